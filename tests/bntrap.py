"""The BatchNorm NaN trap (Vryniotis, "5 tips for multi-GPU training with Keras", Datumbox 2018, tip 2), reproducible
on demand, and its fixes: a test helper. Notebook 05 builds the same model and pipelines in its own cells.

1030 samples, global batch 64, 4 replicas: the last step is split [2, 2, 2, 0]. The replica with no
data computes the mean and variance of an empty batch (0/0 = NaN) and writes them into *its* copy of
BatchNormalization's moving statistics, which Keras 3 does not aggregate across replicas.
"""
from __future__ import annotations

from typing import Any

from gputrain_kit._args import require_choice, require_int

__all__ = ["FIXES", "trap_data", "build_bn_model", "train", "summarize"]

N_SAMPLES, GLOBAL_BATCH, FEATURES, CLASSES = 1030, 64, 16, 4
FIXES = (None, "drop_remainder", "repeat", "pad", "synchronized")


def trap_data():
    """1030 seeded synthetic samples: (x, y) arrays."""
    from gputrain_kit import data

    return data.synthetic(N_SAMPLES, n_features=FEATURES, n_classes=CLASSES, validation_fraction=0.0).train


def build_bn_model(strategy: Any, *, scale: bool = False, synchronized: bool = False):
    """Dense -> BatchNormalization -> ReLU -> Dense, built and compiled in ``strategy.scope()`` (as in notebook 05)."""
    import keras

    with strategy.scope():
        model = keras.Sequential([
            keras.Input((FEATURES,)), keras.layers.Dense(32, name="dense"),
            keras.layers.BatchNormalization(scale=scale, synchronized=synchronized, name="bn"),
            keras.layers.ReLU(), keras.layers.Dense(CLASSES, name="logits")])
        model.compile(optimizer="adam", metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def train(strategy: Any, fix: str | None = None, *, scale: bool = False, epochs: int = 1,
          callbacks: list | None = None):
    """Train the BN model on the trap data with one of FIXES applied (None: the trap). Returns (model, history)."""
    import keras
    import numpy as np
    import tensorflow as tf

    require_choice("train", "fix", fix, FIXES)
    epochs = require_int("train", "epochs", epochs, minimum=1)
    keras.utils.set_random_seed(0)
    x, y = trap_data()
    kwargs: dict[str, Any] = {}
    if fix == "pad":                       # repeat the first samples until the size divides the batch
        extra = -len(x) % GLOBAL_BATCH
        x, y = np.concatenate([x, x[:extra]]), np.concatenate([y, y[:extra]])
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if fix == "repeat":
        ds = ds.repeat().batch(GLOBAL_BATCH)
        kwargs["steps_per_epoch"] = len(x) // GLOBAL_BATCH
    else:
        ds = ds.batch(GLOBAL_BATCH, drop_remainder=(fix == "drop_remainder"))
    model = build_bn_model(strategy, scale=scale, synchronized=(fix == "synchronized"))
    history = model.fit(ds, epochs=epochs, verbose=0, shuffle=False, callbacks=callbacks or [], **kwargs)
    return model, history


def summarize(model: Any, strategy: Any) -> dict[str, Any]:
    """NaN copies, spread between replicas, and NaN rows of predict under the strategy."""
    import numpy as np

    from gputrain_kit.replicas import replica_report

    x, _ = trap_data()
    report = replica_report(model, strategy)
    predictions = model.predict(x, batch_size=GLOBAL_BATCH, verbose=0)
    return {"nan_copies": len(report.poisoned), "spread": report.spread,
            "nan_rows": int(np.isnan(predictions).any(axis=1).sum()), "report": report}
