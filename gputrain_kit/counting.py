"""Counting devices, and which calls lock TensorFlow's device configuration.

Each experiment runs in its own child process (devices are fixed per process),
several at a time.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ._args import require_str, short
from ._children import Job, run_jobs
from ._children.lock_probe import CALLS, EXTRA_CALLS, KERAS_MODEL

__all__ = ["KERAS_MODEL", "LOCK_PROBES", "LockProbe", "probe_locks", "gpus_seen", "late_visibility_change",
           "shared_gpu"]

#: Calls people use to count devices; ``_children/lock_probe.py`` runs each (``inspect.getsource`` shows how).
LOCK_PROBES: tuple[str, ...] = tuple(CALLS)


@dataclass(frozen=True)
class LockProbe:
    call: str
    split_error: str | None       # set_logical_device_configuration afterwards
    visible_error: str | None     # set_visible_devices afterwards

    @property
    def locked(self) -> bool:
        return self.split_error is not None

    def row(self) -> str:
        if not self.locked:
            return f"{self.call:<36} leaves the configuration open"
        return f"{self.call:<36} LOCKS it: {self.split_error}"


#: Probes start TensorFlow in a child; on a GPU machine a default start reserves nearly all of each GPU's
#: memory (measured on an H100: 79,349 of 81,559 MiB), which would starve the learner's own kernel and
#: anyone sharing the GPU. With memory growth the child takes only what it uses; whether devices lock
#: does not depend on it.
_GROWTH = {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}


def shared_gpu(environ: Mapping[str, str] | None = None) -> str | None:
    """Why this kernel's GPU is taken to be shared with other people (None: nothing says so): a workshop seat
    (``GPUTRAIN_WORKSHOP_SEAT``, set by the workshop server's hook) or ``TF_FORCE_GPU_ALLOW_GROWTH=true`` in the
    environment, which a shared server sets so that no process takes the whole card. Notebook 01 then skips the
    case that starts TensorFlow with its default settings, which takes most of the GPU while it runs."""
    if environ is not None and not isinstance(environ, Mapping):
        raise ValueError(f"shared_gpu: environ must be a mapping of environment variables such as os.environ, or "
                         f"None for this process's; got {short(environ)}.")
    env = os.environ if environ is None else environ
    if env.get("GPUTRAIN_WORKSHOP_SEAT") is not None:
        return f"GPUTRAIN_WORKSHOP_SEAT={env['GPUTRAIN_WORKSHOP_SEAT']!r} (a workshop seat)"
    if env.get("TF_FORCE_GPU_ALLOW_GROWTH", "").strip().lower() == "true":
        return "TF_FORCE_GPU_ALLOW_GROWTH=true (set where a GPU is shared)"
    return None


def _run(func: str, jobs: list[Job], processes: int = 2) -> dict[str, dict[str, Any]]:
    from .processes import ChildError

    outcomes = run_jobs("lock_probe", jobs, processes=processes, timeout=120, func=func)
    failed = [o for o in outcomes.values() if not o.ok]
    if failed:
        raise ChildError(f"{func}: {failed[0].id}: {failed[0].error}")
    return {job_id: outcome.values or {} for job_id, outcome in outcomes.items()}


def probe_locks(calls: Sequence[str] | None = None) -> list[LockProbe]:
    """For each call (one of LOCK_PROBES, the default, or KERAS_MODEL): can devices still be configured after it?

    Each call is probed first thing in a process of its own: on Linux a child forked from one process that
    has imported TensorFlow without starting it (one import for every probe), elsewhere a fresh process.
    One probe at a time: they are short, and each starts a whole runtime. It prints one line when it starts (the
    probes take 5 to 10 seconds in all, mostly the one import of TensorFlow).

    Each probe then splits the *CPU* into logical devices: the lock it shows is TensorFlow's (its context's device
    configuration), the same on a GPU machine; what a call allocates on a GPU is not measured here (notebook 01,
    section 6.2, on a GPU)."""
    names = list(LOCK_PROBES) if calls is None else list(calls)
    unknown = [c for c in names if c not in LOCK_PROBES and c not in EXTRA_CALLS]
    if unknown:
        raise ValueError(f"probe_locks: unknown call {short(unknown[0])}; choose from "
                         f"{list(LOCK_PROBES) + list(EXTRA_CALLS)}.")
    # the course's rule: no cell waits over 5 s without saying so
    print(f"probing {len(names)} call{'s' if len(names) != 1 else ''}, each first thing in a process of its own "
          "(5 to 10 seconds)...", flush=True)
    values = _run("probe_locks", [Job(c, {"probe": c}, _GROWTH) for c in names], processes=1)
    return [LockProbe(c, values[c]["split"], values[c]["visible"]) for c in names]


def gpus_seen(values: Sequence[str | None]) -> list[tuple[str | None, int]]:
    """Start one process per CUDA_VISIBLE_DEVICES value (None = unset); return how many GPUs TF saw."""
    jobs = [Job(f"{i}", {"count_gpus": True}, {**_GROWTH, "CUDA_VISIBLE_DEVICES": v}) for i, v in enumerate(values)]
    found = _run("gpus_seen", jobs)
    return [(found[job.id]["cvd"], found[job.id]["gpus"]) for job in jobs]


def late_visibility_change(new_value: str = "") -> dict[str, int]:
    """In a fresh process: count GPUs with ``tf.config.list_logical_devices``, set CUDA_VISIBLE_DEVICES, count
    again (and with ``list_physical_devices``). The counts do not change; they are TensorFlow's device lists, which
    it builds once per process and keeps, not a new read of the variable by CUDA."""
    new_value = require_str("late_visibility_change", "new_value", new_value)
    return _run("late_visibility_change", [Job("late", {"late_value": new_value}, _GROWTH)])["late"]
