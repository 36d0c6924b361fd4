"""Where variables live and where computation runs: readable device names for the notebooks."""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Any, Callable, Iterator

from ._args import short

__all__ = ["normalize_device", "short_device", "variable_devices", "replica_devices", "run_on_replicas"]

_DEVICE = re.compile(r"(?:device:)?(CPU|GPU|TPU):(\d+)\s*$", re.IGNORECASE)


def normalize_device(name: str) -> str:
    """The kit's one reading of a device name: ``/job:localhost/replica:0/task:0/device:CPU:1``, ``/cpu:1`` or
    ``GPU:1`` -> ``/device:CPU:1`` (``/device:GPU:1``); '' (not pinned) or anything else -> ''."""
    m = _DEVICE.search(name or "")
    return f"/device:{m.group(1).upper()}:{m.group(2)}" if m else ""


def short_device(name: str) -> str:
    """'/job:localhost/replica:0/task:0/device:CPU:3' -> 'CPU:3' ('' stays '' = not pinned; a name that is no
    device name is returned as it is)."""
    if not isinstance(name, str):
        raise ValueError(f"short_device: expected a device name string, got {short(name)}.")
    return normalize_device(name).removeprefix("/device:") or name


def _backing(variable: Any) -> Any:
    """A Keras 3 variable wraps a tf.Variable in ``.value``; tf.distribute needs that one."""
    return getattr(variable, "value", variable)


def variable_devices(model: Any, strategy: Any | None = None) -> dict[str, list[str]]:
    """For each variable of ``model``: the devices holding a copy (one per replica for a model built under a
    strategy's scope; the variable's own strategy is used when ``strategy`` is not given).

    Keyed by the variable's ``path``, in ``model.weights`` order. Two variables can share a path (a subclassed
    model with two layers given the same name): the second is keyed ``"<path> (2)"``, the third ``"<path> (3)"``,
    so every variable has its own entry."""
    if not hasattr(model, "weights"):
        raise ValueError(f"variable_devices: expected a Keras model or layer, got {type(model).__name__}.")
    if not getattr(model, "built", True) and not model.weights:
        raise ValueError(f"variable_devices: the model {getattr(model, 'name', '?')!r} is not built yet (it has no "
                         "Input and was never called), so it has no variables to place yet. Start it with "
                         "keras.Input(shape), call it once on a batch, or call model.build(input_shape) first.")
    out: dict[str, list[str]] = {}
    for v in model.weights:
        tf_var = _backing(v)
        owner = strategy if strategy is not None else getattr(tf_var, "distribute_strategy", None)
        copies = owner.experimental_local_results(tf_var) if owner is not None else [tf_var]
        key, k = v.path, 1
        while key in out:
            k += 1
            key = f"{v.path} ({k})"
        out[key] = [short_device(c.device) for c in copies]
    return out


def replica_devices(strategy: Any, per_replica: Any) -> list[tuple[str, tuple[int, ...]]]:
    """(device, shape) of each replica's tensor in a PerReplica value returned by ``strategy.run``."""
    return [(short_device(t.device), tuple(t.shape)) for t in strategy.experimental_local_results(per_replica)]


@contextlib.contextmanager
def _quiet_tf_warnings() -> Iterator[None]:
    logger = logging.getLogger("tensorflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def _require_distributed(strategy: Any, batch: Any) -> None:
    """Refuse a batch that is not split over the replicas: ``strategy.run`` would hand every replica all of it."""
    import tensorflow as tf

    replicas = getattr(strategy, "num_replicas_in_sync", 1)
    parts = tf.nest.flatten(batch)
    if replicas > 1 and not any(isinstance(p, tf.distribute.DistributedValues) for p in parts):
        shape = getattr(batch, "shape", None)
        given = type(batch).__name__ + (f" of shape {tuple(shape)}" if shape is not None else "")
        raise ValueError(
            f"run_on_replicas: distributed_batch must be split over the replicas (a distributed value, one part per "
            f"replica); got {given}, which strategy.run would give whole to every one of the {replicas} "
            "replicas. Fix: distribute it first, e.g. batch = next(iter(strategy.experimental_distribute_dataset("
            "tf.data.Dataset.from_tensor_slices(x).batch(64)))).")


def run_on_replicas(strategy: Any, fn: Callable[[Any], Any], distributed_batch: Any) -> list[tuple[str, tuple[int, ...]]]:
    """Run ``fn`` on every replica **eagerly** and return (device, output shape) per replica.

    Eagerly, each op executes on its replica's device and the result's ``.device``
    says where it ran. (Results returned from a ``tf.function`` can be copied to
    the caller's device, so their ``.device`` would not prove anything.) The
    "MirroredStrategy eagerly has overhead" warning is silenced: this is a probe,
    not a training loop. ``distributed_batch`` must be split over the replicas (from
    ``strategy.experimental_distribute_dataset``): a plain tensor is refused, since every replica
    would get all of it.
    """
    if not hasattr(strategy, "run"):
        raise ValueError(f"run_on_replicas: expected a tf.distribute strategy, got {type(strategy).__name__}.")
    _require_distributed(strategy, distributed_batch)
    with _quiet_tf_warnings():
        result = strategy.run(fn, args=(distributed_batch,))
    return replica_devices(strategy, result)
