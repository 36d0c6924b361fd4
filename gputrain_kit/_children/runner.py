"""``run_jobs``: send jobs to ``server.py`` processes, at most ``processes`` at a time, and collect what each
reports. Jobs that need another environment (a CPU kernel family, CUDA_VISIBLE_DEVICES) get a server of
their own, since TensorFlow reads those when it is imported."""
from __future__ import annotations

import collections
import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from .protocol import parse

__all__ = ["Job", "Outcome", "run_jobs", "fork_enabled"]


def fork_enabled() -> bool:
    """Whether jobs are forked from one process that imported TensorFlow: Linux only (macOS does not allow
    forking a process that loaded its system frameworks; Windows has no fork), unless ``GPUTRAIN_FORK=0``."""
    import os

    return sys.platform.startswith("linux") and os.environ.get("GPUTRAIN_FORK", "1") != "0"


@dataclass(frozen=True)
class Job:
    """One job: ``args`` for the task's ``run``; ``env`` changes the child's environment (None removes a
    variable). Jobs with the same ``env`` share a server (and, forking, one import)."""

    id: str
    args: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True)
class Outcome:
    """What one job gave back: ``values`` (the task's return value) or ``error`` (its traceback's tail, or
    why no result came: the process died, the time ran out). ``died``: the process ended without a word."""

    id: str
    values: dict[str, Any] | None = None
    error: str | None = None
    died: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


def _env_key(env: Mapping[str, str | None]) -> tuple:
    return tuple(sorted(env.items()))


def run_jobs(task: str, jobs: Sequence[Job], *, processes: int | Callable[[], int] = 2, timeout: float = 300,
             on_result: Callable[[Outcome, int, int], None] | None = None, fork: bool | None = None,
             func: str = "run_jobs") -> dict[str, Outcome]:
    """Run every job of ``task`` (a module of this package) and return its Outcome by id, in ``jobs``' order.

    At most ``processes`` jobs run at a time over all environments (a function: asked again at least every half
    second, so that a caller can raise it while the jobs run); a freed slot goes to a server already
    running with jobs waiting, else to the environment with the most jobs waiting (one environment's jobs
    before the next's: one TensorFlow import at a time where it can). ``on_result(outcome, done, total)`` is called as each finishes, in the calling
    thread. After ``timeout`` seconds every server is killed and the jobs without a result get an error."""
    from ..processes import child_environment

    fork = fork_enabled() if fork is None else fork
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{func}: job ids must be unique, got {ids}.")
    # Forking: one server per environment, fed job by job. Otherwise: one server (a fresh process) per job.
    # Servers start when their first job is sent, so that no more than `processes` import at once.
    def key_of(job: Job) -> Any:
        return _env_key(job.env) if fork else job.id

    groups: dict[Any, collections.deque] = {}
    for job in jobs:
        groups.setdefault(key_of(job), collections.deque()).append(job)
    envs = {key: child_environment(func, queue[0].env) for key, queue in groups.items()}
    results: dict[str, Outcome] = {}
    running = {key: 0 for key in groups}
    ended: set[Any] = set()
    stderr: dict[Any, Any] = {}
    servers: dict[Any, subprocess.Popen] = {}
    # Reader threads only pass lines on; this thread starts every server and sends every job. (A server asks the
    # kernel to kill it when the thread that started it ends: that must be this one, alive until we return.)
    lines: queue.Queue = queue.Queue()

    def read(key: Any, server: subprocess.Popen) -> None:
        assert server.stdout is not None
        for line in server.stdout:
            raw = parse(line)
            if raw is not None and "id" in raw:
                lines.put((key, raw))
        server.wait()
        server.stdout.close()                        # read to its end: closed here, not left to the collector
        lines.put((key, None))

    def start(key: Any) -> subprocess.Popen:
        stderr[key] = tempfile.TemporaryFile("w+")
        server = servers[key] = subprocess.Popen(
            [sys.executable, "-m", "gputrain_kit._children.server", task, "1" if fork else "0"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr[key], text=True, env=envs[key])
        threading.Thread(target=read, args=(key, server), daemon=True).start()
        return server

    def feed() -> None:        # fill the free slots; close the input of servers with no more jobs
        while sum(running.values()) < (processes() if callable(processes) else processes):
            open_keys = [k for k in groups if groups[k] and k not in ended]
            if not open_keys:
                break
            # A server already running takes the job if one can: a second TensorFlow import beside it
            # would hold about half a GB more, and on 2 cores finish no sooner.
            started = [k for k in open_keys if k in servers]
            key = max(started or open_keys, key=lambda k: len(groups[k]))
            job = groups[key].popleft()
            stdin = (servers.get(key) or start(key)).stdin
            assert stdin is not None                 # every server is started with stdin=PIPE
            running[key] += 1
            try:
                stdin.write(json.dumps({"id": job.id, "args": dict(job.args)}) + "\n")
                stdin.flush()
            except OSError:    # the server is gone: its reader says so, the job is reported missing
                pass
        for key, server in servers.items():
            if not groups[key] and server.stdin is not None and not server.stdin.closed:
                try:
                    server.stdin.close()
                except OSError:
                    pass

    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        feed()
        while len(ended) < len(servers) or any(groups[k] for k in groups if k not in ended):
            left = deadline - time.monotonic()
            try:
                key, raw = lines.get(timeout=max(0.0, min(left, 0.5) if callable(processes) else left))
            except queue.Empty:
                if time.monotonic() < deadline:      # a limit that may have risen: fill the new slots
                    feed()
                    continue
                timed_out = True
                break
            if raw is None:    # a server ended: its slots are free, its waiting jobs stay missing
                ended.add(key)
                running[key] = 0
            else:
                outcome = Outcome(raw["id"], raw.get("values"), raw.get("error"), bool(raw.get("died")))
                results[outcome.id] = outcome
                running[key] -= 1
                if on_result is not None:
                    on_result(outcome, len(results), len(jobs))
            feed()
    finally:
        for server in servers.values():
            if server.poll() is None:
                server.kill()
                server.wait()
    tails = {}
    for key, file in stderr.items():
        file.seek(0)
        tails[key] = "\n".join(file.read().strip().splitlines()[-6:])
        file.close()
    for job in jobs:
        if job.id in results:
            continue
        key = key_of(job)
        tail = tails.get(key, "")
        if timed_out:
            why = f"no result within {timeout:.0f} s"
        elif key in servers:
            why = f"its process exited with status {servers[key].returncode} before reporting"
        else:
            why = "not run: an earlier job's process ended first"
        results[job.id] = Outcome(job.id, error=why + (f":\n{tail}" if tail else ""), died=True, timed_out=timed_out)
    return {job_id: results[job_id] for job_id in ids}
