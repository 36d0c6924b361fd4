"""Device-parallel branches: one shared LSTM encodes two inputs, one branch per device.

The model of DumpDoctorWang's CSDN post "Multi-GPU training in Keras and weights that load without
effect" (2018). Built two ways. ``construction_time_placement`` is what that post and the Q&A
thread about InceptionV3 on 12 GB GPUs did: ``tf.device`` around layer calls while building a
functional model: that places the variables (the layers are built eagerly, on symbolic inputs), not the
computation. ``PlacedBranches`` puts ``tf.device`` inside ``call()``, which is what pins the computation in
Keras 3; its variables are not placed, since Keras builds a subclassed model without a ``build()`` by
tracing ``call()`` inside a ``StatelessScope`` and creates the variables when that scope exits, outside every
device scope (notebook 03, section 3).
"""
from __future__ import annotations

from typing import Any, Sequence

from ._lazy import lazy_attributes

__all__ = ["construction_time_placement", "PlacedBranches", "digits_as_sequences", "traced_op_devices"]


def digits_as_sequences(x):
    """Digits (n, 64) -> two sequence views: rows (n, 8, 8) and columns (n, 8, 8)."""
    import numpy as np

    images = np.asarray(x, dtype="float32").reshape(-1, 8, 8)
    return images, np.transpose(images, (0, 2, 1)).copy()


def construction_time_placement(devices: Sequence[str], units: int = 16):
    """The 2018 way: a functional model built with tf.device around each branch's layer call."""
    import keras
    import tensorflow as tf

    rows, cols = keras.Input((8, 8), name="rows"), keras.Input((8, 8), name="cols")
    shared = keras.layers.LSTM(units, name="shared_lstm")
    with tf.device(devices[0]):
        a = shared(rows)
    with tf.device(devices[1]):
        b = shared(cols)
    with tf.device(devices[2] if len(devices) > 2 else "/cpu:0"):
        merged = keras.layers.Concatenate(name="merge")([a, b])
        out = keras.layers.Dense(10, name="classifier")(merged)
    return keras.Model([rows, cols], out, name="construction_time")


def traced_op_devices(model: Any, *specs: Any) -> dict[str, int]:
    """Trace ``model(list(inputs))`` as a tf.function; count its ops by requested device.

    '' means "not pinned": TensorFlow's placer decides, and puts unpinned ops on the default device.
    """
    import collections

    import tensorflow as tf

    fn = tf.function(lambda *inputs: model(list(inputs) if len(inputs) > 1 else inputs[0]), autograph=False)
    graph = fn.get_concrete_function(*specs).graph
    return dict(sorted(collections.Counter(op.device for op in graph.get_operations()).items()))


def _make_class():
    import keras
    import tensorflow as tf

    class PlacedBranches(keras.Model):
        """Two branches, each pinned to its device inside call(); merged on ``merge_device``.

        The work is placed, the variables are not: built by tracing ``call()``, the shared LSTM and the
        classifier get the default device. Sharing one LSTM, the branches divide the work, never the weights.
        """

        def __init__(self, devices: Sequence[str], merge_device: str = "/cpu:0", units: int = 16, **kwargs):
            super().__init__(**kwargs)
            if len(devices) != 2:
                raise ValueError(f"PlacedBranches: give exactly two branch devices, got {list(devices)}.")
            self.branch_devices, self.merge_device = list(devices), merge_device
            self.shared = keras.layers.LSTM(units, name="shared_lstm")
            self.classifier = keras.layers.Dense(10, name="classifier")

        def call(self, inputs):
            rows, cols = inputs
            with tf.device(self.branch_devices[0]):
                a = self.shared(rows)                 # branch 1 runs here
            with tf.device(self.branch_devices[1]):
                b = self.shared(cols)                 # branch 2 runs here
            with tf.device(self.merge_device):
                return self.classifier(tf.concat([a, b], axis=-1))

        def where(self, inputs) -> dict[str, str]:
            """Run eagerly; the device each branch's output (and the merge) was computed on."""
            from .placement import short_device

            rows, cols = inputs
            with tf.device(self.branch_devices[0]):
                a = self.shared(rows)
            with tf.device(self.branch_devices[1]):
                b = self.shared(cols)
            with tf.device(self.merge_device):
                out = self.classifier(tf.concat([a, b], axis=-1))
            return {"branch 1": short_device(a.device), "branch 2": short_device(b.device),
                    "merge": short_device(out.device)}

    return PlacedBranches


__getattr__ = lazy_attributes(PlacedBranches=_make_class)
