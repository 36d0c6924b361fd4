"""``training.distributed_split`` checks its arguments as ``plan_batches`` does (the same helpers), before touching
TensorFlow, and warns ArgumentOrderWarning on arguments that look swapped, from the same rule and wording."""
from __future__ import annotations

import warnings

import pytest

from conftest import last_json, run_python
from gputrain_kit.batching import ArgumentOrderWarning, plan_batches, warn_if_swapped
from gputrain_kit.training import distributed_split


class FakeStrategy:
    """Enough of a strategy for the argument checks (they run before TensorFlow is touched)."""
    num_replicas_in_sync = 4

    def experimental_distribute_dataset(self, dataset):    # pragma: no cover - the checks refuse first
        raise AssertionError("reached TensorFlow")


def swapped(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call()
        except AssertionError:
            pass                      # FakeStrategy: the warning came before TensorFlow, which is all we look at
    return [w for w in caught if issubclass(w.category, ArgumentOrderWarning)]


def test_swapped_arguments_warn_with_the_wording_of_plan_batches():
    split = swapped(lambda: distributed_split(FakeStrategy(), 64, 1030))
    plan = swapped(lambda: plan_batches(64, 1030, 4))
    assert len(split) == len(plan) == 1
    assert str(split[0].message) == ("distributed_split: global_batch=1030 is larger than n_samples=64: one step "
                                     "holds all the data. The arguments are (strategy, n_samples, global_batch): "
                                     "were two swapped?")
    assert str(plan[0].message) == str(split[0].message).replace("distributed_split", "plan_batches").replace(
        "(strategy, n_samples, global_batch)", "(n_samples, global_batch, replicas)")
    assert split[0].filename == __file__, "the warning points at the caller's line"
    small = swapped(lambda: distributed_split(FakeStrategy(), 1030, 2))
    assert [str(w.message) for w in small] == [
        "distributed_split: global_batch=2 is smaller than the strategy's 4 replicas: some replica gets no data in "
        "every step. The arguments are (strategy, n_samples, global_batch): were two swapped?"]
    assert not swapped(lambda: warn_if_swapped("plan_batches", 1030, 64, 4))


@pytest.mark.parametrize("args, kwargs, error, fragment", [
    (("1030", 64), {}, TypeError, r"^distributed_split: n_samples must be a whole number, got '1030' \(str\)\. Pass"),
    ((1030, 64.0), {}, TypeError, r"^distributed_split: global_batch must be a whole number, got 64\.0 \(float\)\. "
                                  r"Pass an int, e\.g\. global_batch=64\."),
    ((1030, 0), {}, ValueError, r"^distributed_split: global_batch must be at least 1, got 0\."),
    ((0, 64), {}, ValueError, r"^distributed_split: n_samples must be at least 1, got 0\."),
    ((1030, 64, "no"), {}, TypeError, r"^distributed_split: drop_remainder must be True or False, got 'no'\."),
    ((1030, 64), {"via": "graph"}, ValueError, r"^distributed_split: via must be one of 'dataset', 'function'"),
    ((1030, 62), {"via": "function"}, ValueError, r"^distributed_split: via='function' needs global_batch "
                                                  r"divisible by replicas, got global_batch=62 and replicas=4"),
])
def test_bad_arguments_are_refused_before_tensorflow(args, kwargs, error, fragment):
    with pytest.raises(error, match=fragment):
        distributed_split(FakeStrategy(), *args, **kwargs)


def test_a_strategy_that_is_no_strategy_is_named():
    with pytest.raises(TypeError, match=r"^distributed_split: strategy must be a tf\.distribute strategy object, "
                                        r"got 1030 \(int\)\. Pass it first: distributed_split\(strategy, n_samples"):
        distributed_split(1030, 64, 4)


def test_real_strategy_no_tensorflow_before_the_checks():
    """In a fresh process: a refused call imports no TensorFlow; the real split still matches plan_batches, and the
    swapped call warns there too (and then splits what it was given)."""
    proc = run_python("""
        import json, sys, warnings
        from gputrain_kit.training import distributed_split
        class Fake:
            num_replicas_in_sync = 4
            def experimental_distribute_dataset(self, ds):
                raise AssertionError
        try:
            distributed_split(Fake(), 1030, 0)
        except ValueError:
            pass
        before = "tensorflow" in sys.modules
        import gputrain_kit as kit
        kit.setup(devices=4)
        strategy = kit.training.strategy_for(4)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            swapped = distributed_split(strategy, 64, 1030)
        print(json.dumps({"before": before, "split": distributed_split(strategy, 1030, 64)[-1],
                          "function": distributed_split(strategy, 1030, 64, via="function")[-1],
                          "swapped": swapped, "warnings": [type(w.message).__name__ for w in caught]}))
    """)
    r = last_json(proc)
    assert r["before"] is False
    assert r["split"] == [2, 2, 2, 0] and r["function"] == [6, 0, 0, 0]
    assert r["swapped"] == [[16, 16, 16, 16]] and r["warnings"] == ["ArgumentOrderWarning"]
