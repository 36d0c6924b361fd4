"""Claims of notebooks 00 and 01 made true after a review: what kit.inventory() does to a process, that a CPU kernel
family is labelled by what ran (not by what was asked), the shared-GPU guard of notebook 01's 6.2, the probes'
announcement, and the GPU facts make gpu-check records for the claims no CPU can measure."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT, last_json, nvidia_smi_gpus, run_python


def _cuda_build() -> bool:
    import tensorflow as tf

    return bool(tf.sysconfig.get_build_info().get("is_cuda_build"))


def test_inventory_creates_no_device_but_starts_cuda_on_a_cuda_build():
    """Notebook 00, "Your machine, without creating devices": setup() still works after inventory(); on a CUDA build
    the listing calls the driver's cuInit (here, without a driver, TensorFlow logs that call failing right then)."""
    proc = run_python("""
        import json, sys, gputrain_kit as kit
        import tensorflow as tf
        print("<<before>>", file=sys.stderr, flush=True)
        inv = kit.inventory()
        print("<<after>>", file=sys.stderr, flush=True)
        rep = kit.setup(devices=2)
        print(json.dumps({"initialised": inv.devices_initialised, "devices": list(rep.devices)}))
    """, env={"TF_CPP_MIN_LOG_LEVEL": "0"}, fresh=True)
    out = last_json(proc)
    assert out == {"initialised": False, "devices": ["/device:CPU:0", "/device:CPU:1"]}
    if not _cuda_build() or nvidia_smi_gpus():
        pytest.skip("the cuInit log shows only on a CUDA build of TensorFlow without a GPU driver")
    before, _, rest = proc.stderr.partition("<<before>>")
    during, _, _ = rest.partition("<<after>>")
    assert "cuInit" not in before and "cuInit" in during, proc.stderr[-2000:]


def test_run_cases_labels_a_case_with_the_family_that_ran_or_refuses(monkeypatch):
    """TF_ENABLE_ONEDNN_OPTS=1 gives oneDNN only in a build that includes it: a case whose process ran Eigen while
    oneDNN was asked for is refused, never labelled oneDNN. Simulated here by a process told to run Eigen."""
    from gputrain_kit import batchnorm, cpu_kernels

    case = [("dense", "no BN", "drop_remainder")]
    both = batchnorm.run_cases(case, epochs=1, processes=2, kernels=("onednn", "eigen"))
    assert [r.kernels for r in both.results] == ["onednn", "eigen"]      # each child said what it ran
    monkeypatch.setattr(batchnorm, "family_env", lambda family, func="": cpu_kernels.family_env("eigen", func))
    with pytest.raises(ValueError, match=r"run_cases: kernels asked for oneDNN \('onednn'\), but the case's process "
                                         r"ran Eigen \(portable\) kernels") as err:
        batchnorm.run_cases(case, epochs=1, processes=1, kernels="onednn")
    assert "Fix: kernels=None (this process's family) or kernels='eigen'" in str(err.value)


def test_shared_gpu_reads_the_workshop_seat_and_forced_growth():
    from gputrain_kit.counting import shared_gpu

    assert shared_gpu({}) is None
    assert "GPUTRAIN_WORKSHOP_SEAT='3'" in shared_gpu({"GPUTRAIN_WORKSHOP_SEAT": "3"})
    assert "TF_FORCE_GPU_ALLOW_GROWTH=true" in shared_gpu({"TF_FORCE_GPU_ALLOW_GROWTH": " True "})
    assert shared_gpu({"TF_FORCE_GPU_ALLOW_GROWTH": "false"}) is None
    with pytest.raises(ValueError, match="shared_gpu: environ must be a mapping .* got 'x'"):
        shared_gpu("x")


def test_probe_locks_says_so_before_it_waits(capsys):
    from gputrain_kit import counting

    probes = counting.probe_locks(["tf.config.list_physical_devices()"])
    assert not probes[0].locked
    assert capsys.readouterr().out.splitlines() == [
        "probing 1 call, each first thing in a process of its own (5 to 10 seconds)..."]


def test_gpu_check_measures_what_notebook_01_does_not_claim():
    """6.5: TF_FORCE_GPU_ALLOW_GROWTH with a split; 6.3: the CUDA driver's own count after a late change; section 4:
    a split after device_lib on a GPU. Each a fact of its own, run alone (it reads the GPU's memory)."""
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check

    assert gpu_check.FACTS["growth_variable_split"][1] == {"TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert "set_memory_growth" not in gpu_check.FACTS["growth_variable_split"][0]
    assert "memory_limit=1024" in gpu_check.FACTS["growth_variable_split"][0]
    assert "cuDeviceGetCount" in gpu_check.FACTS["late_cuda_visible_devices_driver"][0]
    assert "device_lib.list_local_devices()" in gpu_check.FACTS["device_lib_then_split"][0]
    assert {"growth_variable_split", "late_cuda_visible_devices_driver", "device_lib_then_split"} <= set(gpu_check.ALONE)
