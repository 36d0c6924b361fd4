"""Inspect every replica's copy of every variable: NaN, drift from replica 0, and trainable copies that differ.

``layer.moving_mean.numpy()`` reads one copy (replica 0's), so a poisoned model looks healthy.
Reading every copy needs the Keras variable's backing ``tf.Variable``: ``variable.value``.
A trainable variable's copies are identical under a MirroredStrategy (every replica applies the same all-reduced
update); copies that differ mean a step stopped half way (a crashed ``fit``), and the model must be rebuilt or
reloaded (``ReplicaReport.diverged``).
"""
from __future__ import annotations

import numbers
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

from ._args import ArgumentTypeError, short, typed
from ._lazy import lazy_attributes
from .batching import (EmptyReplicaWarning, UnevenBatchWarning, empty_slots, input_path, plan_batches,  # noqa: F401
                       plan_verdict, split_batch)

__all__ = ["ReplicaReport", "replica_report", "ReplicaHealth", "ReplicaHealthError", "check_batch_plan",
           "EmptyReplicaWarning", "UnevenBatchWarning"]


@dataclass(frozen=True)
class VariableRow:
    path: str
    finite: tuple[bool, ...]          # per replica
    max_diff: tuple[float, ...]       # per replica: largest |copy - replica 0's copy| (nan if either is non-finite)
    trainable: bool | None = None     # None: not known (a row made by hand)
    same: tuple[bool, ...] = ()       # per replica: the copy equals replica 0's element for element (NaN == NaN)

    @property
    def diverged(self) -> bool:
        """The copies are not all identical (a NaN copy beside a finite one counts; NaN everywhere does not)."""
        return bool(self.same) and not all(self.same)


@dataclass(frozen=True)
class ReplicaReport:
    replicas: int
    rows: tuple[VariableRow, ...]

    @property
    def poisoned(self) -> list[tuple[str, int]]:
        """(variable path, replica) for every non-finite copy."""
        return [(r.path, i) for r in self.rows for i, ok in enumerate(r.finite) if not ok]

    @property
    def spread(self) -> float:
        """Largest difference between a finite copy and replica 0's copy, over every variable (0.0 when identical).
        Measured from replica 0's copy, the one a saved file keeps: two other replicas' copies can differ by up
        to twice this."""
        import math
        values = [d for r in self.rows for d in r.max_diff if not math.isnan(d)]
        return max(values, default=0.0)

    @property
    def diverged(self) -> list[str]:
        """Trainable variables whose replicas' copies are not all identical. Under a MirroredStrategy every replica
        applies the same all-reduced update, so these copies are identical in any model that trained normally
        (BatchNorm's moving statistics, not trainable, drift apart by design in Keras 3 and are not listed). When
        they differ, a step stopped half way (a ``fit`` that crashed updated some replicas' copies and not others'):
        the model is broken, and must be rebuilt or reloaded from saved weights."""
        return [r.path for r in self.rows if r.trainable and r.diverged]

    @property
    def healthy(self) -> bool:
        return not self.poisoned and not self.diverged

    def divergence(self) -> str:
        """One sentence about the trainable copies that differ (``diverged``), with what to do; "" when none do."""
        diverged = [r for r in self.rows if r.trainable and r.diverged]
        if not diverged:
            return ""
        names = ", ".join(r.path for r in diverged[:6]) + (f" and {len(diverged) - 6} more" if len(diverged) > 6 else "")
        replicas = sorted({i for r in diverged for i, same in enumerate(r.same) if not same})
        which = ", ".join(map(str, replicas))
        return (f"trainable copies differ between replicas: {names} (replica{'s' if len(replicas) > 1 else ''} "
                f"{which} differ{'' if len(replicas) > 1 else 's'} from replica 0). Mirrored trainable variables "
                "must be identical on every replica, so this model is broken (a fit that crashed mid-step updated "
                "some replicas' copies and not others'): rebuild the model, or reload saved weights, before "
                "training or predicting with it again.")

    def heatmap(self):
        """Variable x replica figure, non-finite copies in red (see gputrain_kit.plots.replica_heatmap)."""
        from .plots import replica_heatmap
        return replica_heatmap(self)

    def __repr__(self) -> str:
        import math

        width = max((len(r.path) for r in self.rows), default=8)
        head = f"{'variable':<{width}}  " + "  ".join(f"{'replica ' + str(i):>12}" for i in range(self.replicas))
        lines = [head]
        for r in self.rows:
            cells = []
            for ok, diff in zip(r.finite, r.max_diff):
                cells.append(f"{'NaN/inf':>12}" if not ok else f"{diff:>12.3g}")
            lines.append(f"{r.path:<{width}}  " + "  ".join(cells))
        compared = any(not math.isnan(d) for r in self.rows for d in r.max_diff[1:])
        lines.append(f"(cells: largest |copy - replica 0's copy|; {len(self.poisoned)} non-finite copies; "
                     + (f"spread {self.spread:.3g})" if compared or self.replicas == 1 else
                        "spread: none, no finite copy to compare with replica 0's)"))
        if self.diverged:
            import textwrap

            lines += textwrap.wrap("Diverged: " + self.divergence(), 100, break_on_hyphens=False,
                                   break_long_words=False)
        return "\n".join(lines)


def _require_strategy(func: str, strategy: Any) -> None:
    if not hasattr(strategy, "experimental_local_results"):
        raise ArgumentTypeError(
            f"{func}: strategy must be a tf.distribute strategy object, got {typed(strategy)}. Pass the object "
            "the model was built under, e.g. strategy = tf.distribute.MirroredStrategy(), or "
            "model.distribute_strategy.")


def _strategy_name(strategy: Any) -> str:
    name = type(strategy).__name__
    return "the default strategy (no strategy.scope())" if name == "_DefaultDistributionStrategy" else name


def replica_report(model: Any, strategy: Any = None, variables: Sequence[Any] | None = None) -> ReplicaReport:
    """Every replica's copy of every variable of ``model``: finite or not, difference from replica 0.

    ``strategy`` must be the one the model was built under; None (the default) reads it from the model
    (``model.distribute_strategy``). A model built outside ``strategy.scope()`` has one copy per variable,
    and the report says so instead of showing a healthy one-replica table.
    """
    import numpy as np

    func = "replica_report"
    if not hasattr(model, "weights"):
        raise ArgumentTypeError(f"{func}: model must be a Keras model (or layer), got {typed(model)}. "
                                "Call replica_report(model, strategy).")
    if strategy is None:
        strategy = getattr(model, "distribute_strategy", None)
        if strategy is None:
            raise ArgumentTypeError(f"{func}: {typed(model)} has no distribute_strategy to read; pass the strategy "
                                    "it was built under: replica_report(layer, strategy).")
        if type(strategy).__name__ == "_DefaultDistributionStrategy":   # built outside any strategy's scope
            raise ValueError(f"{func}: the model was built outside any strategy's scope, so each variable has one "
                             "copy and there is nothing to compare. Build it inside `with strategy.scope():` "
                             "(notebook 02), or pass the strategy you meant: replica_report(model, strategy).")
    _require_strategy(func, strategy)
    variables = list(model.weights if variables is None else variables)
    if not variables:
        raise ValueError(f"{func}: the model has no variables yet: build or train it first.")
    built_under = getattr(model, "distribute_strategy", None)
    expected = getattr(strategy, "num_replicas_in_sync", None)
    copies_of_first = len(strategy.experimental_local_results(getattr(variables[0], "value", variables[0])))
    if expected and copies_of_first != expected:
        raise ValueError(
            f"{func}: the strategy given has {expected} replicas, but the model's variables have "
            f"{copies_of_first} cop{'y' if copies_of_first == 1 else 'ies'}: the model was built under "
            f"{_strategy_name(built_under)}, not under the {_strategy_name(strategy)} given. Build the model "
            "inside `with strategy.scope():`, or pass model.distribute_strategy.")
    if built_under is not None and built_under is not strategy:
        warnings.warn(f"{func}: the model was built under another {_strategy_name(built_under)} object than "
                      f"the {_strategy_name(strategy)} given; the report reads the copies the model holds. "
                      "Pass model.distribute_strategy to be sure.", RuntimeWarning, stacklevel=2)
    rows = []
    for v in variables:
        copies = [c.numpy() for c in strategy.experimental_local_results(getattr(v, "value", v))]
        finite = tuple(bool(np.isfinite(c).all()) for c in copies)
        ref = copies[0]
        diffs = tuple(float(np.abs(c - ref).max()) if (ok and finite[0] and c.size) else (0.0 if ok and not c.size else float("nan"))
                      for c, ok in zip(copies, finite))
        same = tuple(c.shape == ref.shape and bool(np.array_equal(c, ref, equal_nan=c.dtype.kind in "fc"))
                     for c in copies)
        rows.append(VariableRow(getattr(v, "path", getattr(v, "name", "?")), finite, diffs,
                                bool(getattr(v, "trainable", False)), same))
    return ReplicaReport(len(rows[0].finite), tuple(rows))


class ReplicaHealthError(RuntimeError):
    """Some replica's copy of a variable is non-finite, a trainable variable's copies differ, or the copies
    diverged beyond the tolerance."""


def _replicas_named(replicas: list[int]) -> str:
    return (f"replica {replicas[0]}" if len(replicas) == 1 else
            "replicas " + ", ".join(map(str, replicas[:-1])) + f" and {replicas[-1]}")


def _samples(n: int) -> str:
    return f"{n} sample" if n == 1 else f"{n} samples"


def _few_samples_fix(n_samples: int, global_batch: int, replicas: int) -> str:
    """The fix for data that fill no whole global batch: a smaller batch that fits them, or enough data for one,
    each with fixed-size batches (drop_remainder=True), since a partial last step is what leaves replicas empty."""
    fits = n_samples - n_samples % replicas          # the samples rounded down to the replica count
    if global_batch % replicas == 0:
        more = f"at least {global_batch} samples, with drop_remainder=True"
    else:
        up = -(-global_batch // replicas) * replicas      # the next multiple of the replica count
        more = f"at least {up} samples at a global batch of {up}, with drop_remainder=True"
    if fits:
        return (f"a global batch of at most {fits} that is a multiple of the replica count, with drop_remainder=True "
                f"(or a sample count that the batch divides, so no step is partial), or {more}.")
    return (f"more data: at least {replicas} samples at a global batch of {replicas} (one per replica)"
            + (f", or at least {global_batch} at the global batch of {global_batch}"
               if global_batch % replicas == 0 and global_batch > replicas else "")
            + ", with drop_remainder=True.")


def first_step_verdict(plan: list[list[int]], global_batch: int, replicas: int, n_samples: int | None = None,
                       shard_policy: Any = "auto") -> str:
    """For the ``"dataset"`` path (``fit``, ``experimental_distribute_dataset``): what ``fit`` does with a plan whose
    first step splits unevenly (it refuses it at that step, notebook 02) and what a custom loop meets instead;
    "" when the first step splits evenly. An empty replica in a first step makes it uneven too, so a global batch
    that leaves a replica empty in every step never reaches BatchNormalization in ``fit``. ``n_samples``: the data's
    size (default: the samples the plan holds, all of them unless drop_remainder dropped some)."""
    if not plan or len(set(plan[0])) == 1:
        return ""
    text = (f"Keras 3 fit refuses this at its first step, before any BatchNormalization update: step 1 splits "
            f"{plan[0]}, and fit starts by averaging the replicas' first batches, which needs equal sizes "
            "(InvalidArgumentError: Inputs to operation AddN ... must have the same size and shape; notebook 02, "
            "section 5).")
    n_samples = sum(map(sum, plan)) if n_samples is None else n_samples
    below = global_batch - global_batch % replicas
    fitting = [c for c in ((below, below + replicas) if below else (replicas, 2 * replicas)) if c <= n_samples]
    choices = " or ".join(map(str, fitting))
    every = [i for i, size in enumerate(split_batch(global_batch, replicas, shard_policy)) if size == 0]
    full_steps = sum(1 for sizes in plan if sum(sizes) == global_batch)
    empty = empty_slots(plan)
    loop = "A custom loop (strategy.run over experimental_distribute_dataset) accepts it"
    fixed = f"with drop_remainder=True where the new batch does not divide the {_samples(n_samples)}"
    if every and full_steps:
        text += (f" {loop}, and there a global batch of {global_batch} over {replicas} replicas leaves "
                 f"{_replicas_named(every)} empty in every full step, drop_remainder or not: BatchNormalization "
                 "writes NaN into each empty replica's copy of the moving statistics at the first step (notebook 05). "
                 f"Fix: a global batch that is a multiple of the replica count ({choices}), {fixed}; "
                 "drop_remainder, repeat() or padding alone cannot help.")
    elif empty:
        step = empty[0][0]
        text += (f" {loop}; there step {step + 1} gives {_replicas_named([r for s, r in empty if s == step])} no "
                 "data, and BatchNormalization writes NaN into each empty replica's copy of the moving statistics "
                 f"(notebook 05). Fix: a global batch that is a multiple of the replica count ({choices}), with "
                 "fixed-size batches (drop_remainder=True on the global batch, or repeat() with steps_per_epoch).")
    else:
        text += (f" {loop} (a replica with fewer samples waits for the others). Fix: a global batch that is a "
                 f"multiple of the replica count ({choices}), {fixed}.")
    if n_samples < global_batch or not fitting:    # the data fill no step a fix could use: more data, or less batch
        lead = (f"there are fewer samples ({n_samples}) than one global batch of {global_batch}"
                if n_samples < global_batch else f"there are fewer samples ({n_samples}) than replicas ({replicas})")
        text = text[:text.rindex(" Fix: ")] + f" Fix: {lead}: " + _few_samples_fix(n_samples, global_batch, replicas)
    return text


def check_batch_plan(n_samples: int, global_batch: int, replicas: int, drop_remainder: bool = False,
                     *, via: str = "dataset", shard_policy: Any = "auto") -> list[list[int]]:
    """Warn before training when ``fit``'s first step would split unevenly, which Keras 3's ``fit`` refuses at that
    step (UnevenBatchWarning; EmptyReplicaWarning when some step also leaves a replica empty, as a custom loop
    would meet it), and (EmptyReplicaWarning) when some later step leaves a replica with no data.

    ``via`` is the input path, as in ``plan_batches``: ``"dataset"`` for ``fit`` and
    ``experimental_distribute_dataset``, ``"function"`` for ``distribute_datasets_from_function``.
    ``shard_policy``: your dataset's auto-shard policy, as in ``plan_batches`` (default "auto": in-memory data;
    "off" splits every batch evenly, and can then leave replicas empty where "auto" does not).
    Returns the plan.
    """
    via = input_path("check_batch_plan", via)
    plan = plan_batches(n_samples, global_batch, replicas, drop_remainder, via=via, shard_policy=shard_policy,
                        _caller="check_batch_plan")
    refused = first_step_verdict(plan, global_batch, replicas, n_samples, shard_policy) if via == "dataset" else ""
    if refused:                          # fit stops at step 1, whatever the later steps hold
        warnings.warn(refused, EmptyReplicaWarning if empty_slots(plan) else UnevenBatchWarning, stacklevel=2)
    elif not plan:                         # drop_remainder on fewer samples than one batch: nothing trains at all
        warnings.warn(f"drop_remainder=True leaves no step at all: {_samples(n_samples)} "
                      f"do{'es' if n_samples == 1 else ''} not fill one whole step "
                      f"of {global_batch} over {replicas} replicas, so every replica gets nothing and training runs "
                      "no step. Fix: " + _few_samples_fix(n_samples, global_batch, replicas), EmptyReplicaWarning,
                      stacklevel=2)
    elif empty_slots(plan) and n_samples < global_batch:      # the data fill no step: no batching trick helps
        warnings.warn(plan_verdict(plan).split(" Fix: ")[0] + f" Fix: there are fewer samples ({n_samples}) than "
                      f"one global batch of {global_batch}: " + _few_samples_fix(n_samples, global_batch, replicas),
                      EmptyReplicaWarning, stacklevel=2)
    elif empty_slots(plan):
        where = "the global batch" if via == "dataset" else "each replica's batch"
        warnings.warn(plan_verdict(plan) + f" Fix: fixed-size batches (drop_remainder=True on {where}, "
                      "or repeat() with steps_per_epoch, or padding the data to a multiple of the global batch). "
                      "BatchNormalization(synchronized=True) is no fix for empty steps (a conv net with it crashed "
                      "with oneDNN CPU kernels in notebook 05); use it against drift, with fixed-size batches, at the price of "
                      "all-reduces in every BatchNormalization layer every step.",
                      EmptyReplicaWarning, stacklevel=2)
    return plan


def _make_callback():
    import keras

    class ReplicaHealth(keras.callbacks.Callback):
        """At every epoch end, check every replica's copy of every variable: non-finite copies, and trainable
        variables whose copies differ between replicas (``ReplicaReport.diverged``: the model is broken).

        ``on_problem="raise"`` (default) stops training with ReplicaHealthError; ``"warn"`` warns.
        ``tolerance``: also complain when finite copies differ from replica 0's by more than this.
        """

        def __init__(self, strategy: Any = None, tolerance: float | None = None, on_problem: str = "raise"):
            super().__init__()
            if on_problem not in ("raise", "warn"):
                raise ValueError(f"ReplicaHealth: on_problem must be 'raise' or 'warn', got {short(on_problem)}.")
            if strategy is not None:
                _require_strategy("ReplicaHealth", strategy)
            if tolerance is not None:
                if isinstance(tolerance, bool) or not isinstance(tolerance, numbers.Real):
                    raise ArgumentTypeError(f"ReplicaHealth: tolerance must be a number (the largest difference "
                                            f"allowed between a replica's copy and replica 0's) or None, got {typed(tolerance)}. "
                                            "Pass e.g. tolerance=1e-6.")
                if not tolerance >= 0:
                    raise ValueError(f"ReplicaHealth: tolerance must be 0 or more, got {tolerance}.")
            self.strategy, self.tolerance, self.on_problem = strategy, tolerance, on_problem
            self.reports: list[ReplicaReport] = []

        def on_train_begin(self, logs=None):
            # Checked before the first step, not after an epoch: a strategy that is not the model's, or a
            # model with one copy of each variable (built outside any strategy's scope).
            own = self.model.distribute_strategy
            if self.strategy is not None and self.strategy is not own:
                raise ValueError(f"ReplicaHealth: strategy= is not the strategy this model was built under "
                                 f"({type(own).__name__} with {own.num_replicas_in_sync} replica(s)); its variables "
                                 "have no copies there. Pass the strategy whose scope() built the model, or leave "
                                 "strategy out: the callback then uses the model's own.")
            if own.num_replicas_in_sync == 1:
                warnings.warn("ReplicaHealth: this model has one copy of each variable (built outside a multi-"
                              "device strategy's scope(), or a strategy of one replica): nothing can differ "
                              "between replicas; non-finite values are still reported.", RuntimeWarning,
                              stacklevel=2)

        def on_epoch_end(self, epoch, logs=None):
            strategy = self.strategy or self.model.distribute_strategy
            report = replica_report(self.model, strategy)
            self.reports.append(report)
            problems = []
            if report.diverged:          # first: the model is broken, whatever else is wrong with it
                problems.append(f"after epoch {epoch + 1}, " + report.divergence().rstrip("."))
            if report.poisoned:
                names = sorted({f"{path} (replica {i})" for path, i in report.poisoned})
                problems.append(f"{len(report.poisoned)} non-finite replica copies after epoch {epoch + 1}: "
                                + ", ".join(names[:4]) + (" ..." if len(names) > 4 else ""))
            if self.tolerance is not None and report.spread > self.tolerance:
                problems.append(f"a replica's copy differs from replica 0's by {report.spread:.3g} (> tolerance {self.tolerance:g}) "
                                f"after epoch {epoch + 1}")
            if problems:
                message = "ReplicaHealth: " + "; ".join(problems) + " (see gputrain_kit.replica_report)."
                if self.on_problem == "raise":
                    self.model.stop_training = True
                    raise ReplicaHealthError(message)
                warnings.warn(message, RuntimeWarning, stacklevel=2)

    return ReplicaHealth


__getattr__ = lazy_attributes(ReplicaHealth=_make_callback)
