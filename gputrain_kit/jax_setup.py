"""``setup(devices=N, backend="jax")``: the same one-call setup for Keras 3 on the JAX backend (notebook 09).

Keras fixes its backend when it is first imported, and JAX fixes its device list when it first initialises:
so the backend (``KERAS_BACKEND=jax``) and the number of simulated CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=N``) are set here, before either is imported. JAX cannot
split one GPU into logical devices: with at least N GPUs visible it uses N of them; otherwise it uses N
simulated CPU devices (slices of the same cores, as on the TensorFlow path) and says so.
"""
from __future__ import annotations

import os
import sys
from typing import Any

_FLAG = "--xla_force_host_platform_device_count"


def _gpus_visible() -> int:
    """NVIDIA GPUs on this machine (nvidia-smi), before JAX initialises: 0 without a driver."""
    import shutil
    import subprocess

    if not shutil.which("nvidia-smi") or os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines()) if out.returncode == 0 else 0


class Refused(RuntimeError):
    """The JAX path cannot run in this process (``devices.setup`` raises it as a SetupError)."""


def _error(text: str) -> Exception:
    return Refused(text)


def setup_jax(devices: int, kind: str, seed: int, call: str) -> dict[str, Any]:
    """The JAX path of ``devices.setup`` (arguments checked there): the fields of its SetupReport."""
    keras_mod = sys.modules.get("keras")
    if keras_mod is not None and os.environ.get("KERAS_BACKEND", "tensorflow") != "jax":
        raise _error(f"{call}: Keras is already imported in this kernel with the "
                     f"{os.environ.get('KERAS_BACKEND', 'tensorflow')} backend, and Keras fixes its backend at "
                     f"import. Restart the kernel and run {call} first, before importing keras.")
    if "jax" in sys.modules:
        import jax

        if jax.device_count() < devices:
            raise _error(f"{call}: JAX is already initialised in this kernel with {jax.device_count()} device(s). "
                         f"Restart the kernel and run {call} first, before anything imports jax.")
    gpus = _gpus_visible() if kind != "cpu" else 0
    if kind == "gpu" and gpus < devices:
        raise _error(f"{call}: JAX sees {gpus} GPU(s) and cannot split one GPU into logical devices; use "
                     f"kind='auto' (simulated CPU devices) or ask for at most {gpus} device(s).")
    notes: list[str] = []
    if gpus >= devices:
        mode = "gpu"
    else:
        mode = "cpu"
        os.environ["JAX_PLATFORMS"] = "cpu"
        flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if not f.startswith(_FLAG)]
        os.environ["XLA_FLAGS"] = " ".join(flags + [f"{_FLAG}={devices}"])
        if gpus:
            notes.append(f"{gpus} GPU(s) visible, fewer than {devices}: JAX cannot split a GPU into logical "
                         "devices, so this runs on simulated CPU devices instead.")
        notes.append("simulated devices share the same CPU cores: they show how arrays are laid out and work is "
                     "distributed, never how much faster GPUs would be.")
    os.environ["KERAS_BACKEND"] = "jax"
    from . import _tf

    with _tf.quiet():
        import jax
        import keras

        if keras.backend.backend() != "jax":      # pragma: no cover - guarded above
            raise _error(f"{call}: Keras runs the {keras.backend.backend()} backend; restart the kernel.")
        platform = "gpu" if mode == "gpu" else "cpu"
        found = jax.devices(platform)
        if len(found) < devices:
            raise _error(f"{call}: JAX made {len(found)} {platform} device(s), not {devices}: something set XLA_FLAGS "
                         "or imported jax before setup(). Restart the kernel and run setup() first.")
        keras.utils.set_random_seed(seed)
        names = tuple(f"{d.platform}:{d.id}" for d in found[:devices])
    return dict(mode=mode, devices=names, physical_gpus=tuple(f"gpu:{i}" for i in range(gpus)), memory_limit_mb=None,
                seed=seed, tensorflow="", keras=keras.__version__, notes=tuple(notes), backend="jax",
                jax=jax.__version__)
