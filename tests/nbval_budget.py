"""pytest plugin for `make nbval`: every notebook must stay within its performance budget.

While strict nbval runs a notebook in its fresh kernel, this measures the notebook's wall time
(kernel start to last cell) and the kernel's peak resident memory (VmHWM), and samples the peak
of the kernel *with its child processes* (notebook 07's workers; proportional set size, so shared
libraries count once, as in a container's memory limit). If a notebook takes more than 60 s (on a machine
too slow for that, 12 floors plus the noise: ``perf.wall_limit_s``), its
kernel more than 1.5 GB, or the kernel with its children more than 2 GB (Binder's limit for the
whole container), its last cell fails with the numbers. Before the first notebook it measures the
*floor* (a fresh kernel that imports the kit, runs ``setup(devices=4)`` and one TensorFlow op) and
fails a notebook over 12 times the floor, and the last notebook of a whole-course run when the course
took over 70 times the floor, each limit with the measured run-to-run noise on top (``perf.RATIO_NOISE``;
issue 33: the goal stays 5x a notebook). A table with each notebook's ratio to the floor is printed at the
end of the run. Loaded with ``-p nbval_budget`` (tests/ on PYTHONPATH). ``GPUTRAIN_BUDGET_TIME=off`` keeps the
memory limits only, for a run that shares the cores with other work (``make test`` runs one kernel family beside
the unit tests, the other alone with every limit).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from perf import (COURSE_RATIO_LIMIT, FLOOR_RATIO_ENFORCED, FLOOR_RATIO_GOAL, FLOOR_RATIO_LIMIT,  # noqa: E402
                  FLOOR_RUNS, RATIO_NOISE, ROOT, NOTEBOOK_BUDGET_BYTES, NOTEBOOK_BUDGET_S, TREE_BUDGET_BYTES, TreeSampler,
                  REFERENCE_FLOOR_S, kernel_pid, measure_floor, notebook_ratio_limit, wall_limit_s)

# Tests of this plugin lower the limits; nothing else sets these.
NOTEBOOK_BUDGET_S = float(os.environ.get("GPUTRAIN_NOTEBOOK_BUDGET_S", NOTEBOOK_BUDGET_S))
FLOOR_RATIO_ENFORCED = FLOOR_RATIO_ENFORCED or "GPUTRAIN_FLOOR_RATIO_LIMIT" in os.environ
FLOOR_RATIO_LIMIT = float(os.environ.get("GPUTRAIN_FLOOR_RATIO_LIMIT", FLOOR_RATIO_LIMIT))
COURSE_RATIO_LIMIT = float(os.environ.get("GPUTRAIN_COURSE_RATIO_LIMIT", COURSE_RATIO_LIMIT))
RATIO_NOISE = float(os.environ.get("GPUTRAIN_RATIO_NOISE", RATIO_NOISE))
# GPUTRAIN_BUDGET_TIME=off: memory only, no floor and no time limit, for a run that shares the cores with other
# work (`make test` runs one kernel family beside the unit tests; the other, alone, keeps every time limit).
TIME_MEASURED = os.environ.get("GPUTRAIN_BUDGET_TIME", "on") != "off"
_floor: dict[str, float] = {}

_last_item: dict[str, str] = {}       # notebook path -> nodeid of its last cell
_state: dict[str, dict] = {}          # notebook path -> start, sampler
_results: list[tuple[str, float, int, int, int]] = []   # name, s, kernel, tree, TensorFlow imports


def pytest_collection_modifyitems(items):
    for item in items:
        if item.__class__.__name__ == "IPyNbCell":
            _last_item[str(item.parent.path)] = item.nodeid


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    key = str(getattr(item.parent, "path", ""))
    first = item.__class__.__name__ == "IPyNbCell" and key not in _state
    if first and "seconds" not in _floor and TIME_MEASURED:
        # once per run, before any notebook's clock starts (tests of this plugin ask for 1 kernel)
        _floor["runs"] = int(os.environ.get("GPUTRAIN_FLOOR_RUNS", FLOOR_RUNS))
        _floor["seconds"] = measure_floor(runs=_floor["runs"])
    if first:
        _state[key] = {"start": time.monotonic(), "sampler": None}
    yield
    if first:
        pid = kernel_pid(getattr(item.parent, "kernel", None))
        if pid:
            sampler = TreeSampler(pid)
            sampler.__enter__()
            _state[key]["sampler"] = sampler


def wall_limit(floor: float | None, tf_children: int = 0) -> float:
    """The notebook's wall-time budget on this machine (``perf.wall_limit_s`` with this run's limits)."""
    if "GPUTRAIN_NOTEBOOK_BUDGET_S" in os.environ:      # the plugin's own tests ask for exactly this budget
        return NOTEBOOK_BUDGET_S
    limit = notebook_ratio_limit(tf_children, limit=FLOOR_RATIO_LIMIT) if FLOOR_RATIO_ENFORCED else 0.0
    return wall_limit_s(floor, budget_s=NOTEBOOK_BUDGET_S, limit=limit, noise=RATIO_NOISE)


def floor_ratio_problem(seconds: float, floor: float | None, *, enforced: bool | None = None,
                        limit: float | None = None, imports: int = 0) -> str | None:
    """What is wrong with a notebook that took ``seconds`` against the ``floor``, or None: over the limit,
    when the limit is enforced."""
    enforced = FLOOR_RATIO_ENFORCED if enforced is None else enforced
    limit = FLOOR_RATIO_LIMIT if limit is None else limit
    if not floor or not enforced or seconds <= limit * (1 + RATIO_NOISE) * floor:
        return None
    return (f"took {seconds / floor:.1f} times the floor ({seconds:.1f} s vs {floor:.1f} s for a bare "
            f"kernel that imports the kit; limit {limit:g}x"
            + (f" ({limit - imports:g} + {imports} TensorFlow import(s) in processes it started)" if imports else "")
            + f" plus {RATIO_NOISE:.0%} for run-to-run noise, "
            f"goal {FLOOR_RATIO_GOAL:g}x)")


def course_ratio_problem(total: float, floor: float | None, imports: int = 0) -> str | None:
    """What is wrong with a whole course that took ``total`` seconds against the ``floor``, or None (the limit
    plus one floor per TensorFlow import the notebooks started in processes of their own)."""
    limit = COURSE_RATIO_LIMIT + imports
    if not floor or total <= limit * (1 + RATIO_NOISE) * floor:
        return None
    return (f"the whole course took {total / floor:.1f} times the floor ({total:.0f} s vs {floor:.1f} s; limit "
            f"{limit:g}x ({COURSE_RATIO_LIMIT:g} + {imports} TensorFlow imports in processes the notebooks "
            f"started) plus {RATIO_NOISE:.0%} for run-to-run noise)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or _last_item.get(str(getattr(item.parent, "path", ""))) != item.nodeid:
        return
    state = _state.get(str(item.parent.path))
    if not state:
        return
    seconds = time.monotonic() - state["start"]
    name = Path(str(item.parent.path)).name
    sampler = state["sampler"]
    problems = []
    if sampler is None:   # never silently skip the budget: say that memory could not be measured
        problems.append("its kernel's memory could not be measured (kernel pid unknown: did nbval or "
                        "jupyter_client change?)")
        kernel_peak = tree_peak = imports = 0
    else:
        sampler.__exit__(None, None, None)
        kernel_peak, tree_peak, imports = sampler.kernel_peak, sampler.peak, sampler.tf_children
    _results.append((name, seconds, kernel_peak, tree_peak, imports))
    floor = _floor.get("seconds")
    wall = wall_limit(floor, imports)
    if seconds > wall and TIME_MEASURED:
        problems.append(f"took {seconds:.1f} s (budget {wall:.0f} s)")
    over = floor_ratio_problem(seconds, floor, limit=notebook_ratio_limit(imports, limit=FLOOR_RATIO_LIMIT),
                               imports=imports)
    if over:
        problems.append(over)
    course = sorted(ROOT.glob("notebooks/[0-9][0-9]_*.ipynb"))
    if TIME_MEASURED and len(_results) == len(course) and {r[0] for r in _results} == {p.name for p in course}:
        over = course_ratio_problem(sum(r[1] for r in _results), floor,
                                    sum(r[4] for r in _results))    # after the last notebook of a whole run
        if over:
            problems.append(over)
    if kernel_peak > NOTEBOOK_BUDGET_BYTES:
        problems.append(f"its kernel peaked at {kernel_peak / 1e9:.2f} GB "
                        f"(budget {NOTEBOOK_BUDGET_BYTES / 1e9:.1f} GB)")
    if tree_peak > TREE_BUDGET_BYTES:
        problems.append(f"the kernel with its child processes peaked at {tree_peak / 1e9:.2f} GB "
                        f"(proportional set size; budget {TREE_BUDGET_BYTES / 1e9:.1f} GB, Binder's limit)")
    if problems:
        message = (f"performance budget: {name} " + " and ".join(problems) + " on this machine, kernel start "
                   "to last cell. Make it lighter (fewer epochs, smaller data) or split the notebook; "
                   "`make bench` measures every notebook.")
        report = outcome.get_result()
        if report.failed:            # keep the cell's own failure (its output diff) in front
            report.sections.append(("performance budget", message))
        else:
            report.outcome = "failed"
            report.longrepr = message


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    if not TIME_MEASURED:
        terminalreporter.section("notebook performance budget: memory only (GPUTRAIN_BUDGET_TIME=off: this run "
                                 "shares the cores, its times are not the notebooks')")
        terminalreporter.write_line(f"{'notebook':32} {'kernel GB':>10} {'with children GB (PSS)':>23}")
        for name, _, kernel, tree, _ in _results:
            terminalreporter.write_line(f"{name:32} {kernel / 1e9:10.2f} {tree / 1e9:23.2f}")
        return
    wall = wall_limit(_floor.get("seconds"))
    terminalreporter.section(f"notebook performance budget ({wall:.0f} s on this machine"
                             + (f", 60 s where the floor is under {REFERENCE_FLOOR_S:.1f} s"
                                if wall > NOTEBOOK_BUDGET_S else "")
                             + f"; kernel {NOTEBOOK_BUDGET_BYTES / 1e9:.1f} GB, with children "
                             f"{TREE_BUDGET_BYTES / 1e9:.1f} GB)")
    floor = _floor.get("seconds") or float("nan")
    terminalreporter.write_line(f"floor (fresh kernel, import the kit, setup(devices=4), one op; median of {_floor.get('runs', 0):.0f}): "
                                f"{floor:.1f} s; "
                                f"goal {FLOOR_RATIO_GOAL:g}x, limit {FLOOR_RATIO_LIMIT:g}x a notebook and "
                                f"{COURSE_RATIO_LIMIT:g}x the course, each plus {RATIO_NOISE:.0%} for noise"
                                + ("" if FLOOR_RATIO_ENFORCED else " (reported, not enforced)"))
    terminalreporter.write_line(f"{'notebook':32} {'wall s':>7} {'x floor':>8} {'limit x':>8} {'kernel GB':>10} "
                                f"{'with children GB (PSS)':>23}")
    for name, seconds, kernel, tree, imports in _results:
        terminalreporter.write_line(f"{name:32} {seconds:7.1f} {seconds / floor:8.1f} "
                                    f"{notebook_ratio_limit(imports, limit=FLOOR_RATIO_LIMIT) * (1 + RATIO_NOISE):8.1f} {kernel / 1e9:10.2f} "
                                    f"{tree / 1e9:23.2f}")
    total = sum(r[1] for r in _results)
    imports = sum(r[4] for r in _results)
    terminalreporter.write_line(f"{'all notebooks':32} {total:7.1f} {total / floor:8.1f}  (limit {COURSE_RATIO_LIMIT:g}x "
                                f"for the whole course, + {imports} TensorFlow imports in processes the notebooks "
                                "started, plus the noise)")
