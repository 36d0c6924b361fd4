"""The versions the course supports, and what a version outside them cannot run (``doctor`` prints it).

The range is ``pyproject.toml``'s (TensorFlow 2.18-2.21, Keras 3.10 or later); ``make test-versions`` checks the
claim tests at its old end (docs/versions.md). Inside the range one notebook cell is known to need more: notebook
03's ``keras.distribution`` cell needs Keras 3.15 on TensorFlow (older ones cannot construct ``DataParallel`` there),
and notebook 09 runs Keras on JAX, which only the ``jax`` extra installs.
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TENSORFLOW_RANGE", "KERAS_OLDEST", "JAX_OLDEST", "VersionFinding", "check_versions", "version_tuple"]

#: Oldest and newest TensorFlow minor versions the course is checked with (``pyproject.toml``: >=2.18,<2.22).
TENSORFLOW_RANGE = ((2, 18), (2, 21))
#: The oldest Keras of the range; 3.15 is what the stored outputs were made with.
KERAS_OLDEST = (3, 10)
#: Notebook 03's ``keras.distribution`` cell: Keras before 3.15 cannot construct DataParallel on TensorFlow.
KERAS_FOR_NOTEBOOK_03 = (3, 15)
#: Notebook 09 (``pyproject.toml``'s ``jax`` extra).
JAX_OLDEST = (0, 6)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.21.0"`` -> ``(2, 21, 0)``; a suffix (``rc1``, ``.dev``, ``+cu12``) ends the number it is on."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = ""
        for char in piece:
            if not char.isdigit():
                break
            digits += char
        if not digits:
            break
        parts.append(int(digits))
        if len(digits) < len(piece):
            break
    return tuple(parts)


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@dataclass(frozen=True)
class VersionFinding:
    """One package's verdict: ``status`` is "ok", "warn" (some notebooks cannot run: ``notebooks`` names them) or
    "FAIL" (the course cannot run); ``detail`` says why and what to install."""

    status: str
    name: str
    detail: str
    notebooks: tuple[str, ...] = ()


def check_versions(tensorflow: str, keras: str, jax: str | None) -> list[VersionFinding]:
    """The installed TensorFlow, Keras and JAX (None: not installed) against the supported range."""
    tf_v, keras_v = version_tuple(tensorflow), version_tuple(keras)
    low, high = TENSORFLOW_RANGE
    found = []
    supported = f"the course supports TensorFlow {_dotted(low)} to {_dotted(high)}"
    if tf_v[:2] < low:
        found.append(VersionFinding("FAIL", "TensorFlow", f"{tensorflow}: {supported}; older ones were never checked "
                                    "(and those before 2.16 have no Keras 3). Install one of the range: pip install "
                                    f"'tensorflow>={_dotted(low)},<{high[0]}.{high[1] + 1}'."))
    elif tf_v[:2] > high:
        found.append(VersionFinding("warn", "TensorFlow", f"{tensorflow}: newer than the range the course was checked "
                                    f"with ({_dotted(low)} to {_dotted(high)}): the notebooks may show other "
                                    "outputs or meet changes nobody has tried; `make test-versions TF=...` checks it."))
    else:
        found.append(VersionFinding("ok", "TensorFlow", f"{tensorflow} (supported: {_dotted(low)} to "
                                    f"{_dotted(high)})"))
    if keras_v[:1] != (3,):
        found.append(VersionFinding("FAIL", "Keras", f"{keras}: the course is written for Keras 3. Unset "
                                    f"TF_USE_LEGACY_KERAS and install keras>={_dotted(KERAS_OLDEST)}."))
    elif keras_v[:2] < KERAS_OLDEST:
        found.append(VersionFinding("FAIL", "Keras", f"{keras}: the course needs Keras {_dotted(KERAS_OLDEST)} or "
                                    "newer (older ones were never checked with it; `doctor` lists the multi-GPU "
                                    f"traps they have). Upgrade: pip install -U 'keras>={_dotted(KERAS_OLDEST)}'."))
    elif keras_v[:2] < KERAS_FOR_NOTEBOOK_03:
        found.append(VersionFinding("warn", "Keras", f"{keras}: notebook 03's keras.distribution cell needs Keras "
                                    f"{_dotted(KERAS_FOR_NOTEBOOK_03)} or newer (older ones cannot construct "
                                    "DataParallel on the TensorFlow backend); every other notebook runs. Upgrade "
                                    f"for it: pip install -U 'keras>={_dotted(KERAS_FOR_NOTEBOOK_03)}'.", ("03",)))
    else:
        found.append(VersionFinding("ok", "Keras", keras))
    if jax is None:
        found.append(VersionFinding("warn", "JAX", "not installed: notebook 09 (Keras on JAX) cannot run; every other "
                                    "notebook runs. Install it: pip install 'jax>=0.6' (the kit's jax extra).",
                                    ("09",)))
    elif version_tuple(jax)[:2] < JAX_OLDEST:
        found.append(VersionFinding("warn", "JAX", f"{jax}: notebook 09 needs JAX {_dotted(JAX_OLDEST)} or newer. "
                                    f"Upgrade: pip install -U 'jax>={_dotted(JAX_OLDEST)}'.", ("09",)))
    else:
        found.append(VersionFinding("ok", "JAX", f"{jax} (notebook 09)"))
    return found
