"""The widget half of the performance budget (the notebooks' half is checked during `make nbval`
by tests/nbval_budget.py): in a real kernel, every explorer's median update over 20 control
changes is under 0.5 s, and a run that trains shows progress while it runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import perf  # noqa: E402


@pytest.fixture(scope="module")
def timings():
    return perf.measure_widgets(changes=20)


def test_every_explorer_is_measured(timings):
    names = " ".join(timings["widgets"])
    for widget in ("visibility explorer", "ScalingExplorer", "MemoryExplorer", "SplitExplorer",
                   "ScalingModelExplorer"):
        assert widget in names
    assert all(t["changes"] == 20 for t in timings["widgets"].values())


def test_widget_updates_are_under_half_a_second(timings):
    slow = {name: round(t["median_s"], 3) for name, t in timings["widgets"].items()
            if t["median_s"] >= perf.WIDGET_BUDGET_S}
    assert not slow, f"median update over {perf.WIDGET_BUDGET_S} s: {slow}"


def test_training_run_shows_progress(timings):
    run = timings["runs"]["ScalingExplorer (02): Run trains 3 epochs"]
    assert run["progress_updates"] == [1, 2, 3], "the progress bar must move once per epoch"
    assert run["status_before_training"].startswith("training on 2 replica(s)")


def test_tree_sampler_counts_child_processes():
    import subprocess
    import time

    grandchild = ("import time; x = bytearray(300 * 2**20); x[::4096] = b'1' * len(x[::4096]); time.sleep(4)")
    parent = subprocess.Popen([sys.executable, "-c",
                               f"import subprocess, sys; subprocess.run([sys.executable, '-c', {grandchild!r}])"],
                              start_new_session=True)
    try:
        with perf.TreeSampler(parent.pid, interval=0.1) as sampler:
            time.sleep(3)
        assert sampler.peak > 250 * 2**20, "the child's memory must count"
        assert sampler.kernel_peak < 150 * 2**20, "the parent's own peak stays small"
    finally:
        import os
        import signal
        os.killpg(parent.pid, signal.SIGKILL)      # the grandchild too
        parent.wait()
