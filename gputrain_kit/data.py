"""Offline datasets: scikit-learn's digits (real) and seeded synthetic blobs (controlled).

Nothing here downloads anything. With ``batch_size=None`` you get NumPy arrays;
with a batch size, ``tf.data`` pipelines (training shuffled with the seed,
validation in order). Both come as ``Split(train, validation)``, where each part
is ``(x, y)`` arrays or a dataset.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from ._args import require_bool, require_fraction, require_int, short

__all__ = ["Split", "digits", "synthetic", "to_datasets"]


class Split(NamedTuple):
    train: Any
    validation: Any


def _split_indices(n: int, validation_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.random.default_rng(seed).permutation(n)
    n_val = int(round(n * validation_fraction))
    return order[n_val:], order[:n_val]


def to_datasets(arrays: Split, batch_size: int, *, seed: int = 0, drop_remainder: bool = False) -> Split:
    """Turn a Split of arrays into batched ``tf.data`` pipelines.

    Training: shuffled with ``seed`` (a new order each epoch, reproducible), batched
    with ``drop_remainder``. Validation: in order, never drops a sample.
    """
    from ._tf import import_tf

    tf = import_tf()
    func = "to_datasets"
    batch_size = require_int(func, "batch_size", batch_size, minimum=1)
    drop_remainder = require_bool(func, "drop_remainder", drop_remainder)
    x, y = arrays.train
    train = (tf.data.Dataset.from_tensor_slices((x, y))
             .shuffle(len(x), seed=seed, reshuffle_each_iteration=True)
             .batch(batch_size, drop_remainder=drop_remainder))
    validation = None
    if arrays.validation is not None:
        validation = tf.data.Dataset.from_tensor_slices(arrays.validation).batch(batch_size)
    return Split(train, validation)


def digits(batch_size: int | None = None, *, validation_fraction: float = 0.2, seed: int = 0,
           image: bool = False, drop_remainder: bool = False) -> Split:
    """scikit-learn's 1797 handwritten 8x8 digits (shipped with scikit-learn, no download).

    Pixels scaled to [0, 1] as float32, labels int32 0-9. ``image=True`` gives
    shape (8, 8, 1) instead of 64 features. The split is a seeded permutation.
    ``batch_size=None`` returns arrays;
    an int returns ``tf.data`` pipelines.
    """
    from sklearn.datasets import load_digits

    func = "digits"
    validation_fraction = require_fraction(func, "validation_fraction", validation_fraction)
    seed = require_int(func, "seed", seed, minimum=0)
    image = require_bool(func, "image", image)
    bunch = load_digits()
    x = (bunch.data / 16.0).astype("float32")
    if image:
        x = x.reshape(-1, 8, 8, 1)
    y = bunch.target.astype("int32")
    return _finish(x, y, validation_fraction, seed, batch_size, drop_remainder)


def synthetic(n_samples: int = 1024, *, n_features: int = 16, n_classes: int = 4,
              noise: float = 1.0, validation_fraction: float = 0.2, seed: int = 0,
              batch_size: int | None = None, drop_remainder: bool = False) -> Split:
    """Seeded Gaussian blobs: ``n_classes`` centres in ``n_features`` dimensions.

    Exactly ``n_samples`` samples before the split, so experiments can choose
    awkward sizes (e.g. 1030 for the BatchNorm trap).
    """
    func = "synthetic"
    n_samples = require_int(func, "n_samples", n_samples, minimum=2)
    n_features = require_int(func, "n_features", n_features, minimum=1)
    n_classes = require_int(func, "n_classes", n_classes, minimum=2)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or noise < 0:
        raise ValueError(f"{func}: noise must be a number >= 0, got {short(noise)}.")
    validation_fraction = require_fraction(func, "validation_fraction", validation_fraction)
    seed = require_int(func, "seed", seed, minimum=0)
    rng = np.random.default_rng(seed)
    centres = rng.normal(0.0, 2.0, size=(n_classes, n_features))
    y = rng.integers(0, n_classes, size=n_samples).astype("int32")
    x = (centres[y] + rng.normal(0.0, noise, size=(n_samples, n_features))).astype("float32")
    return _finish(x, y, validation_fraction, seed, batch_size, drop_remainder)


def _finish(x: np.ndarray, y: np.ndarray, validation_fraction: float, seed: int,
            batch_size: int | None, drop_remainder: bool) -> Split:
    train_idx, val_idx = _split_indices(len(x), validation_fraction, seed)
    arrays = Split((x[train_idx], y[train_idx]),
                   (x[val_idx], y[val_idx]) if len(val_idx) else None)
    if batch_size is None:
        if drop_remainder:
            raise ValueError("drop_remainder only applies to pipelines: pass batch_size=... as well.")
        return arrays
    return to_datasets(arrays, batch_size, seed=seed, drop_remainder=drop_remainder)
