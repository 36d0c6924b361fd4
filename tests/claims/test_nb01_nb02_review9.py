"""Notebooks 01 and 02 after the ninth expert read: the 2020 post's slowdown is given no measured cause (its own guess
and two likely ones, as hypotheses), the accuracy loss of big batches is said for the run it rests on, and every cell
that trains for seconds says so before it starts (the setup time is in 02's intro, as in 00's and 01's)."""
from __future__ import annotations

import json
import sys

import pytest

from conftest import ROOT

NOTEBOOKS = ROOT / "notebooks"
sys.path.insert(0, str(ROOT / "tools"))


def _sources(name: str) -> list[str]:
    return ["".join(c["source"]) for c in json.loads((NOTEBOOKS / name).read_text())["cells"]]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_notebook_02_names_hypotheses_for_the_post_s_slowdown_not_a_cause():
    section = next(_flat(s) for s in _sources("02_data_parallel.ipynb") if s.startswith("On simulated devices, which"))
    assert "too short to gain from a split. That is no" not in section        # the asserted cause
    assert "It measured no cause for its slowdown (\"原因我还没找到\": *I have not found the reason yet*)" in section
    assert "(我猜的)" in section and "*maybe time is wasted moving data between GPUs (my guess)*" in section
    assert "its small models' steps may have been too short to gain from a split" in section
    assert "`ReductionToOneDevice`, which makes one device the bottleneck (section 3)" in section
    assert "neither the post nor this course measured any of the three" in section
    # the post's guess is quoted as the post has it
    seed = next((ROOT.parent / "shared" / "seeds").glob("002_*.txt"), None)
    if seed is None:
        pytest.skip("the source articles are not in this checkout")
    assert "原因我还没找到,可能是数据在不同gpu传输时浪费了时间吧(我猜的)" in seed.read_text()


def test_notebook_02_says_big_batches_lost_accuracy_at_the_same_rate_in_this_run():
    sources = [_flat(s) for s in _sources("02_data_parallel.ipynb")]
    summary = next(s for s in sources if "## Summary" in s)
    assert "bigger batches at fixed epochs lose accuracy." not in summary
    assert "bigger batches at fixed epochs lost accuracy at the same learning rate, in this run and in the post's " \
           "table (notebook 06: a learning rate scaled with the batch narrows the gap, up to a point)" in summary
    after = next(s for s in sources if s.startswith("With 15 times fewer updates per epoch"))
    assert "and the same learning rate" in after and "(one model, one seed: this run)" in after
    assert "shows how to keep its accuracy" not in after


@pytest.mark.parametrize("notebook, marker", [
    ("02_data_parallel.ipynb", "copies = strategy.experimental_local_results(model.layers[0].kernel.value)"),
    ("02_data_parallel.ipynb", "x70, y70 = x_train[:70], y_train[:70]"),
    ("01_cuda_visible_devices.ipynb", "with kit.device_activity() as mirrored_activity:")])
def test_cells_that_train_for_seconds_say_so_first_and_have_a_reason(notebook, marker):
    import slow_cells

    source = next(s for s in _sources(notebook) if marker in s)
    first = source.splitlines()[0]
    assert first.startswith("print(") and "(some seconds)...\", flush=True)" in first, first
    assert slow_cells.reason(notebook, first) is not None, first


def test_notebook_02_intro_gives_the_setup_time():
    intro = _flat(_sources("02_data_parallel.ipynb")[0])
    assert "The setup cell takes about 10 seconds (it imports TensorFlow)" in intro
