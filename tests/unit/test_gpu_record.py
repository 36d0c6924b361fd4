"""The GPU record (kit.gpu_record, docs/gpu.md) and the tool that makes it (tools/gpu_check.py), on any machine.

The record is what `make gpu-check` measured on a real GPU; these tests check that it is labelled, that it
says what the notebooks say of it, and that the tool refuses to run without a GPU. The GPU-only claims
themselves are tested live by the @pytest.mark.gpu tests on a GPU machine.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import gputrain_kit as kit
from conftest import ROOT

FACTS = kit.gpu_record.RECORD["facts"]


def test_record_is_labelled_with_machine_and_date():
    label = kit.gpu_record.label()
    assert "H100" in label and "2026-11-22" in label and "not this machine" in label
    assert "580.159.04" in label and "TensorFlow 2.21.0" in label


def test_every_fact_has_a_line_and_unknown_ones_are_refused():
    lines = kit.gpu_record.lines()
    assert len(lines) == len(kit.gpu_record.KEYS) and all(line.strip() for line in lines)
    with pytest.raises(ValueError, match=r"gpu_record.lines: unknown fact 'nope'; choose from first_op_default"):
        kit.gpu_record.lines("nope")


def test_record_says_what_notebook_01_says():
    """6.2: the first op takes most of the card; device_lib and growth only a CUDA context. 6.1: a plain fit
    uses GPU:0 only. 6.3: a late CUDA_VISIBLE_DEVICES change does nothing. 6.5: growth dropped after a split."""
    total = FACTS["first_op_default"]["after"][0][1]
    assert FACTS["first_op_default"]["after"][0][0] > 0.9 * total
    assert FACTS["device_lib_listing"]["after"][0][0] < 0.01 * total
    assert FACTS["first_op_growth"]["after"][0][0] < 0.01 * total
    first, *others = FACTS["plain_fit_peaks_split"]["peaks"]
    assert first > 0 and others == [0, 0, 0]
    assert all(p > 0 for p in FACTS["mirrored_fit_peaks_split"]["peaks"])
    late = FACTS["late_cuda_visible_devices"]
    assert late["first"] == late["later"] == ["/device:GPU:0"] and late["op_device"].endswith("GPU:0")
    assert FACTS["early_cuda_visible_devices"]["gpus"] == []
    assert "virtual devices configured" in FACTS["growth_after_split"]["error"]
    grown = FACTS["growth_before_split"]
    assert grown["says_growth"] is True and grown["after"][0][0] > FACTS["first_op_growth"]["after"][0][0] + 900


def test_record_says_what_notebooks_02_03_05_say():
    assert "NCCL: invalid usage" in FACTS["nccl_on_logical_gpus"]["error"]
    assert FACTS["hierarchical_copy_on_logical_gpus"]["error"] is None
    assert FACTS["determinism_same"] is True
    assert FACTS["activity_split"]["computed"] == [f"/device:GPU:{i}" for i in range(4)]
    rows = {tuple(line.split()[:3]): line for line in FACTS["bn_matrix"]["rows"][2:]}
    assert not any(" crash " in line for line in FACTS["bn_matrix"]["rows"])            # nothing crashed
    assert " loud NaN " in rows[("conv", "scale=True", "last")]
    assert " healthy " in rows[("conv", "no", "BN")] and " healthy " in rows[("conv", "synchronized", "last")]
    idle = [int(line.split("measured idle ")[1].split("%")[0]) for line in FACTS["pipeline_idle"]["lines"]]
    assert min(idle) >= 90


def test_docs_gpu_report_is_the_same_run():
    report = json.loads((ROOT / "docs" / "gpu-report.json").read_text())
    for key in ("first_op_default", "device_lib_listing", "nccl_on_logical_gpus", "oom_tensor"):
        assert report["facts"][key]["after" if "after" in report["facts"][key] else "error"][:1] == \
            FACTS[key]["after" if "after" in FACTS[key] else "error"][:1]
    assert report["machine"]["details"][0]["device_name"] == "NVIDIA H100 80GB HBM3"
    doc = (ROOT / "docs" / "gpu.md").read_text()
    assert "NVIDIA H100 80GB HBM3" in doc and "2026-11-22" in doc and "make gpu-check" in doc
    for row in report["notebooks"]:
        assert row["notebook"] in doc


def test_gpu_check_refuses_without_a_gpu(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 2 and "nvidia-smi finds no GPU here" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_gpu_check_compares_outputs_after_sanitizing():
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check
    sanitizers = gpu_check._sanitizers()
    cell = {"cell_type": "code", "metadata": {}, "outputs": [
        {"output_type": "stream", "name": "stdout", "text": "at 0x7f00deadbeef TensorFlow 2.21.0\n"},
        {"output_type": "error", "ename": "ValueError", "evalue": "boom"}]}
    assert gpu_check._outputs_text(cell, sanitizers) == "[stdout] at 0xADDRESS TensorFlow X.Y.Z\n\nValueError: boom"
    assert not gpu_check._compared({"cell_type": "code", "metadata": {"tags": ["nbval-ignore-output"]}})
    table = gpu_check.notebook_table({"notebooks": [{"notebook": "00_x.ipynb", "ran": True, "seconds": 3.2,
                                                     "gpu_peak_mib": [1550], "compared_cells": 9,
                                                     "differences": [{}], "stderr_cells": []}]})
    assert "| 00_x.ipynb | yes | 3 s | 1,550 MiB | 1 of 9 | 0 |" in table


def test_gpu_check_runs_a_notebook_through_perf_and_names_the_failing_cell(tmp_path, monkeypatch):
    """gpu_check executes notebooks with perf.run_notebook (GPUs visible, its sampler watching the kernel);
    a failing cell is reported by index with its own error, and CUDA_VISIBLE_DEVICES is restored."""
    import nbformat
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print('hi')"),
                                         nbformat.v4.new_code_cell("raise ValueError('boom')")])
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    row, executed = gpu_check.run_notebook_on_gpu(path, timeout=120)
    assert row["ran"] is False and row["error"] == "cell 1: ValueError: boom"
    assert executed.cells[0].outputs[0]["text"] == "hi\n" and row["seconds"] > 0
    assert row["gpu_peak_mib"] == [] and row["compared_cells"] == 2
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""


def test_recorded_matrix_prints_as_the_live_one_does():
    """Notebook 05 prints the H100 record under its own matrix: a case per line, what you see indented under
    it and wrapped (no line over 100 characters), and which of the record's cases are not in DEFAULT_CASES."""
    from gputrain_kit.batchnorm import DEFAULT_CASES

    text = kit.gpu_record.lines("bn_matrix")[0]
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 110 and len(lines) > len(FACTS["bn_matrix"]["rows"])
    recorded = len(FACTS["bn_matrix"]["rows"]) - 2
    extra = recorded - sum(1 for m, bn, b in DEFAULT_CASES if f"    {m:<6} {bn:<13} {b:<16}" in text)
    assert f"{recorded} cases, the {recorded - extra} of DEFAULT_CASES and {extra} of OTHER_CASES" in lines[0]
    assert "    dense  scale=False   last step empty  silent NaN" in lines
    assert any(line.startswith("        loss finite; NaN in moving_mean") for line in lines)


# Notebook 08's full model on an H200 with Keras on JAX: a run of its own in the record (issue 44).
H200 = "h200-keras-jax-nb08"


def test_the_h200_run_is_labelled_with_its_machine_backend_and_date():
    label = kit.gpu_record.run_label(H200)
    assert label == ("Recorded on 1 x NVIDIA H200 (driver 580.159.04), Keras 3.15.1 on JAX 0.11.2, not TensorFlow, "
                     "2026-11-27: not this machine.")
    assert "H100" in kit.gpu_record.label()          # the H100 record notebooks 01-05 show is untouched
    assert kit.gpu_record.RECORD["machine"]["gpu"] == "NVIDIA H100 80GB HBM3" and "runs" not in FACTS


def test_an_unknown_run_is_refused_by_name():
    for func in (kit.gpu_record.run_label, kit.gpu_record.configurations):
        with pytest.raises(ValueError, match=rf"gpu_record.{func.__name__}: unknown run 'h100'; choose from {H200} "
                                             r"\(kit.gpu_record.RUNS\)"):
            func("h100")


def test_the_h200_run_loads_with_estimate_levers_and_copies():
    """configurations() gives each configuration estimate_memory's keyword arguments and its peaks in bytes;
    a learner who edits what it returns does not edit the record."""
    from gputrain_kit.memory import dense_stack_profile, estimate_memory

    configs = kit.gpu_record.configurations(H200)
    assert list(configs)[:6] == ["start: Adam, float32", "SGD", "mixed_bfloat16", "recomputation", "accumulation x4",
                                 "half the batch"]                     # notebook 08's LEVERS, in its order
    model = kit.gpu_record.RUNS[H200]["model"]
    profile = dense_stack_profile(model["layers"], model["width"], head=model["head"])
    for name, values in configs.items():
        assert isinstance(values["peak"], int) and values["peak"] > values["held_after"] > 0, name
        assert 0 < values["twin_peak"] < 0.25e9, name
        estimate_memory(profile, **{"batch_size": model["batch_size"], "optimizer": "adam", **values["levers"]})
    assert [name for name, values in configs.items() if "note" in values] == ["recomputation"]
    configs["SGD"]["peak"] = 0
    assert kit.gpu_record.configurations(H200)["SGD"]["peak"] == 14_266_149_632


def test_the_h200_run_is_the_shared_record():
    """The figures are the raw JSON files beside ../shared/gpu/2026-11-27-h200-keras-jax-nb08.md (where that folder
    is present: the maintainers' checkout)."""
    shared = ROOT.parent / "shared" / "gpu"
    if not (shared / "2026-11-27-h200-keras-jax-nb08-full.json").exists():
        pytest.skip("../shared/gpu is not beside this checkout")
    full = json.loads((shared / "2026-11-27-h200-keras-jax-nb08-full.json").read_text())
    twin = json.loads((shared / "2026-11-27-h200-keras-jax-nb08-twin.json").read_text())
    configs = kit.gpu_record.configurations(H200)
    named = {"recomputation": "recomputation (RematScope full)", "mixed_bfloat16 + SGD": "mixed_bfloat16 + SGD (08's "
             "recipe)", "SGD + mixed_bfloat16 + accumulation x4": "SGD + mixed_bfloat16 + accumulation x4 (08's "
             "exercise 1)"}
    for name, values in configs.items():
        raw = named.get(name, name)
        assert (values["peak"], values["held_after"]) == (full[raw]["peak"], full[raw]["held_after"]), name
        assert values["twin_peak"] == twin[raw]["peak"], name
        assert full[raw]["kind"] == "NVIDIA H200" and full[raw]["keras"] == "3.15.1" and full[raw]["jax"] == "0.11.2"
    assert kit.gpu_record.RUNS[H200]["model"]["params"] == full["SGD"]["params"] == 537_067_536


def test_docs_gpu_reports_the_h200_run():
    doc = (ROOT / "docs" / "gpu.md").read_text()
    assert "NVIDIA H200" in doc and "2026-11-27" in doc and "Keras 3.15.1 on JAX 0.11.2" in doc
    for name, values in kit.gpu_record.configurations(H200).items():
        assert f"| {name} |" in doc and f"{values['peak'] / 1e9:.2f}" in doc, name
