"""One-call device setup (real, split or simulated devices) and side-effect-free inventory.

TensorFlow fixes its device list the first time anything uses a device; after
that, logical devices, visibility and memory growth can no longer change. So
``setup()`` must run first in every notebook, and it creates the largest device
count you will need: strategies then use the first k of them (``device_names(k)``).
"""
from __future__ import annotations

import logging
import os
import platform
from dataclasses import dataclass, field
from typing import Any

from . import _tf, cpu_kernels
from ._args import require_choice, require_int

__all__ = ["SetupError", "SetupReport", "Inventory", "setup", "device_names", "inventory", "current", "mode_for"]

#: Memory each logical GPU gets when fewer GPUs than ``devices`` must be split.
DEFAULT_SPLIT_MEMORY_MB = 1024
MAX_DEVICES = 64


class SetupError(RuntimeError):
    """setup() cannot do what was asked in this process; the message says how to fix it."""


@dataclass(frozen=True)
class SetupReport:
    """What ``setup()`` did. Its repr says it in plain words."""

    mode: str                      # "gpu" | "split-gpu" | "cpu"
    devices: tuple[str, ...]       # logical device names, in order
    physical_gpus: tuple[str, ...]
    memory_limit_mb: int | None    # per logical GPU, None when not limited
    seed: int
    tensorflow: str
    keras: str
    notes: tuple[str, ...] = field(default=())
    cpu_kernels: str = ""          # the CPU kernel family and why (cpu_kernels.detect().line())
    kernel_family: str = ""        # "onednn" | "eigen"
    backend: str = "tensorflow"    # Keras's backend: "tensorflow" or "jax" (notebook 09)
    jax: str = ""                  # JAX's version on the JAX backend

    @property
    def simulated(self) -> bool:
        """True when the devices are slices of the CPU (no GPU computes anything)."""
        return self.mode == "cpu"

    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def __repr__(self) -> str:
        n = len(self.devices)
        if self.mode == "cpu":
            head = f"{n} simulated device{'s' * (n != 1)}: the CPU split into {n} logical CPU{'s' * (n != 1)}."
        elif self.mode == "split-gpu":
            head = (f"{n} logical GPU{'s' * (n != 1)} split from {len(self.physical_gpus)} physical "
                    f"GPU{'s' * (len(self.physical_gpus) != 1)}, {self.memory_limit_mb} MB each.")
        else:
            limit = (f", memory capped at {self.memory_limit_mb} MB each" if self.memory_limit_mb
                     else ", memory growth on")
            head = f"{n} real GPU{'s' * (n != 1)}{limit}."
        lines = [f"gputrain_kit setup: {head}", "  devices: " + ", ".join(self.devices)]
        import textwrap   # wrapped here, at word boundaries, so JupyterLab does not wrap mid-word

        lines += [textwrap.fill(note, width=96, initial_indent="  note: ", subsequent_indent="        ",
                                break_long_words=False, break_on_hyphens=False) for note in self.notes]
        if self.cpu_kernels:
            lines.append(f"  CPU kernels: {self.cpu_kernels}")
        if self.backend == "jax":
            lines.append(f"  Keras {self.keras} on JAX {self.jax}; seed {self.seed}.")
        else:
            lines.append(f"  TensorFlow {self.tensorflow}, Keras {self.keras}; seed {self.seed}; op determinism on.")
        return "\n".join(lines)


_state: dict[str, Any] = {"args": None, "report": None}


_DEFAULTS = {"kind": "auto", "memory_limit_mb": None, "seed": 0, "backend": "tensorflow"}


def _call_text(args: dict[str, Any]) -> str:
    shown = {k: v for k, v in args.items() if k == "devices" or _DEFAULTS.get(k) != v}
    return "setup(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


def current() -> SetupReport | None:
    """The report of the setup() that ran in this process, or None."""
    return _state["report"]


def mode_for(n_gpus: int, devices: int) -> tuple[str, list[int]]:
    """The mode ``setup(devices=devices)`` picks with ``n_gpus`` visible GPUs, and how many logical devices
    each physical device (each GPU, or the one CPU) gets. Pure Python: nothing is initialised.

    >>> mode_for(2, 6)
    ('split-gpu', [3, 3])
    """
    if n_gpus == 0:
        return "cpu", [devices]
    if n_gpus >= devices:
        return "gpu", [1] * devices
    return "split-gpu", [devices // n_gpus + (i < devices % n_gpus) for i in range(n_gpus)]


def setup(devices: int = 2, *, kind: str = "auto", memory_limit_mb: int | None = None,
          seed: int = 0, backend: str = "tensorflow") -> SetupReport:
    """Create ``devices`` devices for the course, seed everything, and return a report.

    - ``kind="auto"``: at least ``devices`` GPUs -> use the first ``devices`` of them
      (memory growth on); fewer GPUs -> split them into ``devices`` logical GPUs of
      ``memory_limit_mb`` each (default 1024); no GPU -> split the CPU into
      ``devices`` logical CPUs (simulated devices: same cores, no real speed-up).
    - ``kind="gpu"`` requires a GPU; ``kind="cpu"`` hides GPUs and splits the CPU.

    Must run before TensorFlow initialises its devices. Calling it again with the
    same arguments returns the same report; other arguments raise SetupError.

    ``backend="jax"`` (notebook 09): Keras 3 on JAX instead, set before Keras is imported; ``devices`` real GPUs
    where at least that many are visible, else simulated CPU devices (JAX cannot split a GPU).
    """
    func = "setup"
    devices = require_int(func, "devices", devices, minimum=1, maximum=MAX_DEVICES)
    kind = require_choice(func, "kind", kind, ("auto", "gpu", "cpu"))
    if memory_limit_mb is not None:
        memory_limit_mb = require_int(func, "memory_limit_mb", memory_limit_mb, minimum=64)
    seed = require_int(func, "seed", seed, minimum=0)
    backend = require_choice(func, "backend", backend, ("tensorflow", "jax"))
    args = {"devices": devices, "kind": kind, "memory_limit_mb": memory_limit_mb, "seed": seed, "backend": backend}

    if _state["args"] is not None:
        if _state["args"] == args:
            return _state["report"]
        raise SetupError(
            f"{_call_text(args)} cannot run: {_call_text(_state['args'])} already set up this "
            "kernel's devices, and TensorFlow cannot change devices once they are initialised. "
            f"Restart the kernel (Kernel > Restart Kernel) and run {_call_text(args)} first, "
            "or keep the earlier setup and use device_names(k) for fewer devices."
        )
    if backend == "jax":
        if memory_limit_mb is not None:
            raise ValueError(f"{_call_text(args)}: memory_limit_mb splits GPUs on the TensorFlow backend; JAX "
                             "cannot split a GPU. Leave it out.")
        from . import jax_setup

        try:
            report = SetupReport(**jax_setup.setup_jax(devices, kind, seed, _call_text(args)))
        except jax_setup.Refused as err:
            raise SetupError(str(err)) from None
        _state.update(args=args, report=report)
        return report
    if _tf.devices_initialised():
        raise SetupError(
            f"{_call_text(args)} must run before TensorFlow initialises its devices, but something "
            "in this kernel has already used TensorFlow (an op, a model, list_logical_devices()...). "
            "Restart the kernel and make setup() the first thing you run."
        )

    tf = _tf.import_tf()
    import keras

    gpus = tf.config.list_physical_devices("GPU")
    if kind == "gpu" and not gpus:
        raise SetupError(
            f"{_call_text(args)}: no GPU is visible to TensorFlow here "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!s}, "
            f"CUDA build: {tf.sysconfig.get_build_info().get('is_cuda_build', False)}). "
            "Use kind='auto' to fall back to simulated CPU devices, or run "
            "`python -m gputrain_kit doctor` to see why the GPU is missing."
        )
    notes: list[str] = []
    try:
        if kind == "cpu" or not gpus:
            mode = "cpu"
            if gpus:
                tf.config.set_visible_devices([], "GPU")
                notes.append(f"kind='cpu': {len(gpus)} GPU(s) hidden from TensorFlow.")
            # Memory statistics on every CPU: oneDNN's allocator keeps them, Eigen's default allocator does not,
            # TensorFlow's BFC CPU allocator does under both (read at the first op, so set it now).
            cpu_kernels.use_bfc_allocator()
            bfc = os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "")
            if bfc.strip().lower() in ("1", "true"):
                notes.append("memory statistics: TensorFlow's BFC CPU allocator (TF_CPU_ALLOCATOR_USE_BFC=true), "
                             "the allocator family GPUs use, under either CPU kernel family.")
            else:
                notes.append(f"TF_CPU_ALLOCATOR_USE_BFC={bfc} was set before setup(): the CPU allocator may keep no "
                             "memory statistics (notebooks 01, 03 and 08 need them); unset it and restart.")
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(devices)])
            notes.append("simulated devices share the same CPU cores: they show how work is "
                         "distributed, never how much faster GPUs would be.")
            if memory_limit_mb is not None:
                notes.append("memory_limit_mb applies to GPUs only; ignored on CPU.")
            limit = None
        elif len(gpus) >= devices:
            mode = "gpu"
            used = gpus[:devices]
            tf.config.set_visible_devices(used, "GPU")
            for gpu in used:
                if memory_limit_mb is None:
                    tf.config.experimental.set_memory_growth(gpu, True)
                else:
                    tf.config.set_logical_device_configuration(
                        gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)])
            if len(gpus) > devices:
                notes.append(f"{len(gpus) - devices} more GPU(s) hidden so this kernel does not hold their memory.")
            limit = memory_limit_mb
        else:
            mode = "split-gpu"
            limit = memory_limit_mb or DEFAULT_SPLIT_MEMORY_MB
            per_gpu = mode_for(len(gpus), devices)[1]
            for gpu, count in zip(gpus, per_gpu):
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit) for _ in range(count)])
            notes.append("logical GPUs share their physical GPU's compute: timings do not show "
                         "multi-GPU speed-ups.")
        names = tuple(d.name for d in tf.config.list_logical_devices("GPU" if mode != "cpu" else "CPU"))
    except RuntimeError as err:  # TensorFlow initialised its devices behind our back
        raise SetupError(
            f"{_call_text(args)} must run before TensorFlow initialises its devices "
            f"(TensorFlow said: {err}). Restart the kernel and run setup() first."
        ) from err

    # TensorFlow's Python logger prints INFO lines (every MirroredStrategy reduction) in notebooks;
    # keep warnings, drop the chatter.
    tf.get_logger().setLevel(logging.WARNING)
    keras.utils.set_random_seed(seed)  # seeds Python, NumPy and TensorFlow
    tf.config.experimental.enable_op_determinism()
    if mode != "cpu":
        # TensorFlow runs float32 matmuls and convolutions in TensorFloat-32 on Ampere and newer GPUs
        # (10-bit mantissa): the course compares results across devices and strategies, so keep float32.
        tf.config.experimental.enable_tensor_float_32_execution(False)
        notes.append("TensorFloat-32 off: float32 matmuls stay float32, so results compare with the "
                     "CPU run (TensorFlow's default on Ampere and newer GPUs is on).")

    kernels = cpu_kernels.detect()
    report = SetupReport(mode=mode, devices=names[:devices], physical_gpus=tuple(g.name for g in gpus),
                         memory_limit_mb=limit, seed=seed, tensorflow=tf.__version__,
                         keras=keras.__version__, notes=tuple(notes), cpu_kernels=kernels.short(),
                         kernel_family=kernels.family)
    _state.update(args=args, report=report)
    return report


def device_names(n: int | None = None) -> list[str]:
    """The first ``n`` logical devices that setup() made (all of them if ``n`` is None)."""
    report = _state["report"]
    if report is None:
        raise SetupError("device_names() needs gputrain_kit.setup(devices=...) to run first in this kernel.")
    if n is None:
        return list(report.devices)
    n = require_int("device_names", "n", n, minimum=1)
    if n > len(report.devices):
        raise ValueError(
            f"device_names({n}): setup made only {len(report.devices)} device(s) "
            f"({', '.join(report.devices)}). Ask for at most {len(report.devices)}, or restart the "
            f"kernel and call setup(devices={n})."
        )
    return list(report.devices[:n])


@dataclass(frozen=True)
class Inventory:
    """Physical devices and environment, read without initialising any device."""

    python: str
    platform: str
    tensorflow: str
    keras: str
    cuda_build: bool
    cuda_version: str | None
    cudnn_version: str | None
    cuda_visible_devices: str | None
    physical_devices: tuple[tuple[str, str], ...]   # (device_type, name)
    devices_initialised: bool
    cpu_kernels: str = ""                          # cpu_kernels.detect().line()

    @property
    def gpus(self) -> list[str]:
        return [name for dtype, name in self.physical_devices if dtype == "GPU"]

    def __repr__(self) -> str:
        cvd = "<unset>" if self.cuda_visible_devices is None else repr(self.cuda_visible_devices)
        build = (f"CUDA {self.cuda_version}, cuDNN {self.cudnn_version}" if self.cuda_build
                 else "CPU-only build")
        rows = [
            ("Python", self.python), ("platform", self.platform),
            ("TensorFlow", f"{self.tensorflow} ({build})"), ("Keras", self.keras),
            ("CPU kernels", self.cpu_kernels or "unknown"),
            ("CUDA_VISIBLE_DEVICES", cvd),
            ("physical devices", ", ".join(f"{n} ({t})" for t, n in self.physical_devices) or "none"),
            ("devices initialised", "yes" if self.devices_initialised else "no (setup() can still run)"),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def inventory() -> Inventory:
    """Physical devices, CUDA_VISIBLE_DEVICES, versions and TF build info.

    Uses ``tf.config.list_physical_devices()``, which does not create devices, and
    never ``device_lib.list_local_devices()``, which builds every device (on a GPU, a
    CUDA context on each: 529 MiB of an H100's 81,559 in the kit's record, notebook 01;
    older TensorFlow reserved most of the memory too, tensorflow#8021).

    It runs in this process, and is not free of effects on a CUDA build of TensorFlow: listing physical devices
    initialises CUDA here (the driver's ``cuInit``, seen in its log even on a machine without a GPU), and CUDA
    reads ``CUDA_VISIBLE_DEVICES`` when it initialises: set that variable before calling this. It creates no
    device and leaves the device configuration open (``setup()`` can still run after it).
    """
    tf = _tf.import_tf()
    import keras

    info = tf.sysconfig.get_build_info()
    return Inventory(
        python=platform.python_version(), platform=f"{platform.system()} {platform.machine()}",
        tensorflow=tf.__version__, keras=keras.__version__,
        cuda_build=bool(info.get("is_cuda_build", False)),
        cuda_version=info.get("cuda_version"), cudnn_version=info.get("cudnn_version"),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        physical_devices=tuple((d.device_type, d.name) for d in tf.config.list_physical_devices()),
        devices_initialised=_tf.devices_initialised(),
        cpu_kernels=cpu_kernels.detect().line(),
    )
