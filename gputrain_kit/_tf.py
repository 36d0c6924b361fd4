"""Import TensorFlow quietly, once, without touching any device.

TensorFlow's C++ runtime prints start-up chatter (oneDNN notes, "could not find
cuda drivers", absl's "log messages before InitializeLog") straight to file
descriptor 2. In a notebook that lands in the cell's stored output and breaks
strict nbval, so the kit imports TensorFlow with fd 2 redirected to a temporary
file and replays it only if the import fails.
"""
from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from typing import IO, Iterator

#: Environment defaults applied before TensorFlow is imported (a user's own value wins).
QUIET_ENV = {"TF_CPP_MIN_LOG_LEVEL": "3"}


class _NoJax:
    """A meta-path finder that refuses ``import jax``. TensorFlow's import tries ``from jax import jit`` (tf.lite's
    converter, tensorflow/lite/python/util.py) and, where JAX is installed (notebook 09's backend), loads all of
    it: about 0.4 s and a hundred MB more in every TensorFlow process. TensorFlow catches the ImportError and goes
    on without it."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name == "jax" or name.startswith("jax."):
            raise ImportError("the kit keeps JAX out of a process that runs Keras on TensorFlow")
        return None


def _jax_wanted() -> bool:
    """Keras runs on JAX in this process, or JAX is imported already: then JAX is never refused."""
    return os.environ.get("KERAS_BACKEND") == "jax" or "jax" in sys.modules


def block_jax() -> None:
    """Keep JAX out of this process for good, unless Keras runs on JAX here (KERAS_BACKEND=jax) or JAX is already
    imported: for the kit's child processes, which run TensorFlow only."""
    if _jax_wanted():
        return
    if not any(isinstance(f, _NoJax) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoJax())        # type: ignore[arg-type]


@contextlib.contextmanager
def _jax_kept_out() -> Iterator[None]:
    """JAX refused while the block runs (TensorFlow's import), allowed again after it."""
    if _jax_wanted():
        yield
        return
    finder = _NoJax()
    sys.meta_path.insert(0, finder)              # type: ignore[arg-type]
    try:
        yield
    finally:
        sys.meta_path.remove(finder)             # type: ignore[arg-type]


@contextlib.contextmanager
def _fd2_to_tempfile() -> Iterator[IO[bytes]]:
    """Send everything written to file descriptor 2 into a temporary file."""
    with tempfile.TemporaryFile(mode="w+b") as sink:
        try:
            sys.stderr.flush()
        except Exception:  # pragma: no cover - exotic stderr objects
            pass
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield sink
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def tf_imported() -> bool:
    """True when TensorFlow is already imported in this process."""
    return "tensorflow" in sys.modules


def import_tf():
    """Return the ``tensorflow`` module, importing it quietly the first time."""
    if tf_imported():
        return sys.modules["tensorflow"]
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    with _fd2_to_tempfile() as sink, _jax_kept_out():
        try:
            import tensorflow as tf  # noqa: F401
            import keras  # noqa: F401  (keras prints nothing, but import it under the same guard)
        except BaseException:
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise
    return tf


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The block's C++ start-up chatter (TensorFlow's, XLA's) kept out of the notebook, replayed only if the block
    fails: for Keras on JAX, which imports TensorFlow too where it is installed (tf.data, seeding)."""
    for key, value in QUIET_ENV.items():
        os.environ.setdefault(key, value)
    with _fd2_to_tempfile() as sink:
        try:
            yield
        except BaseException:
            sink.seek(0)
            sys.stderr.write(sink.read().decode(errors="replace"))
            raise


def devices_initialised() -> bool:
    """True once TensorFlow has created its logical devices in this process.

    After that, neither logical devices, visibility nor memory growth can change.
    """
    if not tf_imported():
        return False
    try:
        from tensorflow.python.eager import context
    except ImportError:  # pragma: no cover - TensorFlow moved its internals
        return False
    ctx = context.context()
    return bool(getattr(ctx, "_initialized", False) or getattr(ctx, "_context_handle", None))
