"""What every child process of the kit does first: stay quiet, and never outlive its parent."""
from __future__ import annotations

import os
import signal
import sys
from typing import NoReturn

__all__ = ["quiet_tensorflow", "die_with_parent", "fork", "end_child"]


def quiet_tensorflow() -> None:
    """TensorFlow's C++ start-up messages off (unless the user set a level), and JAX kept out of this TensorFlow
    process (``_tf.block_jax``: TensorFlow would import all of JAX where it is installed)."""
    from .._tf import block_jax

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    block_jax()


def die_with_parent(parent: int | None = None) -> bool:
    """Linux: have the kernel SIGKILL this process when its parent dies (a restarted notebook kernel), so no
    child outlives it holding ports, memory or CPU. ``parent``: the process id expected as parent; when it
    has already died, exit at once. Returns False where this cannot be arranged (other systems)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False
    if parent is not None and os.getppid() != parent:    # it died before prctl took effect
        os._exit(1)
    return True


def fork() -> int:
    """``os.fork()`` with this process's buffered output written first (so the child does not write it again):
    the kit's one place that forks (the job server's children, the workers' zygote)."""
    sys.stdout.flush()
    sys.stderr.flush()
    return os.fork()


def end_child(code: object) -> NoReturn:
    """End a forked child: its Python and C buffered output written, then ``os._exit`` (the parent's exit handlers,
    inherited by the fork, must not run twice). ``code``: the exit status (not an int: 1)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)        # C stdio's buffers, as a normal exit writes them
    except BaseException:
        pass
    os._exit((code if isinstance(code, int) else 1) & 0xFF)
