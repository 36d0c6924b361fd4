"""``run_python``'s fork server: a test's child program runs in a process forked from one that has imported
TensorFlow and Keras already, instead of a new interpreter that imports them again (about 4 s each, several
hundred times in `make unit`).

One server per environment per test process (TensorFlow reads the CPU kernel family and its log level when it is
imported, so a child with another environment needs another import). The server imports, never starts
TensorFlow's runtime (no device, no thread pool), and forks one child per request, as the kit's job server does
(``gputrain_kit._children.server``): each child starts its own runtime and allocator, as a fresh process does.
The child is made to look like ``python -c CODE``: its own ``__main__``, ``sys.argv == ['-c']``, standard input
from /dev/null, standard output and error to files, Python's exit handling (an uncaught exception's traceback,
exit status 1; ``SystemExit``; non-daemon threads joined; ``atexit`` handlers run).

What a fork cannot make look fresh is what the import already did: modules in ``sys.modules`` and the
environment as it was at the import. ``conftest.run_python`` therefore runs a fresh interpreter for code that
reads ``sys.modules``, changes the environment, uses ``multiprocessing``, runs Keras on another backend
(``KERAS_BACKEND``, ``setup(backend=...)``) or uses JAX or PyTorch itself, or asks
for it (``fresh=True``), and everywhere ``GPUTRAIN_TEST_FORK=0`` or not on Linux.

The protocol: the server reads one JSON request a line on standard input (``{"code", "out", "err"}``: the
program and the files for its output), answers ``{"pid": N}`` when it has forked and ``{"rc": N}`` when the
child has exited (negative: the signal that killed it, as ``subprocess`` reports).
"""
from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Code the server's import would make behave otherwise than in a fresh interpreter.
_NEEDS_FRESH = re.compile(r"sys\.modules|os\.environ\s*\[[^\]]*\]\s*=|os\.environ\.(update|setdefault|pop|clear)"
                          r"|putenv|unsetenv|del\s+os\.environ|multiprocessing|KERAS_BACKEND|importlib\.reload"
                          r"|backend\s*=|\bjax\b|\btorch\b")     # setup(backend=...): Keras's backend is fixed at import

# A whole `make unit` with every child forked where this allows passed (2026-11-28: 2872 tests, 142 of 165 children
# forked); the earlier run that validated file by file found one miss, setup(backend='jax') in a child, now above.


SERVER = r'''
import builtins, io, json, os, sys, types, traceback
from gputrain_kit._children.lifecycle import die_with_parent, end_child, fork
die_with_parent()
from gputrain_kit._tf import import_tf
import_tf()                                   # as the kit imports them: quietly, JAX kept out of the import only
import numpy
import gputrain_kit

def child(request):
    code = 1
    try:
        os.setsid()
        for fd, path in ((1, request["out"]), (2, request["err"])):
            f = os.open(path, os.O_WRONLY | os.O_TRUNC)
            os.dup2(f, fd)
            os.close(f)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), write_through=False)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True,
                                      errors="backslashreplace")
        sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
        numpy.random.seed()                       # a fresh process seeds it from the OS
        sys.argv = ["-c"]
        main = types.ModuleType("__main__")
        main.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = main
        try:
            exec(compile(request["code"], "<string>", "exec"), main.__dict__)
            code = 0
        except SystemExit as exit_:
            c = exit_.code
            if c is None:
                code = 0
            elif isinstance(c, int):
                code = c
            else:
                print(c, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        import threading
        threading._shutdown()
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        end_child(code)

print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    request = json.loads(line)
    pid = fork()
    if pid == 0:
        child(request)
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    print(json.dumps({"rc": rc}), flush=True)
'''


def can_fork(code: str, env: dict[str, str]) -> bool:
    """Whether ``code`` would run in a forked child as in a fresh interpreter (see the module's docstring);
    never with ``GPUTRAIN_TEST_FORK=0``."""
    if not sys.platform.startswith("linux") or os.environ.get("GPUTRAIN_TEST_FORK", "1") == "0":
        return False
    if env.get("KERAS_BACKEND", "tensorflow") != "tensorflow" or env.get("GPUTRAIN_FORK") == "0":
        return False
    return not _NEEDS_FRESH.search(code)


class _Server:
    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=tempfile.TemporaryFile("w+"), text=True, env=env, cwd=ROOT, bufsize=1)
        self._buffer = ""
        if not self._read(600).get("ready"):
            raise RuntimeError("the test fork server did not start")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, timeout: float | None) -> dict:
        """The next JSON line from the server, or {} on timeout; RuntimeError if it died."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while "\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return {}
            chunk = os.read(fd, 65536).decode()
            if not chunk:
                raise RuntimeError(f"the test fork server exited ({self.proc.wait()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        return json.loads(line)

    def run(self, code: str, timeout: float) -> subprocess.CompletedProcess:
        assert self.proc.stdin is not None
        with tempfile.NamedTemporaryFile("w+b", delete=False) as out, \
                tempfile.NamedTemporaryFile("w+b", delete=False) as err:
            pass
        try:
            self.proc.stdin.write(json.dumps({"code": code, "out": out.name, "err": err.name}) + "\n")
            self.proc.stdin.flush()
            pid = self._read(60)["pid"]
            answer = self._read(timeout)
            timed_out = not answer
            if timed_out:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                answer = self._read(60)
            stdout = Path(out.name).read_bytes().decode(errors="replace")
            stderr = Path(err.name).read_bytes().decode(errors="replace")
        finally:
            os.unlink(out.name)
            os.unlink(err.name)
        args = [sys.executable, "-c", code]
        if timed_out:
            raise subprocess.TimeoutExpired(args, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(args, answer["rc"], stdout, stderr)

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()


_servers: dict[tuple, _Server] = {}
_KEEP = 2          # servers kept per test process (about 0.7 GB each): the environments used last


def run_forked(code: str, env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``code`` as ``python -c`` would with ``env``, forked from this environment's server."""
    key = tuple(sorted(env.items()))
    server = _servers.pop(key, None)
    if server is None or not server.alive():
        server = _Server(env)
    _servers[key] = server                  # most recently used last
    while len(_servers) > _KEEP:
        _servers.pop(next(iter(_servers))).stop()
    return server.run(code, timeout)
