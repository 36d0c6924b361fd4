"""Notebook 01 after the tenth expert read (issue 44): the CUDA_VISIBLE_DEVICES model follows a real driver (the range
cut-off before the repeat check, a bare 'GPU-' matches nothing, a repeat makes cuInit fail rather than hide GPUs
silently), the notebook cites that measurement, and /GPU:i counts only the visible GPUs TensorFlow accepts."""
from __future__ import annotations

import importlib.util
import json
import mmap
from pathlib import Path

import pytest

from conftest import ROOT

NOTEBOOK = ROOT / "notebooks" / "01_cuda_visible_devices.ipynb"


def _cells() -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(NOTEBOOK.read_text())["cells"]}


def _text(cell: dict) -> str:
    return " ".join("".join(cell["source"]).split())


def _output(cell: dict) -> str:
    return "".join("".join(o.get("text", "")) for o in cell.get("outputs", []))


def _framework_library() -> Path:
    spec = importlib.util.find_spec("tensorflow")
    assert spec is not None and spec.submodule_search_locations
    found = [Path(d) / "libtensorflow_framework.so.2" for d in spec.submodule_search_locations]
    found = [p for p in found if p.exists()]
    if not found:
        pytest.skip("this TensorFlow has no libtensorflow_framework.so.2 (not a Linux wheel)")
    return found[0]


def test_the_installed_tensorflow_ignores_gpus_it_does_not_accept_and_logs_a_failed_cuinit():
    """The strings behind cell 23's sentence and the repeat's consequence, in the installed library
    (gpu_device.cc: GetDefaultMinGPUMultiprocessorCount, the minimum compute capability; cuInit's failure)."""
    with _framework_library().open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as lib:
        for text in (b"Ignoring visible gpu device", b"The minimum required Cuda capability is",
                     b"TF_MIN_GPU_MULTIPROCESSOR_COUNT", b"core count >= 8", b"failed call to cuInit",
                     b"GetDefaultMinGPUMultiprocessorCount"):
            assert lib.find(text) >= 0, text


def test_cell_23_and_exercise_1_say_gpu_i_counts_the_gpus_tensorflow_accepts():
    cells = _cells()
    renumbering = _text(cells["42463acc"])
    assert "TensorFlow numbers only the visible GPUs it accepts" in renumbering
    assert "`TF_MIN_GPU_MULTIPROCESSOR_COUNT` (8 by default" in renumbering
    assert "\"Ignoring visible gpu device\"" in renumbering and "minimum compute capability" in renumbering
    assert "(one GPU model)" in _text(cells["f6f2d595"])
    assert "a visible GPU that TensorFlow ignores (section 3) gets no `/GPU:i`" in _text(cells["df0becdc"])


def test_the_notebook_says_repeats_make_cuda_fail_and_cites_the_driver():
    cells = _cells()
    rules = _text(cells["7090aa7d"])
    assert "no cell compares it with a real driver" not in rules and "checked against a real driver" in rules
    assert "fails with `CUDA_ERROR_INVALID_DEVICE`" in rules and "\"failed call to cuInit\"" in rules
    assert "A repeat after the stop is never read (`0,9,0`)" in rules
    values = _output(cells["a531bf0a"])
    assert "'0,9,0'      -> 1 visible: [0]\n" in values
    assert "'0,0'        -> 0 visible: []  (cuInit fails: CUDA_ERROR_INVALID_DEVICE)" in values
    cited = _text(cells["drv01md"])
    assert "one NVIDIA H200 (driver 580.159.04, 2026-11-28)" in cited and "one driver and one GPU" in cited
    compared = _output(cells["drv01code"])
    rows = compared.count("'")
    assert "agrees with the driver on 32 of 32 values" in compared and "differs" not in compared and rows > 40
    solution = _text(cells["aa5bf539"])
    assert "without an error" not in solution and "`CUDA_ERROR_INVALID_DEVICE`: CUDA does not start" in solution
    summary = _text(cells["6c45dbba"])
    assert "silently drops" not in summary and "hides all of them" not in summary
    assert "makes CUDA fail to start (`CUDA_ERROR_INVALID_DEVICE`)" in summary
    assert "\"Ignoring visible gpu device\"" in summary
