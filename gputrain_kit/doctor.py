"""``python -m gputrain_kit doctor``: can the course run on this machine?

Prints versions, the TensorFlow build (CUDA/cuDNN), the CPU kernels, physical GPUs,
CUDA_VISIBLE_DEVICES, the known traps of the installed Keras, whether JupyterLab's widget
extension is installed, the machine's memory, and a smoke test in a child process:
``setup(devices=2)``, one epoch of ``fit`` under MirroredStrategy (8 samples in batches of 4:
2 steps, each split over the 2 devices), then a read of the allocator's memory statistics.
Exits 1 when something would stop the notebooks, naming what and how to fix it.
"""
from __future__ import annotations

import argparse
import importlib
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .known_traps import version_tuple as _version_tuple

OK, INFO, WARN, FAIL = "ok", "info", "warn", "FAIL"


@dataclass(frozen=True)
class Check:
    status: str   # ok | info | warn | FAIL
    name: str
    detail: str

    def line(self) -> str:
        return f"[{self.status:^4}] {self.name}: {self.detail}"


def shown_path(path: str | os.PathLike) -> str:
    """A path as a learner can share it: relative to the current folder when under it or its parent (the
    course's own .venv seen from notebooks/), under ~ as ~/..., else as it is."""
    path = Path(path)
    here = Path.cwd()
    for base, prefix in ((here, ""), (here.parent, "../")):
        try:
            return prefix + str(path.relative_to(base))
        except ValueError:
            pass
    try:
        return "~/" + str(path.relative_to(Path.home()))
    except ValueError:
        return str(path)


def check_python() -> Check:
    v = sys.version_info
    text = f"{v.major}.{v.minor}.{v.micro} at {shown_path(sys.executable)}"
    if v < (3, 10):
        return Check(FAIL, "Python", f"{text}: the kit needs Python 3.10 or newer.")
    return Check(OK, "Python", text)


def _installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (without importing it), or None."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def version_checks(tensorflow: str, keras: str, jax: str | None) -> list[Check]:
    """TensorFlow, Keras and JAX against the supported range (``versions``): FAIL where the course cannot run,
    warn naming the notebooks a version cannot run."""
    from .versions import check_versions

    status = {"ok": OK, "warn": WARN, "FAIL": FAIL}
    return [Check(status[f.status], f.name, f.detail) for f in check_versions(tensorflow, keras, jax)]


def check_tensorflow() -> list[Check]:
    try:
        from . import _tf
        tf = _tf.import_tf()
        import keras
    except Exception as err:  # broken install, missing wheel, CPU without AVX...
        return [Check(FAIL, "TensorFlow", f"cannot be imported ({type(err).__name__}: {err}). "
                      "Run `make lab` (or `pip install -e .`) to install it.")]
    checks = version_checks(tf.__version__, keras.__version__, _installed_version("jax"))
    info = tf.sysconfig.get_build_info()
    if info.get("is_cuda_build"):
        build = f"CUDA {info.get('cuda_version')}, cuDNN {info.get('cudnn_version')}"
    else:
        build = "CPU-only build"
    checks.append(Check(INFO, "TensorFlow build", build))
    checks.append(check_cpu_kernels())
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    checks.append(Check(INFO, "CUDA_VISIBLE_DEVICES", "<unset>" if cvd is None else repr(cvd)))
    gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    if gpus:
        checks.append(Check(OK, "GPUs", f"{len(gpus)}: {', '.join(gpus)}"))
    elif shutil.which("nvidia-smi"):
        checks.append(Check(WARN, "GPUs", "nvidia-smi exists but TensorFlow sees no GPU: install the "
                            "CUDA wheels with `pip install -e .[gpu]`, and check CUDA_VISIBLE_DEVICES. "
                            "The notebooks still run on simulated devices."))
    else:
        checks.append(Check(INFO, "GPUs", "none: the notebooks simulate devices by splitting the CPU."))
    return checks


def check_cpu_kernels() -> Check:
    """Which CPU kernel family TensorFlow runs here, why, and how bfloat16 runs (notebooks 00, 05, 08)."""
    from . import cpu_kernels

    kernels = cpu_kernels.detect()
    return Check(INFO, "CPU kernels", f"{kernels.line()}; notebooks 05 and 08 run both families side by side")


def check_known_traps(keras_version: str | None = None) -> list[Check]:
    """The installed Keras against the known multi-GPU traps of the supported range (``known_traps``)."""
    from .known_traps import traps_for

    checks = []
    for trap, applies in traps_for(keras_version):
        name = f"trap {trap.key} ({trap.reported})"
        if trap.since is None and trap.fixed_in is None:
            # every Keras has it, and it is avoided by a default: information, not a warning
            checks.append(Check(INFO, name, f"this Keras has it, as {trap.versions()} do: {trap.title}; {trap.fix}."))
        elif applies:
            checks.append(Check(WARN, name, f"this Keras has it: {trap.title} ({trap.symptom}). Fix: {trap.fix}."))
        else:
            checks.append(Check(OK, name, f"not in this Keras ({trap.versions()} only)"))
    return checks


def check_packages() -> list[Check]:
    checks = []
    for module, need in (("ipywidgets", (8,)), ("sklearn", (1,)), ("matplotlib", (3,)),
                         ("jupyterlab", (4,))):
        try:
            mod = importlib.import_module(module)
        except Exception as err:
            checks.append(Check(FAIL, module, f"cannot be imported ({err}). Run `make lab` to install it."))
            continue
        version = getattr(mod, "__version__", "?")
        if _version_tuple(version)[: len(need)] < need:
            checks.append(Check(FAIL, module, f"{version}: need {'.'.join(map(str, need))} or newer."))
        else:
            checks.append(Check(OK, module, version))
    return checks


def widget_extension_path() -> Path | None:
    """Where JupyterLab's widget manager extension is installed, or None."""
    try:
        from jupyter_core.paths import jupyter_path
    except ImportError:
        return None
    for base in jupyter_path("labextensions"):
        candidate = Path(base) / "@jupyter-widgets" / "jupyterlab-manager" / "package.json"
        if candidate.exists():
            return candidate.parent
    return None


def check_widgets_extension() -> Check:
    path = widget_extension_path()
    if path is None:
        return Check(FAIL, "JupyterLab widgets extension", "not found: sliders would show as plain text. "
                     "Install it in the environment that runs JupyterLab: pip install 'jupyterlab_widgets>=3'.")
    return Check(OK, "JupyterLab widgets extension", shown_path(path))


def check_memory() -> Check:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return Check(INFO, "memory", "unknown on this platform")
    if total < 2:
        return Check(WARN, "memory", f"{total:.1f} GiB: notebooks need about 1.5 GiB each; close other kernels.")
    return Check(OK, "memory", f"{total:.1f} GiB")


def check_smoke(timeout: float = 240.0) -> Check:
    """``_children/smoke.py`` in a fresh process: 2 devices, one epoch, the allocator's statistics."""
    from ._children import Job, run_jobs

    name = "smoke test (2 devices, MirroredStrategy, one epoch)"
    outcome = run_jobs("smoke", [Job("smoke")], processes=1, timeout=timeout, fork=False, func="doctor")["smoke"]
    if outcome.timed_out:
        return Check(FAIL, name, f"did not finish in {timeout:.0f} s: the machine is overloaded or TensorFlow hangs.")
    if not outcome.ok or (outcome.values or {}).get("replicas") != 2:
        tail = (outcome.error or str(outcome.values)).strip().splitlines()[-3:]
        return Check(FAIL, name, "failed: " + " | ".join(tail))
    said = (outcome.values or {}).get("memory_statistics", "")
    if said != "ok":
        return Check(FAIL, name, "trained on 2 devices, but TensorFlow's allocator keeps no memory statistics "
                     f"({said}): notebooks 01, 03 and 08 would fail. Unset "
                     "TF_CPU_ALLOCATOR_USE_BFC (setup() sets it to true) or set it to true.")
    return Check(OK, name, "trained on 2 devices; the allocator's memory statistics work")


def run_checks(quick: bool = False) -> list[Check]:
    checks = [check_python()]
    tf_checks = check_tensorflow()
    checks += tf_checks
    if all(c.status != FAIL for c in tf_checks):
        checks += check_known_traps()
    checks += check_packages()
    checks.append(check_widgets_extension())
    checks.append(check_memory())
    if not quick and all(c.status != FAIL for c in tf_checks):
        checks.append(check_smoke())
    return checks


def main(argv: list[str] | None = None, checks: Callable[[bool], list[Check]] = run_checks) -> int:
    parser = argparse.ArgumentParser(prog="python -m gputrain_kit doctor",
                                     description="Check whether the gputrain-kit notebooks can run here.")
    parser.add_argument("--quick", action="store_true",
                        help="skip the smoke test (a child process that trains one epoch of 2 steps on 2 devices "
                        "and reads the allocator's memory statistics)")
    args = parser.parse_args(argv)
    results = checks(args.quick)
    for check in results:
        print(check.line())
    failed = [c for c in results if c.status == FAIL]
    if failed:
        print(f"\nNOT READY: {len(failed)} problem(s): " + "; ".join(c.name for c in failed) +
              ". Fix the FAIL lines above, then run the doctor again.")
        return 1
    print("\nReady: the notebooks can run here.")
    return 0
