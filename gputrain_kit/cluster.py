"""A multi-worker job's cluster, from both sides: the launcher's (free ports, ``TF_CONFIG``, which processes
still run) and a worker's (``worker_task()``: which worker am I; ``chief_or_scratch_dir``). Notebook 07;
``multiworker.launch_local_workers`` starts the workers."""
from __future__ import annotations

import json
import os
import sys
import socket
import tempfile
from dataclasses import dataclass
from typing import Sequence

from ._args import require_int, short

__all__ = ["free_ports", "running", "tf_config", "WorkerTask", "worker_task", "chief_or_scratch_dir",
           "listening_sockets"]

_HOST = "127.0.0.1"
_ANY = ""          # TensorFlow's gRPC server listens on every interface (0.0.0.0:port)


# --------------------------------------------------------------------------- cluster description
def free_ports(count: int, host: str = _ANY) -> list[int]:
    """``count`` distinct ports that are free on every interface now (the OS picks them)."""
    count = require_int("free_ports", "count", count, minimum=1, maximum=64)
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def running(pids: Sequence[int]) -> list[int]:
    """The process ids in ``pids`` that are still running (to check that no worker was left behind)."""
    alive = []
    for pid in pids:
        pid = require_int("running", "each pid", pid, minimum=1)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:        # exists, owned by someone else
            alive.append(pid)
            continue
        try:                           # a zombie has exited: it is not running
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            pass
        alive.append(pid)
    return alive


def _port_is_free(port: int, host: str = _ANY) -> bool:
    """Could a server listen on ``port``? SO_REUSEADDR, as gRPC uses: closed connections lingering
    in TIME_WAIT do not count, a process listening there does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def tf_config(workers: Sequence[str], index: int) -> str:
    """The ``TF_CONFIG`` JSON for worker ``index`` of a cluster of ``host:port`` addresses.

    Every host gets the same cluster and its own index; on a real cluster, export it
    on each host before starting the same script there.
    """
    if isinstance(workers, str) or not isinstance(workers, Sequence) or not workers:
        raise ValueError("tf_config: workers must be a non-empty list of 'host:port' strings, "
                         "e.g. ['gpu-a:12345', 'gpu-b:12345'].")
    for address in workers:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"tf_config: {short(address)} is not 'host:port'; write e.g. 'gpu-a:12345'.")
    if len(set(workers)) != len(workers):
        raise ValueError(f"tf_config: addresses must be distinct, got {list(workers)}.")
    index = require_int("tf_config", "index", index, minimum=0, maximum=len(workers) - 1)
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}})


# --------------------------------------------------------------------------- inside a worker
_TASK_TYPES = ("chief", "worker", "evaluator", "ps")     # what TensorFlow's multi_worker_util allows


@dataclass(frozen=True)
class WorkerTask:
    """Which task this process is: ``index`` of ``count`` tasks of its ``type`` (``"worker"`` in this course's
    clusters, or TensorFlow's ``"chief"``, ``"evaluator"``, ``"ps"``)."""
    index: int
    count: int
    type: str = "worker"
    has_chief_task: bool = False      # the cluster has a "chief" job

    @property
    def is_chief(self) -> bool:
        """TensorFlow's rule (``multi_worker_util.is_chief``): the ``"chief"`` task where the cluster has one,
        otherwise worker 0; an ``"evaluator"`` is its own chief too (it runs outside the training cluster)."""
        if self.type in ("chief", "evaluator"):
            return True
        return self.type == "worker" and self.index == 0 and not self.has_chief_task


def worker_task() -> WorkerTask:
    """Read ``TF_CONFIG`` of this process (inside a worker). Without it: worker 0 of 1."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return WorkerTask(0, 1)
    try:
        config = json.loads(raw)
        cluster = config["cluster"]
        kind = str(config["task"]["type"])
        index = int(config["task"]["index"])
        jobs = {name: list(addresses) for name, addresses in cluster.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"worker_task: TF_CONFIG is not valid ({err}): {raw[:200]!r}") from err
    if kind not in _TASK_TYPES:
        raise ValueError(f"worker_task: TF_CONFIG's task type is {kind!r}; TensorFlow allows {list(_TASK_TYPES)}.")
    if kind not in jobs and kind != "evaluator":     # TensorFlow lets the evaluator be missing from the cluster
        raise ValueError(f"worker_task: TF_CONFIG's task type {kind!r} is not a job of its cluster "
                         f"({sorted(jobs)}): {raw[:200]!r}")
    count = len(jobs.get(kind, [])) or 1
    if not 0 <= index < count:
        raise ValueError(f"worker_task: TF_CONFIG's task index {index} is outside its {count} {kind!r} task(s).")
    return WorkerTask(index, count, kind, "chief" in jobs)


def chief_or_scratch_dir(path: str | os.PathLike) -> str:
    """Where this worker should write a checkpoint: ``path`` on the chief, a scratch folder elsewhere.

    With MultiWorkerMirroredStrategy every worker must take part in saving, but only the chief's copy is
    kept; the others write to a throw-away directory. The chief is TensorFlow's (``WorkerTask.is_chief``):
    the ``"chief"`` task where the cluster has one, else worker 0. An evaluator, chief of nothing but itself,
    reads the training's checkpoints and gets a scratch folder as well, so that one process writes ``path``.
    """
    task = worker_task()
    if task.is_chief and task.type != "evaluator":
        return os.fspath(path)
    return tempfile.mkdtemp(prefix=f"gputrain-{task.type}{task.index}-")


def listening_sockets() -> list[tuple[str, int]]:
    """(address, port) of every TCP socket listening in this process's network namespace, from
    /proc/net/tcp and /proc/net/tcp6 (read, never by connecting)."""
    import ipaddress

    found = []
    for name, width in (("tcp", 4), ("tcp6", 16)):
        try:
            with open(f"/proc/net/{name}") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 4 or fields[3] != "0A":   # 0A: LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)
            # /proc writes each 32-bit word in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4)) if sys.byteorder == "little" else raw
            ip = ipaddress.ip_address(raw[:width])
            found.append((str(ip), int(port, 16)))
    return found
