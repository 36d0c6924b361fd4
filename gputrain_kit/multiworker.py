"""Several TensorFlow workers on one machine: what a multi-host job looks like, on 127.0.0.1.

``MultiWorkerMirroredStrategy`` reads its cluster from ``TF_CONFIG``: every process
gets the same list of ``host:port`` addresses and its own index. On a real
cluster each host runs one worker; here ``launch_local_workers`` starts them as
processes of this machine, on free loopback ports, streams their logs and
returns what each one reported. A worker that fails or hangs never hangs the
caller: on the first failure, on the time limit or on Ctrl-C, every worker's
process group is killed (which frees its port) and the error names the worker
and shows its last log lines.

TensorFlow notices a dead worker by itself: ``MultiWorkerMirroredStrategy`` starts
TensorFlow's coordination service, which aborts the other workers' collectives
with ``UnavailableError`` ("The following tasks are unhealthy (stopped sending
heartbeats)") once the dead worker's heartbeats are overdue, or sooner when a
collective loses its connection to it; the strategy's own ``_check_health`` thread
is switched off while the service runs. A worker that hangs still sends heartbeats:
the others wait for it, and only ``timeout`` stops them.

Inside a worker, ``report(name=value)`` sends JSON-able values back and
``worker_task()`` says which worker this is. ``chief_or_scratch_dir(path)`` says where
it saves: ``path`` on the chief; on any other worker a new ``tempfile.mkdtemp`` folder
on its own host, outside ``path``, which the kit never deletes. (tf-keras's
``BackupAndRestore`` does it otherwise: ``<path>/workertemp_<index>``, inside the
shared folder, deleted after each save: ``distribute/distributed_file_utils.py``.)

On Linux the workers are forked from one process that imported TensorFlow once
(``gputrain_kit._zygote``), so only the first launch pays the import.
"""
from __future__ import annotations

import inspect
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import FunctionType
from typing import Any, Callable, Mapping, Sequence

from ._args import require_bool, require_int, short
from .cluster import WorkerTask, chief_or_scratch_dir, free_ports, running, tf_config, worker_task
from .cluster import _HOST, _port_is_free
from .netns import PrivateNetwork, start_private_network, worker_command
from ._children.protocol import parse, report
from .processes import child_environment, function_with_helpers
from ._zygote import ZygoteError, shared_zygote

__all__ = ["launch_local_workers", "WorkerResult", "LocalRun", "WorkerError", "WorkerFailed",
           "WorkerTimeout", "PortInUseError", "free_ports", "tf_config", "worker_task", "WorkerTask",
           "report", "chief_or_scratch_dir", "running", "ExposedWorkersWarning"]

#: Lines in worker logs that mean its gRPC server could not bind its port.
_PORT_CLASH = ("Address already in use", "Could not start gRPC server", "Failed to add port")
#: Lines that mean a worker failed only because a peer disappeared (not the root cause).
_PEER_LOST = ("Collective ops is aborted", "Socket closed", "failed to connect to all addresses",
              "Connection reset by peer", "UnavailableError")


# --------------------------------------------------------------------------- errors
class WorkerError(RuntimeError):
    """A local multi-worker run did not finish. ``.worker``: the index to blame (None if none);
    ``.last_lines``: its last log lines; ``.pids`` and ``.ports``: what the run used (all stopped)."""

    def __init__(self, message: str, *, worker: int | None = None, last_lines: Sequence[str] = (),
                 pids: Sequence[int] = (), ports: Sequence[int] = (), logs: Sequence[Sequence[str]] = ()):
        super().__init__(message)
        self.worker = worker
        self.last_lines = list(last_lines)
        self.pids = list(pids)
        self.ports = list(ports)
        self.logs = [list(lines) for lines in logs]


class WorkerFailed(WorkerError):
    """A worker exited with a non-zero status; the others were stopped."""


class WorkerTimeout(WorkerError):
    """The run passed its time limit; every worker was stopped."""


class PortInUseError(WorkerError):
    """A port of the cluster is taken by another process."""


class ExposedWorkersWarning(UserWarning):
    """The workers run without a private network: their ports can be reached from other machines."""


_EXPOSED = ("the workers' TensorFlow servers will listen on every network interface (0.0.0.0), not only "
            "127.0.0.1, and TensorFlow's distributed runtime has no authentication: while they run, anyone "
            "who can reach this machine on those ports can run operations in them. Use a trusted network "
            "(not a workshop's shared Wi-Fi), or a machine where unprivileged user namespaces are allowed.")


# --------------------------------------------------------------------------- results
@dataclass(frozen=True)
class WorkerResult:
    """What one worker did: its index, process id, port, exit status, reported values and log."""
    index: int
    pid: int
    port: int
    returncode: int
    values: dict[str, Any]
    log: list[str] = field(repr=False)

    @property
    def result(self) -> Any:
        """The worker function's return value (None for a script)."""
        return self.values.get("result")


@dataclass(frozen=True)
class LocalRun:
    """Every worker's result, in index order, and the cluster they formed."""
    workers: list[WorkerResult]
    cluster: dict[str, list[str]]
    seconds: float
    private_network: bool = False   #: True when the workers ran in a loopback-only network namespace

    def __len__(self) -> int:
        return len(self.workers)

    def __getitem__(self, index: int) -> WorkerResult:
        return self.workers[index]

    def __iter__(self):
        return iter(self.workers)

    @property
    def results(self) -> list[Any]:
        """Each worker's return value (or ``result=`` report), in index order."""
        return [w.result for w in self.workers]

    def values(self, name: str) -> list[Any]:
        """The value each worker reported under ``name``, in index order."""
        missing = [w.index for w in self.workers if name not in w.values]
        if missing:
            have = sorted({k for w in self.workers for k in w.values})
            raise KeyError(f"worker(s) {missing} did not report {name!r}; reported names: {have}.")
        return [w.values[name] for w in self.workers]


# --------------------------------------------------------------------------- the launcher
def _payload(func: str, target: Any, args: Sequence[str], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    if callable(target):
        # Its source, with what it uses from its module (the functions and classes of other cells and what they
        # use, plain constants, modules) shipped, and anything else refused here, before a worker starts.
        if inspect.isfunction(target) and "report" in target.__globals__:
            # a worker finds the kit's report() without asking; a module's own `report` (a notebook's is
            # setup()'s report) is not the one it calls there, so it is neither shipped nor refused
            shown = {k: v for k, v in target.__globals__.items() if k != "report"}
            target = FunctionType(target.__code__, shown, target.__name__, target.__defaults__, target.__closure__)
        source = function_with_helpers(
            func, target, what="pass a function defined with `def` (or a script path)",
            closure_fix="Workers are new processes that receive the function's source only: define it at the "
                        "top level, import what it needs inside it, and pass values as kwargs=...",
            import_given=True)      # np, tf, keras of its module (its helpers' too): imported there as here
        name = target.__name__
        try:
            json.dumps(dict(kwargs))
        except TypeError as err:
            raise ValueError(f"{func}: kwargs must be JSON-able (numbers, strings, lists, dicts): {err}.") from err
        if args:
            raise ValueError(f"{func}: args= is for scripts; pass a function's arguments as kwargs={{...}}.")
        return {"kind": "function", "name": name, "source": source, "kwargs": dict(kwargs)}
    if isinstance(target, (str, os.PathLike)):
        path = Path(target)
        if path.suffix != ".py" or not path.is_file():
            raise ValueError(f"{func}: {short(str(target))} is not an existing .py script; pass a script path "
                             "or a function.")
        if kwargs:
            raise ValueError(f"{func}: kwargs= is for functions; pass a script's arguments as args=[...].")
        return {"kind": "script", "path": str(path.resolve()), "args": [str(a) for a in args]}
    raise ValueError(f"{func}: script_or_function must be a .py path or a function, got {type(target).__name__}.")


def _root_cause(bad: list[int], logs, pump, open_streams, procs) -> int:
    """Which failed worker to blame: one that did not merely lose a peer, else the first."""
    # let the failed workers' last lines arrive
    pump(time.monotonic() + 0.5, lambda: not any(i in open_streams for i in bad))
    bad = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
    for index in bad:
        if not any(marker in line for line in logs[index] for marker in _PEER_LOST):
            return index
    return bad[0]


def _stream_to_stdout(index: int, line: str) -> None:
    print(f"[worker {index}] {line}", flush=True)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process group (its own children too), even if the worker exited."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        if proc.poll() is None:
            proc.kill()


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = " (out of memory?)" if -code == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exit status {code}"


def launch_local_workers(script_or_function: Callable[..., Any] | str | os.PathLike, workers: int = 2, *,
                         kwargs: Mapping[str, Any] | None = None, args: Sequence[str] = (),
                         timeout: float = 120, hide_gpus: bool = True, ports: Sequence[int] | None = None,
                         env: Mapping[str, str] | None = None,
                         log: str | Callable[[int, str], None] | None = "stream",
                         last_lines: int = 8, grace: float = 0,
                         private_network: bool | None = None) -> LocalRun:
    """Start ``workers`` processes that form one TensorFlow cluster on 127.0.0.1; return their results.

    - ``script_or_function``: a ``.py`` script (run as ``__main__`` with ``args``) or a top-level
      function (its source is sent, with the functions, classes (read from their notebook cell, in a notebook),
      constants and modules of its module that it uses, and what those use in turn; anything else of its module
      it uses is refused before a worker starts; it is called with ``kwargs`` and its return value comes back).
    - Each worker gets ``TF_CONFIG`` with the whole cluster and its own index.
    - ``hide_gpus=True`` sets ``CUDA_VISIBLE_DEVICES=""`` in the workers (several processes on one
      GPU would each grab its memory). With False every worker sees every GPU of this machine (``env``
      goes to all of them alike), each with memory growth; nothing gives each worker its own GPU.
    - ``ports``: fixed ports (checked free first); by default free ones are picked.
    - ``log="stream"`` prints every line as ``[worker i] ...`` while they run; a callable
      ``log(index, line)`` receives them instead; None keeps them (in the results) without printing.
    - ``timeout`` (seconds) bounds the whole run. On the first failure, the time limit or an
      interrupt every worker is killed at once (the others are not left to run into TensorFlow's
      own heartbeat check), then WorkerFailed / WorkerTimeout / PortInUseError is raised naming the
      worker and showing its last ``last_lines`` log lines.
    - ``private_network``: TensorFlow's servers listen on every interface and have no authentication,
      so by default (None) the workers run in a private Linux network namespace that has only loopback
      (``gputrain_kit.netns``): unreachable from other machines. Where the system allows none, an
      ExposedWorkersWarning says so before they start. True: refuse to start without one
      (RuntimeError); False: no namespace, with the warning. ``LocalRun.private_network`` says which.
    - ``grace`` (seconds, default 0): after the first failure, how long the other workers may run on
      before they are stopped, so that what TensorFlow does about the failure reaches their logs
      (the error's ``.logs``). They are stopped as soon as they have all ended, within ``timeout``.

    On Linux the workers are forked from a helper process that has imported TensorFlow and Keras but
    started nothing (``gputrain_kit._zygote``): the first launch pays that import, later launches with
    the same environment reuse it (it exits after 5 idle minutes, or with this process). Each worker
    starts its own runtime, environment and random state, as a fresh process does.
    ``GPUTRAIN_FORK=0`` starts every worker as a fresh Python instead.
    """
    func = "launch_local_workers"
    workers = require_int(func, "workers", workers, minimum=1, maximum=16)
    hide_gpus = require_bool(func, "hide_gpus", hide_gpus)
    last_lines = require_int(func, "last_lines", last_lines, minimum=1, maximum=200)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"{func}: timeout must be a positive number of seconds, got {short(timeout)}.")
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or not grace >= 0:
        raise ValueError(f"{func}: grace must be a number of seconds, 0 or more, got {short(grace)}.")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ValueError(f"{func}: kwargs must be a dict of keyword arguments, got {type(kwargs).__name__}.")
    if isinstance(args, str) or not isinstance(args, Sequence):
        raise ValueError(f"{func}: args must be a list of strings, got {short(args)}.")
    if not (log is None or log == "stream" or callable(log)):
        raise ValueError(f"{func}: log must be 'stream', None or a function log(index, line), got {short(log)}.")
    if private_network is not None and not isinstance(private_network, bool):
        raise TypeError(f"{func}: private_network must be None (isolate where possible), True (required) or "
                        f"False, got {short(private_network)}.")
    emit: Callable[[int, str], None] | None = _stream_to_stdout if log == "stream" else (log if callable(log) else None)
    payload = _payload(func, script_or_function, args, kwargs or {})

    if ports is not None:
        if isinstance(ports, (str, bytes)) or not isinstance(ports, Sequence):
            raise ValueError(f"{func}: ports must be a list of {workers} port numbers, got {short(ports)}.")
        ports = [require_int(func, "each port", p, minimum=1024, maximum=65535) for p in ports]
        if len(ports) != workers or len(set(ports)) != workers:
            raise ValueError(f"{func}: ports must be {workers} distinct port numbers (one per worker), "
                             f"got {ports}.")
        busy = [p for p in ports if not _port_is_free(p)]
        if busy:
            raise PortInUseError(
                f"port(s) {busy} on {_HOST} are already in use (another program, or workers of an earlier "
                "run that are still shutting down). Pass ports=None to let the kit pick free ports, or stop "
                "the program holding them.", ports=ports)

    base_env = dict(os.environ)
    base_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    base_env["PYTHONUNBUFFERED"] = "1"
    if hide_gpus:
        base_env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        base_env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
    for key in (env or {}):
        if key == "TF_CONFIG":
            raise ValueError(f"{func}: TF_CONFIG is written by the launcher for each worker; do not pass it in env.")
        if key == "CUDA_VISIBLE_DEVICES" and hide_gpus:
            raise ValueError(f"{func}: env sets CUDA_VISIBLE_DEVICES while hide_gpus=True hides the GPUs; "
                             "pass hide_gpus=False to choose the GPUs yourself.")
    base_env = child_environment(func, env, base_env)

    network: PrivateNetwork | None = None
    if private_network is not False:
        made = start_private_network()
        if isinstance(made, str):
            if private_network:
                raise RuntimeError(f"{func}: private_network=True, but {made}. Pass private_network=None to run "
                                   f"with a warning instead. Without it, {_EXPOSED}")
            warnings.warn(f"{func}: {made}, so {_EXPOSED}", ExposedWorkersWarning, stacklevel=2)
        else:
            network = made
    else:
        warnings.warn(f"{func}: private_network=False, so {_EXPOSED}", ExposedWorkersWarning, stacklevel=2)
    try:
        # Checked and built once; only the ports change when a launch is retried.
        for attempt in range(3):
            chosen = list(ports) if ports is not None else free_ports(workers)
            try:
                return _run_cluster(payload, workers, chosen, base_env, emit, timeout, last_lines, grace, network)
            except PortInUseError as err:
                # A port the kit picked was taken before TensorFlow bound it: pick new ones (twice at most).
                if ports is not None or not err.pids or attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
    finally:
        if network is not None:
            network.close()


def _run_cluster(payload: dict[str, Any], workers: int, ports: list[int], base_env: dict[str, str],
                 emit: Callable[[int, str], None] | None, timeout: float, last_lines: int,
                 grace: float = 0, network: PrivateNetwork | None = None) -> LocalRun:
    """One launch of the cluster on ``ports``; arguments already checked by launch_local_workers."""
    addresses = [f"{_HOST}:{p}" for p in ports]
    cluster = {"worker": addresses}

    spec = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="gputrain-worker-", delete=False)
    with spec:
        json.dump(payload, spec)
    lines_q: "queue.Queue[tuple[int, str | None]]" = queue.Queue()
    logs: list[list[str]] = [[] for _ in range(workers)]
    values: list[dict[str, Any]] = [{} for _ in range(workers)]
    procs: list[subprocess.Popen] = []

    def read_lines(index: int, stream) -> None:
        for raw in iter(stream.readline, ""):
            lines_q.put((index, raw.rstrip("\n")))
        stream.close()
        lines_q.put((index, None))

    def take(index: int, line: str) -> None:
        try:
            reported = parse(line)
        except ValueError:
            reported = None              # interleaved with other output: kept as a log line
        if reported is not None:
            values[index].update(reported)
            return
        logs[index].append(line)
        if emit is not None:
            emit(index, line)

    def tail(index: int) -> list[str]:
        return [line for line in logs[index] if line.strip()][-last_lines:]

    def stop_all() -> None:
        for proc in procs:
            _kill_group(proc)
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - a process ignoring SIGKILL
                pass

    def pump(until: float, done: Callable[[], bool]) -> None:
        """Handle the workers' lines as they come, until ``done()`` or the time ``until``."""
        while not done() and time.monotonic() < until:
            try:
                index, line = lines_q.get(timeout=0.05)
            except queue.Empty:
                continue
            if line is None:
                open_streams.discard(index)
            else:
                take(index, line)

    def drain(until: float) -> None:
        pump(until, lambda: not open_streams)

    start = time.monotonic()
    deadline = start + float(timeout)
    open_streams = set(range(workers))
    zygote = shared_zygote(base_env)
    threads = []
    try:
        for index in range(workers):
            worker_env = dict(base_env, TF_CONFIG=tf_config(addresses, index),
                              GPUTRAIN_LAUNCHER_PID=str(os.getpid()))
            proc: Any = None                        # a ForkedWorker or a Popen: the same parts are used
            if zygote is not None:
                try:
                    proc = zygote.spawn(spec.name, worker_env, network.pid if network is not None else None)
                except ZygoteError:
                    zygote = None                   # a fresh process for this worker and the rest
            if proc is None:
                command = worker_command(network, [sys.executable, "-u", "-m", "gputrain_kit._worker", spec.name])
                proc = subprocess.Popen(command,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        text=True, errors="replace", env=worker_env, start_new_session=True)
            procs.append(proc)
            thread = threading.Thread(target=read_lines, args=(index, proc.stdout), daemon=True)
            thread.start()
            threads.append(thread)
        pids = [p.pid for p in procs]
        failed: int | None = None
        while True:
            pump(time.monotonic() + 0.05, lambda: False)
            codes = [p.poll() for p in procs]
            bad = [i for i, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = _root_cause(bad, logs, pump, open_streams, procs)
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                still = [i for i, c in enumerate(codes) if c is None]
                stop_all()
                drain(time.monotonic() + 2)
                shown = "\n".join(f"Last lines of worker {i}:\n" +
                                  ("\n".join(f"  {line}" for line in tail(i)) or "  (no output)") for i in still)
                raise WorkerTimeout(
                    f"the workers did not finish within {timeout:g} s: worker(s) {still} were still running "
                    f"and all {workers} were stopped. Raise timeout= if the job is just slow; otherwise the "
                    f"last lines below show what each worker did last.\n{shown}",
                    worker=still[0], last_lines=tail(still[0]), pids=pids, ports=ports, logs=logs)
        if failed is not None:
            # Let the failing worker's last words arrive before the others are stopped.
            code = procs[failed].returncode
            pump(time.monotonic() + 2, lambda: failed not in open_streams)
            others = [i for i in range(workers) if i != failed]
            if grace and others:         # let the others meet the failure on their own
                pump(min(time.monotonic() + grace, deadline), lambda: all(p.poll() is not None for p in procs))
            ended = [i for i in others if grace and procs[i].poll() is not None]
            still = [i for i in others if i not in ended]
            stop_all()
            drain(time.monotonic() + 2)
            lines = tail(failed)
            shown = "\n".join(f"  {line}" for line in lines) or "  (no output)"
            stopped = f" The other worker(s) {still} were stopped." if still else ""
            if ended:
                stopped += (f" Worker(s) {ended} ended on their own during the {grace:g}-second grace period "
                            f"({', '.join(_exit_text(procs[i].returncode) for i in ended)}); their logs are in .logs.")
            error: type[WorkerError] = WorkerFailed
            why = ""
            if any(marker in line for line in logs[failed] for marker in _PORT_CLASH):
                error = PortInUseError
                why = (f" Its port {ports[failed]} was taken by another process before TensorFlow could bind it "
                       "('Could not start gRPC server'); run again and the kit picks new free ports.")
            raise error(f"worker {failed} of {workers} failed ({_exit_text(code)}).{why}{stopped}\n"
                        f"Last lines of worker {failed}:\n{shown}",
                        worker=failed, last_lines=lines, pids=pids, ports=ports, logs=logs)
        stop_all()              # children a worker left behind in its group (they may hold its pipe)
        drain(time.monotonic() + 10)
        if payload["kind"] == "function":
            lost = [i for i in range(workers) if "result" not in values[i]]
            if lost:
                raise WorkerFailed(f"worker(s) {lost} finished, but their return value did not arrive (its "
                                   "line was mixed with other output). Run again; if it repeats, make the worker "
                                   "print less.", worker=lost[0], last_lines=tail(lost[0]), pids=pids,
                                   ports=ports, logs=logs)
    except BaseException:
        stop_all()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=2)
        try:
            os.unlink(spec.name)
        except OSError:
            pass
    results = [WorkerResult(i, procs[i].pid, ports[i], procs[i].returncode, values[i], logs[i])
               for i in range(workers)]
    return LocalRun(results, cluster, time.monotonic() - start, network is not None)
