"""Known multi-GPU traps of the Keras versions the kit supports, and which ones the installed Keras has.

Each trap was reproduced on simulated devices (2 logical CPUs, ``MirroredStrategy``) with every Keras from 3.6
to 3.12 and 3.15 on TensorFlow 2.21, under both CPU kernel families; ``tests/claims/test_known_traps.py`` checks on
the installed versions that each trap bites exactly where ``applies`` says it does. ``metrics-under-mirrored`` was
measured again (issue 44) on Keras 3.8.0, 3.9.2 and 3.10.0: 3.8.0 and 3.9.2 report another loss and MAE than one
device with no regularizer at all, so it is not the penalty (keras PR #20610 unscaled that in 3.8.0). Before 3.8
the weights themselves differ (``regularization-training``; 3.7.0 measured), which hides the reports. ``python -m gputrain_kit
doctor`` lists them for the installed Keras; ``kit.explain`` recognises the errors the loud ones raise.
"""
from __future__ import annotations

from dataclasses import dataclass

from .versions import version_tuple  # one reading of a version string, for the traps, the doctor and the range

__all__ = ["CHECKED", "Trap", "TRAPS", "traps_for", "installed_keras", "version_tuple"]

Version = tuple[int, ...]

#: The Keras versions every trap was reproduced on (3.13 and 3.14 were never checked).
CHECKED = "3.6 to 3.12, and 3.15"


@dataclass(frozen=True)
class Trap:
    """One known trap: the Keras versions it bites (``since`` inclusive, ``fixed_in`` exclusive; None: open at that
    end), what a learner sees, and the fix."""

    key: str
    title: str
    reported: str                 # where it was reported or fixed, e.g. "keras#20611"
    since: Version | None
    fixed_in: Version | None
    symptom: str                  # what the learner sees: the error, or "silent: ..."
    fix: str

    def applies(self, keras_version: str | Version) -> bool:
        """Whether this Keras version has the trap."""
        version = version_tuple(keras_version) if isinstance(keras_version, str) else tuple(keras_version)
        return ((self.since is None or version >= self.since)
                and (self.fixed_in is None or version < self.fixed_in))

    def versions(self) -> str:
        """The affected versions in words: "Keras 3.7", "Keras before 3.8", "every Keras 3 checked (...)"."""
        if self.since is None and self.fixed_in is None:
            return f"every Keras 3 checked ({CHECKED})"
        if self.since is None:
            return f"Keras before {_text(self.fixed_in)}"
        if self.fixed_in is not None and self.fixed_in[0] == self.since[0] and self.fixed_in[1] - self.since[1] <= 3:
            minors = [f"{self.since[0]}.{minor}" for minor in range(self.since[1], self.fixed_in[1])]
            return "Keras " + (f"{', '.join(minors[:-1])} and {minors[-1]}" if len(minors) > 1 else minors[0])
        if self.fixed_in is None:
            return f"Keras {_text(self.since)} and later"
        return f"Keras {_text(self.since)} to {_text(self.fixed_in)} (not included)"


def _text(version: Version | None) -> str:
    return ".".join(map(str, version or ()))


TRAPS: tuple[Trap, ...] = (
    Trap("dropout-under-mirrored",
         "a model with Dropout (or any layer with a SeedGenerator) cannot be built under MirroredStrategy",
         "keras#20611", (3, 7), (3, 8),
         "ValueError: creating distributed tf.Variable with aggregation=MEAN and a non-floating dtype is not "
         "supported, as the model is built in strategy.scope()",
         "pip install -U 'keras>=3.8' (Keras 3.6 and 3.8 build it)"),
    Trap("regularization-training",
         "Keras does not scale the loss for MirroredStrategy, so a regularization penalty (kernel_regularizer=...) "
         "is mis-scaled: the weights train differently from one device's (measured on 3.7.0 without a regularizer "
         "too)",
         "keras#19891, fixed by keras PR #20609", None, (3, 8),
         "silent: other weights than on one device, and a larger reported loss",
         "pip install -U 'keras>=3.10'"),
    Trap("metrics-under-mirrored",
         "the loss and metrics fit and evaluate report under MirroredStrategy are not one device's, with or "
         "without a regularizer: Keras made its metric variables mirrored, not synchronized on read (the training "
         "itself is right)",
         "keras#21054, fixed by keras PR #21072", (3, 8), (3, 10),
         "silent: the same weights as on one device, another loss and other metric values in history and evaluate",
         "pip install -U 'keras>=3.10', or compare losses and metrics only between runs on the same number of "
         "replicas"),
    Trap("jit-compile-under-mirrored",
         "compile(jit_compile=True) under MirroredStrategy: XLA compiles the step for one device and cannot "
         "reach the other replicas' variables",
         "keras#19005", None, None,
         "InvalidArgumentError: Trying to access resource .../replica_1/... located in device ...:1 from device "
         "...:0 (with op determinism on, as after kit.setup, Keras turns jit_compile off with a warning instead)",
         "leave jit_compile at its default 'auto', which Keras 3 turns off under tf.distribute"),
)


def installed_keras() -> str:
    """The installed Keras's version (imports Keras)."""
    import keras

    return str(keras.__version__)


def traps_for(keras_version: str | None = None) -> list[tuple[Trap, bool]]:
    """Every known trap with whether ``keras_version`` (the installed Keras by default) has it."""
    version = installed_keras() if keras_version is None else keras_version
    return [(trap, trap.applies(version)) for trap in TRAPS]
