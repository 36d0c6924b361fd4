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
    with _fd2_to_tempfile() as sink:
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
