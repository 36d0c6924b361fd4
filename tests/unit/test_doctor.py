"""python -m gputrain_kit doctor: output and exit codes."""
from __future__ import annotations

import subprocess
import sys

from gputrain_kit import doctor
from conftest import ROOT


def _doctor(*args, env=None):
    import os
    full_env = dict(os.environ, **(env or {}))
    return subprocess.run([sys.executable, "-m", "gputrain_kit", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=full_env)


def test_healthy_machine_passes_with_smoke_test():
    proc = _doctor("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for fragment in ("TensorFlow", "Keras", "TensorFlow build", "CUDA_VISIBLE_DEVICES", "GPUs",
                     "JupyterLab widgets extension", "smoke test", "trap jit-compile-under-mirrored", "Ready"):
        assert fragment in proc.stdout


def test_doctor_names_the_cpu_kernels_and_fails_where_memory_statistics_would(tmp_path):
    for family, value in (("oneDNN", "1"), ("Eigen (portable)", "0")):
        proc = _doctor("doctor", "--quick", env={"TF_ENABLE_ONEDNN_OPTS": value})
        assert f"[info] CPU kernels: {family} (TF_ENABLE_ONEDNN_OPTS={value} forces it); bfloat16 " in proc.stdout
    # Eigen kernels with the BFC allocator turned off by hand: notebooks 01, 03 and 08 would fail.
    proc = _doctor("doctor", env={"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPU_ALLOCATOR_USE_BFC": "false"})
    assert proc.returncode == 1, proc.stdout
    assert "keeps no memory statistics" in proc.stdout and "notebooks 01, 03 and 08 would fail" in proc.stdout
    assert "TF_CPU_ALLOCATOR_USE_BFC" in proc.stdout


def test_broken_tensorflow_fails_with_a_reason(tmp_path):
    fake = tmp_path / "tensorflow"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('simulated broken install')\n")
    proc = _doctor("doctor", "--quick", env={"PYTHONPATH": str(tmp_path)})
    assert proc.returncode == 1
    assert "[FAIL] TensorFlow: cannot be imported" in proc.stdout
    assert "simulated broken install" in proc.stdout and "NOT READY" in proc.stdout


def test_any_failed_check_means_exit_1(capsys):
    def checks(quick):
        return [doctor.Check(doctor.OK, "a", "fine"), doctor.Check(doctor.FAIL, "widgets", "missing")]
    assert doctor.main([], checks=checks) == 1
    assert "NOT READY: 1 problem(s): widgets" in capsys.readouterr().out
    assert doctor.main([], checks=lambda quick: [doctor.Check(doctor.WARN, "memory", "low")]) == 0


def test_unknown_command_is_usage_error():
    proc = _doctor("frobnicate")
    assert proc.returncode == 2 and "usage: python -m gputrain_kit doctor" in proc.stderr
    assert _doctor().returncode == 2


def test_doctor_shows_paths_without_the_machines_folders(tmp_path, monkeypatch):
    """Stored outputs and pasted reports show no machine path: the course's venv relative to where it runs."""
    from pathlib import Path

    from conftest import ROOT as root
    from gputrain_kit import doctor

    monkeypatch.chdir(root / "notebooks")
    assert doctor.shown_path(root / ".venv" / "bin" / "python") == "../.venv/bin/python"
    monkeypatch.chdir(root)
    assert doctor.shown_path(root / ".venv" / "bin" / "python") == ".venv/bin/python"
    assert doctor.shown_path(Path.home() / "x" / "y") == "~/x/y" or str(Path.home()) in str(root)
    monkeypatch.chdir(tmp_path)
    assert doctor.shown_path("/opt/elsewhere/python") == "/opt/elsewhere/python"
