"""How tf.distribute splits each global batch over replicas (pure Python, no TensorFlow).

Two input paths, two rules (``via=``):

- ``"dataset"``: ``strategy.experimental_distribute_dataset`` and Keras ``fit`` (which uses it). How it cuts a
  global batch of ``b`` samples depends on tf.data's auto-shard policy (``shard_policy=``,
  ``tf.data.Options().experimental_distribute.auto_shard_policy``; on one machine):

  * ``"auto"`` (tf.data's default) on in-memory data (NumPy arrays, ``from_tensor_slices``, ``range``), and
    ``"data"`` (which Keras sets for NumPy arrays): tf.data's auto-shard rewrite shards by data and replaces the
    balanced rebatching with TensorFlow's legacy one (``RewriteRebatchV2ToV1`` in its ``auto_shard.cc``; the
    docstring of ``_AutoShardDataset`` in ``tensorflow/python/data/experimental/ops/distribute.py``), which
    gives each replica in turn ``ceil(b / replicas)``. A replica gets **zero** samples whenever
    ceil(b / r) x (r - 1) >= b for r replicas (4 samples on 3 replicas -> [2, 2, 0]). For a short last batch
    that is one step per epoch, which ``drop_remainder=True`` removes (b=6 over 4 replicas -> [2, 2, 2, 0]);
    for a global batch of 5, 6 or 9 over 4 replicas it is every step, ``drop_remainder`` or not
    ([2, 2, 1, 0], [2, 2, 2, 0], [3, 3, 3, 0]).
  * ``"off"``, ``"file"`` (skipped on one machine) and ``"hint"``, and ``"auto"`` on a pipeline that reads files
    (AUTO shards it by file): the balanced split of ``batch_sizes_for_worker`` (sizes that differ by at most one,
    the larger first: 5 over 4 -> [2, 1, 1, 1], 6 -> [2, 2, 1, 1]), so a full global batch of at least r samples
    leaves no replica empty; a short last batch fills those sizes in replica order, so it can leave several
    replicas empty: 4 samples of a global batch of 6 -> [2, 2, 0, 0], 6 of 64 -> [6, 0, 0, 0].
- ``"function"``: ``strategy.distribute_datasets_from_function`` with the usual recipe (each pipeline
  batches by ``input_context.get_per_replica_batch_size(global_batch)``) hands out whole per-replica
  batches, one per replica in order. The last step gets the remaining batches: 1030 samples, global 64,
  4 replicas -> [6, 0, 0, 0]; and even with no partial batch, 1040 -> [16, 0, 0, 0]. With
  ``drop_remainder=True`` on the per-replica batch, tf.distribute drops a last step it cannot fill. No
  rebatching, so the auto-shard policy does not change the split.

Empty pieces are what poison or crash BatchNormalization in notebook 05.
"""
from __future__ import annotations

from typing import Any, Iterable

from ._args import require_bool, require_choice, require_int, short

__all__ = ["plan_batches", "split_batch", "VIAS", "SHARD_POLICIES", "ArgumentOrderWarning"]


class ArgumentOrderWarning(UserWarning):
    """A batch plan whose arguments look swapped: a global batch below the replica count or above the data."""

VIAS = ("dataset", "function")
#: tf.data's auto-shard policies, as ``plan_batches(shard_policy=...)`` names them (AutoShardPolicy's names).
SHARD_POLICIES = ("auto", "data", "off", "file", "hint")
_BALANCED = ("off", "file", "hint")     # the policies that keep tf.distribute's balanced rebatching


class EmptyReplicaWarning(UserWarning):
    """The batch plan gives some replica zero samples in some step (where ``fit``'s first step already splits
    unevenly, the message says first that ``fit`` refuses it)."""


class UnevenBatchWarning(UserWarning):
    """The first step gives the replicas different batch sizes, which Keras 3's ``fit`` refuses (notebook 02)."""


def split_batch(batch: int, replicas: int, shard_policy: Any = "auto") -> list[int]:
    """Per-replica sizes for one global batch of ``batch`` samples over ``replicas``. Under the auto-shard policies
    "auto" (in-memory data) and "data": ceil(batch / replicas) each, in replica order, so the last replica gets
    none whenever ceil(batch / replicas) x (replicas - 1) >= batch; under "off", "file" and "hint": sizes that
    differ by at most one, the larger first.

    >>> split_batch(6, 4), split_batch(5, 4), split_batch(9, 4)
    ([2, 2, 2, 0], [2, 2, 1, 0], [3, 3, 3, 0])
    >>> split_batch(6, 4, shard_policy="off")
    [2, 2, 1, 1]
    """
    batch = require_int("split_batch", "batch", batch, minimum=0)
    replicas = require_int("split_batch", "replicas", replicas, minimum=1)
    if shard_rule("split_batch", shard_policy) == "balanced":
        return _fill(batch, _balanced(batch, replicas))
    per_replica = -(-batch // replicas)  # ceil
    return [max(0, min(per_replica, batch - i * per_replica)) for i in range(replicas)]


def shard_rule(func: str, shard_policy: Any) -> str:
    """"legacy" or "balanced": which rebatching tf.distribute keeps under ``shard_policy`` (one of SHARD_POLICIES,
    any case, or a ``tf.data.experimental.AutoShardPolicy`` member)."""
    name = getattr(shard_policy, "name", shard_policy)
    if isinstance(name, str) and name.lower() in SHARD_POLICIES:
        return "balanced" if name.lower() in _BALANCED else "legacy"
    raise ValueError(f"{func}: shard_policy must be one of {', '.join(map(repr, SHARD_POLICIES))} (tf.data's "
                     f"AutoShardPolicy, as your dataset's options.experimental_distribute.auto_shard_policy sets "
                     f"it), got {short(shard_policy)}. Fix: shard_policy=\"auto\" for tf.data's default, "
                     "shard_policy=\"off\" for a dataset with AutoShardPolicy.OFF.")


def _balanced(batch: int, replicas: int) -> list[int]:
    """``batch_sizes_for_worker`` on one machine: sizes that differ by at most one, the larger first."""
    base, extra = divmod(batch, replicas)
    return [base + 1] * extra + [base] * (replicas - extra)


def _fill(samples: int, sizes: list[int]) -> list[int]:
    """``samples`` poured into pieces of at most ``sizes``, in replica order (the rebatching of a short batch)."""
    pieces = []
    for size in sizes:
        pieces.append(min(size, samples))
        samples -= pieces[-1]
    return pieces


def input_path(func: str, via: Any) -> str:
    """``via`` checked, with ``"fit"`` read as ``"dataset"``: fit feeds the replicas through that path."""
    return "dataset" if via == "fit" else require_choice(func, "via", via, VIAS)


def plan_arguments(func: str, n_samples: Any, global_batch: Any) -> tuple[int, int]:
    """``n_samples`` and ``global_batch`` checked as every batch plan checks them (``func`` names the caller in
    the messages): whole numbers of at least 1."""
    return (require_int(func, "n_samples", n_samples, minimum=1),
            require_int(func, "global_batch", global_batch, minimum=1))


#: How each function that takes a batch plan's numbers orders them, for the swapped-arguments warning.
ARGUMENT_ORDERS = {"plan_batches": "(n_samples, global_batch, replicas)",
                   "check_batch_plan": "(n_samples, global_batch, replicas)",
                   "distributed_split": "(strategy, n_samples, global_batch)"}


def warn_if_swapped(func: str, n_samples: int, global_batch: int, replicas: int, *, stacklevel: int = 3,
                    replicas_from: str = "") -> None:
    """The one rule for arguments that look swapped: a global batch below the replica count (some replica gets no
    data in every step) or above the data (one step holds it all) warns ArgumentOrderWarning, naming the order of
    ``func``'s arguments. ``replicas_from``: where the replica count came from when it is no argument of ``func``
    (``distributed_split``: "the strategy's"). ``stacklevel`` as for ``warnings.warn``, counted from the caller."""
    if replicas <= global_batch <= n_samples:
        return
    import warnings

    replicas_text = f"{replicas_from} {replicas} replicas" if replicas_from else f"replicas={replicas}"
    why = (f"global_batch={global_batch} is smaller than {replicas_text}: some replica gets no data in "
           "every step" if global_batch < replicas else
           f"global_batch={global_batch} is larger than n_samples={n_samples}: one step holds all the data")
    order = ARGUMENT_ORDERS.get(func, ARGUMENT_ORDERS["plan_batches"])
    warnings.warn(f"{func}: {why}. The arguments are {order}: were two swapped?", ArgumentOrderWarning,
                  stacklevel=stacklevel + 1)


def require_divisible(func: str, global_batch: int, replicas: int) -> None:
    """via='function': ``InputContext.get_per_replica_batch_size`` refuses a global batch the replicas cannot
    share; said in the kit's words before TensorFlow says it."""
    if global_batch % replicas:
        raise ValueError(
            f"{func}: via='function' needs global_batch divisible by replicas, got global_batch="
            f"{global_batch} and replicas={replicas}; InputContext.get_per_replica_batch_size raises for this. "
            f"Use a global batch that is a multiple of {replicas}, e.g. {global_batch - global_batch % replicas or replicas}.")


def plan_batches(n_samples: int, global_batch: int, replicas: int, drop_remainder: bool = False, *,
                 via: str = "dataset", shard_policy: Any = "auto", _caller: str = "") -> list[list[int]]:
    """Per-replica batch sizes for every step of one epoch, as tf.distribute splits them.

    ``via="dataset"`` (default; ``"fit"`` says the same): ``experimental_distribute_dataset`` and Keras ``fit``; ``drop_remainder``
    is the global batch's. ``via="function"``: ``distribute_datasets_from_function`` on one worker, the
    dataset batched per replica (``drop_remainder`` is then the per-replica batch's); the global batch must
    divide by the replicas, as ``get_per_replica_batch_size`` demands.

    ``shard_policy``: your dataset's auto-shard policy (SHARD_POLICIES; ``via="dataset"`` only): "auto"
    (tf.data's default; Keras sets "data" for NumPy arrays, which splits alike) plans the split of in-memory
    data; "off" (and "file", "hint", or "auto" on a pipeline that reads files) the balanced one.

    >>> plan_batches(1030, 64, 4)[-1]
    [2, 2, 2, 0]
    >>> plan_batches(1030, 64, 4, via="function")[-1]
    [6, 0, 0, 0]
    >>> len(plan_batches(1030, 64, 4)), len(plan_batches(1030, 64, 4, drop_remainder=True))
    (17, 16)
    >>> plan_batches(1030, 64, 4, shard_policy="off")[-1]
    [6, 0, 0, 0]
    """
    func = _caller or "plan_batches"
    n_samples, global_batch = plan_arguments(func, n_samples, global_batch)
    replicas = require_int(func, "replicas", replicas, minimum=1)
    drop_remainder = require_bool(func, "drop_remainder", drop_remainder)
    via = input_path(func, via)
    rule = shard_rule(func, shard_policy)
    warn_if_swapped(func, n_samples, global_batch, replicas, stacklevel=3 if not _caller else 4)
    if via == "function":
        return _plan_per_replica_batches(n_samples, global_batch, replicas, drop_remainder, func)
    full, rest = divmod(n_samples, global_batch)
    sizes = _balanced(global_batch, replicas) if rule == "balanced" else split_batch(global_batch, replicas)
    plan = [sizes[:] for _ in range(full)]                  # every full step splits alike
    if rest and not drop_remainder:     # legacy: ceil(rest / replicas) each; balanced: rest poured into the sizes
        plan.append(_fill(rest, sizes) if rule == "balanced" else split_batch(rest, replicas))
    return plan


def _plan_per_replica_batches(n_samples: int, global_batch: int, replicas: int,
                              drop_remainder: bool, func: str = "plan_batches") -> list[list[int]]:
    """distribute_datasets_from_function: whole per-replica batches dealt to the replicas in order."""
    require_divisible(func, global_batch, replicas)
    per_replica = global_batch // replicas
    full, rest = divmod(n_samples, per_replica)
    if drop_remainder:  # static batch shapes: tf.distribute then drops a step that cannot fill every replica
        return [[per_replica] * replicas for _ in range(full // replicas)]
    whole_steps, left = divmod(full, replicas)              # steps whose replicas all get a whole batch
    plan = [[per_replica] * replicas for _ in range(whole_steps)]
    last = [per_replica] * left + ([rest] if rest else [])
    if last:
        plan.append((last + [0] * replicas)[:replicas])
    return plan


def empty_slots(plan: list[list[int]]) -> list[tuple[int, int]]:
    """(step, replica) pairs, 0-based, where a replica gets no samples."""
    return [(step, replica) for step, sizes in enumerate(plan)
            for replica, size in enumerate(sizes) if size == 0]


def describe_plan(plan: list[list[int]]) -> list[tuple[int, int, list[int]]]:
    """Group consecutive identical steps: [(first_step, last_step, sizes)], steps counted from 1."""
    groups: list[tuple[int, int, list[int]]] = []
    for step, sizes in enumerate(plan, start=1):
        if groups and groups[-1][2] == sizes:
            groups[-1] = (groups[-1][0], step, sizes)
        else:
            groups.append((step, step, sizes))
    return groups


def plan_verdict(plan: list[list[int]]) -> str:
    """One plain sentence about the plan: even, uneven, or some replica gets no data."""
    empty = empty_slots(plan)
    if empty:
        step = empty[0][0]
        replicas = [r for s, r in empty if s == step]
        who = (f"replica {replicas[0]}" if len(replicas) == 1 else
               "replicas " + ", ".join(map(str, replicas[:-1])) + f" and {replicas[-1]}")
        steps = len({s for s, _ in empty}) - 1
        others = (f", and {steps} more step{'s' if steps > 1 else ''} leave{'' if steps > 1 else 's'} a replica "
                  "without data" if steps else "")
        if step == 0:       # an empty replica in step 1 is also an uneven first step, which fit checks first
            return (f"step 1 gives {who} no data{others}: Keras 3 fit refuses such a first step (its replicas' "
                    "batches differ in size) before any update; a custom loop (strategy.run) runs it, and there "
                    "BatchNormalization writes NaN into each empty replica's copy of the moving statistics "
                    "(notebook 05). Fix: give every step a batch that fills every replica (a global batch that is a "
                    "multiple of the replica count, at least one whole global batch of data, and fixed-size batches: "
                    "drop_remainder=True).")
        return (f"step {step + 1} gives {who} no data{others}: with BatchNormalization that step "
                "writes NaN into each empty replica's copy of the moving statistics (silently), with its default "
                "scale=True the NaN can then reach every replica's weights, and a conv net may crash fit "
                "(it does with TensorFlow's oneDNN CPU kernels, not with its Eigen kernels or on an H100): "
                "what happens depends on the kernels and the model (notebook 05).")
    uneven = [i for i, sizes in enumerate(plan) if len(set(sizes)) > 1]
    if uneven and uneven[0] == 0:
        return (f"step 1 splits unevenly {plan[0]}: tf.distribute accepts that, but Keras 3 fit refuses a "
                "first step whose replicas get different batch sizes: use a global batch divisible by the "
                "replica count.")
    if uneven:
        return (f"every replica gets data; step {uneven[0] + 1} splits unevenly {plan[uneven[0]]}, which fit "
                "accepts (the replica with fewer samples waits a moment for the others).")
    return "every step splits evenly: every replica gets the same number of samples."


def empty_step_fixes(batch: int, devices: int, steps: int = 1, *, batches: Iterable[int] | None = None,
                     accumulations: Iterable[int] | None = None, devices_choices: Iterable[int] | None = None
                     ) -> list[str]:
    """The settings that give every one of ``devices`` replicas data in each of the ``steps`` accumulation steps
    of a global batch of ``batch`` (each step's batch a multiple of the device count), among the choices given
    (``None``: any global batch, any smaller accumulation count; other device counts only where
    ``devices_choices`` names them). Each fix, followed, leaves no replica empty; [] when none of the choices does."""
    fixes = []
    multiple = devices * steps
    if batches is None:
        fixes.append(f"a global batch that is a multiple of {multiple:,}")
    elif found := sorted({int(b) for b in batches if int(b) % multiple == 0}, key=lambda b: (abs(b - batch), b))[:2]:
        fixes.append(f"a global batch that is a multiple of {multiple:,} ({' or '.join(f'{b:,}' for b in sorted(found))})")
    fewer = [int(k) for k in (range(1, steps) if accumulations is None else accumulations)
             if int(k) < steps and batch % int(k) == 0 and (batch // int(k)) % devices == 0]
    if fewer:
        k = max(fewer)                  # the most accumulation that works keeps most of its memory saving
        fixes.append(f"{k} accumulation step{'s' if k > 1 else ''} (steps of {batch // k:,}, a multiple of {devices})"
                     if k > 1 else f"no accumulation (one step of {batch:,}, a multiple of {devices})")
    step = batch // steps
    others = sorted({int(d) for d in devices_choices or ()} - {1, devices})
    dividing = [d for d in others if step % d == 0]
    if dividing:
        fixes.append(f"devices={' or '.join(map(str, dividing[-2:]))} (dividing each step's {step:,} samples)")
    if not fixes and accumulations is not None:     # no one control does it: two together (fewer steps, devices)
        pairs = [(int(k), d) for k in accumulations for d in others
                 if int(k) < steps and batch % int(k) == 0 and (batch // int(k)) % d == 0]
        if pairs:
            k, d = max(pairs, key=lambda pair: (pair[1], pair[0]))
            fixes.append(f"{k} accumulation steps with devices={d} (steps of {batch // k:,})" if k > 1 else
                         f"no accumulation with devices={d} (one step of {batch:,})")
    if not fixes and batches is not None:           # nor fewer steps: a larger batch with a device count that divides
        pairs = [(int(b), d) for b in batches for d in others if int(b) % (d * steps) == 0]
        if pairs:
            b, d = min(pairs, key=lambda pair: (abs(pair[1] - devices), abs(pair[0] - batch)))
            fixes.append(f"a global batch of {b:,} with devices={d}")
    return fixes
