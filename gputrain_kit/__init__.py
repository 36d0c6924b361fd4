"""gputrain_kit: the package behind the gputrain-kit course on multi-GPU Keras training.

Start every notebook with ``gputrain_kit.setup(devices=...)``. Importing this
package does not import TensorFlow; ``setup()`` does, quietly.
"""
from __future__ import annotations

from .activity import DeviceActivity, ProfilerBusyError, device_activity
from .replicas import ReplicaHealthError, check_batch_plan, replica_report
from .batching import plan_batches
from .devices import SetupError, SetupReport, current, device_names, inventory, setup
from .errors import error_summary, expect_error
from .explainer import ExplainedError, Explanation, explain, explain_errors
from .measure import MemoryMeasurement, measure_memory
from .memory import estimate_memory, memory_verdict
from .multiworker import PortInUseError, WorkerError, WorkerFailed, WorkerTimeout, launch_local_workers
from .saving import load_verified, save_verified
from .scaling import scaling_model
from .visibility import parse_cuda_visible_devices


def _version() -> str:
    """The installed distribution's version: written once, in pyproject.toml."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("gputrain-kit")
    except PackageNotFoundError:     # the source tree without an install
        return "0+unknown"


__version__ = _version()

#: Submodules, imported on first use (``kit.memory``, ``kit.check``, ...): importing the kit stays light (PEP 562).
SUBMODULES = ("activity", "batchnorm", "branches", "check", "checkpoints", "cluster", "collectives", "counting", "course",
              "cpu_kernels", "data", "devices", "doctor", "errors", "explainer", "feeding", "gpu_record", "known_traps",
              "lrscaling", "measure", "memory", "multiworker", "netns", "parallel", "pipeline", "placement", "plots", "processes",
              "replicas", "saving", "scaling", "sharding", "training", "visibility", "widgets")

__all__ = [
    "setup", "device_names", "inventory", "current", "plan_batches", "expect_error", "error_summary",
    "device_activity", "DeviceActivity", "ProfilerBusyError", "activity",
    "explain", "explain_errors", "Explanation", "ExplainedError", "explainer", "netns",
    "parse_cuda_visible_devices", "estimate_memory", "memory_verdict", "measure_memory", "MemoryMeasurement", "branches", "memory", "pipeline",
    "save_verified", "load_verified", "saving", "checkpoints",
    "scaling_model", "scaling", "feeding", "lrscaling",
    "replica_report", "ReplicaHealth", "ReplicaHealthError", "check_batch_plan", "replicas",
    "SetupError", "SetupReport", "check", "counting", "cpu_kernels", "data", "gpu_record", "known_traps", "parallel", "placement", "plots", "processes",
    "training", "multiworker", "launch_local_workers", "WorkerError", "WorkerFailed", "WorkerTimeout",
    "PortInUseError",
    "visibility", "widgets", "__version__", "measure", "batchnorm", "cluster", "sharding", "collectives",
]


def __getattr__(name: str):
    if name in SUBMODULES:
        import importlib

        return importlib.import_module(f".{name}", __name__)
    if name == "ReplicaHealth":  # a Keras callback: built on first use so importing the kit stays TF-free
        from .replicas import ReplicaHealth
        return ReplicaHealth
    raise AttributeError(f"module 'gputrain_kit' has no attribute {name!r}")
