"""How much memory a model needs per device: single device, data parallel, or split across devices.

Counted per device, in bytes:
- parameters: every variable of the layers the device holds (float32 = 4 bytes each);
- gradients: one per trainable parameter;
- optimizer slots: Adam keeps 2 per trainable parameter (momentum, velocity), RMSprop and SGD with
  momentum 1, plain SGD 0;
- activations: every layer's output for the device's share of the batch, counted as if all were
  kept for the backward pass.

An estimate, not a bound either way. Left out: the CUDA context, cuDNN's workspace, the
temporaries of the backward pass and of the optimizer's update, the allocator's rounding, and the
optimizer's scalar variables (a Keras 3 optimizer on TensorFlow has two: ``iteration``, int64, and
``learning_rate``, float32: 12 bytes). Counted although not always kept: outputs the backward pass
does not need (a Dense output that only feeds a ReLU layer, for one). So a real step can need more
or less: ``measure_training_step`` asks TensorFlow's allocator.

Strategies: ``"single"`` (one device holds everything), ``"data"`` (MirroredStrategy: every device
holds the *whole* model, gradients and slots; the batch is split), ``"split"`` (consecutive layers
spread over the devices, balanced by parameter count; each device keeps its layers' activations
for the whole batch).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, Sequence

from ._args import require_choice, require_int, short

__all__ = ["LayerStat", "MemoryEstimate", "profile", "estimate_memory", "split_layers", "preset_profile",
           "PRESETS", "OPTIMIZER_SLOTS", "dense_stack_profile", "measure_training_step"]

OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "rmsprop": 1, "sgd-momentum": 1, "sgd": 0}
PRESETS = {
    "InceptionV3 299x299": "inception_v3",
    "Dense stack 24 x 8192 (1.6B parameters)": "dense_stack",
    "ResNet50 224x224": "resnet50",
    "course digits model": "digits",
}
# Display names used by earlier versions of the course: still accepted, never shown.
PRESET_ALIASES = {"InceptionV3 299x299 (seed 003)": "InceptionV3 299x299"}


@dataclass(frozen=True)
class LayerStat:
    name: str
    params: int            # all variables (trainable and not)
    trainable: int
    activations: int       # output elements per sample


@dataclass(frozen=True)
class MemoryEstimate:
    strategy: str
    devices: int
    batch_size: int
    optimizer: str
    per_device: tuple[dict[str, int], ...]   # keys: parameters, gradients, optimizer, activations, total
    assumptions: tuple[str, ...] = field(default=())

    @property
    def peak(self) -> int:
        """Bytes on the fullest device: the one that runs out first."""
        return max(d["total"] for d in self.per_device)

    def fits(self, capacity_gb: float) -> bool:
        return self.peak <= capacity_gb * 1e9

    def __repr__(self) -> str:
        gb = lambda b: f"{b / 1e9:7.2f} GB"
        lines = [f"{self.strategy} on {self.devices} device(s), batch {self.batch_size}, {self.optimizer}:",
                 f"  {'device':<7}{'params':>11}{'grads':>11}{'optimizer':>11}{'activ.':>11}{'total':>11}"]
        for i, d in enumerate(self.per_device):
            lines.append(f"  {i:<7}" + "".join(f"{gb(d[k]):>11}" for k in
                                               ("parameters", "gradients", "optimizer", "activations", "total")))
        return "\n".join(lines)


def profile(model: Any) -> list[LayerStat]:
    """Per-layer parameter counts and output sizes (per sample) of a built Keras model."""
    import math

    import keras

    if not isinstance(model, keras.Model) or not model.built:
        raise ValueError("profile: pass a built Keras model (call it once, or give it an Input).")
    stats = []
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        outputs = keras.tree.flatten(layer.output)
        per_sample = sum(math.prod(d for d in o.shape[1:] if d is not None) for o in outputs)
        stats.append(LayerStat(layer.name, sum(math.prod(w.shape) for w in layer.weights),
                               sum(math.prod(w.shape) for w in layer.trainable_weights), int(per_sample)))
    return stats


def preset_profile(name: str) -> list[LayerStat]:
    """A stored profile of a preset model (see PRESETS): no TensorFlow, no model build, no memory.

    The stored numbers were read from ``keras.applications.<Model>(weights=None)``; a test rebuilds
    the models and checks them.
    """
    key = PRESETS.get(PRESET_ALIASES.get(name, name), name)
    if key not in PRESETS.values():
        raise ValueError(f"preset_profile: unknown preset {short(name)}; choose from {list(PRESETS)}.")
    if key == "dense_stack":
        return dense_stack_profile(24, 8192)
    table = json.loads(resources.files("gputrain_kit").joinpath("presets.json").read_text())
    return [LayerStat(*row) for row in table[key]]


def split_layers(stats: Sequence[LayerStat], devices: int, costs: Sequence[float] | None = None) -> list[list[int]]:
    """Consecutive layer indices per device, balancing ``costs`` (default: parameter counts), order kept."""
    devices = require_int("split_layers", "devices", devices, minimum=1)
    if devices > len(stats):
        raise ValueError(f"split_layers: cannot split {len(stats)} layer(s) over {devices} devices.")
    costs = [s.params for s in stats] if costs is None else list(costs)
    total = sum(costs) or 1
    groups: list[list[int]] = [[] for _ in range(devices)]
    running, device = 0.0, 0
    for i, cost in enumerate(costs):
        layers_left, devices_left = len(costs) - i, devices - device - 1
        if groups[device] and devices_left and (running >= total * (device + 1) / devices
                                                or layers_left <= devices_left):
            device += 1
        groups[device].append(i)
        running += cost
    return groups


def dense_stack_profile(layers: int, width: int) -> list[LayerStat]:
    """The profile of ``layers`` Dense(width) layers on width inputs, without building anything."""
    layers = require_int("dense_stack_profile", "layers", layers, minimum=1)
    width = require_int("dense_stack_profile", "width", width, minimum=1)
    return [LayerStat(f"dense_{i}", width * width + width, width * width + width, width) for i in range(layers)]


def estimate_memory(model: Any, *, batch_size: int, optimizer: str = "adam", strategy: str = "single",
                    devices: int = 1, bytes_per_value: int = 4) -> MemoryEstimate:
    """Per-device bytes for parameters, gradients, optimizer slots and activations.

    ``model``: a built Keras model, or a profile (list of LayerStat, e.g. from ``preset_profile``).
    ``batch_size`` is the global batch. An estimate, not a lower or upper bound: see the module's
    docstring for what it leaves out and what it counts that a real step may not keep.
    """
    func = "estimate_memory"
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    optimizer = require_choice(func, "optimizer", optimizer, OPTIMIZER_SLOTS)
    strategy = require_choice(func, "strategy", strategy, ("single", "data", "split"))
    devices = require_int(func, "devices", devices, minimum=1)
    if strategy == "single" and devices != 1:
        raise ValueError(f"{func}: strategy='single' means one device; got devices={devices}. "
                         "Use strategy='data' or 'split' for several.")
    stats = list(model) if isinstance(model, (list, tuple)) else profile(model)
    b, slots = bytes_per_value, OPTIMIZER_SLOTS[optimizer]

    def usage(layers: Sequence[LayerStat], samples: int) -> dict[str, int]:
        d = {"parameters": b * sum(s.params for s in layers),
             "gradients": b * sum(s.trainable for s in layers),
             "optimizer": b * slots * sum(s.trainable for s in layers),
             "activations": b * samples * sum(s.activations for s in layers)}
        d["total"] = sum(d.values())
        return d

    if strategy == "split":
        costs = [usage([s], batch_size)["total"] for s in stats]          # balance by memory, not params
        per_device = [usage([stats[i] for i in group], batch_size) for group in split_layers(stats, devices, costs)]
    else:
        shares = [-(-batch_size // devices)] * devices if strategy == "data" else [batch_size]
        per_device = [usage(stats, s) for s in shares]
    assumptions = (
        f"{b}-byte values (float32); {slots} optimizer slot(s) per trainable parameter ({optimizer})",
        "activations = every layer's output, as if all were kept for backprop; left out: CUDA context, "
        "cuDNN workspace, backward and update temporaries, optimizer scalars: an estimate, not a bound",
        "data parallel: every device holds the whole model, its gradients and slots; batch split ceil(b/n)"
        if strategy == "data" else
        "split: consecutive layers per device, balanced by memory; each keeps its activations for the whole batch"
        if strategy == "split" else "single device: everything in one place",
    )
    return MemoryEstimate(strategy, devices, batch_size, optimizer, tuple(per_device), assumptions)


def measure_training_step(model: Any, x: Any, y: Any) -> dict[str, int]:
    """What one training step of a compiled Keras model really holds, by TensorFlow's allocator.

    Runs ``train_on_batch(x, y)`` twice (the first builds and traces) and resets the allocator's
    peak before the second. Returns, in bytes: ``variables`` (the model's and its optimizer's
    variables, scalars included), ``step`` (the most the second step allocated on top of what was
    held before it: gradients, kept outputs, temporaries) and ``total`` (their sum), to set
    against ``estimate_memory(...).peak``. Pass ``x`` and ``y`` as tensors, so that the batch is
    allocated before the step and counted in neither. Measured on the device of the model's first
    variable (every logical CPU shares one allocator).
    """
    import math

    import numpy as np
    import tensorflow as tf

    from .placement import short_device

    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or not model.weights:
        raise ValueError("measure_training_step: pass a built, compiled Keras model (model.compile(...)).")
    model.train_on_batch(x, y)
    device = short_device(getattr(model.weights[0], "value", model.weights[0]).device)
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    model.train_on_batch(x, y)
    step = tf.config.experimental.get_memory_info(device)["peak"] - before
    variables = sum(np.dtype(v.dtype).itemsize * math.prod(v.shape) for v in model.weights + optimizer.variables)
    return {"variables": int(variables), "step": int(step), "total": int(variables + step)}
