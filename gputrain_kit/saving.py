"""Saving that is never half-written, and loading that never silently loads nothing.

``save_verified`` writes to a temporary file in the destination folder, checks the file by loading it
back, and only then renames it into place (an atomic rename on POSIX): a crash at any moment leaves
the previous file intact. ``load_verified`` turns Keras's silent or warning-only partial loads into one
clear error that lists every variable that was not loaded, and leaves the model as it was.
"""
from __future__ import annotations


import os
import re
import tempfile
import warnings
from pathlib import Path
from typing import Any

from ._args import ArgumentTypeError, require_bool, short, typed
from .errors import shorten_message

__all__ = ["save_verified", "load_verified", "LoadError", "SaveError", "NonFiniteError", "NonFiniteWarning"]

_SUFFIXES = (".weights.h5", ".keras")
_SENTINEL = 7.7e-37  # written into every variable before a load: whatever still holds it was not loaded


class LoadError(ValueError):
    """A load left some variables unloaded; ``.missing`` lists their paths."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = missing


class SaveError(RuntimeError):
    """The file written could not be read back identically; nothing was replaced."""


class NonFiniteError(ValueError):
    """``save_verified`` refused a model holding NaN/inf; ``.poisoned``: (variable path, replica) pairs."""

    def __init__(self, message: str, poisoned: list[tuple[str, int]]):
        super().__init__(message)
        self.poisoned = poisoned


class NonFiniteWarning(UserWarning):
    """``load_verified`` loaded NaN/inf values."""


def _is_model(value: Any) -> bool:
    return hasattr(value, "weights") and hasattr(value, "save_weights")


def _check_args(func: str, model: Any, path: Any) -> None:
    if isinstance(model, (str, os.PathLike)) and _is_model(path):
        raise ArgumentTypeError(f"{func}: the arguments are swapped: call {func}(model, path), got the path "
                                f"{short(os.fspath(model))} first and a {type(path).__name__} second.")
    if not _is_model(model):
        raise ArgumentTypeError(f"{func}: model must be a Keras model, got {typed(model)}. "
                                f"Call {func}(model, path).")
    if not isinstance(path, (str, os.PathLike)):
        raise ArgumentTypeError(f"{func}: path must be a file name (str or pathlib.Path) ending in .keras or "
                                f".weights.h5, got {typed(path)}.")


def _check_path(func: str, path: Any) -> Path:
    path = Path(os.fspath(path))
    if path.is_dir():
        raise ValueError(f"{func}: {short(str(path))} is a folder; pass a file name in it ending with .keras (whole "
                         f"model) or .weights.h5 (weights), e.g. {short(str(path / 'model.keras'))}.")
    if not path.name.endswith(_SUFFIXES):
        raise ValueError(f"{func}: the file name must end with .weights.h5 (weights) or .keras (whole model), "
                         f"got {short(path.name)}.")
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


#: Warnings Keras lets through while it skips a mismatched variable that say nothing about the file.
_NOISE = ("optimizer", "__array__ implementation")
_SHAPE = re.compile(r"variable\.shape=(\([^)]*\)), Received: value\.shape=(\([^)]*\))\. "
                    r"Target variable: <Variable path=([^,]+),")


def _unreadable(func: str, path: Path, err: BaseException) -> "LoadError":
    kind = ("a .keras file is a zip archive" if path.name.endswith(".keras")
            else "a .weights.h5 file is an HDF5 file")
    return LoadError(f"{func}: {path} cannot be read as a Keras file ({type(err).__name__}: "
                     f"{shorten_message(str(err), 200)}); {kind}. Was it written completely (an interrupted save "
                     "or download), or is it another kind of file under a Keras name? The model was left unchanged.",
                     [])


def _load_into(model: Any, path: Path) -> tuple[list[str], list[str]]:
    """Load ``path`` into ``model`` (sentinel-filled first); return (unloaded variable paths, warnings)."""
    import zipfile

    _fill_sentinel(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.load_weights(str(path), skip_mismatch=True)
        except (zipfile.BadZipFile, OSError, KeyError) as err:   # not a zip / HDF5 file, or no weights in it
            raise _unreadable("load_verified", path, err) from err
    messages = [str(w.message) for w in caught if not any(n in str(w.message) for n in _NOISE)]
    return _unloaded(model), messages


def _shape_mismatches(messages: list[str]) -> list[str]:
    """'path: (4, 8) in the model, (4, 16) in the file' for each shape mismatch Keras reported."""
    found = []
    for text in messages:
        for model_shape, file_shape, var in _SHAPE.findall(text):
            item = f"{var}: {model_shape} in the model, {file_shape} in the file"
            if item not in found:
                found.append(item)
    return found


def _nonfinite(model: Any) -> list[tuple[str, int]]:
    import numpy as np

    poisoned = []
    for v in model.weights:
        if "float" not in str(v.dtype):
            continue
        for replica, component in enumerate(_components(v)):
            if not np.isfinite(component.numpy()).all():
                poisoned.append((v.path, replica))
    return poisoned


def _describe(poisoned: list[tuple[str, int]]) -> str:
    by_path: dict[str, list[int]] = {}
    for path, replica in poisoned:
        by_path.setdefault(path, []).append(replica)
    items = [f"{p} (replica{'s' if len(r) > 1 else ''} {', '.join(map(str, r))})" for p, r in by_path.items()]
    shown = ", ".join(items[:4]) + (f" and {len(items) - 4} more" if len(items) > 4 else "")
    return f"{len(by_path)} variable(s) hold NaN/inf: {shown}"


def save_verified(model: Any, path: Any, *, allow_nonfinite: bool = False) -> Path:
    """Save ``model`` to ``path`` (.weights.h5 or .keras) atomically, after checking the written file.

    The check loads the file back into the model and compares every variable bit for bit with the
    values before saving; the model ends exactly as it started either way, every replica's copy
    included (a distributed model's replicas are restored one by one, never synced to replica 0).

    A model holding NaN/inf in any replica's copy of any variable is refused (NonFiniteError, nothing
    written): such a file loads without complaint, and predicts NaN or hides the replicas' NaN (it keeps replica
    0's copy). ``allow_nonfinite=True`` saves it
    anyway, for a post-mortem.
    """
    import numpy as np

    _check_args("save_verified", model, path)
    require_bool("save_verified", "allow_nonfinite", allow_nonfinite)
    path = _check_path("save_verified", path)
    if not model.weights:
        raise ValueError("save_verified: the model has no variables yet: build it (call it once) before saving.")
    poisoned = _nonfinite(model)
    if poisoned and not allow_nonfinite:
        # A saved file keeps replica 0's copy: NaN there is loaded and predicted; NaN elsewhere is lost, and hidden
        kept = ("would load without complaint and predict NaN" if any(replica == 0 for _, replica in poisoned)
                else "would keep replica 0's finite copy, load without complaint and hide that other replicas' "
                     "copies hold NaN (predict under the strategy gives NaN rows)")
        raise NonFiniteError(f"save_verified: refusing to save {path.name}: {_describe(poisoned)}. A file saved "
                             f"now {kept}. Nothing was written. Inspect every "
                             "replica's copies with gputrain_kit.replica_report(model, model.distribute_strategy) "
                             "(notebook 05); pass allow_nonfinite=True to save anyway for a post-mortem.",
                             poisoned)
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
    _check_args("load_verified", model, path)
    path = _check_path("load_verified", path)
    if not path.exists():
        raise FileNotFoundError(f"load_verified: {path} does not exist.")
    if not model.weights:
        raise ValueError("load_verified: build the model (call it once) before loading weights into it.")
    before = _snapshot(model)
    try:
        missing, messages = _load_into(model, path)
    except BaseException:
        _restore(model, before)
        raise
    if missing:
        _restore(model, before)
        shapes = _shape_mismatches(messages)
        if shapes:
            detail = (f" Cause: the shapes differ ({'; '.join(shapes[:4])}"
                      f"{' ...' if len(shapes) > 4 else ''}): the file comes from a model with other layer sizes.")
        else:
            said = messages[0].splitlines()[0].split(" Example error message")[0].strip() if messages else ""
            detail = f' Keras said: "{shorten_message(said, 200)}"' if said else ""
            if len(missing) < len(model.weights):     # the file has some of the model's layers, not all
                detail += (" The file holds only some of the model's layers: was it written only partly (an "
                           "interrupted save), or saved from a model with fewer layers?")
            else:
                detail += (" None of the model's layers is in the file: was it saved from a different model "
                           "(e.g. a parallel wrapper instead of its template)?")
        raise LoadError(f"load_verified: {len(missing)} of {len(model.weights)} variable(s) were not loaded from "
                        f"{path.name}: {shorten_message(', '.join(missing), 400)}. The model was left unchanged."
                        f"{detail}", missing)
    poisoned = _nonfinite(model)
    if poisoned:
        warnings.warn(f"load_verified: {path.name} loaded, but {_describe(poisoned)}: it was saved from a poisoned "
                      "model, and predictions will be NaN. Retrain, or load an earlier file (notebook 05 shows how "
                      "a model gets NaN).", NonFiniteWarning, stacklevel=2)
    return model
