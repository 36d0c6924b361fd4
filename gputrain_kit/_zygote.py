"""Local workers forked from one process that has imported TensorFlow (Linux).

Every worker ``launch_local_workers`` starts used to be a new Python that imported
TensorFlow and Keras (about 3 s here, for each worker of each launch). This module
is that import done once: ``python -m gputrain_kit._zygote FD`` imports them, never
starts TensorFlow's runtime (no device, no thread pool, no gRPC), and forks one
child per worker on request. Each child starts its own runtime, as a fresh process
does; only the import is shared. TensorFlow reads ``TF_CONFIG`` and the device
variables when its runtime starts, so each child gets its environment before that.

The launcher talks to it over a Unix socket (``SOCK_SEQPACKET``: one JSON message per
packet). A request carries the worker's spec file, environment, private network and,
as a passed file descriptor, the write end of the pipe that becomes the worker's
stdout and stderr. The zygote answers with the worker's pid and, when it exits, its
exit code (negative: the signal that killed it, as ``subprocess.Popen`` reports).

It exits when its launcher dies (``PR_SET_PDEATHSIG``, as workers do), when the
launcher closes the socket, or after ``GPUTRAIN_ZYGOTE_IDLE_S`` seconds (default
300) without a worker, so an idle kernel does not keep a TensorFlow import in memory.
"""
from __future__ import annotations

import atexit
import io
import itertools
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from typing import IO


def _child(request: dict, out_fd: int, sock: socket.socket) -> None:
    """In the forked child: become the worker. Never returns."""
    code = 1
    try:
        sock.close()
        os.setsid()                         # its own process group, killed as one (as Popen's start_new_session)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.close(out_fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True,
                                      errors="backslashreplace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True,
                                      errors="backslashreplace")
        if request.get("netns"):
            from .netns import join_or_exit   # single-threaded here: a forked child has only this thread
            join_or_exit(str(request["netns"]))
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ["GPUTRAIN_LAUNCHER_PID"] = str(os.getppid())   # the zygote: the worker dies with it
        if "numpy" in sys.modules:       # a fresh process seeds NumPy's global generator from the OS: so here
            sys.modules["numpy"].random.seed()
        from ._worker import main
        code = main(["_worker", request["spec"]])
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        from ._children.lifecycle import end_child
        end_child(code)


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def serve(fd: int) -> int:
    from ._children.lifecycle import fork
    from ._worker import _die_with_launcher, _quiet_tensorflow

    _die_with_launcher()
    sock = socket.socket(fileno=fd)
    _quiet_tensorflow()                  # imports TensorFlow quietly; starts nothing
    import keras  # noqa: F401  (the workers' own import, done once here)
    idle_s = float(os.environ.get("GPUTRAIN_ZYGOTE_IDLE_S", "300"))
    _send(sock, {"ready": os.getpid()})
    children: set[int] = set()
    last_busy = time.monotonic()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.02)
        if ready:
            try:
                data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 1)
            except OSError:
                data, fds = b"", []
            if not data:                 # the launcher closed its end: stop
                break
            request = json.loads(data)
            pid = fork()
            if pid == 0:
                _child(request, fds[0], sock)
            for each in fds:
                os.close(each)
            children.add(pid)
            _send(sock, {"started": request["id"], "pid": pid})
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        if children or ready:
            last_busy = time.monotonic()
        elif time.monotonic() - last_busy > idle_s:
            break
    return 0


# --------------------------------------------------------------------------- the launcher's side
class ZygoteError(RuntimeError):
    """The zygote could not start a worker; the launcher starts a fresh process instead."""


class ForkedWorker:
    """A worker forked by the zygote, with the parts of ``subprocess.Popen`` the launcher uses."""

    def __init__(self, zygote: "Zygote", pid: int, stdout: IO[str]):
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._zygote = zygote

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout or 0.0)
            time.sleep(0.01)
        return int(self.returncode or 0)

    def kill(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Zygote:
    """A running zygote, started with ``env`` (the workers' environment without their own variables)."""

    def __init__(self, env: dict[str, str], timeout: float = 120):
        self.env = dict(env)
        self.owner = os.getpid()         # a forked copy of the launcher must not share this socket
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._errors = tempfile.TemporaryFile("w+")
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._started: dict[int, int] = {}
        self._exits: dict[int, int] = {}
        self._children: set[int] = set()
        self._changed = threading.Condition()
        self._dead = False
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "gputrain_kit._zygote", str(theirs.fileno())], pass_fds=[theirs.fileno()],
                env=dict(env, GPUTRAIN_LAUNCHER_PID=str(os.getpid())), stdin=subprocess.DEVNULL,
                stdout=self._errors, stderr=self._errors)
        finally:
            theirs.close()
        self._sock.settimeout(timeout)
        try:
            ready = json.loads(self._sock.recv(1 << 16) or b"{}")
        except (OSError, ValueError):
            ready = {}
        if "ready" not in ready:
            self.close()
            raise ZygoteError(f"the zygote did not start: {self._tail()}")
        self._sock.settimeout(None)
        threading.Thread(target=self._read, daemon=True, name="gputrain-zygote").start()

    def _tail(self) -> str:
        try:
            self._errors.seek(0)
            return " | ".join(self._errors.read().strip().splitlines()[-4:]) or "no output"
        except (OSError, ValueError):
            return "no output"

    def _read(self) -> None:
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                data = b""
            if not data:
                break
            message = json.loads(data)
            with self._changed:
                if "started" in message:
                    self._started[message["started"]] = message["pid"]
                elif "exit" in message:
                    self._exits[message["exit"]] = message["code"]
                self._changed.notify_all()
        with self._changed:              # the zygote is gone, and its workers with it (PR_SET_PDEATHSIG)
            self._dead = True
            for pid in self._children - set(self._exits):
                self._exits[pid] = -signal.SIGKILL
            self._changed.notify_all()

    def alive(self) -> bool:
        return not self._dead and self.process.poll() is None

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def spawn(self, spec: str, env: dict[str, str], netns: int | None, timeout: float = 30) -> ForkedWorker:
        """Fork a worker that runs ``python -m gputrain_kit._worker spec`` with ``env``, in ``netns``."""
        read, write = os.pipe()
        try:
            with self._lock:
                number = next(self._ids)
                request = {"id": number, "spec": spec, "env": env, "netns": netns}
                try:
                    socket.send_fds(self._sock, [json.dumps(request).encode()], [write])
                except OSError as err:
                    raise ZygoteError(f"the zygote is gone ({err})") from None
        finally:
            os.close(write)
        deadline = time.monotonic() + timeout
        with self._changed:
            while number not in self._started:
                if self._dead or time.monotonic() > deadline:
                    os.close(read)
                    raise ZygoteError(f"the zygote did not start the worker: {self._tail()}")
                self._changed.wait(0.1)
            pid = self._started.pop(number)
            self._children.add(pid)
        return ForkedWorker(self, pid, open(read, "r", errors="replace"))

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:  # pragma: no cover
            pass
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        self._errors.close()


if __name__ == "__main__":
    try:
        sys.exit(serve(int(sys.argv[1])))
    except OSError:                      # the launcher went away (its end of the socket is closed)
        sys.exit(0)


# One zygote per process, kept for the next launch: the workers' (``multiworker``).
_lock = threading.Lock()
_shared: Zygote | None = None


def close_shared() -> None:
    global _shared
    with _lock:
        if _shared is not None:
            _shared.close()
            _shared = None


atexit.register(close_shared)      # a kernel that exits stops its zygote (and any worker still running)


def shared_zygote(env: dict[str, str]) -> Zygote | None:
    """Linux: the process the workers are forked from, started on first use and kept for the next launch
    with the same environment (TensorFlow and Keras imported once instead of once per worker).
    None elsewhere, with GPUTRAIN_FORK=0, or if it cannot start: each worker is then a fresh process."""
    global _shared
    from ._children.runner import fork_enabled

    if not fork_enabled():
        return None
    with _lock:
        if _shared is not None and _shared.owner != os.getpid():
            _shared = None                  # inherited through a fork of this process: the parent's, not ours
        if _shared is not None and (not _shared.alive() or _shared.env != env):
            _shared.close()                 # gone idle, or another environment (it is read at import)
            _shared = None
        if _shared is None:
            try:
                _shared = Zygote(env)
            except ZygoteError:
                return None
        return _shared
