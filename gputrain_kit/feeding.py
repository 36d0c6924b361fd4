"""Is training waiting for its input? Time every step's wait for data against its compute."""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

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


def measure_steps(model: Any, dataset: Any, steps: int = 20, warmup: int = 2) -> StepTimes:
    """Run ``steps`` training steps by hand, timing ``next(iterator)`` and ``train_on_batch`` separately."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"measure_steps: steps must be >= 1 and warmup >= 0, got {steps}, {warmup}.")
    iterator = iter(dataset.repeat())
    for _ in range(warmup):
        x, y = next(iterator)
        model.train_on_batch(x, y)
    waits, computes = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
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
