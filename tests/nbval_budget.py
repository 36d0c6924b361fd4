"""pytest plugin for `make nbval`: every notebook must stay within its performance budget.

While strict nbval runs a notebook in its fresh kernel, this measures the notebook's wall time
(kernel start to last cell) and the kernel's peak resident memory (VmHWM), and samples the peak
of the kernel *with its child processes* (notebook 07's workers; proportional set size, so shared
libraries count once, as in a container's memory limit). If a notebook takes more than 60 s, or
either memory figure exceeds 1.5 GiB, its last cell fails with the numbers. A table is printed
at the end of the run. Loaded with ``-p nbval_budget`` (tests/ on PYTHONPATH).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
from perf import NOTEBOOK_BUDGET_BYTES, NOTEBOOK_BUDGET_S, TreeSampler  # noqa: E402

_last_item: dict[str, str] = {}       # notebook path -> nodeid of its last cell
_state: dict[str, dict] = {}          # notebook path -> start, sampler
_results: list[tuple[str, float, int, int]] = []


def pytest_collection_modifyitems(items):
    for item in items:
        if item.__class__.__name__ == "IPyNbCell":
            _last_item[str(item.parent.path)] = item.nodeid


def _kernel_pid(notebook) -> int | None:
    kernel = getattr(notebook, "kernel", None)
    km = getattr(kernel, "km", None)
    process = getattr(getattr(km, "provisioner", None), "process", None)
    return getattr(process, "pid", None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    key = str(getattr(item.parent, "path", ""))
    first = item.__class__.__name__ == "IPyNbCell" and key not in _state
    if first:
        _state[key] = {"start": time.monotonic(), "sampler": None}
    yield
    if first:
        pid = _kernel_pid(item.parent)
        if pid:
            sampler = TreeSampler(pid)
            sampler.__enter__()
            _state[key]["sampler"] = sampler


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    if call.when != "call" or _last_item.get(str(getattr(item.parent, "path", ""))) != item.nodeid:
        return
    state = _state.get(str(item.parent.path))
    if not state or not state["sampler"]:
        return
    sampler = state["sampler"]
    sampler.__exit__(None, None, None)
    seconds = time.monotonic() - state["start"]
    name = Path(str(item.parent.path)).name
    _results.append((name, seconds, sampler.kernel_peak, sampler.peak))
    problems = []
    if seconds > NOTEBOOK_BUDGET_S:
        problems.append(f"took {seconds:.1f} s (budget {NOTEBOOK_BUDGET_S:.0f} s)")
    if sampler.kernel_peak > NOTEBOOK_BUDGET_BYTES:
        problems.append(f"its kernel peaked at {sampler.kernel_peak / 2**30:.2f} GiB "
                        f"(budget {NOTEBOOK_BUDGET_BYTES / 2**30:.1f} GiB)")
    if sampler.peak > NOTEBOOK_BUDGET_BYTES:
        problems.append(f"the kernel with its child processes peaked at {sampler.peak / 2**30:.2f} GiB "
                        f"(proportional set size; budget {NOTEBOOK_BUDGET_BYTES / 2**30:.1f} GiB)")
    if problems:
        report = outcome.get_result()
        report.outcome = "failed"
        report.longrepr = (f"performance budget: {name} " + " and ".join(problems) +
                           " on this machine, kernel start to last cell. Make it lighter (fewer epochs, "
                           "smaller data) or split the notebook; `make bench` measures every notebook.")


def pytest_terminal_summary(terminalreporter):
    if not _results:
        return
    terminalreporter.section("notebook performance budget (60 s, 1.5 GiB kernel)")
    terminalreporter.write_line(f"{'notebook':32} {'wall s':>7} {'kernel GiB':>11} {'with children GiB (PSS)':>24}")
    for name, seconds, kernel, tree in _results:
        terminalreporter.write_line(f"{name:32} {seconds:7.1f} {kernel / 2**30:11.2f} {tree / 2**30:24.2f}")
