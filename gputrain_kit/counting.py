"""Counting devices, and which calls lock TensorFlow's device configuration.

Each experiment runs in its own child process (devices are fixed per process),
several at a time.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Sequence

from ._args import short
from .processes import fork_enabled, run_child

__all__ = ["LOCK_PROBES", "LockProbe", "probe_locks", "gpus_seen", "late_visibility_change"]

#: Calls people use to count devices, and the code that makes each one.
LOCK_PROBES: dict[str, str] = {
    "tf.config.list_physical_devices()": "tf.config.list_physical_devices()",
    "device_lib.list_local_devices()": ("from tensorflow.python.client import device_lib\n"
                                        "device_lib.list_local_devices()"),
    "tf.config.list_logical_devices()": "tf.config.list_logical_devices()",
    "a first op: tf.constant(1.0) + 1": "tf.constant(1.0) + 1",
}

_PROBE = """
import tensorflow as tf
{call}
cpu = tf.config.list_physical_devices("CPU")[0]
results = {{}}
try:
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    results["split"] = None
except RuntimeError as e:
    results["split"] = str(e)
try:
    tf.config.set_visible_devices([], "GPU" if tf.config.list_physical_devices("GPU") else "CPU")
    results["visible"] = None
except RuntimeError as e:
    results["visible"] = str(e)
report(**results)
"""


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


def _parallel(jobs, workers: int = 2):
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda job: job(), jobs))


# Linux: one child imports TensorFlow (which starts nothing) and forks a process per probe, so that the probed
# call is the first thing TensorFlow's runtime does in that process, as in a fresh one, for one import in all.
_FORKED_PROBES = """
import json, os, sys
import tensorflow as tf
for name, code in json.loads({jobs!r}):
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            exec(compile(code, "<probe>", "exec"),
                 {{"report": lambda **values: print("__gputrain_kit__" + json.dumps({{name: values}}), flush=True)}})
            status = 0
        except BaseException:
            import traceback
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    if status:
        sys.exit(f"the probe of {{name}} failed (wait status {{status}})")
"""


def probe_locks(calls: Sequence[str] | None = None) -> list[LockProbe]:
    """For each call (a key of LOCK_PROBES): can devices still be configured after it?

    Each call is probed first thing in a process of its own: on Linux a child forked from one process that
    has imported TensorFlow without starting it (one import for every probe), elsewhere a fresh process."""
    import json

    names = list(LOCK_PROBES) if calls is None else list(calls)
    unknown = [c for c in names if c not in LOCK_PROBES]
    if unknown:
        raise ValueError(f"probe_locks: unknown call {short(unknown[0])}; choose from {list(LOCK_PROBES)}.")
    if fork_enabled("GPUTRAIN_PROBE_FORK"):   # GPUTRAIN_PROBE_FORK=0 or GPUTRAIN_FORK=0: fresh processes
        jobs = [[c, _PROBE.format(call=LOCK_PROBES[c])] for c in names]
        values = run_child(_FORKED_PROBES.format(jobs=json.dumps(jobs)), env=_GROWTH).values
        return [LockProbe(c, values[c]["split"], values[c]["visible"]) for c in names]
    results = _parallel([lambda c=c: run_child(_PROBE.format(call=LOCK_PROBES[c]), env=_GROWTH) for c in names])
    return [LockProbe(c, r.values["split"], r.values["visible"]) for c, r in zip(names, results)]


_COUNT = """
import os, tensorflow as tf
report(cvd=os.environ.get("CUDA_VISIBLE_DEVICES"), gpus=len(tf.config.list_physical_devices("GPU")))
"""


def gpus_seen(values: Sequence[str | None]) -> list[tuple[str | None, int]]:
    """Start one process per CUDA_VISIBLE_DEVICES value (None = unset); return how many GPUs TF saw."""
    results = _parallel([lambda v=v: run_child(_COUNT, env={**_GROWTH, "CUDA_VISIBLE_DEVICES": v}) for v in values])
    return [(r.values["cvd"], r.values["gpus"]) for r in results]


_LATE = """
import os, tensorflow as tf
before = len(tf.config.list_logical_devices("GPU"))
os.environ["CUDA_VISIBLE_DEVICES"] = {new!r}
after = len(tf.config.list_logical_devices("GPU"))
report(before=before, after=after, physical_after=len(tf.config.list_physical_devices("GPU")))
"""


def late_visibility_change(new_value: str = "") -> dict[str, int]:
    """In a fresh process: count GPUs, set CUDA_VISIBLE_DEVICES, count again. The count does not change."""
    if not isinstance(new_value, str):
        raise ValueError(f"late_visibility_change: new_value must be a string, got {short(new_value)}.")
    return run_child(_LATE.format(new=new_value), env=_GROWTH).values
