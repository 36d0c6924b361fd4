"""Saving that is never half-written, and loading that never silently loads nothing.

``save_verified`` writes to a temporary file in the destination folder, checks the file by loading it
back, and only then renames it into place (an atomic rename on POSIX): a crash at any moment leaves
the previous file intact. ``load_verified`` turns Keras's silent or warning-only partial loads into one
clear error that lists every variable that was not loaded, and leaves the model as it was.
"""
from __future__ import annotations

from ._args import short as _short

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

__all__ = ["save_verified", "load_verified", "LoadError", "SaveError"]

_SUFFIXES = (".weights.h5", ".keras")
_SENTINEL = 7.7e-37  # written into every variable before a load: whatever still holds it was not loaded


class LoadError(ValueError):
    """A load left some variables unloaded; ``.missing`` lists their paths."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = missing


class SaveError(RuntimeError):
    """The file written could not be read back identically; nothing was replaced."""


def _check_path(func: str, path: Any) -> Path:
    path = Path(os.fspath(path))
    if not path.name.endswith(_SUFFIXES):
        raise ValueError(f"{func}: the file name must end with .weights.h5 (weights) or .keras (whole model), "
                         f"got {_short(path.name)}.")
    return path


def _components(variable: Any) -> list[Any]:
    """The per-replica tf.Variables behind a Keras variable (one for an ordinary model)."""
    backing = getattr(variable, "value", variable)
    values = getattr(backing, "values", None)
    return list(values) if isinstance(values, (tuple, list)) else [backing]


def _snapshot(model: Any) -> list[list[Any]]:
    """Every replica's copy of every variable: restoring them must not heal (or hide) a replica's state."""
    return [[c.numpy().copy() for c in _components(v)] for v in model.weights]


def _restore(model: Any, values: list[list[Any]]) -> None:
    for v, copies in zip(model.weights, values):
        for component, value in zip(_components(v), copies):
            component.assign(value)


def _sentinel(variable: Any) -> Any:
    import numpy as np

    return np.full(variable.shape, _SENTINEL if "float" in str(variable.dtype) else 7, dtype=variable.dtype)


def _fill_sentinel(model: Any) -> None:
    for v in model.weights:
        v.assign(_sentinel(v))


def _unloaded(model: Any) -> list[str]:
    return [v.path for v in model.weights if v.numpy().tobytes() == _sentinel(v).tobytes()]


def _load_into(model: Any, path: Path) -> tuple[list[str], list[str]]:
    """Load ``path`` into ``model`` (sentinel-filled first); return (unloaded variable paths, warnings)."""
    _fill_sentinel(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.load_weights(str(path), skip_mismatch=True)
    messages = [str(w.message) for w in caught if "optimizer" not in str(w.message)]
    return _unloaded(model), messages


def save_verified(model: Any, path: Any) -> Path:
    """Save ``model`` to ``path`` (.weights.h5 or .keras) atomically, after checking the written file.

    The check loads the file back into the model and compares every variable bit for bit with the
    values before saving; the model ends exactly as it started either way, every replica's copy
    included (a distributed model's replicas are restored one by one, never synced to replica 0).
    """
    import numpy as np

    path = _check_path("save_verified", path)
    if not hasattr(model, "weights") or not model.weights:
        raise ValueError("save_verified: the model has no variables yet: build it (call it once) before saving.")
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = ".weights.h5" if path.name.endswith(".weights.h5") else ".keras"
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    os.close(fd)
    tmp = Path(tmp_name)
    before = _snapshot(model)
    try:
        if suffix == ".keras":
            model.save(str(tmp))
        else:
            model.save_weights(str(tmp))
        missing, _ = _load_into(model, tmp)
        changed = [v.path for v, old in zip(model.weights, before)       # the file holds replica 0's values
                   if v.numpy().tobytes() != np.asarray(old[0]).tobytes()]
        _restore(model, before)
        if missing or changed:
            raise SaveError(f"save_verified: {tmp.name} did not read back identically "
                            f"({len(missing)} variable(s) missing, {len(changed)} different: "
                            f"{', '.join((missing + changed)[:5])}); {path.name} was left untouched.")
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        _restore(model, before)
        tmp.unlink(missing_ok=True)
        raise
    return path


def load_verified(model: Any, path: Any) -> Any:
    """Load weights from ``path`` into ``model``; raise LoadError listing every variable not loaded.

    Unlike ``load_weights(..., skip_mismatch=True)`` (a warning) or a partial match (silence), a load
    that leaves any variable untouched raises, and the model keeps its previous values.
    """
    path = _check_path("load_verified", path)
    if not path.exists():
        raise FileNotFoundError(f"load_verified: {path} does not exist.")
    if not hasattr(model, "weights") or not model.weights:
        raise ValueError("load_verified: build the model (call it once) before loading weights into it.")
    before = _snapshot(model)
    try:
        missing, messages = _load_into(model, path)
    except BaseException:
        _restore(model, before)
        raise
    if missing:
        _restore(model, before)
        detail = f" Keras said: {messages[0].splitlines()[0]}" if messages else ""
        raise LoadError(f"load_verified: {len(missing)} of {len(model.weights)} variable(s) were not loaded from "
                        f"{path.name}: {', '.join(missing)}. The model was left unchanged.{detail} "
                        "Was the file saved from a different model (e.g. a parallel wrapper instead of its template)?",
                        missing)
    return model
