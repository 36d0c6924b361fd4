"""What ``keras.utils.multi_gpu_model`` did, in readable form, and which all-reduce a strategy uses.

``multi_gpu_model(template, gpus=G)`` (Keras 2; marked deprecated in TF 2.1's API docs, "will be removed
after 2020-04-01", and gone in TF 2.4; keras-team/keras#14397 is a support answer pointing to
``tf.distribute.MirroredStrategy``) wrapped a template model: for every batch it cut the inputs into G
slices, ran the *same* template (same weights) on each slice, and concatenated the outputs on the CPU.
It placed each replica under ``tf.device('/gpu:i')`` while building the wrapper, which worked in TF1
graph-mode Keras. ``MultiGpuLike`` reproduces that behaviour, not the 2018 mechanism: TF2 re-traces the
model for ``fit`` and drops construction-time placement (notebook 03), so it places each slice inside
``call()``. It trains, and training it trains the template.
"""
from __future__ import annotations

from typing import Any, Sequence

from ._lazy import lazy_attributes

__all__ = ["MultiGpuLike", "slice_bounds", "reduction_in_use", "CROSS_DEVICE_OPS"]


def slice_bounds(batch: int, parts: int) -> list[tuple[int, int]]:
    """multi_gpu_model's split: ``batch // parts`` each, the last slice takes the remainder."""
    step = batch // parts
    return [(i * step, batch if i == parts - 1 else (i + 1) * step) for i in range(parts)]


def _make_class():
    import keras
    import tensorflow as tf

    class MultiGpuLike(keras.Model):
        """A template run on several devices, one slice of each batch per device, merged on the CPU."""

        def __init__(self, template: keras.Model, devices: Sequence[str], merge_device: str = "/cpu:0", **kwargs):
            super().__init__(**kwargs)
            if not isinstance(template, keras.Model):
                raise ValueError(f"MultiGpuLike: template must be a Keras model, got {type(template).__name__}.")
            if len(devices) < 1:
                raise ValueError("MultiGpuLike: give at least one device, e.g. kit.device_names(2).")
            self.template, self.devices, self.merge_device = template, list(devices), merge_device

        def call(self, inputs, training=None):
            batch = tf.shape(tf.nest.flatten(inputs)[0])[0]
            parts = len(self.devices)
            step = batch // parts
            outputs = []
            for i, device in enumerate(self.devices):            # one slice per device
                with tf.device(device):
                    start = i * step
                    stop = batch if i == parts - 1 else start + step   # last slice: the remainder
                    piece = tf.nest.map_structure(lambda t: t[start:stop], inputs)
                    outputs.append(self.template(piece, training=training))
            with tf.device(self.merge_device):                   # concatenate on the CPU
                return tf.nest.map_structure(lambda *parts_: tf.concat(parts_, axis=0), *outputs)

        def slice_devices(self, inputs) -> list[tuple[str, tuple[int, ...]]]:
            """Run eagerly; return (device, output shape) of every slice: where each slice really ran."""
            from .placement import short_device

            batch = int(tf.nest.flatten(inputs)[0].shape[0])
            out = []
            for device, (start, stop) in zip(self.devices, slice_bounds(batch, len(self.devices))):
                with tf.device(device):
                    piece = tf.nest.map_structure(lambda t: t[start:stop], inputs)
                    result = tf.nest.flatten(self.template(piece, training=False))[0]
                out.append((short_device(result.device), tuple(result.shape)))
            return out

    return MultiGpuLike


__getattr__ = lazy_attributes(MultiGpuLike=_make_class)


#: The cross-device reductions MirroredStrategy accepts, and what each does.
CROSS_DEVICE_OPS = {
    "ReductionToOneDevice": "copy every replica's gradient to one device, add them there, copy the sum back "
                            "(the choice of the 2020 CSDN post on GPU count x batch size; works everywhere, one device becomes the bottleneck)",
    "HierarchicalCopyAllReduce": "reduce along a fixed tree built for NVIDIA DGX-1 GPU links, then broadcast "
                                 "back the same way (slower than ReductionToOneDevice on other topologies)",
    "NcclAllReduce": "NVIDIA's NCCL all-reduce between GPUs (needs GPUs with NCCL kernels: Linux builds)",
}


def reduction_in_use(strategy: Any) -> str:
    """The all-reduce a MirroredStrategy was *configured* with, e.g. 'CollectiveAllReduce (RING)': the op that
    all-reduces float values such as the gradients. A ``reduce_to`` / ``strategy.reduce`` whose destinations are
    not exactly the replicas' devices (with 2 or more replicas, every reduction to one place, even to a replica's
    own GPU) or include a CPU, and every int32 value, go through ``ReductionToOneDevice`` whatever is configured
    (``mirrored_strategy.py``: ``_reduce_to``, ``_get_cross_device_ops``); ``kit.training.record_reductions()``
    shows which op ran each reduction.

    A strategy with one replica (the default strategy that ``model.distribute_strategy`` returns outside any
    scope, ``OneDeviceStrategy``) has nothing to reduce across devices, and is answered so.

    Reads private attributes of TensorFlow's strategy, only to show its choice.
    """
    extended = getattr(strategy, "extended", None)
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if extended is None or not isinstance(replicas, int):
        raise ValueError(f"reduction_in_use: strategy must be a tf.distribute strategy, got "
                         f"{type(strategy).__name__}. Fix: pass the strategy itself, e.g. "
                         f"reduction_in_use(model.distribute_strategy) or the MirroredStrategy you built.")
    ops = getattr(extended, "_cross_device_ops", None)
    if ops is None and replicas == 1:
        return f"no cross-device reduction: one replica ({type(strategy).__name__})"
    if ops is None:
        return "unknown (this TensorFlow keeps its choice elsewhere)"
    name = type(ops).__name__
    if name == "CollectiveAllReduce":
        options = getattr(extended, "_communication_options", None)
        impl = getattr(getattr(options, "implementation", None), "name", None)
        if impl:
            return f"{name} ({impl})"
    return name
