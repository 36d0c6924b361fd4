"""Your own model in the BatchNorm matrix (``batchnorm.run_cases(build=..., data=...)``): the learner's build
function and data checked before any case starts (one input or several, as a dict by input name or a list in
input order), and the data handed to each case's process in a temporary file."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._args import require_int, short
from .cpu_kernels import FAMILY_NAMES

DEVICES = 4        # the replicas every case trains on (batchnorm.DEVICES)

AS_BUILT = "as built"


@dataclass(frozen=True)
class _UsersModel:
    """A learner's build() and data, checked (``run_cases(build=..., data=...)``)."""
    source: str
    name: str
    x: Any                         # one NumPy array, or a dict / list / tuple of them (one per model input)
    y: Any
    batch_size: int
    loss: str
    given: int = 0                 # samples passed, before the cut to whole batches + DEVICES - 1

    @property
    def rows(self) -> int:
        """The samples trained on (every input and y have this many rows)."""
        return len(self.y)

    def note(self, families: tuple[str, ...] | None) -> str:
        """What the matrix of this model says above its table: how the data was cut, and the kernels."""
        steps = (self.rows - (DEVICES - 1)) // self.batch_size
        from .cpu_kernels import expected_family

        kernels = ("under " + " and ".join(FAMILY_NAMES.get(f, f) for f in families) + " kernels" if families else
                   f"under this process's CPU kernels, {FAMILY_NAMES[expected_family()]} (kernels=('onednn', 'eigen') "
                   "runs both families)")
        return (f"Your data: {self.given} samples, cut to {self.rows} = {steps} x {self.batch_size} + "
                f"{DEVICES - 1}, so that the last step splits [1, 1, 1, 0] (the trap, on purpose; whether your "
                f"own data size hits it: check_batch_plan({self.given}, {self.batch_size}, {DEVICES})); {kernels}.")


def _users_model(func: str, build: Any, data: Any, batch_size: Any, loss: Any) -> _UsersModel:
    from ._args import require_str
    from .processes import build_source

    source = build_source(func, build, returns="a Keras model", runs="Each case")
    x, y, inputs = _users_data(func, data)
    batch_size = require_int(func, "batch_size", batch_size, minimum=DEVICES)
    if batch_size % DEVICES:
        below, above = batch_size - batch_size % DEVICES, batch_size - batch_size % DEVICES + DEVICES
        raise ValueError(f"{func}: batch_size={batch_size} does not divide over the {DEVICES} replicas, and Keras 3's "
                         f"fit refuses a first step whose replicas get different batch sizes (notebook 02); pass "
                         f"{below} or {above}.")
    if len(y) < batch_size + DEVICES - 1:
        raise ValueError(f"{func}: data has {len(y)} samples; a last step that leaves one of the {DEVICES} "
                         f"replicas empty needs at least batch_size + {DEVICES - 1} = {batch_size + DEVICES - 1}. "
                         "Pass more data or a smaller batch_size.")
    if loss is not None:
        loss = require_str(func, "loss", loss)
        import keras                                         # a misspelt loss is the user's, not the trap's:

        try:                                                 # refused here, before any case starts
            keras.losses.get(loss)
        except ValueError:
            raise ValueError(f"{func}: loss={loss!r} is not a Keras loss name; pass one such as "
                             "'sparse_categorical_crossentropy' or 'mse' (what compile(loss=...) accepts).") from None
    if loss is None:
        _refuse_uncompiled(func, build)
    # Whole batches and a last batch of DEVICES - 1 samples: split [1, 1, 1, 0], one replica gets none.
    n = (len(y) - (DEVICES - 1)) // batch_size * batch_size + DEVICES - 1
    return _UsersModel(source, build.__name__, _rebuild_inputs(x, [a[:n] for _, a in inputs]), y[:n], batch_size,
                       loss or "", len(y))


_DATA_FIX = ("Pass data=(x, y) with the samples along the first axis: x one NumPy array, or for a model with "
             "several inputs a dict of arrays by input name or a list of arrays in the inputs' order; y one array.")


def _users_data(func: str, data: Any) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """``data=(x, y)`` checked: x one NumPy array, a dict of them (input name -> array) or a list or tuple of
    them (one per input, in order); y one array; every input and y with the same number of rows. Returns x, y
    and x's arrays, each with how a message names it ("x", "x['img']", "x[1]")."""
    import numpy as np

    from ._args import ArgumentTypeError, typed

    if not isinstance(data, tuple) or len(data) != 2:
        raise ArgumentTypeError(f"{func}: data must be a tuple (x, y), got {_described(data)}. " + _DATA_FIX)
    x, y = data
    if isinstance(x, dict):
        inputs = list(x.items())
        names = [f"x[{key!r}]" for key, _ in inputs]
        odd = [key for key, _ in inputs if not isinstance(key, str) or not key]
        if odd:
            raise ArgumentTypeError(f"{func}: data's x is a dict, so its keys must be the model's input names "
                                    f"(strings), got the key {short(odd[0])}. " + _DATA_FIX)
    elif isinstance(x, (list, tuple)):
        inputs, names = list(enumerate(x)), [f"x[{i}]" for i in range(len(x))]
    else:
        inputs, names = [("", x)], ["x"]
    if not inputs:
        raise ValueError(f"{func}: data's x is an empty {type(x).__name__}; it needs one array per model input. "
                         + _DATA_FIX)
    for name, (_, array) in zip(names + ["y"], inputs + [("", y)]):
        if not isinstance(array, np.ndarray) or array.ndim == 0:
            what = "one row per sample" if name == "y" else "one row per sample (a dict or list of them for several inputs)"
            raise ArgumentTypeError(f"{func}: data's {name} must be a NumPy array with {what}, got {typed(array)}. "
                                    + _DATA_FIX)
        if array.dtype == object:
            raise ArgumentTypeError(f"{func}: data's {name} is a NumPy array of Python objects ({typed(array)}); "
                                    "pass numbers, e.g. np.asarray(values, dtype='float32').")
    rows = [(name, len(array)) for name, (_, array) in zip(names, inputs)] + [("y", len(y))]
    if len({n for _, n in rows}) > 1:
        counts = ", ".join(f"{name} {n}" for name, n in rows)
        raise ValueError(f"{func}: data's inputs and y must have the same number of rows (samples), got {counts}. "
                         "Pass arrays with one row per sample, the samples along the first axis, the same samples "
                         "in the same order in every array.")
    return x, y, [(name, array) for name, (_, array) in zip(names, inputs)]


def _described(value: Any) -> str:
    """A value for a message about data: a list, tuple or dict by its items' types and shapes (an array's repr
    would fill the message with numbers)."""
    from ._args import typed

    if isinstance(value, (list, tuple, dict)):
        items = [f"{key!r}: {short(v, 48)}" for key, v in value.items()] if isinstance(value, dict) else \
            [short(v, 48) for v in value]
        listed = ", ".join(items[:3]) + (", ..." if len(items) > 3 else "")
        return f"a {type(value).__name__} of {len(items)} item{'' if len(items) == 1 else 's'} ({listed})"
    return typed(value)


def _rebuild_inputs(x: Any, arrays: list[Any]) -> Any:
    """``arrays`` (x's, in order) put back in x's form: one array, a dict with x's keys, a list or a tuple."""
    if isinstance(x, dict):
        return dict(zip(x, arrays))
    if isinstance(x, (list, tuple)):
        return type(x)(arrays)
    return arrays[0]



def _refuse_uncompiled(func: str, build: Any) -> None:
    """Without loss=, build() must compile its model: where this process's TensorFlow runtime has started (a
    notebook after ``setup``), build it here without allocating its weights and refuse an uncompiled one before
    any case starts (elsewhere each case's process says so)."""
    from .processes import built_here

    model = built_here(build)
    if model is not None and hasattr(model, "compiled") and not model.compiled:
        raise ValueError(f"{func}: {build.__name__}() returns an uncompiled model and no loss was given: compile "
                         "it inside build(), or pass loss=..., e.g. loss='sparse_categorical_crossentropy'.")


def _users_data_file(users: _UsersModel) -> str:
    """The learner's data in a temporary .npz file that the case processes read (removed after the run)."""
    import os
    import tempfile

    import numpy as np

    handle, path = tempfile.mkstemp(prefix="gputrain-bn-", suffix=".npz")
    os.close(handle)
    x = users.x
    form = "dict" if isinstance(x, dict) else "list" if isinstance(x, (list, tuple)) else "array"
    arrays = list(x.values()) if isinstance(x, dict) else list(x) if form == "list" else [x]
    names = list(x) if isinstance(x, dict) else []
    np.savez(path, y=users.y, x_form=np.array(form), x_names=np.array(names, dtype=str),
             **{f"x{i}": a for i, a in enumerate(arrays)})
    return path


def load_users_data(path: str) -> tuple[Any, Any]:
    """The learner's (x, y) from the file ``_users_data_file`` wrote, as a case trains on it: x one array, a dict
    by input name, or a tuple (one array per input, in order: what tf.data and Keras take for several inputs)."""
    import numpy as np

    with np.load(path) as saved:
        form, names = str(saved["x_form"]), [str(n) for n in saved["x_names"]]
        count = sum(1 for key in saved.files if key[:1] == "x" and key[1:].isdigit())
        arrays = [saved[f"x{i}"] for i in range(count)]
        y = saved["y"]
    if form == "dict":
        return dict(zip(names, arrays)), y
    return (tuple(arrays) if form == "list" else arrays[0]), y


