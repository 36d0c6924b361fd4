"""What a training step really holds, by TensorFlow's allocator: the measurements behind ``memory``'s estimates.

``measure_training_step`` reads the allocator in this process; ``measure_memory``, ``measure_levers`` and
``start_measuring`` / ``start_measuring_families`` run ``_children/measure.py`` in processes of their own
(a model measured after another in one process would count what the first one left), each under the CPU
kernel family asked for, with TensorFlow's BFC CPU allocator, whose statistics work under both families.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._args import ArgumentTypeError, require_bool, require_choice, require_int, short
from .cpu_kernels import require_allocator_stats
from .memory import DTYPE_POLICIES
from .optimizer_slots import _CLASSES as _OPTIMIZER_CLASSES, optimizer_spec
from .processes import BackgroundRun

__all__ = ["measure_training_step", "MemoryMeasurement", "measure_memory", "measure_levers", "start_measuring",
           "PendingMeasurements", "start_measuring_families", "PendingFamilies", "CompiledMemory", "compiled_memory"]


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

    if not hasattr(model, "train_on_batch") or not hasattr(model, "weights"):
        raise ArgumentTypeError(f"measure_training_step: model must be a built, compiled Keras model, got "
                                f"{short(model)}.")
    optimizer = getattr(model, "optimizer", None)
    name = getattr(model, "name", "?")
    fixes = []
    if not model.weights:
        fixes.append(f"the model {name!r} is not built yet (it has no weights): call it once on a batch "
                     "(model(x[:1])), or start it with keras.Input(shape) (model.build(input_shape) builds a "
                     "subclassed model's layers only if the model defines build())")
    if optimizer is None:
        fixes.append(f"the model {name!r} is not compiled: call model.compile(optimizer=..., loss=...) first")
    if fixes or optimizer is None:
        raise ValueError("measure_training_step: pass a built, compiled Keras model; " + "; and ".join(fixes) + ".")
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


def _check_remat_model(func: str, build: Any) -> None:
    """remat=True needs a Sequential model (``rematerialize``): where this process's TensorFlow runtime has
    started (a notebook after ``setup``), build the model here, without allocating its weights
    (``keras.StatelessScope``), and refuse any other kind before a process starts. Elsewhere building it would
    start the runtime (``setup`` could not run after), so the measuring process checks it first thing."""
    from .processes import built_here

    model = built_here(build)
    if model is None:
        return
    import keras

    if isinstance(model, keras.Model) and not isinstance(model, keras.Sequential):
        raise ArgumentTypeError(f"{func}: remat=True rebuilds a keras.Sequential model in recomputed segments; "
                                f"{build.__name__}() returns {short(model)}. Build it as keras.Sequential, or "
                                f"measure without remat and wrap consecutive layers in keras.remat by hand.")


def _measure_config(func: str, build: Any, *, batch_size: int, optimizer: Any, dtype_policy: str, remat: bool,
                    accumulation_steps: int, steps: int) -> tuple[str, dict, dict]:
    """build's source, the child's config and the config shown to the user, every argument checked
    first (errors name ``func``)."""
    from .processes import build_source

    source = build_source(func, build, returns="an uncompiled Keras model", runs="It")
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    if optimizer is None:
        raise ArgumentTypeError(f"{func}: optimizer must be a name from {list(_OPTIMIZER_CLASSES)} or a Keras "
                                "optimizer, got None; e.g. optimizer='adam'.")
    spec = optimizer_spec(func, optimizer)       # a name in any case, or a Keras optimizer with its options
    dtype_policy = require_choice(func, "dtype_policy", dtype_policy, DTYPE_POLICIES)
    remat = require_bool(func, "remat", remat)
    accumulation_steps = require_int(func, "accumulation_steps", accumulation_steps, minimum=1)
    steps = require_int(func, "steps", steps, minimum=1)
    if batch_size % accumulation_steps:
        raise ValueError(f"{func}: batch_size={batch_size} is not divisible by accumulation_steps="
                         f"{accumulation_steps}; every step must get the same number of samples.")
    config = {"batch_size": batch_size, "optimizer": list(spec.build), "dtype_policy": dtype_policy,
              "remat": remat, "accumulation_steps": accumulation_steps, "steps": steps}
    return source, config, dict(config, optimizer=spec.label)


def _measurement(values: dict, shown: dict, func: str) -> MemoryMeasurement:
    if int(values["state"]) <= 0:
        # Seen on CPU with a model of a few kilobytes: the allocator's statistics stayed at zero.
        raise ValueError(f"{func}: TensorFlow's allocator on {values['device']} counted nothing held between steps "
                         f"for this model ({shown}); its statistics miss small allocations. Measure a model with "
                         "at least a megabyte of parameters, or estimate this one with estimate_memory.")
    if values.get("compiled_with"):
        import warnings
        warnings.warn(f"{func}: build() compiles its model (with {values['compiled_with']}); it was measured "
                      f"compiled with optimizer={shown['optimizer']!r} and a mean-squared-error loss, as every "
                      "measurement is. Pass optimizer= to measure another optimizer; return the model uncompiled "
                      "to silence this.", UserWarning, stacklevel=2)
    return MemoryMeasurement(int(values["state"]), int(values["peak"]), values["device"], shown,
                             values.get("kernels", ""))


def _child_env(func: str, kernels: str | None) -> dict[str, str]:
    """The measuring child's environment: the CPU kernel family asked for (None: this process's environment
    decides, as it did for this process) and TensorFlow's BFC CPU allocator, whose statistics are the
    measurement under either family."""
    from .cpu_kernels import family_env

    return family_env(kernels, func) if kernels is not None else {"TF_CPU_ALLOCATOR_USE_BFC": "true"}


class _Queue:
    """First come, first served: one measuring run of this process at a time (see ``_measure``)."""

    def __init__(self) -> None:
        import threading

        self._turn = threading.Condition()
        self._next = self._serving = 0

    def __enter__(self) -> None:
        with self._turn:
            ticket, self._next = self._next, self._next + 1
            self._turn.wait_for(lambda: self._serving == ticket)

    def __exit__(self, *exc: Any) -> None:
        with self._turn:
            self._serving += 1
            self._turn.notify_all()


_QUEUE = _Queue()


def _measure(func: str, source: str, name: str, jobs: list[tuple[str, dict, dict]], processes: int,
             env: dict[str, str], on_result: Any = None) -> dict[str, MemoryMeasurement]:
    """Every job in a process of its own (``_children/measure.py``; on Linux forked from one process that
    imported TensorFlow, which saves the import, about 4 s here, for every configuration).

    Runs queue behind each other, first come first served: a measurement asked for while background
    measurements run waits for them, so the memory beside a notebook is one run's (one TensorFlow import
    and up to ``processes`` children) however many were started; on 2 cores running more at once would
    not finish sooner anyway."""
    with _QUEUE:
        return _measure_now(func, source, name, jobs, processes, env, on_result)


def _measure_now(func: str, source: str, name: str, jobs: list[tuple[str, dict, dict]], processes: int,
                 env: dict[str, str], on_result: Any = None) -> dict[str, MemoryMeasurement]:
    from ._children import Job, run_jobs
    from .processes import ChildError

    shown = {n: s for n, _, s in jobs}
    results: dict[str, MemoryMeasurement] = {}
    failures: list[str] = []
    refused: list[ValueError] = []       # measured, but nothing the allocator counted: the user's error

    def done(outcome: Any, _count: int, total: int) -> None:
        if not outcome.ok:
            reason = outcome.error.strip().splitlines()[-1] if not outcome.died else outcome.error.strip()
            if any(word in (outcome.error or "") for word in ("ResourceExhausted", "MemoryError", "OOM when")):
                reason = ("the model did not fit in this machine's memory (TensorFlow ran out while building or "
                          "training it). Plan it without its weights instead: kit.estimate_memory(build, "
                          "batch_size=...) builds nothing; or measure a smaller twin and scale up (notebook 08).")
            failures.append(f"{outcome.id}: {reason}" if total > 1 else reason)
            return
        try:
            results[outcome.id] = _measurement(outcome.values, shown[outcome.id], func)
        except ValueError as err:
            refused.append(err)
            return
        if on_result is not None:
            on_result(outcome.id, results[outcome.id], len(results), total)

    run_jobs("measure", [Job(n, {"config": c, "build_source": source, "build_name": name}, env) for n, c, _ in jobs],
             processes=processes, timeout=300 + 60 * len(jobs), on_result=done, func=func)
    if failures:
        raise ChildError(f"{func}: " + "\n".join(failures + [str(err) for err in refused]))
    if refused:
        raise refused[0]
    return results


def measure_memory(build: Any, *, batch_size: int, optimizer: Any = "adam", dtype_policy: str = "float32",
                   remat: bool = False, accumulation_steps: int = 1, steps: int = 2,
                   kernels: str | None = None) -> MemoryMeasurement:
    """Train ``build()``'s model for ``steps`` steps in a fresh process and ask TensorFlow's allocator.

    ``build``: a zero-argument function, defined with ``def`` in a notebook cell or a script, returning an
    uncompiled Keras model (``keras``, ``tf`` and ``np`` are available inside it). The model is trained
    on random data with a mean-squared-error loss: one whole update, then ``steps`` updates measured
    (``steps x accumulation_steps`` training steps). ``batch_size`` is the batch of one update: with
    ``accumulation_steps=k`` each step runs ``batch_size / k`` samples. ``remat=True`` rematerializes
    the model in segments (``rematerialize``). ``optimizer``: a name (``"adam"``, ``"sgd"``, ...) or a Keras
    optimizer, as ``estimate_memory`` takes it (its kind and the options that add slots, e.g. ``amsgrad``). A process of its own, with a new TensorFlow runtime and
    allocator: a model measured after another in one process would count what the first one left. On
    Linux it is forked from a process that has imported TensorFlow but not started it, which saves the
    import (about 4 s here); elsewhere, or with ``GPUTRAIN_FORK=0``, a new interpreter.

    ``kernels``: the CPU kernel family to measure with, ``"onednn"`` or ``"eigen"`` (``cpu_kernels``); None
    keeps this process's (its environment's) family. The process uses TensorFlow's BFC CPU allocator, whose
    statistics work under both families, so this works from a plain script too, with or without ``setup()``.
    """
    source, config, shown = _measure_config(
        "measure_memory", build, batch_size=batch_size, optimizer=optimizer, dtype_policy=dtype_policy, remat=remat,
        accumulation_steps=accumulation_steps, steps=steps)
    if config["remat"]:
        _check_remat_model("measure_memory", build)
    env = _child_env("measure_memory", kernels)
    return _measure("measure_memory", source, build.__name__, [("one", config, shown)], 1, env)["one"]


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
    if any(config["remat"] for _, config, _ in jobs):
        _check_remat_model(func, build)
    return source, jobs


def measure_levers(build: Any, levers: Any, *, batch_size: int, steps: int = 2, processes: int = 2,
                   on_result: Any = None, kernels: str | None = None) -> dict[str, MemoryMeasurement]:
    """``measure_memory`` for several configurations, each in a process of its own (forked from one that
    imported TensorFlow once, on Linux), up to ``processes`` at a time. ``levers``: name -> settings that
    differ from the default (``batch_size``, ``optimizer``, ``dtype_policy``, ``remat``,
    ``accumulation_steps``), e.g. ``{"Adam": {}, "SGD": {"optimizer": "sgd"}}``.
    ``on_result(name, measurement, done, total)`` is called as each finishes. Results keep ``levers``' order.
    ``kernels``: the CPU kernel family, as for ``measure_memory``."""
    func = "measure_levers"
    processes = require_int(func, "processes", processes, minimum=1)
    env = _child_env(func, kernels)
    source, jobs = _lever_jobs(func, build, levers, batch_size, steps)
    results = _measure(func, source, build.__name__, jobs, processes, env, on_result)
    return {name: results[name] for name, _, _ in jobs}


class PendingMeasurements(BackgroundRun):
    """Measurements running in the background (``start_measuring``): ``.result()`` waits for them,
    ``.progress_bar()`` is a widget that follows them as they finish."""

    unit = "measurement"
    units = "measurements"
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

    unit = "measurement"
    units = "measurements"
    bar_label = "both families"

    def __init__(self, build: Any, levers: Any, batch_size: int, steps: int, families: tuple[str, ...]):
        def work(advance: Any) -> dict[str, dict[str, MemoryMeasurement]]:
            results = {}
            for number, family in enumerate(families):
                before = number * len(levers)        # the bar counts measurements, as each finishes
                results[family] = measure_levers(
                    build, levers, batch_size=batch_size, steps=steps, processes=2, kernels=family,
                    on_result=lambda name, measurement, done, total, before=before: advance(before + done))
            return results

        super().__init__(work, len(families) * len(levers))

    def result(self, timeout: float | None = None) -> dict[str, dict[str, MemoryMeasurement]]:
        """Wait for every family (at most ``timeout`` seconds) and return the measurements by family, then name."""
        return super().result(timeout)


def start_measuring_families(build: Any, levers: Any, *, batch_size: int, steps: int = 2,
                             families: Any = None) -> PendingFamilies:
    """``measure_levers`` once per CPU kernel family (``cpu_kernels.FAMILIES`` by default), in the background.

    TensorFlow fixes its kernel family when it is imported, so each family runs in processes of its own; the
    families run one after another (up to 2 configurations at a time), queued behind any measurements already
    running, so that this adds one measuring run's memory beside the notebook whatever the number of families.
    Every argument is checked before anything starts."""
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


@dataclass(frozen=True)
class CompiledMemory:
    """XLA's buffer analysis of one compiled training step (``compiled_memory``), in bytes."""

    arguments: int        # the step's inputs: variables, optimizer slots, the batch
    outputs: int          # what it returns: the updated variables and slots, the loss
    temporaries: int      # XLA's buffers for everything in between: activations, gradients, workspace
    aliased: int          # outputs written over their arguments (donated buffers), counted once
    platform: str         # the device XLA compiled for: "cpu" here, "gpu" on a GPU
    config: dict

    @property
    def peak(self) -> int:
        """Arguments + outputs + temporaries - aliased: what the compiled step holds at most."""
        return self.arguments + self.outputs + self.temporaries - self.aliased

    def __repr__(self) -> str:
        from .memory import human_bytes

        return (f"CompiledMemory({self.config}): peak {human_bytes(self.peak)} (arguments {human_bytes(self.arguments)}, "
                f"outputs {human_bytes(self.outputs)}, temporaries {human_bytes(self.temporaries)}) as XLA compiled it "
                f"for {self.platform}")


def compiled_memory(build: Any, *, batch_size: int, optimizer: Any = "adam",
                    dtype_policy: str = "float32") -> CompiledMemory:
    """A second opinion beside ``estimate_memory``, without training and without the model's weights: ``build()``'s
    model is built under Keras's JAX backend in a process of its own (abstractly: no variable gets a value), its
    training step compiled by XLA for a batch of ``batch_size``, and the compiled program's own buffer analysis
    (``memory_analysis()``) returned. XLA plans for the device it compiles for (this machine's CPU here; on a GPU
    machine, the GPU) and fuses elementwise chains, so it can differ from TensorFlow's allocator either way
    (docs/memory.md). ``build`` as for ``measure_memory``; the loss is mean squared error."""
    from ._children import Job, run_jobs
    from .memory import _policy_key
    from .processes import ChildError, build_source

    func = "compiled_memory"
    source = build_source(func, build, returns="an uncompiled Keras model", runs="It")
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    spec = optimizer_spec(func, optimizer)
    dtype_policy = _policy_key(func, dtype_policy)
    config = {"batch_size": batch_size, "optimizer": list(spec.build), "dtype_policy": dtype_policy}
    env = {"KERAS_BACKEND": "jax", "JAX_PLATFORMS": "", "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    outcome = run_jobs("xla_memory", [Job("one", {"config": config, "build_source": source,
                                                  "build_name": build.__name__}, env)],
                       processes=1, timeout=600, func=func)["one"]
    if not outcome.ok:
        reason = outcome.error.strip().splitlines()[-1] if outcome.error else "no result"
        raise ChildError(f"{func}: {reason}")
    values = outcome.values or {}
    return CompiledMemory(values["arguments"], values["outputs"], values["temporaries"], values["aliased"],
                          values["platform"], dict(config, optimizer=spec.label))
