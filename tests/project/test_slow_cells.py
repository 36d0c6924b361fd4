"""tools/slow_cells.py: every recorded reason belongs to a cell that exists, so `make bench` never shows a
stale reason or hides a slow cell behind one."""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import slow_cells  # noqa: E402


def first_lines() -> dict[str, list[str]]:
    found = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        found[path.stem] = ["".join(c["source"]).splitlines()[0] for c in cells
                            if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    return found


def test_every_reason_names_exactly_one_code_cell():
    lines = first_lines()
    for (number, start), why in slow_cells.REASONS.items():
        notebook = next(name for name in lines if name.startswith(number))
        matches = [line for line in lines[notebook] if line.startswith(start)]
        assert len(matches) == 1, f"{notebook}: {start!r} matches {len(matches)} code cells"
        assert slow_cells.reason(notebook, matches[0]) == why


def test_setup_cells_and_unknown_cells():
    assert "floor" in slow_cells.reason("03_device_parallel", "import gputrain_kit as kit")
    assert slow_cells.reason("03_device_parallel", "print('no such cell')") is None
    assert slow_cells.reason("09_not_a_notebook", "callbacks = [") is None


def test_bench_keeps_the_hand_written_make_test_section():
    """`make bench` rewrites docs/performance.md; the whole `make test` on a fresh clone (issue 33) is measured
    apart and written by hand, and survives the rewrite, up to the next section."""
    import bench

    previous = ("# Performance\n\n## Widgets\n\nw\n\n## `make test` on a fresh clone\n\nmeasured by hand\n\n"
                "| part | time |\n|---|---|\n\n## Unit tests\n\nu\n")
    kept = bench._kept_sections(previous)
    assert kept[:2] == ["", "## `make test` on a fresh clone"] and "measured by hand" in kept
    assert "## Unit tests" not in kept and "w" not in kept and kept[-1] == "|---|---|"
    assert bench._kept_sections("# Performance\n") == []
    assert "## `make test` on a fresh clone" in (ROOT / "docs" / "performance.md").read_text()


def test_the_progress_gap_scales_with_the_floor_as_the_other_budgets_do():
    """5 s without progress on a machine like the one the budgets were set on; on a slower machine (a 6.6 s floor)
    every cell, the setup cell included, takes longer by the same factor, and so may the wait."""
    import perf

    assert perf.progress_gap_s(3.0) == perf.PROGRESS_GAP_S == 5.0
    assert perf.progress_gap_s(None) == 5.0
    slower = perf.progress_gap_s(2 * perf.REFERENCE_FLOOR_S)
    assert abs(slower - 10.0) < 1e-9
