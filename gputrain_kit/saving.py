"""Saving that is never half-written, and loading that never silently loads nothing, or only part.

``save_verified`` writes to a temporary file in the destination folder (which must exist), checks the file by
loading it back (the weights and the optimizer's variables; for a .keras file also that ``keras.saving.load_model``
rebuilds the model from it, ``saving_loadable``), and only then renames it into place (an atomic rename on POSIX):
a crash at any moment leaves the previous file intact. ``load_verified`` turns Keras's silent
or warning-only partial loads into one clear error that names what was not loaded (or what the file holds and
the model lacks), restores the optimizer's state along with the weights, and on refusal leaves every variable
of the model as it was.
"""
from __future__ import annotations

import contextlib
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Any

from ._args import ArgumentTypeError, require_bool, short, typed
from ._files import new_temporary
from .errors import shorten_message
from .saving_loadable import UnloadableModelWarning, load_model_problem
from .weights_file import _OPTIMIZER, _groups, _Layout, _model_layout, _reshaped, _weights_file  # noqa: F401

__all__ = ["save_verified", "load_verified", "LoadError", "SaveError", "NonFiniteError", "NonFiniteWarning",
           "OptimizerStateWarning", "UnloadableModelWarning"]

_SUFFIXES = (".weights.h5", ".keras")


class LoadError(ValueError):
    """A load was refused. ``.missing``: the model's variables the file did not fill (their paths);
    ``.extra``: the file's variables the model has no place for (keys in the file, e.g. ``layers/dense_2/vars/0``)."""

    def __init__(self, message: str, missing: list[str], extra: list[str] | None = None):
        super().__init__(message)
        self.missing = missing
        self.extra = list(extra or [])


class SaveError(RuntimeError):
    """The file written could not be read back identically; nothing was replaced."""


class NonFiniteError(ValueError):
    """``save_verified`` refused a model holding NaN/inf; ``.poisoned``: (variable path, replica) pairs."""

    def __init__(self, message: str, poisoned: list[tuple[str, int]]):
        super().__init__(message)
        self.poisoned = poisoned


class NonFiniteWarning(UserWarning):
    """``load_verified`` loaded NaN/inf values."""


class OptimizerStateWarning(UserWarning):
    """``load_verified`` loaded the weights of a file that also holds optimizer state into a model with no
    optimizer (not compiled): the optimizer state was left out."""


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


def _path_text(path: Path, limit: int = 160) -> str:
    """A path as the learner typed it (repr), or its end when it is very long: the end names the file and the
    folders nearest it, which are what a fix needs."""
    text = repr(str(path))
    return text if len(text) <= limit else "'..." + text[-(limit - 4):]


def _check_folder(func: str, path: Path) -> None:
    """The file's folder must exist: a typo in a folder name must not quietly create a new tree of folders."""
    folder = path.parent
    if folder.is_dir():
        return
    shown = _path_text(folder)
    if folder.exists():
        raise ValueError(f"{func}: path must be a file in an existing folder, got {_path_text(path)}, and {shown} "
                         "is a file, not a folder; pick a path in a folder.")
    missing = folder
    while not missing.parent.exists() and missing.parent != missing:
        missing = missing.parent        # the first folder on the way that does not exist: where a typo would be
    first = "" if missing == folder else f" (nothing from {_path_text(missing)} on exists)"
    raise FileNotFoundError(f"{func}: path must be a file in an existing folder, got {_path_text(path)}, and the "
                            f"folder {shown} does not exist{first}; create it first with os.makedirs({shown}, "
                            "exist_ok=True), or check the folder's name.")


def _components(variable: Any) -> list[Any]:
    """The per-replica tf.Variables behind a Keras variable (one for an ordinary model)."""
    backing = getattr(variable, "value", variable)
    values = getattr(backing, "values", None)
    return list(values) if isinstance(values, (tuple, list)) else [backing]


def _optimizer(model: Any) -> Any:
    """The model's optimizer, or None when it was never compiled."""
    return getattr(model, "optimizer", None)


def _variables(model: Any, optimizer: bool = True) -> list[Any]:
    """The model's weights, then (``optimizer=True``) its optimizer's variables: every variable a file holds."""
    found = list(model.weights)
    opt = _optimizer(model) if optimizer else None
    if opt is not None:
        seen = {id(v) for v in found}
        found += [v for v in opt.variables if id(v) not in seen]
    return found


def _snapshot(variables: list[Any]) -> list[list[Any]]:
    """Every replica's copy of every variable: restoring them must not heal (or hide) a replica's state."""
    return [[c.numpy().copy() for c in _components(v)] for v in variables]


def _restore(variables: list[Any], values: list[list[Any]]) -> None:
    for v, copies in zip(variables, values):
        for component, value in zip(_components(v), copies):
            component.assign(value)


def _marker(variable: Any, second: bool) -> Any:
    """Written before a load, exact in any dtype: 3 (or -5) times the smallest normal float; an int near its end."""
    import ml_dtypes                   # a dependency of Keras; NumPy's finfo knows neither bfloat16 nor float8
    import numpy as np

    dtype = np.dtype(str(variable.dtype))
    if "float" in dtype.name:
        value: Any = float(ml_dtypes.finfo(dtype).tiny) * (-5 if second else 3)
    elif dtype.kind in "iu":
        info, step = np.iinfo(dtype), 11 if second else 7
        value = info.min + step if info.min < 0 else info.max - step
    else:
        value = 0 if second else 7
    return np.full(variable.shape, value, dtype=dtype)


def _holding(variables: list[Any], second: bool) -> list[Any]:
    return [v for v in variables if v.numpy().tobytes() == _marker(v, second).tobytes()]


#: Warnings Keras lets through while it skips a mismatched variable that say nothing about the file. The
#: optimizer's own ("Skipping variable loading for optimizer ...") is checked by load_verified itself (_check_layout).
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


def _file_layout(func: str, path: Path) -> _Layout:
    import zipfile

    try:
        with _weights_file(path) as f:
            return _Layout(f)
    except (zipfile.BadZipFile, OSError, KeyError) as err:   # not a zip / HDF5 file, or no weights in it
        raise _unreadable(func, path, err) from err


def _marked_load(model: Any, path: Path, variables: list[Any], second: bool) -> list[str]:
    """Write a marker into every variable of ``variables``, load ``path``; return Keras's warnings."""
    import zipfile

    for v in variables:
        v.assign(_marker(v, second))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            model.load_weights(str(path), skip_mismatch=True)
        except (zipfile.BadZipFile, OSError, KeyError) as err:   # not a zip / HDF5 file, or no weights in it
            raise _unreadable("load_verified", path, err) from err
    return [str(w.message) for w in caught if not any(n in str(w.message) for n in _NOISE)]


def _load_into(model: Any, path: Path, variables: list[Any]) -> tuple[list[str], list[str]]:
    """Load ``path``; return (the paths of ``variables`` it did not fill, Keras's warnings). A variable still holding
    its marker may hold that value in the file: loaded again after another marker, it cannot hold both."""
    messages = _marked_load(model, path, variables, second=False)
    suspects = _holding(variables, second=False)
    if suspects:
        _marked_load(model, path, suspects, second=True)
    return [v.path for v in _holding(suspects, second=True)], messages


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

    ``path``'s folder must exist: a missing folder raises FileNotFoundError before anything is written (create it
    with ``os.makedirs(folder, exist_ok=True)``); the folder is never created here.

    The check loads the file back into the model and compares, bit for bit with the values before saving, every
    variable the file holds: the weights, and the optimizer's variables (its step counter ``iterations``, the
    learning rate, Adam's moments ...) when the model is compiled. Both formats write the optimizer's
    variables in Keras 3 (``save_weights`` too, under ``optimizer/`` in the .weights.h5 file): a file of an
    uncompiled model holds the weights only. The model ends exactly as it started either way, every replica's
    copy included (a distributed model's replicas are restored one by one, never synced to replica 0).

    A .keras file is also loaded once with ``keras.saving.load_model`` (on the CPU, in safe mode; no random state
    or layer-name counter moves), after checking that every class its configuration names is built into Keras or
    registered (or in a ``keras.saving.custom_object_scope`` around the call). Where it would not load (an
    unregistered subclass of ``keras.Model``, a ``get_config`` that misses an argument, a ``Lambda`` layer), the file
    is still written, for ``load_verified`` into a model built in code, and an UnloadableModelWarning names the
    class and the fix. That load costs about one load of the file more.

    A model holding NaN/inf in any replica's copy of any weight is refused (NonFiniteError, nothing
    written): such a file loads without complaint, and predicts NaN or hides the replicas' NaN (it keeps replica
    0's copy). ``allow_nonfinite=True`` saves it
    anyway, for a post-mortem.
    """
    import numpy as np

    _check_args("save_verified", model, path)
    require_bool("save_verified", "allow_nonfinite", allow_nonfinite)
    path = _check_path("save_verified", path)
    _check_folder("save_verified", path)
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
    suffix = ".weights.h5" if path.name.endswith(".weights.h5") else ".keras"
    tmp = new_temporary(path, suffix, "save_verified")
    variables = _variables(model)
    before = _snapshot(variables)
    try:
        if suffix == ".keras":
            model.save(str(tmp))
        else:
            model.save_weights(str(tmp))
        missing, _ = _load_into(model, tmp, variables)
        changed = [v.path for v, old in zip(variables, before)       # the file holds replica 0's values
                   if v.path not in missing and v.numpy().tobytes() != np.asarray(old[0]).tobytes()]
        _restore(variables, before)
        if missing or changed:
            raise SaveError(f"save_verified: {tmp.name} did not read back identically "
                            f"({len(missing)} variable(s) missing, {len(changed)} different: "
                            f"{', '.join((missing + changed)[:5])}); {path.name} was left untouched.")
        unloadable = load_model_problem(tmp) if suffix == ".keras" else None
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        if path.exists():          # as Keras's own save, which rewrites the file in place, keeps its permissions
            os.chmod(tmp, stat.S_IMODE(path.stat().st_mode))
        os.replace(tmp, path)
    except BaseException:
        _restore(variables, before)
        tmp.unlink(missing_ok=True)
        raise
    if unloadable:
        warnings.warn(f"save_verified: {path.name} was written and its weights read back, but {unloadable}. Its "
                      "weights load into a model built in code: kit.load_verified(model, path).",
                      UnloadableModelWarning, stacklevel=2)
    return path


def _build_optimizer(model: Any) -> None:
    """Create the optimizer's variables as ``fit`` would (in the model's strategy scope, on TensorFlow)."""
    strategy = getattr(model, "distribute_strategy", None)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model.optimizer.build(model.trainable_variables)


def _check_layout(model: Any, path: Path, file: _Layout) -> tuple[bool, list[str]]:
    """Refuse, before anything is loaded, a file holding variables the model lacks, or optimizer state that does
    not fit the model's optimizer; build a compiled model's unbuilt optimizer when the file holds its state.
    Returns whether the file's optimizer state is to be loaded (and checked), and the model's variables the file
    holds in another shape ('key (layer 'name'): (4, 8) in the model, (2, 8) in the file')."""
    model_layout = _model_layout(model)
    wanted, held = model_layout.layers(), file.layers()
    if any(held.get(k) != s for k, s in wanted.items()):     # missing or reshaped: the marked load names them
        return bool(file.optimizer()) and _optimizer(model) is not None, _reshaped(wanted, file)
    extra = [k for k in held if k not in wanted]
    if extra:
        groups = _groups(extra, file.names)
        shown = "; ".join(groups[:4]) + (f"; and {len(groups) - 4} more" if len(groups) > 4 else "")
        raise LoadError(f"load_verified: {path.name} holds {len(extra)} variable(s) the model has no place for: "
                        f"{shown}. Keras would load the rest and ignore these without a word; the model was left "
                        "unchanged. The file was saved from a larger model (more layers, or layers of another "
                        "class): load it into that model, or rebuild the model it was saved from.", [], extra)
    state = file.optimizer()
    optimizer = _optimizer(model)
    if not state or optimizer is None:
        return False, []
    mine = model_layout.optimizer()
    # The file's optimizer took a step (so it was built), or its state is a built one's: build this one to compare
    # (an unbuilt Adam's [iterations, learning_rate] looks like a trained SGD's, which has no slots)
    if (mine != state or (file.step or 0) > 0) and not getattr(optimizer, "built", True):
        _build_optimizer(model)
        mine = _model_layout(model).optimizer()
    if mine != state:
        name = f"{getattr(optimizer, 'name', '')!r} ({type(optimizer).__name__}, {len(mine)} variables)"
        if file.step == 0 and len(state) < len(mine):      # saved after compile(), before the first step
            cause = (f"was saved before its first training step (it held only its step counter and learning "
                     f"rate, as a fresh optimizer does), and the model's optimizer {name} is built. The model was left "
                     "unchanged. Load it into a model compiled and not trained yet")
        elif _schedule_differs(state, mine) is not None:
            saved, model_has = (("a learning-rate schedule", "a constant learning rate")
                                if _schedule_differs(state, mine) == "file" else
                                ("a constant learning rate", "a learning-rate schedule"))
            cause = (f"does not fit the model's optimizer {name}: the file's had {saved}, the model's has "
                     f"{model_has} (a schedule has no learning-rate variable). The model was left unchanged. To "
                     "resume training, compile the model with the kind of learning rate it was saved with")
        else:
            cause = (f"does not fit the model's optimizer {name}: the file was saved with another optimizer, or "
                     "with other layers trainable. The model was left unchanged. To resume training, compile the "
                     "model with the optimizer it was saved with")
        raise LoadError(f"load_verified: {path.name} holds the state of {file.describe_optimizer()}, which {cause}; "
                        "to take the weights alone, load them before compile() (a warning says the optimizer "
                        "state was left out).", [v.path for v in optimizer.variables])
    return True, []


def _optimizer_shapes(layout: dict[str, tuple[int, ...]]) -> list[tuple[int, ...]] | None:
    """The shapes of an optimizer's variables in their order (``optimizer/vars/0``, ``1``, ...); None for a
    layout of another form (a wrapped optimizer's nested groups)."""
    found = [(int(m[1]), shape) for key, shape in layout.items() if (m := re.fullmatch(r"optimizer/vars/(\d+)", key))]
    return [shape for _, shape in sorted(found)] if len(found) == len(layout) else None


def _schedule_differs(state: dict[str, tuple[int, ...]], mine: dict[str, tuple[int, ...]]) -> str | None:
    """Which side's learning rate is a schedule when that is the only difference: "file" or "model", else None.
    A Keras 3 optimizer's variables are its step counter, then its learning rate unless that is a schedule (a
    scalar variable, index 1), then its slots: one side has exactly that scalar more."""
    saved, model = _optimizer_shapes(state), _optimizer_shapes(mine)
    if saved is None or model is None:
        return None
    for longer, shorter, side in ((model, saved, "file"), (saved, model, "model")):
        if len(longer) == len(shorter) + 1 >= 2 and longer[1] == () and longer[:1] + longer[2:] == shorter:
            return side
    return None


def load_verified(model: Any, path: Any) -> Any:
    """Load ``path`` (.weights.h5 or .keras) into ``model``, all of it or nothing; raise LoadError naming what
    does not fit.

    Guarantees, when it returns:

    - every weight of the model was loaded from the file (none kept its previous value);
    - the file holds no variable the model lacks (a file of a larger model is refused, not loaded in part);
    - the optimizer's state in the file (step counter ``iterations``, learning rate, Adam's moments ...) was
      loaded into the model's optimizer, every variable of it. A compiled model's optimizer that was not built
      yet (a fresh optimizer holds only its step counter and learning rate) is built first, as ``fit`` would
      build it, when the file holds a built optimizer's state or one past step 0 (a trained SGD's two variables
      must not pass for an unbuilt Adam's). The learning rate becomes the file's, whatever
      compile() was given.

    Refused (LoadError, raised before anything is loaded where the file's contents show it): a variable of the
    model missing from the file or of another shape (``.missing``), variables in the file the model has no
    place for (``.extra``), optimizer state that does not fit the model's compiled optimizer (another optimizer
    with other variables, a learning-rate schedule where the other has a constant learning rate, or other
    trainable layers; or a file saved before the first training step loaded into a built optimizer). On refusal every variable of the model and of its optimizer holds its previous
    value; an optimizer built for the load stays built, with its initial values (step 0), as ``fit`` would
    have built it.

    A file with optimizer state loaded into a model with no optimizer (not compiled): the weights are loaded
    and an OptimizerStateWarning says the optimizer state was left out (compile before loading to resume
    training). A file without optimizer state (saved from an uncompiled model) leaves the model's optimizer as
    it was.

    Not checked: that the file comes from the same architecture. Variables are matched as Keras matches them:
    in a Sequential or Functional model by the layer's class and occurrence (``layers/dense_1``), never by name,
    so layers renamed, or reordered among classes with the same shapes, load without complaint; in a subclassed
    model by the attribute that holds the layer (``enc/vars``), so renaming the attribute breaks the load
    (notebook 04, section 2). Nor the optimizer's class: its state is
    matched by the number and shapes of its variables, so Adam's state loads into AdamW (the same slots).
    NaN/inf loaded gives a NonFiniteWarning, not an error. Compiled metrics are not in the file.

    To compare the file with the model before loading, it writes the model's own weights file once to a
    temporary folder (twice when it builds the optimizer): a load costs about one save more.
    """
    _check_args("load_verified", model, path)
    path = _check_path("load_verified", path)
    if not path.exists():
        folder = path.parent
        where = "" if folder.is_dir() else f", nor does its folder {short(str(folder))}"
        raise FileNotFoundError(f"load_verified: path must be an existing file, got {short(str(path))}, which does "
                                f"not exist{where}; check the file's name and folder.")
    if not model.weights:
        raise ValueError("load_verified: build the model (call it once) before loading weights into it.")
    file = _file_layout("load_verified", path)
    with_optimizer, reshaped = _check_layout(model, path, file)
    variables = _variables(model, optimizer=with_optimizer)
    before = _snapshot(variables)
    try:
        missing, messages = _load_into(model, path, variables)
    except BaseException:
        _restore(variables, before)
        raise
    if missing:
        _restore(variables, before)
        weights = {v.path for v in model.weights}
        missing_weights = [p for p in missing if p in weights]
        if not missing_weights:        # only the optimizer's: _check_layout matched their keys and shapes
            raise LoadError(f"load_verified: {len(missing)} of the optimizer's variable(s) were not loaded from "
                            f"{path.name}: {shorten_message(', '.join(missing), 300)}. The model was left "
                            "unchanged.", missing)
        shapes = reshaped or _shape_mismatches(messages)      # the layouts name every one; Keras, one example
        if shapes:
            detail = (f" Cause: the shapes differ ({'; '.join(shapes[:4])}"
                      f"{f'; and {len(shapes) - 4} more' if len(shapes) > 4 else ''}): the file comes from a model "
                      "with other layer sizes.")
        else:
            said = messages[0].splitlines()[0].split(" Example error message")[0].strip() if messages else ""
            detail = f' Keras said: "{shorten_message(said, 200)}"' if said else ""
            if len(missing_weights) < len(model.weights):     # the file has some of the model's layers, not all
                detail += (" The file holds only some of the model's layers: was it written only partly (an "
                           "interrupted save), or saved from a model with fewer layers?")
            else:
                detail += (" None of the model's layers is in the file: was it saved from a different model "
                           "(e.g. a parallel wrapper instead of its template)?")
        raise LoadError(f"load_verified: {len(missing_weights)} of {len(model.weights)} variable(s) were not loaded "
                        f"from {path.name}: {shorten_message(', '.join(missing_weights), 400)}. The model was left "
                        f"unchanged.{detail}", missing_weights)
    if file.optimizer() and _optimizer(model) is None:
        warnings.warn(f"load_verified: {path.name} also holds the state of {file.describe_optimizer()}, and the "
                      "model has no optimizer (it is not compiled): the weights were loaded, the optimizer state was "
                      "not. To resume training from this file, compile the model before loading it.",
                      OptimizerStateWarning, stacklevel=2)
    poisoned = _nonfinite(model)
    if poisoned:
        warnings.warn(f"load_verified: {path.name} loaded, but {_describe(poisoned)}: it was saved from a poisoned "
                      "model, and predictions will be NaN. Retrain, or load an earlier file (notebook 05 shows how "
                      "a model gets NaN).", NonFiniteWarning, stacklevel=2)
    return model
