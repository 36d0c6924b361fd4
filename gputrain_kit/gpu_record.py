"""What the course's GPU-only claims printed on a real GPU, recorded by ``make gpu-check`` (docs/gpu.md).

A laptop cannot show GPU memory, NCCL or CUDA's device numbering; the notebooks show these recorded
outputs beside their own, labelled with the machine and the date, so nobody mistakes them for this
machine's. ``show("first_op_default", ...)`` prints them; ``RECORD`` holds the raw values.

Besides that TensorFlow run (on an H100), ``RUNS`` holds runs made another way, each with its own machine and
backend: ``"h200-keras-jax-nb08"``, notebook 08's full model per memory lever on an H200 with Keras on JAX
(``run_label`` names it; ``configurations`` gives each configuration's levers and peaks).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .errors import error_summary

RECORD: dict[str, Any] = json.loads((Path(__file__).with_name("gpu_record.json")).read_text())


#: Runs recorded apart from ``make gpu-check``'s, by name: each with its own ``machine`` (and backend).
RUNS: dict[str, dict[str, Any]] = RECORD.get("runs", {})


def label() -> str:
    """Which machine, software and date the record comes from."""
    m = RECORD["machine"]
    return (f"Recorded on {m['gpus']} x {m['gpu']} (driver {m['driver']}), TensorFlow {m['tensorflow']} "
            f"(CUDA {m['cuda_build']} build), {m['date']}: not this machine.")


def _mib(used_total: list) -> str:
    used, total = used_total[0]
    return f"{used:,} of {total:,} MiB"


def _peaks(values: dict) -> str:
    names = [d.rsplit("/", 1)[-1].replace("device:", "") for d in values.get("devices", [])] or \
        [f"GPU:{i}" for i in range(len(values["peaks"]))]
    return ", ".join(f"{n} {p / 2**10:,.0f} KiB" for n, p in zip(names, values["peaks"]))


def _error(values: dict) -> str:
    text = values.get("error")
    if not text:
        return "no error"
    explained = values.get("explained")
    return error_summary(text, limit=220) + (f"  [kit.explain: {explained['key']}]" if explained else "")


_LINES = {
    "first_op_default": lambda v: f"first op, default settings:       GPU 0 holds {_mib(v['after'])}",
    "device_lib_listing": lambda v: f"device_lib.list_local_devices(): GPU 0 holds {_mib(v['after'])}",
    "first_op_growth": lambda v: f"first op, memory growth on:       GPU 0 holds {_mib(v['after'])}",
    "kit_setup_memory": lambda v: f"kit.setup(devices=4), first op:   GPU 0 holds {_mib(v['after'])} "
                                  f"({v['mode']}, {v['limit']} MiB per logical GPU)",
    "kit_setup_one_gpu": lambda v: f"kit.setup(devices=1), first op:   GPU 0 holds {_mib(v['after'])} "
                                   f"({v['mode']}, memory growth {v['growth']})",
    "plain_fit_peaks_split": lambda v: f"plain fit, peaks: {_peaks(v)}",
    "mirrored_fit_peaks_split": lambda v: f"MirroredStrategy fit, peaks: {_peaks(v)}",
    "late_cuda_visible_devices": lambda v: f"GPUs before the change: {len(v['first'])}; after "
                                           f"CUDA_VISIBLE_DEVICES='': {len(v['later'])}; an op then runs on "
                                           f"{v['op_device'].rsplit('/', 1)[-1].replace('device:', '')}",
    "early_cuda_visible_devices": lambda v: f"CUDA_VISIBLE_DEVICES='' before importing TensorFlow: "
                                            f"{len(v['gpus'])} GPU(s)",
    "growth_after_split": lambda v: f"growth after the split: {_error(v)}",
    "growth_before_split": lambda v: f"growth before the split: accepted, get_memory_growth says {v['says_growth']}, "
                                     f"and a first op holds {_mib(v['after'])} (two 1024 MiB logical GPUs: "
                                     "the growth was dropped)",
    "growth_after_init": lambda v: f"growth after the first op: {_error(v)}",
    "nccl_on_logical_gpus": lambda v: f"NcclAllReduce on 2 logical GPUs of 1 GPU: {_error(v)}",
    "hierarchical_copy_on_logical_gpus": lambda v: f"HierarchicalCopyAllReduce on 4 logical GPUs: "
                                                   f"{'trains, loss ' + format(v['loss'], '.3f') if v.get('loss') else _error(v)}",
    "oom_tensor": lambda v: f"2 GiB tensor on a 1024 MiB logical GPU: {_error(v)}",
    "oom_fit": lambda v: f"4 x Dense(4096) with Adam on a 1024 MiB logical GPU: {_error(v)}",
    "determinism_same": lambda v: f"two fresh processes, MirroredStrategy on 4 logical GPUs, weights bit for bit "
                                  f"the same: {v}",
    "activity_split": lambda v: f"device_activity, 4 logical GPUs: computed on "
                                f"{', '.join(d.rsplit('/', 1)[-1].replace('device:', '') for d in v['computed'])} "
                                f"({v['source']})",
    "activity_whole_gpu": lambda v: f"device_activity, 1 whole GPU: computed on "
                                    f"{', '.join(d.rsplit('/', 1)[-1].replace('device:', '') for d in v['computed'])} "
                                    f"({v['source']})",
    "bn_matrix": lambda v: _bn_matrix(v["rows"]),
    "mixed_precision_peaks": lambda v: "notebook 08's twin on " + v["device"] + ", measured peak: " + ", ".join(
        f"{name} {peak / 1e6:.1f} MB" for name, peak in v["peaks"].items()),
    "pipeline_idle": lambda v: "notebook 03's two stages on 2 logical GPUs:\n    " + "\n    ".join(v["lines"]),
}

def _bn_matrix(rows: list[str]) -> str:
    """The recorded matrix as batchnorm.Matrix prints it: a case per line, what you see on wrapped lines under it."""
    import textwrap

    from .batchnorm import DEFAULT_CASES

    cases = [(row[0:6].strip(), row[7:20].strip(), row[21:37].strip()) for row in rows[2:]]
    extra = [case for case in cases if case not in DEFAULT_CASES]
    out = [f"notebook 05's BatchNorm matrix on 4 logical GPUs: {len(cases)} cases, the "
           f"{len(cases) - len(extra)} of DEFAULT_CASES and {len(extra)} of OTHER_CASES:",
           "    " + rows[0][:49].rstrip() + " (and under it: what you see)", "    " + rows[1][:49]]
    for row in rows[2:]:
        out.append("    " + row[:49].rstrip())
        out.extend(textwrap.wrap(row[49:].strip(), 96, initial_indent="        ", subsequent_indent="        "))
    return "\n".join(out)


def bn_outcomes() -> dict[tuple[str, str, str], str]:
    """The recorded BatchNorm matrix as {(model, bn, batching): outcome}, for ``Matrix.side_by_side``."""
    outcomes = {}
    for row in RECORD["facts"]["bn_matrix"]["rows"][2:]:    # after the header and its rule
        # the columns of batchnorm.Matrix's table: model 6, BatchNorm 13, batches 16, outcome 11
        case = (row[0:6].strip(), row[7:20].strip(), row[21:37].strip())
        outcomes[case] = row[38:49].strip()
    return outcomes


#: The facts ``show`` knows.
KEYS = tuple(_LINES)


def lines(*keys: str) -> list[str]:
    """The recorded facts ``keys`` (all when none), one plain line each."""
    unknown = [k for k in keys if k not in _LINES]
    if unknown:
        raise ValueError(f"gpu_record.lines: unknown fact {unknown[0]!r}; choose from {', '.join(KEYS)}.")
    return [_LINES[k](RECORD["facts"][k]) if k in RECORD["facts"] else
            f"{k}: not in this record, which predates it (`make gpu-check` on a GPU machine records it)"
            for k in (keys or KEYS)]


def show(*keys: str) -> None:
    """Print the label (wrapped: a notebook never breaks it mid-word), then the recorded facts ``keys``."""
    import textwrap

    print(textwrap.fill(label(), 100, break_long_words=False, break_on_hyphens=False))
    for line in lines(*keys):
        print("  " + line)


def _run(func: str, run: str) -> dict[str, Any]:
    if run not in RUNS:
        raise ValueError(f"gpu_record.{func}: unknown run {run!r}; choose from {', '.join(RUNS) or 'none'} "
                         "(kit.gpu_record.RUNS).")
    return RUNS[run]


def run_label(run: str) -> str:
    """Which GPU, driver, backend and date the recorded run ``run`` (a key of ``RUNS``) comes from."""
    m = _run("run_label", run)["machine"]
    if m.get("backend") == "jax":
        software = f"Keras {m['keras']} on JAX {m['jax']}, not TensorFlow"
    else:
        software = f"TensorFlow {m['tensorflow']}, Keras {m['keras']}"
    return f"Recorded on {m['gpus']} x {m['gpu']} (driver {m['driver']}), {software}, {m['date']}: not this machine."


def configurations(run: str) -> dict[str, dict[str, Any]]:
    """The recorded run's configurations, by name: each with its ``levers`` (``estimate_memory``'s keyword
    arguments), its ``peak`` and ``held_after`` in bytes, and where recorded the twin's peak (``twin_peak``)."""
    return {name: dict(values) for name, values in _run("configurations", run)["configurations"].items()}
