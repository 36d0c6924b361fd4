"""How much memory a model needs per device: single device, data parallel, or split across devices.

Counted per device, in bytes (docs/memory.md says how each part was checked):
- parameters: every variable of the layers the device holds (float32 = 4 bytes each);
- gradients: one per trainable parameter;
- optimizer slots: Adam keeps 2 per trainable parameter (momentum, velocity), RMSprop and SGD with
  momentum 1, plain SGD 0, and more with the options that add slots (``amsgrad``, RMSprop's ``momentum`` and
  ``centered``, ``use_ema``: ``optimizer_slots``);
- accumulators: one per trainable parameter with gradient accumulation;
- activations: what each layer keeps for the backward pass, for the device's share of the batch: its outputs
  and what its gradient needs inside it (``layer_costs``: attention's probabilities, float32 under mixed
  policies, dropout masks, GELU and normalization intermediates);
- temporaries: the largest layer's transient working set, the batch on the device and the loss, and under a
  mixed policy the 16-bit copy of every kernel a layer casts per step.

An estimate, not a bound either way. Left out: the CUDA context, cuDNN's workspace (scratch memory NVIDIA's
cuDNN library asks for per call, for its convolution and recurrent kernels), the optimizer's scalar variables and
its update's temporaries, the allocator's rounding. Layers without a rule of their own (and
recurrent layers, by a rule of thumb) are approximated, and the estimate says so: ``measure``
(``measure_memory``) asks TensorFlow's allocator, ``measure.compiled_memory`` XLA's buffer analysis.

Strategies: ``"single"`` (one device holds everything), ``"data"`` (MirroredStrategy: every device
holds the *whole* model, gradients and slots; the batch is split), ``"split"`` (consecutive layers
spread over the devices, balanced by memory; each device keeps its layers' activations
for the whole batch).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from .profiles import (PRESETS, LayerStat, build_abstractly, dense_stack_profile, input_specs,  # noqa: F401
                       preset_profile, profile)
from .optimizer_slots import OPTIMIZER_SLOTS, optimizer_spec
from .remat import remat_checkpoints, rematerialize  # noqa: F401
from ._args import ArgumentTypeError, require_bool, require_choice, require_int, short

__all__ = ["LayerStat", "MemoryEstimate", "profile", "estimate_memory", "memory_verdict", "TIGHT_SHARE", "human_bytes",
           "split_layers", "preset_profile", "PRESETS", "OPTIMIZER_SLOTS", "dense_stack_profile", "DTYPE_POLICIES",
           "ZERO_STAGES", "remat_checkpoints", "rematerialize"]

# Display names used by earlier versions of the course: still accepted, never shown.


@dataclass(frozen=True)
class MemoryEstimate:
    strategy: str
    devices: int
    batch_size: int
    optimizer: str
    per_device: tuple[dict[str, int], ...]   # parameters, gradients, optimizer, accumulators, activations,
    #                                          temporaries, total
    assumptions: tuple[str, ...] = field(default=())

    @property
    def peak(self) -> int:
        """Bytes on the fullest device: the one that runs out first."""
        return max(d["total"] for d in self.per_device)

    def fits(self, capacity_gb: float) -> bool:
        """Whether the fullest device's estimate fits a card of ``capacity_gb`` GB (10^9 bytes)."""
        return self.peak <= _require_capacity("MemoryEstimate.fits", capacity_gb) * 1e9

    def __repr__(self) -> str:
        # one unit for the table, the one that reads best for its largest number: a small model is not 0.00 GB
        unit, size = next((u, s) for u, s in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3), ("B", 1)) if self.peak >= s
                          or s == 1)
        gb = lambda b: f"{b / size:7.2f} {unit:>2}"
        lines = [f"{self.strategy} on {self.devices} device(s), batch {self.batch_size}, {self.optimizer}:",
                 f"  {'device':<7}{'params':>11}{'grads':>11}{'optimizer':>11}{'accum.':>11}{'activ.':>11}"
                 f"{'temp.':>11}{'total':>11}"]
        for i, d in enumerate(self.per_device):
            lines.append(f"  {i:<7}" + "".join(f"{gb(d.get(k, 0)):>11}" for k in
                                               ("parameters", "gradients", "optimizer", "accumulators",
                                                "activations", "temporaries", "total")))
        return "\n".join(lines)


def split_layers(stats: Sequence[LayerStat], devices: int, costs: Sequence[float] | None = None, *,
                 _caller: str = "split_layers") -> list[list[int]]:
    """Consecutive layer indices per device, order kept, every device at least one layer, with the fullest
    device as small as a split in order allows (by ``costs``; default: parameter counts)."""
    devices = require_int(_caller, "devices", devices, minimum=1)
    if devices > len(stats):
        raise ValueError(f"{_caller}: cannot split {len(stats)} layer(s) over devices={devices}: a layer split "
                         f"gives every device at least one layer. Use at most {len(stats)} device(s), or "
                         "strategy='data'.")
    costs = [float(s.params) for s in stats] if costs is None else [float(c) for c in costs]

    def packed(cap: float) -> list[list[int]]:
        # Fill each device up to `cap` in order; a new device when the next layer would exceed it.
        groups: list[list[int]] = [[]]
        running = 0.0
        for i, cost in enumerate(costs):
            if groups[-1] and running + cost > cap:
                groups.append([])
                running = 0.0
            groups[-1].append(i)
            running += cost
        return groups

    # The smallest cap that packs into `devices` groups, by bisection: the fullest device of the best split in
    # order (a greedy cut at equal shares can put one layer too many on the first device).
    low, high = max(costs), sum(costs)
    for _ in range(100):
        if high - low <= 1e-9 * max(high, 1.0):
            break
        middle = (low + high) / 2
        low, high = (low, middle) if len(packed(middle)) <= devices else (middle, high)
    groups = packed(high)
    while len(groups) < devices:              # fewer groups than devices: split one, the fullest stays as full
        largest = max(range(len(groups)), key=lambda g: len(groups[g]))
        groups[largest:largest + 1] = [groups[largest][:-1], groups[largest][-1:]]
    return groups


DTYPE_POLICIES = {"float32": 4, "mixed_float16": 2, "mixed_bfloat16": 2}   # bytes per activation value
ZERO_STAGES = {0: "no sharding", 1: "optimizer slots sharded", 2: "slots and gradients sharded",
               3: "slots, gradients and parameters sharded"}


def _flash(stat: LayerStat) -> LayerStat:
    """``stat`` with flash attention: no heads x queries x keys tensor is kept or materialized (dropout in the
    attention stops Keras from using it: such a layer keeps its own)."""
    import dataclasses

    if not stat.scores or stat.kind not in ("MultiHeadAttention", "GroupQueryAttention"):
        return stat
    return dataclasses.replace(stat, activations=max(0, stat.activations - stat.scores),
                               float32_activations=max(0, stat.float32_activations - stat.scores),
                               temporary=max(0, stat.temporary - 2 * stat.scores))


def _layer_bytes(stat: LayerStat, mixed: bool, act_bytes: int) -> int:
    """Bytes per sample that ``stat``'s layer keeps for the backward pass under the policy."""
    return (act_bytes * stat.activations + (4 * stat.float32_activations if mixed else 0)
            + 4 * getattr(stat, "pinned", 0))


def _kept_activations(stats: Sequence[LayerStat], remat: bool, mixed: bool = False, act_bytes: int = 1) -> int:
    """Activation bytes per sample kept for the backward pass (``act_bytes=1``, ``mixed=False``: elements): all
    layers', or with ``remat`` the segment ends plus the largest segment, recomputed one segment at a time (at
    most all)."""
    sizes = [_layer_bytes(s, mixed, act_bytes) for s in stats]
    if not remat or len(stats) < 3:
        return sum(sizes)
    ends = remat_checkpoints(len(stats))
    segments, start = [], 0
    for end in ends:
        segments.append(sum(sizes[start:end + 1]))
        start = end + 1
    kept = sum(sizes[i] for i in ends) + max(segments)
    # never more than keeping every output: where the large outputs come first (a conv net's early layers),
    # checkpoints plus the largest segment can add up to more than the plain step keeps
    return min(kept, sum(sizes))


def _temporary_bytes(stats: Sequence[LayerStat], mixed: bool, act_bytes: int) -> int:
    """Bytes per sample of the largest transient working set of any one layer's step (attention's in float32)."""
    return max((s.temporary * (4 if s.kind in ("MultiHeadAttention", "GroupQueryAttention") or not mixed
                               else act_bytes) for s in stats), default=0)


def _approximate_note(stats: Sequence[LayerStat]) -> tuple[str, ...]:
    """An assumption naming the layers the planner only approximates (recurrent layers, kinds it has no rule for)."""
    rough = [s for s in stats if s.approximate]
    if not rough:
        return ()
    names = ", ".join(f"{s.name} ({s.kind})" if s.kind else s.name for s in rough[:3]) + (", ..." if len(rough) > 3
                                                                                          else "")
    return (f"approximated, measure it (measure_memory): {names}: what these layers keep inside for the backward "
            "pass is a rule of thumb, not read from the layer",)


def _optimizer_key(func: str, optimizer: Any, model: Any) -> str:
    """The OPTIMIZER_SLOTS name of ``optimizer``'s kind (``optimizer_slots.optimizer_spec`` has its slots)."""
    return optimizer_spec(func, optimizer, model).key


def _policy_key(func: str, policy: Any) -> str:
    """A key of DTYPE_POLICIES from a name (any case, as Keras spells it) or a ``keras.DTypePolicy`` object."""
    name = getattr(policy, "name", policy) if not isinstance(policy, str) else policy
    if isinstance(name, str) and name.strip().lower() in DTYPE_POLICIES:
        return name.strip().lower()
    if isinstance(name, str) and name.strip().lower() in ("float16", "bfloat16", "half"):
        raise ValueError(f"{func}: dtype_policy={short(name)} keeps the variables in 16 bits, which the planner does "
                         "not model (training in pure 16 bits loses small updates); pass 'mixed_float16' or "
                         "'mixed_bfloat16' (float32 variables, 16-bit compute), or 'float32'.")
    return str(require_choice(func, "dtype_policy", policy, DTYPE_POLICIES))


def _bytes_per_value(func: str, value: Any) -> int:
    """Bytes of one variable value: 4 (float32), 2 or 8; a dtype name such as 'float16' is read as its size."""
    sizes = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
    if isinstance(value, str) and value.strip().lower() in sizes:
        return sizes[value.strip().lower()]
    if isinstance(value, str):
        raise ValueError(f"{func}: bytes_per_value must be a size in bytes (4 for float32), or one of "
                         f"{list(sizes)}; got {short(value)}.")
    return int(require_choice(func, "bytes_per_value", require_int(func, "bytes_per_value", value, minimum=1),
                              (2, 4, 8)))


def _strategy_and_devices(func: str, strategy: Any, devices: Any) -> tuple[str, Any]:
    """A tf.distribute strategy object means data parallelism over its replicas."""
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if replicas is None or isinstance(strategy, str):
        return strategy, devices
    if devices not in (1, replicas):
        raise ValueError(f"{func}: the strategy has {replicas} replica(s) but devices={short(devices)}; leave "
                         "devices out when you pass a strategy.")
    return "data", int(replicas)


def estimate_memory(model: Any, *, batch_size: int, optimizer: Any = None, strategy: Any = "single",
                    devices: int = 1, dtype_policy: str = "float32", remat: bool = False,
                    accumulation_steps: int = 1, zero_stage: int = 0, bytes_per_value: int = 4,
                    flash_attention: bool = False) -> MemoryEstimate:
    """Per-device bytes for parameters, gradients, optimizer slots, gradient accumulators and activations.

    ``model``: a built Keras model, or a profile (list of LayerStat, e.g. from ``preset_profile``).
    ``batch_size`` is the global batch. ``optimizer``: a name of OPTIMIZER_SLOTS or a Keras optimizer (its options
    count: ``Adam(amsgrad=True)`` keeps 3 slots); None (default) takes the model's compiled optimizer, or Adam. ``strategy``: ``"single"``, ``"data"``,
    ``"split"``, or a ``tf.distribute`` strategy object (data parallelism over its replicas). The levers:

    - ``dtype_policy``: ``"mixed_float16"`` / ``"mixed_bfloat16"`` keep float32 variables (so
      parameters, gradients and optimizer slots do not shrink; a float16 policy's LossScaleOptimizer
      adds four scalars: its own iteration and learning rate, a step counter and the loss scale) and
      compute in 16 bits: activations take 2 bytes instead of 4, and the 16-bit copy of every kernel a layer
      casts per step counts among the temporaries.
    - ``remat``: activations recomputed in the backward pass, kept only at checkpoints (segments of
      sqrt(layers) layers, see ``remat_checkpoints``); the step computes the forward pass about twice.
    - ``accumulation_steps``: each step runs ``batch_size / accumulation_steps`` samples and adds one
      float32 accumulator per trainable parameter; the update happens every ``accumulation_steps`` steps.
    - ``zero_stage`` (data parallel only): 1 shards optimizer slots, 2 also gradients (and accumulators),
      3 also parameters over the devices (ZeRO, Rajbhandari et al. 2020). Keras 3 on TensorFlow has no ZeRO
      (its TensorFlow distribution backend is a prototype that never lays a variable out): this is a model of what
      DeepSpeed or PyTorch FSDP do, and it costs
      communication (stage 1-2: a reduce-scatter of gradients and an all-gather of parameters per step
      instead of one all-reduce; stage 3: parameters gathered again for every layer, forward and backward).
      Keras's own ``keras.distribution`` on JAX gives stage 3's storage only (each optimizer slot takes its
      variable's layout, so slots are never cut apart from their parameters), and its step holds full-size
      gradients, which no stage here counts: notebook 09 measured twice their size on every device.

    ``strategy="data"`` with a step (``batch_size / accumulation_steps``) the devices do not share evenly warns, as
    ``check_batch_plan`` does: UnevenBatchWarning (33 on 4 devices splits [9, 8, 8, 8], which Keras 3's ``fit``
    refuses at its first step), EmptyReplicaWarning where some device gets no sample (3 on 4: [1, 1, 1, 0]).

    An estimate, not a lower or upper bound: see the module's docstring for what it leaves out.
    """
    func = "estimate_memory"
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    spec = optimizer_spec(func, optimizer, model)
    optimizer = spec.label
    strategy, devices = _strategy_and_devices(func, strategy, devices)
    strategy = require_choice(func, "strategy", strategy, ("single", "data", "split"))
    devices = require_int(func, "devices", devices, minimum=1)
    dtype_policy = _policy_key(func, dtype_policy)
    bytes_per_value = _bytes_per_value(func, bytes_per_value)
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
    if batch_size % accumulation_steps and accumulation_steps <= batch_size:
        raise ValueError(f"{func}: batch_size={batch_size} is not divisible by accumulation_steps="
                         f"{accumulation_steps}; every step must get the same number of samples (measure_memory "
                         f"refuses it too). Use a divisor of {batch_size}, e.g. accumulation_steps="
                         f"{max(k for k in range(1, accumulation_steps + 1) if batch_size % k == 0)}.")
    if accumulation_steps > batch_size:
        raise ValueError(f"{func}: accumulation_steps={accumulation_steps} is more than the batch "
                         f"({batch_size}): each step needs at least one sample. Use at most {batch_size}.")
    if isinstance(model, (list, tuple)):
        stats = list(model)
    else:
        if callable(model) and not hasattr(model, "weights"):
            model = build_abstractly(func, model, dtype_policy)
        stats = profile(model, _caller=func)
        import keras

        if remat and not isinstance(model, keras.Sequential):
            raise ArgumentTypeError(f"{func}: remat=True plans keras.Sequential models only, recomputed in segments "
                                    "of consecutive layers (kit.memory.rematerialize, what measure_memory(remat=True) "
                                    f"runs); got {short(model)}, a {type(model).__name__}, not a keras.Sequential "
                                    "(a functional or subclassed model's layers need not run one after the other). "
                                    "Fix: rebuild it as a keras.Sequential, or wrap consecutive layers in keras.remat "
                                    "by hand and measure it, or plan a profile (kit.memory.profile(model)) as a chain.")
    flash_attention = require_bool(func, "flash_attention", flash_attention)
    scores = sum(s.scores for s in stats if s.kind in ("MultiHeadAttention", "GroupQueryAttention"))
    if flash_attention:
        stats = [_flash(s) for s in stats]
    b, slots = bytes_per_value, spec.slots
    act_bytes = min(b, DTYPE_POLICIES[dtype_policy])
    mixed = dtype_policy != "float32"
    share = {name: (devices if zero_stage >= stage else 1)
             for name, stage in (("optimizer", 1), ("gradients", 2), ("parameters", 3))}

    def usage(layers: Sequence[LayerStat], samples: int) -> dict[str, int]:
        trainable = sum(s.trainable for s in layers)
        per_step = -(-samples // accumulation_steps)
        d = {"parameters": -(-b * sum(s.params for s in layers) // share["parameters"]),
             "gradients": -(-b * trainable // share["gradients"]),
             "optimizer": -(-b * slots * trainable // share["optimizer"]),
             "accumulators": -(-b * trainable // share["gradients"]) if accumulation_steps > 1 else 0,
             "activations": per_step * _kept_activations([s for s in layers if s.kind != "loss"], remat, mixed,
                                                         act_bytes),
             # the largest layer's working set, the batch and the loss (kind "loss"), the 16-bit kernel copies
             "temporaries": per_step * (_temporary_bytes(layers, mixed, act_bytes)
                                        + sum(_layer_bytes(s, mixed, act_bytes) for s in layers if s.kind == "loss"))
             + (2 * sum(s.casts for s in layers) if mixed else 0)}
        d["total"] = sum(d.values())
        return d

    if strategy == "split":
        tail = [s for s in stats if s.kind == "loss"]                     # the batch and the loss: the last device's
        layers = [s for s in stats if s.kind != "loss"]
        costs = [usage([s], batch_size)["total"] for s in layers]         # balance by memory, not params
        groups = split_layers(layers, devices, costs, _caller="estimate_memory")
        per_device = [usage([layers[i] for i in group] + (tail if number == len(groups) - 1 else []), batch_size)
                      for number, group in enumerate(groups)]
    else:
        shares = [-(-batch_size // devices)] * devices if strategy == "data" else [batch_size]
        per_step_batch = batch_size // accumulation_steps
        from .batching import empty_step_fixes, split_batch

        split = split_batch(per_step_batch, devices) if strategy == "data" else []
        if len(set(split)) > 1:     # each replica gets ceil(batch / devices) in order: 6 on 4 is [2, 2, 2, 0]
            import warnings

            from .batching import EmptyReplicaWarning, UnevenBatchWarning

            fixes = "Use " + ", or ".join(empty_step_fixes(batch_size, devices, accumulation_steps)) + "."
            if 0 in split:
                warnings.warn(f"{func}: a step of {per_step_batch} sample(s) on devices={devices} leaves "
                              f"{split.count(0)} replica(s) with no sample in every step (split {split}): Keras 3's "
                              "fit refuses such a first step (notebook 02), a custom loop runs it and "
                              f"BatchNormalization's statistics turn NaN there (notebook 05). {fixes}",
                              EmptyReplicaWarning, stacklevel=2)
            else:           # as check_batch_plan warns: fit averages the first batches, which needs equal sizes
                warnings.warn(f"{func}: a step of {per_step_batch} samples on devices={devices} splits unevenly "
                              f"(split {split}): Keras 3's fit refuses such a first step (InvalidArgumentError: "
                              "Inputs to operation AddN ... must have the same size and shape; notebook 02, section "
                              "5). The estimate gives every device the larger share. " + fixes,
                              UnevenBatchWarning, stacklevel=2)
        per_device = [usage(stats, s) for s in shares]
    levers = []
    if dtype_policy != "float32":
        levers.append(f"{dtype_policy}: float32 variables, gradients and slots; {act_bytes}-byte activations "
                      "(every layer's output; normalization layers keep float32 copies too); where 16-bit "
                      "arithmetic is emulated (most CPUs), matrix multiplications add float32 copies while they "
                      "run: measure"
                      + ("; LossScaleOptimizer adds 4 scalars" if dtype_policy == "mixed_float16" else ""))
    if remat:
        count = sum(s.kind != "loss" for s in stats)
        levers.append(f"recomputation: outputs kept at {len(remat_checkpoints(count))} of {count} layers "
                      "plus one segment; the forward pass runs about twice")
    if accumulation_steps > 1:
        levers.append(f"gradient accumulation: {accumulation_steps} steps of {-(-batch_size // accumulation_steps)} "
                      "samples (global), one float32 accumulator per trainable parameter, one update per "
                      f"{accumulation_steps} steps")
    if flash_attention:
        levers.append("flash attention: no heads x queries x keys tensor kept (keras.config.enable_flash_attention(); "
                      "JAX or PyTorch on a GPU with 16-bit inputs; Keras's TensorFlow backend has none)")
    elif scores and any(s.scores for s in stats):
        per = (2 + (4 if mixed else 0) if mixed else 4) * scores * (-(-batch_size // (devices if strategy == "data"
                                                                                       else 1)))
        levers.append(f"attention keeps {human_bytes(per)} of heads x queries x keys probabilities per device: flash "
                      "attention (estimate_memory(..., flash_attention=True); JAX or PyTorch on a GPU, 16-bit inputs) "
                      "keeps none")
    if zero_stage:
        levers.append(f"ZeRO stage {zero_stage} ({ZERO_STAGES[zero_stage]}) over {devices} devices: a model of "
                      "DeepSpeed / PyTorch FSDP (Keras 3 on TensorFlow has none; keras.distribution on JAX gives "
                      "stage 3's storage only, with full-size gradients during the step: notebook 09); "
                      + ("parameters all-gathered for every layer, forward and backward"
                         if zero_stage == 3 else "a reduce-scatter and an all-gather instead of one all-reduce"))
    assumptions = (
        f"{b}-byte variables (float32); {slots} optimizer slot(s) per trainable parameter ({optimizer})",
        "activations = what each layer keeps for the backward pass (outputs, attention's probabilities, dropout "
        "masks, activation and normalization intermediates: kit.memory.profile lists them); temporaries = the "
        "largest layer's transient working set, the batch and the loss" + (", and the 16-bit kernel copies"
                                                                           if mixed else "")
        + "; left out: CUDA context, cuDNN workspace, optimizer scalars and update temporaries: an estimate, not "
        "a bound (docs/memory.md: float32 within 1.5x of the allocator on the model families measured, but for a "
        "Conv2D + BatchNorm CNN under Eigen's CPU kernels, which keep up to about 1.7x; further off where 16 bits are "
        "emulated)",
        "data parallel: every device holds the whole model, its gradients and slots; batch split ceil(b/n)"
        if strategy == "data" else
        "split: consecutive layers per device, balanced by memory; each keeps its activations for the whole batch"
        if strategy == "split" else "single device: everything in one place",
    ) + tuple(levers) + _approximate_note(stats)
    return MemoryEstimate(strategy, devices, batch_size, optimizer, tuple(per_device), assumptions)


def human_bytes(n: float) -> str:
    """Bytes in the unit that reads best: 4.81e-06 GB is 4.8 KB, 2.12e+03 GB is 2.12 TB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


#: Within this share of the card, an estimate that fits is called tight: it leaves out the CUDA context, cuDNN's
#: workspace and the update's temporaries (notebook 08, section 10).
TIGHT_SHARE = 0.85


def _require_capacity(func: str, capacity_gb: Any) -> float:
    """A card's memory in GB, checked for ``MemoryEstimate.fits`` and ``memory_verdict`` alike: a positive real
    number (NumPy's included; not a bool, a string or NaN) under 100,000 (more is a size in bytes)."""
    import numbers

    if isinstance(capacity_gb, bool) or not isinstance(capacity_gb, numbers.Real) or not float(capacity_gb) > 0:
        raise ArgumentTypeError(f"{func}: capacity_gb must be the card's memory in GB, a positive number such as "
                                f"12, got {short(capacity_gb)} ({type(capacity_gb).__name__}).")
    if 1024 <= float(capacity_gb) < 1e5:   # no card holds a terabyte: MB or MiB, e.g. 24 * 1024
        raise ValueError(f"{func}: capacity_gb is in GB, got {float(capacity_gb):g}, which reads as MB or MiB "
                         f"({float(capacity_gb) / 1024:g} GB); pass {float(capacity_gb) / 1024:g}.")
    if float(capacity_gb) >= 1e5:        # no card holds 100 TB: bytes, as an estimate's .peak is
        raise ValueError(f"{func}: capacity_gb is in GB, got {float(capacity_gb):g}, which reads as bytes "
                         f"({float(capacity_gb) / 1e9:g} GB); pass {float(capacity_gb) / 1e9:g}.")
    return float(capacity_gb)


def memory_verdict(estimate: Any, capacity_gb: float) -> str:
    """One sentence: does the fullest device of ``estimate`` (``estimate_memory``'s) fit on a card of
    ``capacity_gb`` GB (10**9 bytes), tight within 15% of it, and which part dominates it."""
    if not isinstance(estimate, MemoryEstimate):
        raise ArgumentTypeError(f"memory_verdict: estimate must be what estimate_memory(...) returns, got "
                                f"{short(estimate)}; e.g. memory_verdict(kit.estimate_memory(model, batch_size=32), 12).")
    capacity_gb = _require_capacity("memory_verdict", capacity_gb)
    fullest = max(estimate.per_device, key=lambda d: d["total"])
    state = fullest["parameters"] + fullest["gradients"] + fullest["optimizer"] + fullest.get("accumulators", 0)
    activations = fullest["activations"] + fullest.get("temporaries", 0)
    if min(state, activations) >= 0.9 * max(state, activations):
        what = "model state and activations about equally"
    else:
        held = sorted(((fullest.get(key, 0), name) for key, name in
                       (("parameters", "parameters"), ("gradients", "gradients"), ("optimizer", "optimizer slots"),
                        ("accumulators", "accumulators")) if fullest.get(key, 0) > 0),   # SGD: no slots named
                      key=lambda part: -part[0])                                       # largest first
        what = (f"mostly model state ({', '.join(f'{name} {human_bytes(size)}' for size, name in held)})"
                if state > activations else f"mostly activations ({human_bytes(activations)})")
    if estimate.peak > capacity_gb * 1e9:
        fits = "OUT OF MEMORY"
    elif estimate.peak > TIGHT_SHARE * capacity_gb * 1e9:
        fits = "fits, but tight (within 15% of the card, which a real step's extras can fill)"
    else:
        fits = "fits"
    rough = [a.split(":", 1)[1].split(": what")[0].strip() for a in estimate.assumptions
             if a.startswith("approximated, measure it")]
    flash = [a for a in estimate.assumptions if a.startswith("attention keeps")]
    return (f"fullest device needs {human_bytes(estimate.peak)} of a {capacity_gb:g} GB card: {fits}; {what}."
            + (f" Approximated: {rough[0]}: measure it (kit.measure_memory)." if rough else "")
            + (f" Lever: flash attention ({flash[0].split(' of ')[0].replace('attention keeps ', '')} of attention "
               "probabilities it never keeps; JAX or PyTorch on a GPU, Keras on TensorFlow has none)."
               if flash and estimate.peak > TIGHT_SHARE * capacity_gb * 1e9 else ""))
