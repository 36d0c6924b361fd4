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

from ._args import ArgumentTypeError, require_bool, require_choice, require_int, short
from .cpu_kernels import require_allocator_stats
from .processes import BackgroundRun

__all__ = ["LayerStat", "MemoryEstimate", "profile", "estimate_memory", "split_layers", "preset_profile",
           "PRESETS", "OPTIMIZER_SLOTS", "dense_stack_profile", "measure_training_step", "DTYPE_POLICIES",
           "ZERO_STAGES", "remat_checkpoints", "measure_memory", "MemoryMeasurement",
           "measure_levers", "start_measuring", "PendingMeasurements", "start_measuring_families",
           "PendingFamilies", "rematerialize"]

OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "rmsprop": 1, "sgd-momentum": 1, "sgd": 0}
PRESETS = {
    "InceptionV3 299x299": "inception_v3",
    "Dense stack 24 x 8192 (1.6B parameters)": "dense_stack",
    "ResNet50 224x224": "resnet50",
    "Dense stack 8 x 8192 + head (notebook 08)": "dense_stack_08",
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
                 f"  {'device':<7}{'params':>11}{'grads':>11}{'optimizer':>11}{'accum.':>11}{'activ.':>11}"
                 f"{'total':>11}"]
        for i, d in enumerate(self.per_device):
            lines.append(f"  {i:<7}" + "".join(f"{gb(d.get(k, 0)):>11}" for k in
                                               ("parameters", "gradients", "optimizer", "accumulators",
                                                "activations", "total")))
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
    if key == "dense_stack_08":
        return dense_stack_profile(8, 8192, head=16)
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


def dense_stack_profile(layers: int, width: int, head: int | None = None) -> list[LayerStat]:
    """The profile of ``layers`` Dense(width) layers on width inputs, and a Dense(head) output layer if
    ``head`` is given, without building anything (so without allocating a byte of the model)."""
    layers = require_int("dense_stack_profile", "layers", layers, minimum=1)
    width = require_int("dense_stack_profile", "width", width, minimum=1)
    stats = [LayerStat(f"dense_{i}", width * width + width, width * width + width, width) for i in range(layers)]
    if head is not None:
        head = require_int("dense_stack_profile", "head", head, minimum=1)
        stats.append(LayerStat(f"dense_{layers}", width * head + head, width * head + head, head))
    return stats


DTYPE_POLICIES = {"float32": 4, "mixed_float16": 2, "mixed_bfloat16": 2}   # bytes per activation value
ZERO_STAGES = {0: "no sharding", 1: "optimizer slots sharded", 2: "slots and gradients sharded",
               3: "slots, gradients and parameters sharded"}


def remat_checkpoints(n_layers: int) -> list[int]:
    """The layers whose outputs are kept when recomputing in segments of ceil(sqrt(n)) layers (Chen et
    al., "Training Deep Nets with Sublinear Memory Cost", 2016): the last layer of every segment."""
    import math

    size = max(1, math.ceil(math.sqrt(n_layers)))
    return [i for i in range(n_layers) if (i + 1) % size == 0 or i == n_layers - 1]


def _kept_activations(stats: Sequence[LayerStat], remat: bool) -> int:
    """Activation values per sample kept for the backward pass: all outputs, or with ``remat`` the
    segment ends plus the largest segment, recomputed one segment at a time."""
    if not remat or len(stats) < 3:
        return sum(s.activations for s in stats)
    ends = remat_checkpoints(len(stats))
    segments, start = [], 0
    for end in ends:
        segments.append(sum(s.activations for s in stats[start:end + 1]))
        start = end + 1
    return sum(stats[i].activations for i in ends) + max(segments)


def estimate_memory(model: Any, *, batch_size: int, optimizer: str = "adam", strategy: str = "single",
                    devices: int = 1, dtype_policy: str = "float32", remat: bool = False,
                    accumulation_steps: int = 1, zero_stage: int = 0, bytes_per_value: int = 4) -> MemoryEstimate:
    """Per-device bytes for parameters, gradients, optimizer slots, gradient accumulators and activations.

    ``model``: a built Keras model, or a profile (list of LayerStat, e.g. from ``preset_profile``).
    ``batch_size`` is the global batch. The levers:

    - ``dtype_policy``: ``"mixed_float16"`` / ``"mixed_bfloat16"`` keep float32 variables (so
      parameters, gradients and optimizer slots do not shrink; a float16 policy's LossScaleOptimizer
      adds four scalars: its own iteration and learning rate, a step counter and the loss scale) and
      compute in 16 bits: activations take 2 bytes instead of 4.
    - ``remat``: activations recomputed in the backward pass, kept only at checkpoints (segments of
      sqrt(layers) layers, see ``remat_checkpoints``); the step computes the forward pass about twice.
    - ``accumulation_steps``: each step runs ``batch_size / accumulation_steps`` samples and adds one
      float32 accumulator per trainable parameter; the update happens every ``accumulation_steps`` steps.
    - ``zero_stage`` (data parallel only): 1 shards optimizer slots, 2 also gradients (and accumulators),
      3 also parameters over the devices (ZeRO, Rajbhandari et al. 2020). TensorFlow has no ZeRO: this is
      a model of what DeepSpeed, PyTorch FSDP or Keras' own ``keras.distribution`` on JAX do, and it costs
      communication (stage 1-2: a reduce-scatter of gradients and an all-gather of parameters per step
      instead of one all-reduce; stage 3: parameters gathered again for every layer, forward and backward).

    An estimate, not a lower or upper bound: see the module's docstring for what it leaves out.
    """
    func = "estimate_memory"
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    optimizer = require_choice(func, "optimizer", optimizer, OPTIMIZER_SLOTS)
    strategy = require_choice(func, "strategy", strategy, ("single", "data", "split"))
    devices = require_int(func, "devices", devices, minimum=1)
    dtype_policy = require_choice(func, "dtype_policy", dtype_policy, DTYPE_POLICIES)
    remat = require_bool(func, "remat", remat)
    accumulation_steps = require_int(func, "accumulation_steps", accumulation_steps, minimum=1)
    if isinstance(zero_stage, bool):
        raise ArgumentTypeError(f"{func}: zero_stage must be 0, 1, 2 or 3, got {short(zero_stage)}.")
    zero_stage = require_choice(func, "zero_stage", zero_stage, ZERO_STAGES)
    if strategy == "single" and devices != 1:
        raise ValueError(f"{func}: strategy='single' means one device; got devices={devices}. "
                         "Use strategy='data' or 'split' for several.")
    if zero_stage and strategy != "data":
        raise ValueError(f"{func}: zero_stage={zero_stage} shards data-parallel state over the devices; it needs "
                         f"strategy='data', got strategy={short(strategy)}.")
    if accumulation_steps > batch_size:
        raise ValueError(f"{func}: accumulation_steps={accumulation_steps} is more than the batch "
                         f"({batch_size}): each step needs at least one sample. Use at most {batch_size}.")
    stats = list(model) if isinstance(model, (list, tuple)) else profile(model)
    b, slots = bytes_per_value, OPTIMIZER_SLOTS[optimizer]
    act_bytes = min(b, DTYPE_POLICIES[dtype_policy])
    share = {name: (devices if zero_stage >= stage else 1)
             for name, stage in (("optimizer", 1), ("gradients", 2), ("parameters", 3))}

    def usage(layers: Sequence[LayerStat], samples: int) -> dict[str, int]:
        trainable = sum(s.trainable for s in layers)
        per_step = -(-samples // accumulation_steps)
        d = {"parameters": -(-b * sum(s.params for s in layers) // share["parameters"]),
             "gradients": -(-b * trainable // share["gradients"]),
             "optimizer": -(-b * slots * trainable // share["optimizer"]),
             "accumulators": -(-b * trainable // share["gradients"]) if accumulation_steps > 1 else 0,
             "activations": act_bytes * per_step * _kept_activations(layers, remat)}
        d["total"] = sum(d.values())
        return d

    if strategy == "split":
        costs = [usage([s], batch_size)["total"] for s in stats]          # balance by memory, not params
        per_device = [usage([stats[i] for i in group], batch_size) for group in split_layers(stats, devices, costs)]
    else:
        shares = [-(-batch_size // devices)] * devices if strategy == "data" else [batch_size]
        per_device = [usage(stats, s) for s in shares]
    levers = []
    if dtype_policy != "float32":
        levers.append(f"{dtype_policy}: float32 variables, gradients and slots; {act_bytes}-byte activations"
                      + ("; LossScaleOptimizer adds 4 scalars" if dtype_policy == "mixed_float16" else ""))
    if remat:
        levers.append(f"recomputation: outputs kept at {len(remat_checkpoints(len(stats)))} of {len(stats)} layers "
                      "plus one segment; the forward pass runs about twice")
    if accumulation_steps > 1:
        levers.append(f"gradient accumulation: {accumulation_steps} steps of {-(-batch_size // accumulation_steps)} "
                      "samples (global), one float32 accumulator per trainable parameter, one update per "
                      f"{accumulation_steps} steps")
    if zero_stage:
        levers.append(f"ZeRO stage {zero_stage} ({ZERO_STAGES[zero_stage]}) over {devices} devices: a model of "
                      "DeepSpeed / PyTorch FSDP / keras.distribution on JAX, not something TensorFlow does; "
                      + ("parameters all-gathered for every layer, forward and backward"
                         if zero_stage == 3 else "a reduce-scatter and an all-gather instead of one all-reduce"))
    assumptions = (
        f"{b}-byte variables (float32); {slots} optimizer slot(s) per trainable parameter ({optimizer})",
        "activations = every layer's output, as if all were kept for backprop; left out: CUDA context, "
        "cuDNN workspace, backward and update temporaries, optimizer scalars: an estimate, not a bound",
        "data parallel: every device holds the whole model, its gradients and slots; batch split ceil(b/n)"
        if strategy == "data" else
        "split: consecutive layers per device, balanced by memory; each keeps its activations for the whole batch"
        if strategy == "split" else "single device: everything in one place",
    ) + tuple(levers)
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
    require_allocator_stats("measure_training_step", device)
    tf.config.experimental.reset_memory_stats(device)
    before = tf.config.experimental.get_memory_info(device)["current"]
    model.train_on_batch(x, y)
    step = tf.config.experimental.get_memory_info(device)["peak"] - before
    variables = sum(np.dtype(v.dtype).itemsize * math.prod(v.shape) for v in model.weights + optimizer.variables)
    return {"variables": int(variables), "step": int(step), "total": int(variables + step)}


@dataclass(frozen=True)
class MemoryMeasurement:
    """What TensorFlow's allocator held for a training run of ``build()``, measured in a fresh process."""

    state_bytes: int      # held between training steps (at most): parameters, slots, accumulators, scalars
    peak_bytes: int       # the allocator's peak during a training step, model state included
    device: str           # the allocator measured (one device: every logical CPU shares one)
    config: dict
    kernels: str = ""     # the CPU kernel family the measuring process ran: "onednn" or "eigen"

    def __repr__(self) -> str:
        return (f"MemoryMeasurement({self.config}): state {self.state_bytes / 1e6:.2f} MB, "
                f"peak {self.peak_bytes / 1e6:.2f} MB on {self.device}'s allocator"
                + (f", {self.kernels} CPU kernels" if self.kernels else ""))


_MEASURE_BODY = r"""
def measure(config, source, name):
    # One configuration, in a process whose TensorFlow runtime is not initialised yet.
    import gputrain_kit as kit
    kit.setup(devices=1, seed=0)
    import keras
    import numpy as np
    import tensorflow as tf
    keras.mixed_precision.set_dtype_policy(config["dtype_policy"])
    namespace = {"keras": keras, "tf": tf, "np": np, "__name__": "__gputrain_build__"}
    exec(compile(source, "<build>", "exec"), namespace)
    model = namespace[name]()
    if not isinstance(model, keras.Model):
        raise TypeError("measure_memory: build() must return a Keras model, got " + type(model).__name__)
    if config["remat"]:
        model = kit.memory.rematerialize(model)
    k = config["accumulation_steps"]
    optimizer = getattr(keras.optimizers, config["optimizer"])(**({"gradient_accumulation_steps": k} if k > 1 else {}))
    if config["dtype_policy"] == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss="mse")
    device = kit.device_names(1)[0].replace("/device:", "")

    def batch_of(n):
        return (tf.random.stateless_normal((n,) + tuple(model.inputs[0].shape[1:]), seed=(1, 2)),
                tf.zeros((n,) + tuple(model.outputs[0].shape[1:])))

    def held_between_steps(x, y, steps):
        # The most the allocator holds between two training steps, the batch itself taken off.
        data = int(x.shape.num_elements() * x.dtype.size + y.shape.num_elements() * y.dtype.size)
        held, peaks = [], []
        for _ in range(steps):
            tf.config.experimental.reset_memory_stats(device)
            model.train_on_batch(x, y)
            info = tf.config.experimental.get_memory_info(device)
            held.append(info["current"] - data)
            peaks.append(info["peak"])
        return held, max(peaks)

    # Model state: one-sample steps (what Keras keeps of a batch between steps is then negligible), over
    # whole updates, since accumulators are held only while they accumulate and some slots appear only
    # at the first update.
    x, y = batch_of(1)
    held_between_steps(x, y, k)
    held, _ = held_between_steps(x, y, k)
    state = max(held)
    # Peak: the real batch, one whole update to trace, then `steps` updates measured.
    x, y = batch_of(config["batch_size"] // k)
    held_between_steps(x, y, k)
    _, peak = held_between_steps(x, y, config["steps"] * k)
    return {"state": int(state), "peak": int(peak), "device": device, "kernels": kit.cpu_kernels.detect().family}
"""

# One configuration per process (any system).
_MEASURE_CHILD = """
import json, sys
sys.path.insert(0, {root!r})
""" + _MEASURE_BODY.replace("{", "{{").replace("}", "}}") + """
report(**measure(json.loads({config!r}), {source!r}, {name!r}))
"""

# Linux: import TensorFlow once, then fork a child per configuration before any TensorFlow runtime
# exists, so that each child starts its own runtime and allocator, as a fresh process does, without
# paying the import again (4 s here) for every configuration.
_MEASURE_SERVER = """
import json, os, sys, traceback
sys.path.insert(0, {root!r})
import gputrain_kit, keras, numpy, tensorflow   # imported, never initialised, in this parent
""" + _MEASURE_BODY.replace("{", "{{").replace("}", "}}") + """
jobs, source, name, processes = json.loads({jobs!r}), {source!r}, {name!r}, {processes!r}
running = {{}}
while jobs or running:
    while jobs and len(running) < processes:
        job, config = jobs.pop(0)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            status = 0
            try:
                values = dict(measure(config, source, name), name=job)
            except BaseException:
                values, status = {{"name": job, "error": traceback.format_exc(limit=3)[-1500:]}}, 1
            print("__gputrain_kit__" + json.dumps({{"result": values}}), flush=True)
            os._exit(status)
        running[pid] = job
    pid, _ = os.wait()
    running.pop(pid, None)
"""

_OPTIMIZER_CLASSES = {"adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "sgd": "SGD"}


def _measure_config(func: str, build: Any, *, batch_size: int, optimizer: str, dtype_policy: str, remat: bool,
                    accumulation_steps: int, steps: int) -> tuple[str, dict, dict]:
    """build's source, the child's config and the config shown to the user, every argument checked
    first (errors name ``func``)."""
    from .processes import function_source

    source = function_source(
        func, build, what="build must be a function defined with `def` that returns an uncompiled Keras model",
        closure_fix="It runs in a fresh process that receives its source only: define it at the top level of "
                    "a cell or a script.")
    if build.__code__.co_argcount:
        raise ValueError(f"{func}: build must take no arguments; {build.__name__}() takes "
                         f"{build.__code__.co_argcount}. Fix its settings inside it.")
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    optimizer = require_choice(func, "optimizer", optimizer, _OPTIMIZER_CLASSES)
    dtype_policy = require_choice(func, "dtype_policy", dtype_policy, DTYPE_POLICIES)
    remat = require_bool(func, "remat", remat)
    accumulation_steps = require_int(func, "accumulation_steps", accumulation_steps, minimum=1)
    steps = require_int(func, "steps", steps, minimum=1)
    if batch_size % accumulation_steps:
        raise ValueError(f"{func}: batch_size={batch_size} is not divisible by accumulation_steps="
                         f"{accumulation_steps}; every step must get the same number of samples.")
    config = {"batch_size": batch_size, "optimizer": _OPTIMIZER_CLASSES[optimizer], "dtype_policy": dtype_policy,
              "remat": remat, "accumulation_steps": accumulation_steps, "steps": steps}
    return source, config, dict(config, optimizer=optimizer)


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parent.parent)


def _measurement(values: dict, shown: dict, func: str) -> MemoryMeasurement:
    if int(values["state"]) <= 0:
        # Seen on CPU with a model of a few kilobytes: the allocator's statistics stayed at zero.
        raise ValueError(f"{func}: TensorFlow's allocator on {values['device']} counted nothing held between steps "
                         f"for this model ({shown}); its statistics miss small allocations. Measure a model with "
                         "at least a megabyte of parameters, or estimate this one with estimate_memory.")
    return MemoryMeasurement(int(values["state"]), int(values["peak"]), values["device"], shown,
                             values.get("kernels", ""))


def _child_env(func: str, kernels: str | None) -> dict[str, str]:
    """The measuring child's environment: the CPU kernel family asked for (None: this process's environment
    decides, as it did for this process) and TensorFlow's BFC CPU allocator, whose statistics are the
    measurement under either family."""
    from .cpu_kernels import family_env

    return family_env(kernels, func) if kernels is not None else {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


def _measure_in_own_process(source: str, name: str, config: dict, shown: dict, func: str,
                            env: dict[str, str]) -> MemoryMeasurement:
    from .processes import run_child

    code = _MEASURE_CHILD.format(root=_root(), config=json.dumps(config), source=source, name=name)
    return _measurement(run_child(code, timeout=300, env=env).values, shown, func)


def _measure_forked(source: str, name: str, jobs: list[tuple[str, dict, dict]], processes: int, func: str,
                    on_result: Any, env: dict[str, str]) -> dict[str, MemoryMeasurement]:
    """Every job in a child forked from one process that imported TensorFlow (Linux)."""
    import subprocess
    import sys
    import tempfile
    import threading

    from .processes import _PRELUDE, ChildError, child_environment

    code = _PRELUDE + _MEASURE_SERVER.format(root=_root(), jobs=json.dumps([[n, c] for n, c, _ in jobs]),
                                             source=source, name=name, processes=processes)
    shown = {n: s for n, _, s in jobs}
    results: dict[str, MemoryMeasurement] = {}
    failures: list[str] = []
    refused: list[ValueError] = []       # measured, but nothing the allocator counted: the user's error
    with tempfile.TemporaryFile("w+") as errors:
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=errors, text=True,
                                env=child_environment(func, env))
        timer = threading.Timer(300 + 60 * len(jobs), proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                if not line.startswith("__gputrain_kit__"):
                    continue
                values = json.loads(line[len("__gputrain_kit__"):])["result"]
                if "error" in values:
                    reason = values["error"].strip().splitlines()[-1]
                    failures.append(f"{values['name']}: {reason}" if len(jobs) > 1 else reason)
                    continue
                try:
                    results[values["name"]] = _measurement(values, shown[values["name"]], func)
                except ValueError as err:
                    refused.append(err)
                    continue
                if on_result is not None:
                    on_result(values["name"], results[values["name"]], len(results), len(jobs))
            proc.wait()
        finally:
            timer.cancel()
        if proc.returncode != 0 or len(results) + len(failures) + len(refused) < len(jobs):
            errors.seek(0)
            tail = "\n".join(errors.read().strip().splitlines()[-6:])
            failures.append(f"the measuring process exited with status {proc.returncode}:\n{tail}")
    if failures:
        raise ChildError(f"{func}: " + "\n".join(failures + [str(err) for err in refused]))
    if refused:
        raise refused[0]
    return results


def _forking() -> bool:
    """Fork each measurement from one process that imported TensorFlow (Linux; GPUTRAIN_MEASURE_FORK=0 or
    GPUTRAIN_FORK=0 turns it off)."""
    from .processes import fork_enabled

    return fork_enabled("GPUTRAIN_MEASURE_FORK")


def measure_memory(build: Any, *, batch_size: int, optimizer: str = "adam", dtype_policy: str = "float32",
                   remat: bool = False, accumulation_steps: int = 1, steps: int = 2,
                   kernels: str | None = None) -> MemoryMeasurement:
    """Train ``build()``'s model for ``steps`` steps in a fresh process and ask TensorFlow's allocator.

    ``build``: a zero-argument function, defined with ``def`` in a notebook cell or a script, returning an
    uncompiled Keras model (``keras``, ``tf`` and ``np`` are available inside it). The model is trained
    on random data with a mean-squared-error loss: one whole update, then ``steps`` updates measured
    (``steps x accumulation_steps`` training steps). ``batch_size`` is the batch of one update: with
    ``accumulation_steps=k`` each step runs ``batch_size / k`` samples. ``remat=True`` rematerializes
    the model in segments (``rematerialize``). A process of its own, with a new TensorFlow runtime and
    allocator: a model measured after another in one process would count what the first one left. On
    Linux it is forked from a process that has imported TensorFlow but not started it, which saves the
    import (about 4 s here); elsewhere, or with ``GPUTRAIN_MEASURE_FORK=0``, a new interpreter.

    ``kernels``: the CPU kernel family to measure with, ``"onednn"`` or ``"eigen"`` (``cpu_kernels``); None
    keeps this process's (its environment's) family. The process uses TensorFlow's BFC CPU allocator, whose
    statistics work under both families, so this works from a plain script too, with or without ``setup()``.
    """
    source, config, shown = _measure_config(
        "measure_memory", build, batch_size=batch_size, optimizer=optimizer, dtype_policy=dtype_policy, remat=remat,
        accumulation_steps=accumulation_steps, steps=steps)
    env = _child_env("measure_memory", kernels)
    if _forking():
        return _measure_forked(source, build.__name__, [("one", config, shown)], 1, "measure_memory", None,
                               env)["one"]
    return _measure_in_own_process(source, build.__name__, config, shown, "measure_memory", env)


_LEVER_KEYS = ("batch_size", "optimizer", "dtype_policy", "remat", "accumulation_steps")


def _lever_jobs(func: str, build: Any, levers: Any, batch_size: int,
                steps: int) -> tuple[str, list[tuple[str, dict, dict]]]:
    """build's source and, per lever, (name, child config, config shown), every argument checked."""
    from collections.abc import Mapping

    if not isinstance(levers, Mapping) or not levers:
        raise ArgumentTypeError(f"{func}: levers must be a non-empty dict of name -> settings, e.g. "
                                f"{{'Adam': {{}}, 'SGD': {{'optimizer': 'sgd'}}}}; got {short(levers)}.")
    source, jobs = "", []
    for name, settings in levers.items():
        if not isinstance(name, str) or not isinstance(settings, Mapping):
            raise ArgumentTypeError(f"{func}: each lever is a name (str) and a dict of settings, got "
                                    f"{short(name)}: {short(settings)}.")
        unknown = sorted(set(settings) - set(_LEVER_KEYS))
        if unknown:
            raise ValueError(f"{func}: levers[{name!r}] sets {unknown}; a lever can set {list(_LEVER_KEYS)}.")
        config = {"batch_size": batch_size, "optimizer": "adam", "dtype_policy": "float32", "remat": False,
                  "accumulation_steps": 1, **settings}
        source, child_config, shown = _measure_config(func, build, steps=steps, **config)
        jobs.append((name, child_config, shown))
    return source, jobs


def measure_levers(build: Any, levers: Any, *, batch_size: int, steps: int = 2, processes: int = 2,
                   on_result: Any = None, kernels: str | None = None) -> dict[str, MemoryMeasurement]:
    """``measure_memory`` for several configurations, each in a process of its own (forked from one that
    imported TensorFlow once, on Linux), up to ``processes`` at a time. ``levers``: name -> settings that
    differ from the default (``batch_size``, ``optimizer``, ``dtype_policy``, ``remat``,
    ``accumulation_steps``), e.g. ``{"Adam": {}, "SGD": {"optimizer": "sgd"}}``.
    ``on_result(name, measurement, done, total)`` is called as each finishes. Results keep ``levers``' order.
    ``kernels``: the CPU kernel family, as for ``measure_memory``."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    func = "measure_levers"
    processes = require_int(func, "processes", processes, minimum=1)
    env = _child_env(func, kernels)
    source, jobs = _lever_jobs(func, build, levers, batch_size, steps)
    if _forking():
        results = _measure_forked(source, build.__name__, jobs, processes, func, on_result, env)
    else:
        results = {}
        with ThreadPoolExecutor(max_workers=processes) as pool:
            futures = {pool.submit(_measure_in_own_process, source, build.__name__, config, shown, func, env): name
                       for name, config, shown in jobs}
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                if on_result is not None:
                    on_result(futures[future], results[futures[future]], len(results), len(jobs))
    return {name: results[name] for name, _, _ in jobs}


class PendingMeasurements(BackgroundRun):
    """Measurements running in the background (``start_measuring``): ``.result()`` waits for them,
    ``.progress_bar()`` is a widget that follows them as they finish."""

    unit = "measurement"
    bar_label = "measured"

    def __init__(self, build: Any, levers: Any, batch_size: int, steps: int, processes: int,
                 kernels: str | None = None):
        super().__init__(lambda advance: measure_levers(
            build, levers, batch_size=batch_size, steps=steps, processes=processes, kernels=kernels,
            on_result=lambda name, measurement, done, total: advance(done)), len(levers))

    def result(self, timeout: float | None = None) -> dict[str, MemoryMeasurement]:
        """Wait for every measurement (at most ``timeout`` seconds) and return them by name."""
        return super().result(timeout)


class PendingFamilies(BackgroundRun):
    """The same measurements under each CPU kernel family, one family after another in the background
    (``start_measuring_families``): ``.result()`` waits and returns ``{family: {name: MemoryMeasurement}}``."""

    unit = "family"
    bar_label = "families"

    def __init__(self, build: Any, levers: Any, batch_size: int, steps: int, families: tuple[str, ...]):
        def work(advance: Any) -> dict[str, dict[str, MemoryMeasurement]]:
            results = {}
            for done, family in enumerate(families, start=1):
                results[family] = measure_levers(build, levers, batch_size=batch_size, steps=steps, processes=1,
                                                 kernels=family)
                advance(done)
            return results

        super().__init__(work, len(families))

    def result(self, timeout: float | None = None) -> dict[str, dict[str, MemoryMeasurement]]:
        """Wait for every family (at most ``timeout`` seconds) and return the measurements by family, then name."""
        return super().result(timeout)


def start_measuring_families(build: Any, levers: Any, *, batch_size: int, steps: int = 2,
                             families: Any = None) -> PendingFamilies:
    """``measure_levers`` once per CPU kernel family (``cpu_kernels.FAMILIES`` by default), in the background.

    TensorFlow fixes its kernel family when it is imported, so each family runs in processes of its own; the
    families run one after another, one process at a time, so that this adds one process's memory beside the
    notebook whatever the number of families. Every argument is checked before anything starts."""
    from .cpu_kernels import FAMILIES

    func = "start_measuring_families"
    if families is None:
        families = FAMILIES
    if isinstance(families, str) or not isinstance(families, (list, tuple)) or not families:
        raise ArgumentTypeError(f"{func}: families must be a non-empty tuple of CPU kernel families from "
                                f"{FAMILIES}, got {short(families)}; e.g. families=('onednn', 'eigen').")
    for family in families:
        _child_env(func, family)
    _lever_jobs(func, build, levers, batch_size, steps)
    return PendingFamilies(build, dict(levers), batch_size, steps, tuple(families))


def start_measuring(build: Any, levers: Any, *, batch_size: int, steps: int = 2,
                    processes: int = 2, kernels: str | None = None) -> PendingMeasurements:
    """Like ``measure_levers``, but in the background: returns at once (every argument checked first), so
    a notebook can go on while the child processes measure."""
    func = "start_measuring"
    processes = require_int(func, "processes", processes, minimum=1)
    _child_env(func, kernels)
    _lever_jobs(func, build, levers, batch_size, steps)
    return PendingMeasurements(build, dict(levers), batch_size, steps, processes, kernels)


def _remat_segment_class():
    import keras

    class RematSegment(keras.layers.Layer):
        """Consecutive layers whose activations are recomputed in the backward pass (``keras.remat``,
        which is ``tf.recompute_grad`` on TensorFlow), so that only the segment's input is kept."""

        def __init__(self, layers, **kwargs):
            super().__init__(**kwargs)
            self.inner = list(layers)

        def build(self, input_shape):
            shape = input_shape
            for layer in self.inner:
                if not layer.built:
                    layer.build(shape)
                shape = layer.compute_output_shape(shape)

        def _forward(self, x):
            for layer in self.inner:
                x = layer(x)
            return x

        def call(self, x):
            # Positional arguments only: TensorFlow's custom_gradient refuses keyword arguments in a
            # traced function, which is why keras.RematScope fails on this backend.
            return keras.remat(self._forward)(x)

        def compute_output_shape(self, input_shape):
            for layer in self.inner:
                input_shape = layer.compute_output_shape(input_shape)
            return input_shape

    return RematSegment


def rematerialize(model: Any):
    """A Sequential model rebuilt as segments of ceil(sqrt(layers)) layers, each recomputed in the
    backward pass: the form of recomputation that works on the TensorFlow backend (``keras.RematScope``
    fails there). The layers (and their weights) are the same objects."""
    import keras

    if not isinstance(model, keras.Sequential):
        raise ArgumentTypeError(f"rematerialize: pass a keras.Sequential model (functional models: wrap "
                                f"consecutive layers in keras.remat by hand), got {short(model)}.")
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    ends = remat_checkpoints(len(layers))
    segment, start, segments = _remat_segment_class(), 0, []
    for end in ends:
        segments.append(segment(layers[start:end + 1], name=f"remat_{len(segments)}"))
        start = end + 1
    return keras.Sequential([keras.Input(model.inputs[0].shape[1:])] + segments, name=f"{model.name}_remat")
