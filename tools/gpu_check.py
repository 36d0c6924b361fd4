"""``make gpu-check``: run the course on a real GPU machine and record what it shows (docs/gpu.md).

Steps (``--steps``, default all of them, in this order):

- ``machine``: GPU model, count, driver (nvidia-smi); TensorFlow's build (CUDA, cuDNN); versions; date.
- ``doctor``: ``python -m gputrain_kit doctor``.
- ``facts``: the claims only a GPU can show, each in a fresh process: the memory a first op and
  ``device_lib.list_local_devices()`` take, per-GPU peaks after a plain ``fit``, a late
  CUDA_VISIBLE_DEVICES change (TensorFlow's device list and the CUDA driver's count), memory growth on a split
  GPU (the Python call, and TF_FORCE_GPU_ALLOW_GROWTH), NCCL on logical GPUs of one GPU, out of
  memory, op determinism on GPU kernels, ``ReductionToOneDevice`` on GPUs, ``device_activity`` on GPUs;
  with ``kit.explain`` on every error met.
- ``notebooks``: every notebook as written (``setup(devices=4)``: four logical GPUs on one GPU, or one
  per GPU on a 4-GPU server), GPUs visible: whether every cell ran, the time, the GPU memory peak
  (nvidia-smi, sampled), and each compared cell whose output differs from the stored CPU run.
- ``unit``: the unit tests, GPU-only ones included.

Writes ``OUT/report.json`` (``--out``, default artifacts/gpu), ``OUT/notebooks.zip`` (the executed
notebooks) and ``OUT/unit.log``. Nothing in the repository is changed.
"""
from __future__ import annotations

import argparse
import configparser
import datetime
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
STEPS = ("machine", "doctor", "facts", "notebooks", "unit")


def smi(query: str) -> list[list[str]]:
    """Rows of ``nvidia-smi --query-gpu=QUERY`` (an empty list without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [[part.strip() for part in line.split(",")] for line in out.strip().splitlines() if line.strip()]


class GpuMemorySampler:
    """The highest GPU memory (MiB, nvidia-smi) held while the block runs: by the processes ``pids()``
    names (a kernel and its children) where given, else by everything on each GPU."""

    def __init__(self, pids=None, interval: float = 0.25):
        self.pids, self.interval, self.peak_mib, self._stop = pids, interval, [], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> list[int]:
        if self.pids is None:
            return [int(row[0]) for row in smi("memory.used")]
        try:
            out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return []
        mine = self.pids()
        return [sum(int(used) for pid, used in (line.split(",") for line in out.strip().splitlines() if line)
                    if int(pid) in mine)]

    def _run(self) -> None:
        while not self._stop.is_set():
            used = self._sample()
            self.peak_mib = [max(a, b) for a, b in zip(self.peak_mib, used)] if self.peak_mib else used
            self._stop.wait(self.interval)

    def __enter__(self) -> "GpuMemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def _family(pid: int) -> set[int]:
    import psutil
    try:
        proc = psutil.Process(pid)
        return {pid} | {child.pid for child in proc.children(recursive=True)}
    except psutil.Error:
        return {pid}


# --------------------------------------------------------------------------- machine, doctor
MACHINE = """
import platform, tensorflow as tf, keras, numpy
info = tf.sysconfig.get_build_info()
report(tensorflow=tf.__version__, keras=keras.__version__, numpy=numpy.__version__,
       python=platform.python_version(), cuda_build=info.get("cuda_version"), cudnn_build=info.get("cudnn_version"),
       tf_gpus=[d.name for d in tf.config.list_physical_devices("GPU")],
       details=[tf.config.experimental.get_device_details(d) for d in tf.config.list_physical_devices("GPU")])
"""


def machine() -> dict:
    from gputrain_kit import processes
    rows = smi("name,driver_version,memory.total,pci.bus_id")
    smi_version = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout if rows else ""
    cuda_driver = re.search(r"CUDA Version:\s*([\d.]+)", smi_version)
    values = processes.run_child(MACHINE, timeout=300).values
    return {"date": datetime.date.today().isoformat(), "host_cpus": os.cpu_count(),
            "gpus": [{"name": r[0], "driver": r[1], "memory_mib": int(r[2]), "bus_id": r[3]} for r in rows],
            "cuda_driver_api": cuda_driver.group(1) if cuda_driver else None, **values}


def doctor() -> dict:
    proc = subprocess.run([sys.executable, "-m", "gputrain_kit", "doctor"], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)
    return {"exit": proc.returncode, "output": proc.stdout + proc.stderr}


# --------------------------------------------------------------------------- facts
USED = """
import subprocess
def used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return [[int(x) for x in line.split(",")] for line in out.strip().splitlines()]
def error_text(err):
    return f"{type(err).__name__}: {err}"
def explained(text):
    import gputrain_kit as kit
    e = kit.explain(text)
    return {"key": e.key, "text": str(e)} if e else None
"""

DETERMINISM = """
    import hashlib, gputrain_kit as kit
    kit.setup(devices=4)
    import numpy as np
    (x, y), _ = kit.data.digits()
    with kit.training.strategy_for(4).scope():
        model = kit.training.build_digits_model()
    history = model.fit(x, y, batch_size=256, epochs=2, verbose=0)
    weights = b"".join(np.asarray(w).tobytes() for w in model.get_weights())
    report(hash=hashlib.sha256(weights).hexdigest(), loss=history.history["loss"][-1])
"""

FACTS: dict[str, tuple[str, dict]] = {
    # Section 6.2 of notebook 01: what the first use of a GPU holds.
    "first_op_default": ("""
        before = used_mib()
        import tensorflow as tf
        float(tf.constant(1.0) + 1)
        report(before=before, after=used_mib())
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": None}),
    "device_lib_listing": ("""
        before = used_mib()
        from tensorflow.python.client import device_lib
        names = [d.name for d in device_lib.list_local_devices()]
        report(before=before, after=used_mib(), names=names)
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": None}),
    "first_op_growth": ("""
        before = used_mib()
        import tensorflow as tf
        float(tf.constant(1.0) + 1)
        report(before=before, after=used_mib())
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
    "kit_setup_memory": ("""
        import gputrain_kit as kit
        rep = kit.setup(devices=4)
        import tensorflow as tf
        float(tf.constant(1.0) + 1)
        report(mode=rep.mode, devices=list(rep.devices), limit=rep.memory_limit_mb, after=used_mib(),
               notes=list(rep.notes))
    """, {}),
    "kit_setup_one_gpu": ("""
        import gputrain_kit as kit
        rep = kit.setup(devices=1)
        import tensorflow as tf
        float(tf.constant(1.0) + 1)
        gpu = tf.config.list_physical_devices("GPU")[0]
        report(mode=rep.mode, devices=list(rep.devices), growth=tf.config.experimental.get_memory_growth(gpu),
               after=used_mib())
    """, {}),
    # Section 4 probes device_lib on the CPU only: on a GPU it builds the GPU devices (and their allocators) with
    # default options (tensorflow#16753). Is a split asked for afterwards accepted, and does it hold?
    "device_lib_then_split": ("""
        before = used_mib()
        import tensorflow as tf
        from tensorflow.python.client import device_lib
        device_lib.list_local_devices()
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.set_visible_devices(gpu, "GPU")
        try:
            tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
            error = None
        except Exception as err:
            error = error_text(err)
        float(tf.constant(1.0) + 1)
        report(error=error, logical=[d.name for d in tf.config.list_logical_devices("GPU")], before=before,
               after=used_mib())
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": None}),
    # Section 6.1: a plain fit uses the first GPU only.
    "plain_fit_peaks_split": ("""
        import gputrain_kit as kit
        rep = kit.setup(devices=4)
        import tensorflow as tf
        (x, y), _ = kit.data.digits()
        kit.training.build_digits_model().fit(x, y, batch_size=64, epochs=1, verbose=0)
        report(mode=rep.mode, devices=list(rep.devices),
               peaks=[tf.config.experimental.get_memory_info(d)["peak"] for d in kit.device_names()])
    """, {}),
    "mirrored_fit_peaks_split": ("""
        import gputrain_kit as kit
        rep = kit.setup(devices=4)
        import tensorflow as tf, keras
        (x, y), _ = kit.data.digits()
        strategy = tf.distribute.MirroredStrategy(kit.device_names())
        with strategy.scope():
            model = kit.training.build_digits_model()
        model.fit(x[:1024], y[:1024], batch_size=64, epochs=1, verbose=0)
        report(reduction=type(strategy.extended._cross_device_ops).__name__,
               peaks=[tf.config.experimental.get_memory_info(d)["peak"] for d in kit.device_names()])
    """, {}),
    # Section 6.3: CUDA_VISIBLE_DEVICES is read once, when TensorFlow first looks for GPUs.
    "late_cuda_visible_devices": ("""
        import os, tensorflow as tf
        first = [d.name for d in tf.config.list_logical_devices("GPU")]
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        later = [d.name for d in tf.config.list_logical_devices("GPU")]
        x = tf.constant(1.0) + 1
        report(first=first, later=later, op_device=x.device)
    """, {}),
    # The same late change, asked of the CUDA driver itself (not TensorFlow's device list, built once per process).
    "late_cuda_visible_devices_driver": ("""
        import ctypes, os, tensorflow as tf
        first = len(tf.config.list_physical_devices("GPU"))
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        cuda = ctypes.CDLL("libcuda.so.1")
        count = ctypes.c_int(-1)
        status = [cuda.cuInit(0), cuda.cuDeviceGetCount(ctypes.byref(count))]
        report(tensorflow_before=first, driver_after=count.value, status=status)
    """, {}),
    "early_cuda_visible_devices": ("""
        import os
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        import tensorflow as tf
        x = tf.constant(1.0) + 1
        report(gpus=[d.name for d in tf.config.list_logical_devices("GPU")], op_device=x.device)
    """, {}),
    # Section 6.5: memory growth and logical GPUs.
    "growth_after_split": ("""
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
            error = None
        except Exception as err:
            error = error_text(err)
        report(error=error)
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": None}),
    "growth_before_split": ("""
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.experimental.set_memory_growth(gpu, True)
        tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
        float(tf.constant(1.0) + 1)
        report(says_growth=tf.config.experimental.get_memory_growth(gpu),
               logical=[d.name for d in tf.config.list_logical_devices("GPU")], after=used_mib())
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": None}),
    # The environment variable is read by TensorFlow's GPU allocator in C++ (GetAllowGrowthValue, one allocator per
    # logical GPU), not by the Python API that refuses growth with logical devices: does it grow a split GPU?
    # Compare "after" with growth_before_split (a logical GPU's whole 1024 MiB reserved) and first_op_growth.
    "growth_variable_split": ("""
        before = used_mib()
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.set_logical_device_configuration(gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=1024)] * 2)
        float(tf.constant(1.0) + 1)
        report(says_growth=tf.config.experimental.get_memory_growth(gpu),
               logical=[d.name for d in tf.config.list_logical_devices("GPU")], before=before, after=used_mib())
    """, {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}),
    "growth_after_init": ("""
        import tensorflow as tf
        float(tf.constant(1.0) + 1)
        gpu = tf.config.list_physical_devices("GPU")[0]
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
            error = None
        except Exception as err:
            error = error_text(err)
        report(error=error, explained=explained(error) if error else None)
    """, {}),
    # NCCL on two logical GPUs of one physical GPU, asked for explicitly.
    "nccl_on_logical_gpus": ("""
        import gputrain_kit as kit
        kit.setup(devices=2)
        import numpy as np, tensorflow as tf, keras
        strategy = tf.distribute.MirroredStrategy(kit.device_names(2), cross_device_ops=tf.distribute.NcclAllReduce())
        try:
            with strategy.scope():
                model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
                model.compile(optimizer="sgd", loss="mse")
            model.fit(np.ones((8, 4), "float32"), np.zeros((8, 2), "float32"), batch_size=4, epochs=1, verbose=0)
            error = None
        except Exception as err:
            error = error_text(err)
        report(error=error and error[-4000:], explained=explained(error) if error else None)
    """, {"NCCL_DEBUG": "WARN"}),
    "hierarchical_copy_on_logical_gpus": ("""
        import gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, tensorflow as tf
        strategy = tf.distribute.MirroredStrategy(kit.device_names(), cross_device_ops=tf.distribute.HierarchicalCopyAllReduce())
        try:
            with strategy.scope():
                model = kit.training.build_digits_model()
            (x, y), _ = kit.data.digits()
            history = model.fit(x[:1024], y[:1024], batch_size=64, epochs=1, verbose=0)
            error, loss = None, history.history["loss"][-1]
        except Exception as err:
            error, loss = error_text(err), None
        report(error=error and error[-3000:], loss=loss, explained=explained(error) if error else None)
    """, {}),
    # Out of memory on one (logical) GPU: a tensor, then a fit.
    "oom_tensor": ("""
        import gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        try:
            with tf.device(kit.device_names(1)[0]):
                x = tf.random.uniform([512, 1024, 1024])      # 2 GiB on a 1 GiB logical GPU
            float(tf.reduce_sum(x))
            error = None
        except Exception as err:
            error = error_text(err)
        report(error=error and error[-3000:], explained=explained(error) if error else None)
    """, {}),
    "oom_fit": ("""
        import gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, tensorflow as tf, keras
        strategy = kit.training.strategy_for(4)
        try:
            with strategy.scope():
                model = keras.Sequential([keras.Input((4096,))] + [keras.layers.Dense(4096) for _ in range(4)])
                model.compile(optimizer="adam", loss="mse")
            x = np.zeros((8192, 4096), "float32")
            model.fit(x, x, batch_size=8192, epochs=1, verbose=0)
            error = None
        except Exception as err:
            error = error_text(err)
        report(error=error and error[-3000:], explained=explained(error) if error else None)
    """, {}),
    # Op determinism on GPU kernels: two fresh processes, bit for bit.
    "determinism_a": (DETERMINISM, {}),
    "determinism_b": (DETERMINISM, {}),
    # Notebook 08, section 7: float32 against the 16-bit policies on a GPU, the notebook's twin model (its build
    # function written to a file: measure_memory sends the child build's source).
    "mixed_precision_peaks": ("""
        import pathlib, sys, tempfile
        import gputrain_kit as kit
        folder = tempfile.mkdtemp()
        pathlib.Path(folder, "twin.py").write_text(
            "def build():\\n"
            "    return keras.Sequential([keras.Input((512,))] + [keras.layers.Dense(512, activation='relu')\\n"
            "                            for _ in range(8)] + [keras.layers.Dense(16)])\\n")
        sys.path.insert(0, folder)
        from twin import build
        r = kit.measure.measure_levers(build, {"float32": {}, "mixed_bfloat16": {"dtype_policy": "mixed_bfloat16"},
                                              "mixed_float16": {"dtype_policy": "mixed_float16"}}, batch_size=2048,
                                      processes=1)
        report(device=r["float32"].device, peaks={name: m.peak_bytes for name, m in r.items()})
    """, {}),
    # device_activity on GPUs: four logical GPUs, then one whole GPU.
    "activity_split": ("""
        import gputrain_kit as kit
        kit.setup(devices=4)
        run = kit.training.train_digits(4, 256, epochs=1, activity=True)
        a = run.activity
        report(source=a.source, computed=a.computed(0.05), shares=a.shares())
    """, {}),
    "activity_whole_gpu": ("""
        import gputrain_kit as kit
        kit.setup(devices=1)
        run = kit.training.train_digits(1, 256, epochs=1, activity=True)
        a = run.activity
        report(source=a.source, computed=a.computed(0.05), shares=a.shares())
    """, {}),
}


#: Facts that read the GPU's total memory, or start TensorFlow with its default memory settings (which takes
#: nearly the whole GPU: in the first recorded run a late_cuda_visible_devices beside plain_fit_peaks_split
#: made the latter fail with "cudaSetDevice() on GPU:0 failed. Status: out of memory"), run alone, one after
#: another; the others run side by side.
ALONE = ("first_op_default", "device_lib_listing", "first_op_growth", "kit_setup_memory", "kit_setup_one_gpu",
         "growth_before_split", "growth_variable_split", "device_lib_then_split", "late_cuda_visible_devices",
         "late_cuda_visible_devices_driver", "growth_after_init", "mixed_precision_peaks")


def _fact(name: str) -> dict:
    from gputrain_kit import processes
    code, env = FACTS[name]
    began = time.monotonic()
    try:
        values = processes.run_child(USED + textwrap.dedent(code), env=env, timeout=240).values
    except Exception as err:  # a fact that fails is a finding, not the end of the run
        values = {"failed": f"{type(err).__name__}: {str(err)[-2000:]}"}
    values["seconds"] = round(time.monotonic() - began, 1)
    print(f"fact {name}: {json.dumps(values)[:400]}", flush=True)
    return values


def facts(names: list[str] | None = None, parallel: int = 6) -> dict:
    from concurrent.futures import ThreadPoolExecutor
    chosen = [n for n in FACTS if not names or n in names]
    results = {n: _fact(n) for n in chosen if n in ALONE}
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        rest = [n for n in chosen if n not in ALONE]
        results.update(zip(rest, pool.map(_fact, rest)))
    a, b = results.get("determinism_a", {}), results.get("determinism_b", {})
    if a.get("hash") and b.get("hash"):
        results["determinism_same"] = a["hash"] == b["hash"]
    return results


# --------------------------------------------------------------------------- notebooks
def _sanitizers() -> list[tuple[re.Pattern, str]]:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "tests" / "nbval_sanitize.cfg")
    return [(re.compile(cfg[s]["regex"]), cfg[s]["replace"]) for s in cfg.sections()]


def _outputs_text(cell, sanitizers) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(f"[{out.get('name')}] " + "".join(out.get("text", "")))
        elif out.get("output_type") in ("execute_result", "display_data"):
            data = out.get("data", {})
            if "text/plain" in data and "application/vnd.jupyter.widget-view+json" not in data:
                parts.append("".join(data["text/plain"]))
            elif "image/png" in data:
                parts.append("<image>")
        elif out.get("output_type") == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}")
    text = "\n".join(parts)
    for pattern, replace in sanitizers:
        text = pattern.sub(replace, text)
    return text


def _compared(cell) -> bool:
    tags = set(cell.get("metadata", {}).get("tags", []))
    return cell.get("cell_type") == "code" and not tags & {"nbval-ignore-output", "nbval-skip"}


def run_notebook_on_gpu(path: Path, timeout: float = 600) -> tuple[dict, object]:
    """Execute ``path`` with the GPUs visible (perf.run_notebook, as `make bench` does, sampling the kernel's
    GPU memory); its time, GPU peak, failing cell, and output differences."""
    import nbformat
    from perf import run_notebook

    samplers: list[GpuMemorySampler] = []

    def watch(pid: int | None) -> GpuMemorySampler:
        samplers.append(GpuMemorySampler((lambda: _family(pid)) if pid else None))
        return samplers[-1]

    stored = nbformat.read(path, as_version=4)
    run = run_notebook(path, timeout, gpus_visible=True, watch=watch)
    nb, error = run.notebook, None
    if run.error:                      # the failing cell's own error output says it best
        shown = [o for o in nb.cells[run.failed_cell].get("outputs", []) if o.get("output_type") == "error"]
        error = f"cell {run.failed_cell}: " + (f"{shown[0]['ename']}: {shown[0]['evalue']}" if shown else run.error)
    sanitizers = _sanitizers()
    differences = []
    for index, (old, new) in enumerate(zip(stored.cells, nb.cells)):
        if not _compared(old):
            continue
        a, b = _outputs_text(old, sanitizers), _outputs_text(new, sanitizers)
        if a != b:
            first = next((line for line in old.source.splitlines() if line.strip()), "")
            differences.append({"cell": index, "source": first[:100], "stored": a[-1500:], "gpu": b[-1500:]})
    stderr_cells = [i for i, c in enumerate(nb.cells) if c.cell_type == "code"
                    and any(o.get("name") == "stderr" for o in c.get("outputs", []))]
    return ({"notebook": path.name, "ran": error is None, "error": error, "seconds": round(run.seconds, 1),
             "gpu_peak_mib": samplers[0].peak_mib if samplers else [],
             "compared_cells": sum(_compared(c) for c in stored.cells),
             "differences": differences, "stderr_cells": stderr_cells}, nb)


def notebooks(out: Path, only: list[str] | None = None) -> list[dict]:
    import nbformat
    rows = []
    with zipfile.ZipFile(out / "notebooks.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
            if only and not any(path.name.startswith(o) for o in only):
                continue
            row, nb = run_notebook_on_gpu(path)
            archive.writestr(path.name, nbformat.writes(nb))
            rows.append(row)
            print(f"notebook {path.name}: ran={row['ran']} {row['seconds']} s peak={row['gpu_peak_mib']} MiB "
                  f"differences={len(row['differences'])} {row['error'] or ''}", flush=True)
    return rows


# --------------------------------------------------------------------------- unit tests
def unit(out: Path, args: list[str]) -> dict:
    began = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "tests", "-q", "-rfEs", "-p", "no:cacheprovider", *args],
                          capture_output=True, text=True, cwd=ROOT)
    (out / "unit.log").write_text(proc.stdout + proc.stderr)
    summary = next((line for line in reversed(proc.stdout.splitlines()) if " in " in line and "=" in line), "")
    failed = [line for line in proc.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return {"exit": proc.returncode, "summary": summary.strip("= "), "failed": failed,
            "seconds": round(time.monotonic() - began, 1)}


# --------------------------------------------------------------------------- the record
def _last_line(text: str) -> str:
    """An error's last non-empty line, without terminal colours or table-breaking characters."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", text or "")
    lines = [line.strip() for line in plain.splitlines() if line.strip()]
    cell = re.match(r"cell \d+", plain)
    return ((cell.group(0) + ": ") if cell else "") + (lines[-1] if lines else "").replace("|", "/")


def notebook_table(report: dict) -> str:
    """The notebooks x mode table of docs/gpu.md, from a report."""
    lines = ["| notebook | ran | time | GPU memory peak (nvidia-smi) | compared cells that differ | cells with stderr |",
             "|---|---|---|---|---|---|"]
    for row in report.get("notebooks", []):
        peak = ", ".join(f"{p:,} MiB" for p in row["gpu_peak_mib"]) or "?"
        ran = "yes" if row["ran"] else f"**no**: {_last_line(row['error'])[:120]}"
        lines.append(f"| {row['notebook']} | {ran} | {row['seconds']:.0f} s | {peak} | "
                     f"{len(row['differences'])} of {row['compared_cells']} | {len(row['stderr_cells'])} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "artifacts" / "gpu")
    parser.add_argument("--steps", default=",".join(STEPS), help=f"comma-separated, from {', '.join(STEPS)}")
    parser.add_argument("--facts", default="", help="only these facts (comma-separated names)")
    parser.add_argument("--notebooks", default="", help="only these notebooks (name prefixes, comma-separated)")
    parser.add_argument("--pytest-args", default="", help="extra arguments for the unit step")
    args = parser.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    unknown = [s for s in steps if s not in STEPS]
    if unknown:
        parser.error(f"--steps: unknown {unknown}; choose from {', '.join(STEPS)}")
    if not smi("name"):
        print("gpu-check: nvidia-smi finds no GPU here. This check records the course on a real GPU; "
              "run it on a GPU machine (the CPU course is checked by `make test`).", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    report_path = args.out / "report.json"
    report = json.loads(report_path.read_text()) if report_path.exists() else {}
    for step in steps:
        began = time.monotonic()
        if step == "machine":
            report["machine"] = machine()
        elif step == "doctor":
            report["doctor"] = doctor()
        elif step == "facts":
            report.setdefault("facts", {}).update(facts([f for f in args.facts.split(",") if f]))
        elif step == "notebooks":
            report["notebooks"] = notebooks(args.out, [n for n in args.notebooks.split(",") if n])
        elif step == "unit":
            report["unit"] = unit(args.out, args.pytest_args.split())
        report.setdefault("step_seconds", {})[step] = round(time.monotonic() - began, 1)
        report_path.write_text(json.dumps(report, indent=1, default=str))
        print(f"== {step} done in {report['step_seconds'][step]} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
