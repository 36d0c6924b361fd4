"""Small, reproducible training runs on the digits for the data-parallel notebooks and widgets."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._args import require_int
from .batching import plan_batches

__all__ = ["UnevenBatchError", "RunResult", "strategy_for", "build_digits_model", "train_digits", "distributed_split",
           "slowdown_band", "Reduction", "ReductionLog", "record_reductions",
           "CSDN_2020_MNIST", "CSDN_2020_CIFAR10", "CSDN_2020_SETUP"]

#: The measured table of the CSDN post "keras实现多gpu数据并行训练" (about 2020) (MNIST MLP 784-256-256-10, TF 2.3, real GPUs, ReductionToOneDevice):
#: (GPUs, global batch, seconds per epoch, test accuracy %).
CSDN_2020_MNIST = [(1, 64, 2.0, 97.64), (2, 256, 2.5, 97.47), (3, 384, 2.0, 97.16), (4, 512, 2.0, 96.83)]
#: The same article on CIFAR-10 (a CNN, 50 epochs).
CSDN_2020_CIFAR10 = [(1, 32, 10, 79.85), (1, 128, 4, 77.30), (2, 64, 12, 79.07), (2, 256, 4, 73.90),
                    (3, 96, 14, 78.34), (3, 192, 6, 76.26), (3, 288, 4, 75.08), (3, 384, 3, 72.47),
                    (4, 128, 17, 77.83), (4, 256, 8, 75.48), (4, 512, 3, 72.79)]
CSDN_2020_SETUP = ("\"keras实现多gpu数据并行训练\" (Multi-GPU data-parallel training in Keras), CSDN post, about 2020: "
                  "tensorflow-gpu 2.3, real NVIDIA GPUs (model not stated), MirroredStrategy with ReductionToOneDevice")

# The names used before the sources were cited by title.
SEED_002_MNIST, SEED_002_CIFAR10, SEED_002_SETUP = CSDN_2020_MNIST, CSDN_2020_CIFAR10, CSDN_2020_SETUP

_strategies: dict[int, Any] = {}


class UnevenBatchError(ValueError):
    """Keras 3 ``fit`` refused a first batch (the global batch, or all the data where they fill less than one)
    that splits unevenly over the replicas."""


def strategy_for(replicas: int):
    """A MirroredStrategy over the first ``replicas`` set-up devices (cached: no kernel restart needed).

    It reduces with ``ReductionToOneDevice``. The default, ``CollectiveAllReduce``,
    gives every MirroredStrategy in a process the same collective group key, so
    a second strategy over a different number of devices aborts all collectives
    in the process ("... is joining a group with size 2, but that group has size
    4"; tensorflow/tensorflow#61314). Notebook 02 shows it in a child process.
    """
    from .devices import device_names

    replicas = require_int("strategy_for", "replicas", replicas, minimum=1)
    names = device_names(replicas)  # clear error when there are not that many
    if replicas not in _strategies:
        import tensorflow as tf
        from .placement import _quiet_tf_warnings
        with _quiet_tf_warnings():
            _strategies[replicas] = tf.distribute.MirroredStrategy(
                names, cross_device_ops=tf.distribute.ReductionToOneDevice())
    return _strategies[replicas]


def build_digits_model(learning_rate: float = 1e-3, hidden: int = 64):
    """The course's small digits classifier (64 -> hidden -> 10), compiled with Adam."""
    import keras

    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(hidden, activation="relu", name="hidden"),
                              keras.layers.Dense(10, name="logits")])
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


@dataclass(frozen=True)
class RunResult:
    replicas: int
    global_batch: int
    per_replica: int            # ceil(global / replicas): the largest per-replica batch
    steps: int                  # per epoch
    last_step: tuple[int, ...]  # how the last step is split
    epochs: int
    epoch_time_s: float         # median over epochs after the first (tracing excluded)
    samples_per_s: float
    val_accuracy: float
    device_kind: str            # "simulated" (logical CPUs) or "GPU"
    activity: Any = None        # a DeviceActivity of steps 2-4 of epoch 1, when asked for

    def row(self) -> dict[str, Any]:
        return {"replicas": self.replicas, "global batch": self.global_batch, "per replica": self.per_replica,
                "steps/epoch": self.steps, "epoch time (s)": round(self.epoch_time_s, 3),
                "samples/s": round(self.samples_per_s), "val accuracy": round(self.val_accuracy, 4),
                "devices": self.device_kind}


def train_digits(replicas: int, global_batch: int, *, epochs: int = 3, learning_rate: float = 3e-3,
                 on_epoch: Callable[[int, int], None] | None = None, activity: bool = False) -> RunResult:
    """Train the digits model from the same seed on ``replicas`` devices; time it and score it.

    ``on_epoch(done, total)`` is called after each epoch (for progress bars). ``activity=True`` records
    which device computed what during steps 2 to 4 of the first epoch (``kit.device_activity``); the
    first epoch is left out of the timing anyway (it traces the step), so the profiler costs no
    accuracy and no timing.
    """
    import keras
    import numpy as np

    from . import data
    from .devices import current

    func = "train_digits"
    replicas = require_int(func, "replicas", replicas, minimum=1)
    global_batch = require_int(func, "global_batch", global_batch, minimum=1)
    epochs = require_int(func, "epochs", epochs, minimum=1)
    report = current()
    strategy = strategy_for(replicas)
    seed = report.seed if report else 0
    keras.utils.set_random_seed(seed)  # same start for every run, whatever ran before
    arrays = data.digits(seed=seed)
    split = data.to_datasets(arrays, global_batch, seed=seed)   # what digits(batch_size=...) returns
    n_train = len(arrays.train[0])
    with strategy.scope():
        model = build_digits_model(learning_rate)

    times: list[float] = []

    class _Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self._start)
            if on_epoch is not None:
                on_epoch(epoch + 1, epochs)

    recorded: list[Any] = []

    class _Activity(keras.callbacks.Callback):       # steps 2-4 of epoch 1: after the step is traced
        def on_train_batch_begin(self, batch, logs=None):
            if not recorded and batch == 1:
                from .activity import device_activity

                self._recorder = device_activity()          # the devices setup() made
                recorded.append(self._recorder.__enter__())

        def on_train_batch_end(self, batch, logs=None):
            if batch == 3:
                self.on_epoch_end(0)

        def on_epoch_end(self, epoch, logs=None):
            if getattr(self, "_recorder", None) is not None:
                self._recorder.__exit__(None, None, None)
                self._recorder = None

    plan = plan_batches(n_train, global_batch, replicas)
    callbacks = [_Timer()] + ([_Activity()] if activity else [])
    try:
        try:
            model.fit(split.train, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks)
        finally:
            for callback in callbacks[1:]:
                callback.on_epoch_end(0)              # never leave the profiler running
    except Exception as err:  # tf.errors.InvalidArgumentError, checked by message to keep TF out of this module's imports
        if "AddN" in str(err) and len(set(plan[0])) > 1:
            first = sum(plan[0])
            fits = n_train - n_train % replicas         # the largest global batch the data fill, split evenly
            whole = first == global_batch
            where = (f"global batch {global_batch} over {replicas} replicas splits unevenly {plan[0]}" if whole
                     else f"the {n_train} training samples fill less than one global batch of {global_batch}, so the "
                          f"first batch is all of them, and over {replicas} replicas it splits unevenly {plan[0]}")
            fix = ("Use a global batch divisible by the replica count." if whole else
                   f"Use a global batch divisible by the replica count and at most {fits}.")
            raise UnevenBatchError(
                f"Keras 3 fit failed: {where}, and Keras 3 cannot run a first batch whose per-replica shares differ in "
                "shape (InvalidArgumentError: Inputs to operation AddN ... must have the same size and shape; "
                f"compare keras-team/keras#19246). {fix}") from err
        raise
    # Score once at the end, outside the strategy's distributed loop (validating inside fit re-creates a
    # distributed iterator every epoch, which costs more than the training itself on small data).
    x_val, y_val = arrays.validation
    val_accuracy = float(np.mean(np.argmax(model(x_val, training=False), axis=-1) == y_val))
    steady = times[1:] or times
    epoch_time = float(np.median(steady))
    return RunResult(replicas=replicas, global_batch=global_batch, per_replica=max(plan[0]),
                     steps=len(plan), last_step=tuple(plan[-1]), epochs=epochs, epoch_time_s=epoch_time,
                     samples_per_s=n_train / epoch_time, val_accuracy=val_accuracy,
                     device_kind="simulated" if (report is None or report.simulated) else "GPU",
                     activity=recorded[0] if recorded else None)


def distributed_split(strategy: Any, n_samples: int, global_batch: int, drop_remainder: bool = False,
                      *, via: str = "dataset", shard_policy: Any = "auto") -> list[list[int]]:
    """What tf.distribute really delivers: per-replica sizes of every step.

    ``via="dataset"``: ``strategy.experimental_distribute_dataset`` of a globally batched dataset (as ``fit``).
    ``via="function"``: ``strategy.distribute_datasets_from_function`` with each pipeline sharded by the
    input context and batched by ``get_per_replica_batch_size(global_batch)``.
    ``shard_policy``: the dataset's ``auto_shard_policy`` (``batching.SHARD_POLICIES``, as ``plan_batches`` takes
    it; "auto", tf.data's default, leaves the dataset's options as they are), set on the dataset of either path.

    The arguments are checked as ``plan_batches`` checks them, before TensorFlow is touched, and arguments that
    look swapped (a global batch above the data, or below the strategy's replica count) warn
    ``ArgumentOrderWarning`` as there.
    """
    from ._args import ArgumentTypeError, require_bool, typed
    from .batching import input_path, plan_arguments, require_divisible, shard_rule, warn_if_swapped

    func = "distributed_split"
    replicas = getattr(strategy, "num_replicas_in_sync", None)
    if (not hasattr(strategy, "experimental_distribute_dataset") or isinstance(replicas, bool)
            or not isinstance(replicas, int)):
        raise ArgumentTypeError(f"{func}: strategy must be a tf.distribute strategy object, got {typed(strategy)}. "
                                "Pass it first: distributed_split(strategy, n_samples, global_batch), e.g. with "
                                "strategy = kit.training.strategy_for(4).")
    n_samples, global_batch = plan_arguments(func, n_samples, global_batch)
    drop_remainder = require_bool(func, "drop_remainder", drop_remainder)
    via = input_path(func, via)
    shard_rule(func, shard_policy)                      # checked before TensorFlow is touched
    policy = str(getattr(shard_policy, "name", shard_policy)).upper()    # AutoShardPolicy's member name
    warn_if_swapped(func, n_samples, global_batch, replicas, stacklevel=2, replicas_from="the strategy's")
    if via == "function":
        require_divisible(func, global_batch, replicas)

    import tensorflow as tf

    def with_policy(ds: Any) -> Any:
        if policy == "AUTO":
            return ds
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
        return ds.with_options(options)

    if via == "function":
        def dataset_fn(context):
            per_replica = context.get_per_replica_batch_size(global_batch)
            ds = tf.data.Dataset.range(n_samples).shard(context.num_input_pipelines, context.input_pipeline_id)
            return with_policy(ds.batch(per_replica, drop_remainder=drop_remainder))

        dist = strategy.distribute_datasets_from_function(dataset_fn)
    else:
        dist = strategy.experimental_distribute_dataset(
            with_policy(tf.data.Dataset.range(n_samples).batch(global_batch, drop_remainder=drop_remainder)))
    return [[int(t.shape[0]) for t in strategy.experimental_local_results(batch)] for batch in dist]


def slowdown_band(ratio: float) -> str:
    """``ratio`` (time per sample on several replicas over time per sample on one) in words, by band: "less time
    per sample than one" (under 0.9), "about as long as one" (0.9 to 1.5), "1.5 to 3 times as long as one",
    "3 to 10 times as long as one", "more than ten times as long as one" (10 and over). Notebook 02 prints a
    timing this way: the number changes from run to run and machine to machine, the band much less."""
    import math
    import numbers

    from ._args import ArgumentTypeError, short

    fix = "e.g. slowdown_band(one.samples_per_s / four.samples_per_s), one and four from train_digits"
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise ArgumentTypeError(f"slowdown_band: ratio must be a positive finite number (time per sample on several "
                                f"replicas / on one), got {short(ratio)} ({type(ratio).__name__}); {fix}.")
    if not (ratio > 0 and math.isfinite(ratio)):
        raise ValueError(f"slowdown_band: ratio must be a positive finite number (time per sample on several "
                         f"replicas / on one), got {short(ratio)}; {fix}.")
    if ratio < 0.9:
        return "less time per sample than one"
    if ratio < 1.5:
        return "about as long as one"
    if ratio < 3:
        return "1.5 to 3 times as long as one"
    if ratio < 10:
        return "3 to 10 times as long as one"
    return "more than ten times as long as one"


@dataclass(frozen=True)
class Reduction:
    """One reduction TensorFlow ran between devices: ``kind`` "all-reduce" when the sum goes back to exactly the devices
    that hold the value (``ReplicaContext.all_reduce``, and so the gradients' sum in Keras's optimizer) or "reduce"
    when it goes anywhere else (one place, such as the host CPU of ``strategy.reduce`` and of reading a metric's
    per-replica variables); ``dtype`` of the value; ``op``: the class of the cross-device op that really ran it."""

    kind: str
    dtype: str
    op: str


class ReductionLog(list):
    """The reductions recorded by ``record_reductions``, in order; printed as a table of how many of each kind,
    dtype and cross-device op."""

    def counts(self) -> dict[tuple[str, str, str], int]:
        """(kind, dtype, op) -> how many, in the order first seen."""
        found: dict[tuple[str, str, str], int] = {}
        for r in self:
            found[(r.kind, r.dtype, r.op)] = found.get((r.kind, r.dtype, r.op), 0) + 1
        return found

    def __str__(self) -> str:
        if not self:
            return "no reduction between devices was recorded"
        rows = [f"{'kind':<11} {'dtype':<8} {'count':>5}  cross-device op that ran it"]
        rows += [f"{kind:<11} {dtype:<8} {n:>5}  {op}" for (kind, dtype, op), n in self.counts().items()]
        return "\n".join(rows)

    def __repr__(self) -> str:
        return str(self)


@contextmanager
def record_reductions() -> Iterator[ReductionLog]:
    """Record which cross-device op really ran each reduction between devices inside the block.

    A MirroredStrategy's configured op (``cross_device_ops=``, or the default ``CollectiveAllReduce``; what
    ``kit.parallel.reduction_in_use`` names) is not used for every reduction. In TensorFlow's
    ``mirrored_strategy.py`` (2.21), ``_reduce_to`` (``strategy.extended.reduce_to``: ``strategy.reduce``, which
    reduces to the host CPU unless a ``tf.device`` scope names another device, and reading a metric's per-replica
    variables) sends a reduction through ``ReductionToOneDevice`` whenever a destination is a CPU or the destinations
    are not exactly the value's own devices (``_devices_match`` compares the two sets, so with 2 or more replicas
    every reduction to one place, even to a replica's own GPU): on CPU devices, every one. ``_batch_reduce_to``
    (``strategy.extended.batch_reduce_to``: ``ReplicaContext.all_reduce``, the gradients' sum) has no such check: it
    hands the configured op its sums wherever they go (the collective all-reduces, then copies the result to a
    destination of one device; ``HierarchicalCopyAllReduce`` and ``NcclAllReduce`` pass such a sum on to
    ``ReductionToOneDevice`` themselves, and the log shows that inner call instead). Any int32 value goes through
    ``ReductionToOneDevice``, in both (``_get_cross_device_ops``). (Under XLA, on GPUs only, every reduction uses the
    collective.)

    A reduction's kind is read from its destinations: "all-reduce" when they are exactly the value's devices,
    "reduce" otherwise, whichever method ran it. It wraps ``tf.distribute.CrossDeviceOps.reduce`` and
    ``batch_reduce`` (the methods every cross-device op inherits) while the block runs. Python code is recorded as it
    runs: a ``tf.function``'s reductions when it is traced, not on later calls, so record a fresh model's first
    ``fit``.
    """
    import threading

    import tensorflow as tf
    from tensorflow.python.distribute import cross_device_ops as cdo   # _devices_match: the sets TensorFlow compares

    base = tf.distribute.CrossDeviceOps
    log = ReductionLog()
    reduce, batch_reduce = base.__dict__["reduce"], base.__dict__["batch_reduce"]
    calls = threading.local()          # the values handed on by the call in progress (a reduce inside a reduce)

    def dtype_of(value: Any) -> str:
        values = getattr(value, "values", None)       # a PerReplica's tuple (an IndexedSlices' is a tensor)
        first = values[0] if isinstance(values, tuple) and values else value
        return getattr(getattr(first, "dtype", None), "name", type(first).__name__)

    def kind_of(ops: Any, value: Any, destinations: Any, default: str) -> str:
        try:
            same = cdo._devices_match(value, destinations, getattr(ops, "_canonicalize_devices", True))
        except Exception:              # not a value TensorFlow reads devices from: it refuses it itself
            return default
        return "all-reduce" if same else "reduce"

    def recorded(ops: Any, pairs: list, default: str, run: Callable[[], Any]) -> Any:
        outer = getattr(calls, "inner", None)
        inner: list[int] = []
        calls.inner = inner
        at = len(log)
        try:
            return run()
        finally:
            calls.inner = outer
            if outer is not None:
                outer.extend(id(value) for value, _ in pairs)
            handed_on = set(inner)     # an inner call ran these (AllReduceCrossDeviceOps, to one place): counted once
            log[at:at] = [Reduction(kind_of(ops, value, to, default), dtype_of(value), type(ops).__name__)
                          for value, to in pairs if id(value) not in handed_on]

    def recording_reduce(self, reduce_op, per_replica_value, destinations, options=None):
        return recorded(self, [(per_replica_value, destinations)], "reduce",
                        lambda: reduce(self, reduce_op, per_replica_value, destinations, options))

    def recording_batch_reduce(self, reduce_op, value_destination_pairs, options=None):
        pairs = list(value_destination_pairs)
        return recorded(self, pairs, "all-reduce", lambda: batch_reduce(self, reduce_op, pairs, options))

    base.reduce, base.batch_reduce = recording_reduce, recording_batch_reduce
    try:
        yield log
    finally:
        base.reduce, base.batch_reduce = reduce, batch_reduce
