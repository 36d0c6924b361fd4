"""Whether ``keras.saving.load_model`` can rebuild a model from a ``.keras`` file: ``save_verified``'s last check.

A ``.keras`` file holds the model's configuration (``config.json``: every layer's class and arguments) beside its
weights. ``load_model`` rebuilds the model from that configuration, and finds a class not built into Keras only by
the name it was registered under (``@keras.saving.register_keras_serializable()``, or ``custom_objects=`` at load
time): Keras 3 never imports a module the file names outside its own packages, so an unregistered subclass of
``keras.Model`` saves without complaint and its file refuses to load (``TypeError: Could not locate class``).
Reading the weights back into the model that wrote them, as ``save_verified`` does, cannot see that.

``load_model_problem`` answers in two steps: every class the configuration names must be built into Keras or
registered (in this process, or in a ``keras.saving.custom_object_scope`` around the call), which a fresh process
needs as well; then the file is loaded once with ``load_model``, on the CPU, in safe mode, which catches a
``get_config`` that misses an argument, or a ``Lambda`` layer. The load leaves no trace: Python's and NumPy's random
states and Keras's counters for automatic layer names are put back, so later models draw and name as they would have.
"""
from __future__ import annotations

import contextlib
import json
import random
import warnings
import zipfile
from pathlib import Path
from typing import Any, Iterator

from .errors import shorten_message

__all__ = ["UnloadableModelWarning", "load_model_problem", "unregistered_classes"]

#: The packages whose modules Keras's loader imports by itself (``_retrieve_class_or_fn`` in
#: ``keras/src/saving/serialization_lib.py``); "builtins" is how it names Keras's own functions.
_KERAS_PACKAGES = ("keras", "keras_hub", "keras_cv", "keras_nlp", "builtins")


class UnloadableModelWarning(UserWarning):
    """``save_verified`` wrote a ``.keras`` file whose weights read back, but ``keras.saving.load_model`` cannot
    rebuild the model from it (an unregistered custom class, a ``get_config`` that misses an argument, a ``Lambda``
    layer in safe mode)."""


def _entries(node: Any) -> Iterator[dict[str, Any]]:
    """Every serialized object in a configuration: a dict with a class name and a module."""
    if isinstance(node, dict):
        if isinstance(node.get("class_name"), str) and "module" in node:
            yield node
        for value in node.values():
            yield from _entries(value)
    elif isinstance(node, list):
        for value in node:
            yield from _entries(value)


def unregistered_classes(config: dict[str, Any]) -> list[str]:
    """'module.Class' for every class (or function) the configuration names that Keras's loader cannot find: not
    from a Keras package and not registered under the name the file stores (custom objects in scope count)."""
    import keras

    found = []
    for entry in _entries(config):
        module = entry.get("module") or ""
        if module.split(".", 1)[0] in _KERAS_PACKAGES:
            continue
        function = entry["class_name"] == "function"
        name = entry.get("config") if function else entry.get("registered_name") or entry["class_name"]
        if not isinstance(name, str) or keras.saving.get_registered_object(name) is not None:
            continue
        shown = ".".join(filter(None, (module, name if function else entry["class_name"])))    # __main__: no module
        if shown not in found:
            found.append(shown)
    return found


@contextlib.contextmanager
def _no_trace() -> Iterator[None]:
    """Put back what building a model draws or counts: Python's random state (Keras seeds every unseeded
    initializer from it), NumPy's, and Keras's counters for automatic names (``dense_3``)."""
    import numpy as np

    python_state, numpy_state = random.getstate(), np.random.get_state()
    try:
        from keras.src.backend.common import global_state

        uids = global_state.get_global_attribute("object_name_uids")
        uids_before = dict(uids) if uids is not None else None
    except (ImportError, AttributeError):            # another Keras: names may move on, nothing else does
        uids, uids_before = None, None
    try:
        yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        if uids is not None and uids_before is not None:
            uids.clear()
            uids.update(uids_before)


_UNCOMPILED = ("keras.saving.load_model(path, compile=False) loads the model all the same, not compiled (what fails "
               "is what compile() was given: a loss, metric or optimizer Keras cannot find): call compile() on it "
               "again; or, to load it compiled, register that function or class with "
               "@keras.saving.register_keras_serializable() in every process that loads the file")


def load_model_problem(path: Path) -> str | None:
    """Why ``keras.saving.load_model`` cannot rebuild a model from the ``.keras`` file ``path``, in words that name
    the class and the fix (and say that ``compile=False`` loads it, where only what ``compile()`` was given fails);
    None when it rebuilds it."""
    import keras

    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    missing = unregistered_classes(config)
    if missing:
        first = missing[0].rsplit(".", 1)[-1]
        said = (f"keras.saving.load_model cannot rebuild the model from it: it names {', '.join(missing)}, which "
                f"Keras finds only by a registered name (TypeError: Could not locate class '{first}', here and in a "
                "fresh process). ")
        if not unregistered_classes({**config, "compile_config": None}):      # only in what compile() was given
            return said + "Fix: " + _UNCOMPILED
        return (said + "Fix: decorate the class with "
                "@keras.saving.register_keras_serializable() and give it a get_config() that returns its __init__ "
                "arguments (registered in every process that loads the file: define or import it there first); "
                f"or load with keras.saving.load_model(path, custom_objects={{'{first}': {first}}}), and save "
                f"inside keras.saving.custom_object_scope({{'{first}': {first}}}) to check it so")
    device = keras.device("cpu:0") if hasattr(keras, "device") else contextlib.nullcontext()
    with _no_trace(), warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the loader's own notes (metrics not built yet ...) say nothing here
        try:
            with device:
                keras.saving.load_model(str(path))
        except Exception as err:                 # whatever stops the load is the answer
            said = shorten_message(str(err).split(" Full object config")[0], 300)
            try:
                with device:
                    keras.saving.load_model(str(path), compile=False)
            except Exception:                    # the model itself does not load either
                return (f"keras.saving.load_model cannot rebuild the model from it ({type(err).__name__}: {said}). "
                        "Fix: register every custom class (@keras.saving.register_keras_serializable()) with a "
                        "get_config() that returns every __init__ argument; replace a Lambda layer by a small "
                        "registered layer (notebook 04, section 3)")
            return (f"keras.saving.load_model cannot rebuild the compiled model from it ({type(err).__name__}: "
                    f"{said}). Fix: {_UNCOMPILED}")
    return None
