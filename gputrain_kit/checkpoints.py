"""Interrupt training on purpose, resume with BackupAndRestore, and compare with an uninterrupted run."""
from __future__ import annotations

import os
import tempfile
from typing import Any

from ._lazy import lazy_attributes

__all__ = ["CrashAtEpoch", "SimulatedCrash", "resume_experiment"]


class SimulatedCrash(RuntimeError):
    """Raised by CrashAtEpoch: stands for a killed job, a pre-empted machine, a power cut."""


def _crash_callback():
    import keras

    class CrashAtEpoch(keras.callbacks.Callback):
        """Raise SimulatedCrash at the start of epoch ``epoch`` (0-based), after earlier epochs finished."""

        def __init__(self, epoch: int):
            super().__init__()
            self.epoch = epoch

        def on_epoch_begin(self, epoch, logs=None):
            if epoch == self.epoch:
                raise SimulatedCrash(f"simulated crash at the start of epoch {epoch + 1}")

    return CrashAtEpoch


__getattr__ = lazy_attributes(CrashAtEpoch=_crash_callback)


def resume_experiment(*, epochs: int = 4, crash_at: int = 2, reshuffle_each_iteration: bool = False,
                      seed: int = 0, workdir: str | None = None) -> dict[str, Any]:
    """Train the digits model twice from the same seed: straight through, and crashed then resumed.

    The crash comes at the start of epoch ``crash_at`` (0-based), and ``BackupAndRestore`` backs up at epoch
    ends (its default ``save_freq="epoch"``): a restart begins at the first unfinished epoch, which is exact for
    this model (no random layer: a ``Dropout``'s random state is in no file or backup) with op determinism on
    (``kit.setup``). With ``save_freq=N`` a restart would run the unfinished epoch again from its first batch on
    top of a mid-epoch backup, applying the backed-up batches twice (notebook 04, section 5).

    Returns the crash message, the epochs the resumed run actually trained, and whether the final
    weights are bit-for-bit equal.
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from . import data
    from .training import build_digits_model

    if not 0 < crash_at < epochs:
        raise ValueError(f"resume_experiment: crash_at must be between 1 and epochs - 1, got {crash_at}.")
    (x, y), _ = data.digits(seed=seed)
    workdir = workdir or tempfile.mkdtemp(prefix="gputrain-backup-")

    def dataset():
        return (tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(len(x), seed=seed, reshuffle_each_iteration=reshuffle_each_iteration).batch(128))

    def fresh_model():
        keras.utils.set_random_seed(seed)
        return build_digits_model()

    straight = fresh_model()
    straight.fit(dataset(), epochs=epochs, verbose=0, shuffle=False)

    backup = keras.callbacks.BackupAndRestore(os.path.join(workdir, "backup"))
    crashed = fresh_model()
    try:
        crashed.fit(dataset(), epochs=epochs, verbose=0, shuffle=False,
                    callbacks=[backup, __getattr__("CrashAtEpoch")(crash_at)])
        crash = None
    except SimulatedCrash as err:
        crash = str(err)
    trained: list[int] = []

    class _Record(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            trained.append(epoch + 1)

    resumed = fresh_model()  # a new process would start from scratch like this
    resumed.fit(dataset(), epochs=epochs, verbose=0, shuffle=False,
                callbacks=[keras.callbacks.BackupAndRestore(os.path.join(workdir, "backup")), _Record()])
    same = all(a.tobytes() == b.tobytes() for a, b in zip(straight.get_weights(), resumed.get_weights()))
    gap = max(float(np.abs(a - b).max()) for a, b in zip(straight.get_weights(), resumed.get_weights()))
    return {"crash": crash, "resumed_epochs": trained, "bit_identical": same, "max_difference": gap}
