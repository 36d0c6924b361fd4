"""Is training waiting for its input? Time every step's wait for data against its compute."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ._args import ArgumentTypeError, require_int, short, typed

__all__ = ["StepTimes", "measure_steps", "standardize_python", "standardize_tf",
           "fast_tf_pipeline"]


@dataclass(frozen=True)
class StepTimes:
    wait_s: tuple[float, ...]      # waiting for the next batch
    compute_s: tuple[float, ...]   # running the training step

    @property
    def input_bound_fraction(self) -> float:
        """Share of the wall time spent waiting for input."""
        total = sum(self.wait_s) + sum(self.compute_s)
        return sum(self.wait_s) / total if total else 0.0


_EXPECTED = ("a tf.data.Dataset of batched (x, y) pairs, e.g. "
             "tf.data.Dataset.from_tensor_slices((x, y)).batch(64)")


def _check_dataset(func: str, model: Any, dataset: Any) -> str:
    """Refuse, before any step, what is not a dataset of batched (x, y) pairs for ``model``. Returns the hint for
    a model with no ``inputs`` (a subclassed one) fed x of one axis or none, or of a fixed first axis: perhaps
    unbatched, given if its first step fails (a batch of scalars, or one of drop_remainder=True, fits as well)."""
    if not callable(getattr(model, "train_on_batch", None)):
        raise ArgumentTypeError(f"{func}: model must be a Keras model (it needs train_on_batch), got {typed(model)}.")
    spec = getattr(dataset, "element_spec", None)
    if spec is None or not callable(getattr(dataset, "repeat", None)):
        raise ArgumentTypeError(f"{func}: dataset must be {_EXPECTED}; got {typed(dataset)}.")
    if not isinstance(spec, tuple) or len(spec) != 2:
        got = f"elements of {len(spec)} parts" if isinstance(spec, tuple) else "single tensors, not pairs"
        raise ValueError(f"{func}: dataset must be {_EXPECTED}; its elements are {got} ({short(spec)}). "
                         "Map it to (x, y) first, e.g. .map(lambda x, y, w: (x, y)).")
    inputs = getattr(model, "inputs", None)
    shape = getattr(spec[0], "shape", None)
    if inputs and shape is not None and shape.rank is not None and len(inputs[0].shape) != shape.rank:
        raise ValueError(f"{func}: the dataset's x has shape {tuple(shape)}, the model takes "
                         f"{tuple(inputs[0].shape)} (batch first): is it unbatched? Call .batch(64) on it.")
    if not inputs and shape is not None and shape.rank is not None and (shape.rank <= 1 or shape[0] is not None):
        return (f"{func}: the model's first step failed on the dataset's x of shape {tuple(shape)} (see the error "
                "above), which has no batch axis if that is one example's shape: is it unbatched? Call .batch(64) "
                "on it.")
    return ""


def measure_steps(model: Any, dataset: Any, steps: int = 20, warmup: int = 2) -> StepTimes:
    """Run ``steps`` training steps by hand, timing ``next(iterator)`` and ``train_on_batch`` separately.

    ``dataset``: a ``tf.data.Dataset`` of batched ``(x, y)`` pairs (repeated as needed); ``warmup`` steps run
    first, untimed (the first traces the step)."""
    func = "measure_steps"
    steps = require_int(func, "steps", steps, minimum=1)
    warmup = require_int(func, "warmup", warmup, minimum=0)
    unbatched = _check_dataset(func, model, dataset)
    iterator = iter(dataset.repeat())
    t0 = time.perf_counter()
    try:
        pending = [next(iterator)]       # the first batch, taken here to refuse an empty dataset
    except StopIteration:
        raise ValueError(f"{func}: the dataset gave no batch (it is empty); pass {_EXPECTED}.") from None
    first_wait = time.perf_counter() - t0
    if unbatched:                        # the first step, untimed, with the kit's hint if it fails
        try:
            model.train_on_batch(*pending[0])
        except Exception as err:
            model.train_function = None  # traced on the wrong shape: traced anew on the next call (a step on
            raise ValueError(unbatched) from err   # batches), else it fails creating variables on a later call
    for _ in range(warmup):
        x, y = pending.pop() if pending else next(iterator)
        model.train_on_batch(x, y)
    waits, computes = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        if pending:                      # warmup=0: the first batch was fetched above, in first_wait
            x, y = pending.pop()
            t1, t0 = time.perf_counter(), time.perf_counter() - first_wait
        else:
            x, y = next(iterator)
            t1 = time.perf_counter()
        model.train_on_batch(x, y)
        t2 = time.perf_counter()
        waits.append(t1 - t0)
        computes.append(t2 - t1)
    return StepTimes(tuple(waits), tuple(computes))


def standardize_python(image: Any):
    """One image, in plain Python: subtract its mean, divide by its standard deviation, clip to [-3, 3]."""
    import numpy as np

    values = image.numpy().tolist()
    mean = sum(values) / len(values)
    std = (sum((v - mean) ** 2 for v in values) / len(values)) ** 0.5 + 1e-6
    return np.array([min(max((v - mean) / std, -3.0), 3.0) for v in values], dtype=np.float32)


def standardize_tf(images: Any):
    """The same computation on a whole batch, as TensorFlow ops (vectorised)."""
    import tensorflow as tf

    mean = tf.reduce_mean(images, axis=-1, keepdims=True)
    std = tf.math.reduce_std(images, axis=-1, keepdims=True) + 1e-6
    return tf.clip_by_value((images - mean) / std, -3.0, 3.0)


def fast_tf_pipeline(x: Any, y: Any, batch_size: int = 64):
    """The same work (``standardize_tf``) on whole batches, mapped in parallel and prefetched."""
    import tensorflow as tf

    return (tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
            .map(lambda images, labels: (standardize_tf(images), labels), num_parallel_calls=tf.data.AUTOTUNE)
            .prefetch(tf.data.AUTOTUNE))
