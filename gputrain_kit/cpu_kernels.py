"""Which CPU kernels TensorFlow runs here, and the CPU allocator's memory statistics.

TensorFlow ships two families of CPU kernels in one wheel:

- **oneDNN** (Intel's deep-learning kernels). Where TensorFlow turns them on by default is written in its
  ``DefaultOneDnnPolicy()`` (``tensorflow/core/util/port.cc``, TensorFlow 2.21): on Linux x86 when the CPU has
  AVX512-VNNI, AVX512-BF16, AVX-VNNI or AMX (recent servers, AMD Zen 4 and newer, Intel laptops with AVX-VNNI);
  on Linux Arm when the CPU is an Arm Neoverse V1 (AWS Graviton3 class); and in Windows x86 builds on every CPU
  (the code returns true there, although the comment above it still says "Windows: Disabled by default").
- **Eigen**, TensorFlow's portable kernels: everywhere else (AVX2-only Linux machines, AMD before Zen 4, other
  Arm CPUs such as Graviton2 and Graviton4, macOS).

``TF_ENABLE_ONEDNN_OPTS=0`` or ``=1`` forces either family; TensorFlow reads it once, at import, so a
process cannot switch: the kit runs the other family in child processes. The families differ in more than
speed: an empty replica batch crashes a conv net under one and writes NaN under the other (notebook 05),
bfloat16 is native only where oneDNN has the CPU's bf16 instructions (notebook 08), and only oneDNN's CPU
allocator keeps memory statistics unless ``TF_CPU_ALLOCATOR_USE_BFC=true`` is set before the first op, which
``setup()`` does.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable

from ._args import require_choice

__all__ = ["FAMILIES", "FAMILY_NAMES", "CpuKernels", "AllocatorStatsError", "cpu_features", "arm_cpu", "default_family",
           "expected_family", "native_bf16", "onednn_bf16", "bf16_by_onednn", "detect", "family_env", "use_bfc_allocator", "require_allocator_stats"]

#: The two CPU kernel families, as the kit names them.
FAMILIES = ("onednn", "eigen")
FAMILY_NAMES = {"onednn": "oneDNN", "eigen": "Eigen (portable)"}
#: Where TensorFlow writes which family runs by default.
POLICY_SOURCE = "DefaultOneDnnPolicy() in tensorflow/core/util/port.cc"
#: The x86 CPU features for which TensorFlow turns oneDNN on by default on Linux (``POLICY_SOURCE``).
ONEDNN_DEFAULT_FEATURES = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16")
#: The Arm CPUs, as (implementer, part) of their MIDR register, for which TensorFlow turns oneDNN on by default on
#: Linux: its ``TestAarch64CPU(ARM_NEOVERSE_V1)`` (``xla/tsl/platform/cpu_info.cc``) matches implementer 0x41, part 0xd40.
ONEDNN_DEFAULT_ARM_CPUS = {(0x41, 0xD40): "Arm Neoverse V1 (AWS Graviton3 class)"}
_X86 = ("x86_64", "amd64", "x86", "i386", "i686")
_ARM64 = ("aarch64", "arm64")
#: CPU features that execute bfloat16 arithmetic natively (x86: AVX512-BF16, AMX; Arm: the BF16 extension).
BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")
_ENV = "TF_ENABLE_ONEDNN_OPTS"
_BFC_ENV = "TF_CPU_ALLOCATOR_USE_BFC"


class AllocatorStatsError(RuntimeError):
    """The CPU allocator keeps no memory statistics in this process; the message says how to fix it."""


@lru_cache(maxsize=1)
def cpu_features() -> frozenset[str]:
    """The CPU's feature flags as Linux names them (``/proc/cpuinfo``); on macOS the bf16 flag from sysctl;
    empty where neither can be read. Reads files only: nothing of TensorFlow starts."""
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    flags.update(value.split())
                    break
    except OSError:
        pass
    if sys.platform == "darwin":
        try:
            out = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True,
                                 timeout=5).stdout.strip()
            if out == "1":
                flags.add("bf16")
        except (OSError, subprocess.SubprocessError):
            pass
    return frozenset(flags)


def arm_cpu(cpuinfo: str | None = None) -> tuple[int, int] | None:
    """An Arm CPU's (implementer, part) numbers, as Linux's ``/proc/cpuinfo`` gives them ("CPU implementer",
    "CPU part"); None on other CPUs or where they cannot be read. ``cpuinfo``: that file's text (default: read
    this machine's)."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    found: dict[str, int] = {}
    for line in cpuinfo.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key in ("CPU implementer", "CPU part") and key not in found:
            try:
                found[key] = int(value, 0)
            except ValueError:
                return None
    if len(found) < 2:
        return None
    return found["CPU implementer"], found["CPU part"]


def cpu_name() -> str:
    """The CPU's model name, or the platform's processor string."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def native_bf16(features: Iterable[str] | None = None) -> bool:
    """True when the CPU has instructions for bfloat16 arithmetic (AVX512-BF16, AMX-BF16 or Arm's BF16)."""
    found = cpu_features() if features is None else set(features)
    return any(f in found for f in BF16_FEATURES)


def onednn_bf16(features: Iterable[str] | None = None) -> bool:
    """True when TensorFlow lets oneDNN run bfloat16 ops on this CPU (AVX-512 or AVX-NE-CONVERT: TensorFlow's
    ``IsDataTypeSupportedByOneDNNOnThisCPU``); elsewhere its bf16 ops fall back to Eigen, which emulates bf16."""
    found = cpu_features() if features is None else set(features)
    return "avx512f" in found or "avx_ne_convert" in found


def bf16_by_onednn(family: str, features: Iterable[str] | None = None) -> bool:
    """Whether a process running the CPU kernel ``family`` computes bfloat16 with oneDNN's bf16 kernels (True) or
    emulates it with Eigen's, converting to float32 and back (False)."""
    family = require_choice("bf16_by_onednn", "family", family, FAMILIES)
    return family == "onednn" and onednn_bf16(features)


def default_family(features: Iterable[str] | None = None, system: str | None = None,
                   machine: str | None = None, arm: tuple[int, int] | None = None) -> tuple[str, str]:
    """The family TensorFlow picks without ``TF_ENABLE_ONEDNN_OPTS``, and why: TensorFlow's rule
    (``POLICY_SOURCE``) applied to platform facts.

    ``features``: the CPU's feature flags as Linux names them; ``system``/``machine``: as ``platform.system()``
    and ``platform.machine()`` give them; ``arm``: an Arm CPU's (implementer, part). Pure when ``features`` is
    given (``arm`` then defaults to none); with ``features=None`` all facts are read from this machine."""
    if features is None:
        found: set[str] = set(cpu_features())
        arm = arm_cpu() if arm is None else arm
    else:
        found = set(features)
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if system == "Windows":
        if machine in _X86:
            return "onednn", "TensorFlow's default on Windows x86, whatever the CPU (its DefaultOneDnnPolicy)"
        return "eigen", f"TensorFlow's default on Windows {machine}: oneDNN is on by default only in x86 builds"
    if system != "Linux":
        shown = {"Darwin": "macOS"}.get(system, system)
        return "eigen", f"TensorFlow's default on {shown}: oneDNN is on by default only on Linux and Windows x86"
    if machine in _ARM64:
        if arm in ONEDNN_DEFAULT_ARM_CPUS:
            return "onednn", f"TensorFlow's default on this CPU, an {ONEDNN_DEFAULT_ARM_CPUS[arm]}"
        return "eigen", ("TensorFlow's default on this Arm CPU: of Arm CPUs, TensorFlow turns oneDNN on by default "
                         "only on the Arm Neoverse V1 (AWS Graviton3 class)")
    if machine not in _X86:
        return "eigen", f"TensorFlow's default on Linux {machine}: oneDNN is on by default only on x86 and Arm"
    has = [f for f in ONEDNN_DEFAULT_FEATURES if f in found]
    if has:
        return "onednn", f"TensorFlow's default on this CPU: it has {', '.join(has)}"
    return "eigen", ("TensorFlow's default on this CPU, which has none of AVX512-VNNI, AVX512-BF16, AVX-VNNI and "
                     "AMX, the features for which TensorFlow turns oneDNN on by default")


def expected_family(environ: dict[str, str] | None = None) -> str:
    """The family a fresh process started with ``environ`` (default: this one's) gets: ``TF_ENABLE_ONEDNN_OPTS``
    when it forces one, else ``default_family()``. Read without importing TensorFlow (``detect`` asks the running
    TensorFlow instead)."""
    forced = (os.environ if environ is None else environ).get(_ENV, "").strip().lower()
    if forced in ("1", "true"):
        return "onednn"
    if forced in ("0", "false"):
        return "eigen"
    return default_family()[0]


@dataclass(frozen=True)
class CpuKernels:
    """The CPU kernel family this process runs, why, and what the CPU can do."""

    family: str                   # "onednn" | "eigen"
    reason: str                   # "TF_ENABLE_ONEDNN_OPTS=0 forces it" or TensorFlow's default and why
    cpu: str
    native_bf16: bool             # the CPU has bf16 instructions
    default: str                  # the family TensorFlow picks on this CPU without TF_ENABLE_ONEDNN_OPTS

    @property
    def name(self) -> str:
        return FAMILY_NAMES[self.family]

    @property
    def bf16_by_onednn(self) -> bool:
        """bfloat16 runs in oneDNN's bf16 kernels (True), or emulated by Eigen (False)."""
        return bf16_by_onednn(self.family)

    @property
    def bf16(self) -> str:
        """How bfloat16 arithmetic runs in this process."""
        instructions = "with" if self.native_bf16 else "without"
        if self.bf16_by_onednn:
            return f"in oneDNN's bf16 kernels (a CPU {instructions} bf16 instructions)"
        if self.family == "onednn":
            return "emulated: oneDNN runs bf16 only on CPUs with AVX-512 or AVX-NE-CONVERT, so TensorFlow falls back to Eigen"
        return f"emulated by Eigen, converted to float32 and back (a CPU {instructions} bf16 instructions)"

    def short(self) -> str:
        """A short line for setup()'s report: family, forced or default, how bf16 runs."""
        how = self.reason if self.reason.startswith(_ENV) else "TensorFlow's default on this CPU"
        bf16 = "by oneDNN" if self.bf16_by_onednn else "emulated"
        return f"{self.name}, {how}; bfloat16 {bf16}"

    def line(self) -> str:
        """One line: family, why, bf16."""
        return f"{self.name} ({self.reason}); bfloat16 {self.bf16}"

    def __repr__(self) -> str:
        return f"CPU kernels: {self.line()}"


def detect() -> CpuKernels:
    """The CPU kernel family of *this* process, read from the running TensorFlow (imported quietly if it is
    not yet; no device is initialised)."""
    from . import _tf

    _tf.import_tf()
    from tensorflow.python.util import _pywrap_util_port

    family = "onednn" if _pywrap_util_port.IsMklEnabled() else "eigen"
    default, why = default_family()
    forced = os.environ.get(_ENV)
    if forced is not None and forced.strip().lower() in ("0", "1", "true", "false"):
        reason = f"{_ENV}={forced} forces it"
    else:
        reason = why if default == family else (
            f"this TensorFlow's own default; TensorFlow's rule ({POLICY_SOURCE}) gives {FAMILY_NAMES[default]} "
            f"here, so this build differs (one built without oneDNN runs Eigen everywhere)")
    return CpuKernels(family=family, reason=reason, cpu=cpu_name(), native_bf16=native_bf16(), default=default)


def family_env(family: str, func: str = "family_env") -> dict[str, str]:
    """The environment a child process needs to run ``family`` ("onednn" or "eigen") with memory statistics."""
    family = require_choice(func, "kernels", family, FAMILIES)
    return {_ENV: "1" if family == "onednn" else "0", _BFC_ENV: "true"}


def use_bfc_allocator() -> bool:
    """Ask TensorFlow for its BFC CPU allocator, which keeps memory statistics (``get_memory_info``) under
    both kernel families. Works only before TensorFlow's first op in this process: returns False, and
    changes nothing, when the runtime has already started. A value the user set is kept."""
    from . import _tf

    if _tf.devices_initialised():
        return False
    os.environ.setdefault(_BFC_ENV, "true")
    return True


def require_allocator_stats(func: str, device: str = "CPU:0") -> None:
    """Raise AllocatorStatsError, naming ``func`` and the fix, when ``device``'s allocator keeps no statistics."""
    import tensorflow as tf

    try:
        tf.config.experimental.get_memory_info(device)
    except ValueError as err:
        raise AllocatorStatsError(
            f"{func}: TensorFlow's allocator on {device} keeps no memory statistics in this process ({err}). "
            f"TensorFlow's default CPU allocator under the Eigen kernels has none; its BFC allocator does. "
            f"Restart the kernel (or the script) and run gputrain_kit.setup(...) before anything else, or set "
            f"{_BFC_ENV}=true before TensorFlow's first op.") from err
