"""The widget half of the performance budget (the notebooks' half is checked during `make nbval`
by tests/nbval_budget.py): in a real kernel, every explorer's median update over 20 control
changes is under 0.5 s, and a run that trains shows progress while it runs."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import perf  # noqa: E402


@pytest.fixture(scope="module")
def timings():
    return perf.measure_widgets(changes=20)


@pytest.fixture(scope="module")
def widget_budget():
    """0.5 s, scaled with this machine's floor where it is slower than the budgets' (at most 1 s)."""
    return perf.widget_budget_s(perf.measure_floor(runs=1))


@pytest.mark.timing      # widget timings: run alone, after the parallel tests (`make unit`)
def test_every_explorer_is_measured(timings):
    names = " ".join(timings["widgets"])
    for widget in ("visibility explorer", "ScalingExplorer", "MemoryExplorer", "SplitExplorer",
                   "ScalingModelExplorer", "MeshExplorer"):
        assert widget in names
    assert all(t["changes"] == 20 for t in timings["widgets"].values())


@pytest.mark.timing      # widget timings: run alone, after the parallel tests (`make unit`)
def test_widget_updates_are_under_half_a_second(timings, widget_budget):
    assert perf.widget_budget_s(3.0) == 0.5 and perf.widget_budget_s(30.0) == 1.0
    slow = {name: round(t["median_s"], 3) for name, t in timings["widgets"].items()
            if t["median_s"] >= widget_budget}
    assert not slow, f"median update over {widget_budget:.2f} s on this machine: {slow}"


@pytest.mark.timing      # widget timings: run alone, after the parallel tests (`make unit`)
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


def test_nbval_budget_plugin_fails_a_notebook_over_its_time(tmp_path):
    """The notebook half of the budget: the plugin `make nbval` loads fails the last cell of a slow notebook."""
    import os
    import subprocess

    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import time\ntime.sleep(2)"),
                                         nbformat.v4.new_code_cell("print('done')")])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "slow.ipynb"
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="done\n")]
    nb.cells[0].execution_count, nb.cells[1].execution_count = 1, 2
    nbformat.write(nb, path)
    tests = Path(__file__).resolve().parents[1]        # tests/: nbval_budget.py

    def nbval(budget_s: str, ratio: str = "1000", time: str = "on") -> subprocess.CompletedProcess:
        env = dict(os.environ, PYTHONPATH=str(tests), GPUTRAIN_NOTEBOOK_BUDGET_S=budget_s,
                   GPUTRAIN_FLOOR_RATIO_LIMIT=ratio, GPUTRAIN_FLOOR_RUNS="1", GPUTRAIN_BUDGET_TIME=time)
        return subprocess.run([sys.executable, "-m", "pytest", "--nbval", "--nbval-current-env", "-p", "nbval_budget",
                               "-p", "no:cacheprovider", "-q", str(path)], capture_output=True, text=True,
                               env=env, cwd=tmp_path, timeout=180)

    # Over both limits at once (two runs, not three: each starts a kernel and measures a floor): 2 s of sleep is
    # over a 1-second budget and over 0.01 times a kernel start with TensorFlow; the last cell fails with both.
    slow = nbval("1", ratio="0.01")
    assert slow.returncode == 1, slow.stdout[-2000:]
    assert "performance budget: slow.ipynb took" in slow.stdout and "(budget 1 s)" in slow.stdout
    assert "times the floor" in slow.stdout, slow.stdout[-2000:]
    assert "1 failed, 1 passed" in slow.stdout
    assert "x floor" in slow.stdout and "floor (fresh kernel" in slow.stdout    # the table of every notebook
    # The same limits with GPUTRAIN_BUDGET_TIME=off (`make test`'s run beside the unit tests): no floor measured,
    # no time limit, the memory limits and their table kept.
    shared = nbval("1", ratio="0.01", time="off")
    assert shared.returncode == 0, shared.stdout[-2000:]
    assert "memory only (GPUTRAIN_BUDGET_TIME=off" in shared.stdout and "floor (fresh kernel" not in shared.stdout
    assert "slow.ipynb" in shared.stdout.split("memory only")[1]


def test_floor_ratio_fails_a_notebook_over_12x_plus_the_noise_and_the_course_over_70x(monkeypatch):
    """Issue 33: a notebook over 12 times the floor fails (plus the measured noise margin), and a whole course
    over 70 times; the goal (5x) stays reported, not enforced."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    import nbval_budget

    assert (perf.FLOOR_RATIO_LIMIT, perf.COURSE_RATIO_LIMIT, perf.FLOOR_RATIO_ENFORCED) == (12.0, 70.0, True)
    check, noise = nbval_budget.floor_ratio_problem, nbval_budget.RATIO_NOISE
    assert 0 < noise < 0.5
    edge = 12 * (1 + noise) * 3.0                      # floor 3 s
    assert "times the floor" in check(edge + 0.5, 3.0) and "limit 12x plus" in check(edge + 0.5, 3.0)
    assert check(edge - 0.5, 3.0) is None
    assert check(40.0, 3.0, enforced=True, limit=8) is not None and check(40.0, 3.0, enforced=False, limit=8) is None
    assert check(1000.0, None) is None
    # The wall budget: 60 s where the machine allows it; on a slow machine (Zen 3: floor 7 s) 12 floors plus noise.
    assert perf.wall_limit_s(3.0) == 60.0 and perf.wall_limit_s(None) == 60.0
    assert perf.wall_limit_s(7.0) == pytest.approx(12 * (1 + perf.RATIO_NOISE) * 7.0) and perf.wall_limit_s(7.0) > 60
    course = nbval_budget.course_ratio_problem
    assert course(70 * (1 + noise) * 3.0 + 1, 3.0).startswith("the whole course took")
    assert course(70 * (1 + noise) * 3.0 - 1, 3.0) is None


def test_a_tensorflow_import_in_a_child_counts_one_floor_and_a_forked_grandchild_none():
    """The floor is one TensorFlow import; each direct child of the notebook's kernel that imports TensorFlow
    (a CPU kernel family's server, a crash kept apart) adds one floor to that notebook's limit. A plain child adds
    nothing, and neither do the children a TensorFlow child forks (they share its import) nor the children the
    kernel had before the run."""
    import os
    import subprocess
    import time

    forking = ("import os, time, tensorflow\n"
               "pid = os.fork()\n"
               "if pid == 0:\n    time.sleep(1.0); os._exit(0)\n"
               "os.waitpid(pid, 0)\n")
    # A TensorFlow child the process had before sampling began (a test worker's fork server) is not the notebook's.
    earlier = subprocess.Popen([sys.executable, "-c", "import time, tensorflow; time.sleep(1.0)"])
    with perf.TreeSampler(os.getpid(), interval=0.05) as sampler:
        children = [subprocess.Popen([sys.executable, "-c", forking]),
                    subprocess.Popen([sys.executable, "-c", "import json, time; time.sleep(1.5)"])]
        for child in [earlier, *children]:
            child.wait(timeout=120)
        time.sleep(0.2)
    assert sampler.tf_children == 1
    assert perf.notebook_ratio_limit(2) == perf.FLOOR_RATIO_LIMIT + 2


def test_the_course_limit_counts_the_notebooks_imports(monkeypatch):
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1]))
    import nbval_budget

    noise = nbval_budget.RATIO_NOISE
    total = 75 * (1 + noise) * 3.0                     # 75 floors: over 70, within 70 + 6 imports
    assert nbval_budget.course_ratio_problem(total, 3.0, 0) is not None
    assert nbval_budget.course_ratio_problem(total, 3.0, 6) is None
    message = nbval_budget.floor_ratio_problem(16 * (1 + noise) * 3.0, 3.0, limit=14, imports=2)
    assert message and "12 + 2 TensorFlow import(s)" in message

