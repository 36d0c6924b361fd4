"""Notebook 06 after its ninth expert read: the long training cells say what they do before they do it, and the
prose about the batch-1024 table follows the table (its best and worst run are printed by the cell that trains
them, so the words cannot go stale when a CPU's kernels move an accuracy)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "06_batch_size_and_input.ipynb"


def _cells() -> dict[str, dict]:
    return {c.get("id"): c for c in json.loads(NOTEBOOK.read_text())["cells"]}


def _source(cell_id: str) -> str:
    return "".join(_cells()[cell_id]["source"])


def _stdout(cell_id: str) -> str:
    return "".join("".join(o.get("text", "")) for o in _cells()[cell_id].get("outputs", [])
                   if o.get("name") == "stdout")


@pytest.mark.parametrize("cell_id, first", [("b9a8d015", "training 4 models"), ("a66083dc", "training 8 models"),
                                            ("6f0aeb39", "training 9 more models")])
def test_every_training_cell_prints_a_progress_line_before_it_trains(cell_id, first):
    source = _source(cell_id)
    assert source.index("print(") < source.index("batch_sweep(", source.index("\n")), cell_id   # before any training
    assert _stdout(cell_id).startswith(first), _stdout(cell_id)[:80]
    assert "flush=True" in source                                 # each result shows as soon as it is computed
    pieces = ["".join(o.get("text", "")) for o in _cells()[cell_id]["outputs"] if o.get("name") == "stdout"]
    assert all(p.endswith("\n") for p in pieces)     # whole lines: a table split over outputs renders broken


def test_the_table_prose_claims_only_what_the_verdicts_check():
    prose = " ".join(" ".join("".join(c["source"]) for c in _cells().values() if c["cell_type"] == "markdown").split())
    for stale in ("with one seed and warm-up a run can end above the same rate",
                  "its runs end anywhere from above the unscaled rate"):
        assert stale not in prose, stale
    assert "its 9 runs spread over more than 30 points (the best and the worst are printed under the table" in prose
    assert ("its runs spread over more than 30 points and on every seed some end well below the unscaled rate"
            in prose)
    verdicts = _stdout("ca44de6e")        # the two claims, as the next cell prints them (checked under both families)
    assert "the 9 runs at 1.6 spread over more than 30 points: True" in verdicts
    assert "on every seed, some warm-up length ends over 5 images below the same rate: True" in verdicts


def test_the_best_and_worst_runs_are_read_from_the_stored_table():
    out = _stdout("6f0aeb39")
    rows = {int(line.split()[1]): [float(v) for v in line.split("|")[1:]] for line in out.splitlines()
            if line.startswith("seed ")}
    runs = [(acc, seed, w) for seed, (same, *scaled) in rows.items() for acc, w in zip(scaled, (0, 1, 5))]
    for name, (acc, seed, w) in (("best", max(runs)), ("worst", min(runs))):
        side = "above" if acc > rows[seed][0] else "below"
        assert (f"this run's {name} at 1.6: seed {seed}, {w}-epoch warm-up, {acc:.3f}, {side} the same rate on that "
                f"seed ({rows[seed][0]:.3f})") in out
