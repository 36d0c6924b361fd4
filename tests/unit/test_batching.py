"""plan_batches: pure Python, checked against what tf.distribute really delivers."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gputrain_kit import plan_batches
from gputrain_kit.batching import empty_slots, split_batch
from conftest import last_json, run_python


@pytest.mark.parametrize("batch, replicas, expected", [
    (6, 4, [2, 2, 2, 0]), (5, 4, [2, 2, 1, 0]), (1, 4, [1, 0, 0, 0]), (62, 4, [16, 16, 16, 14]),
    (64, 4, [16] * 4), (7, 1, [7]), (0, 3, [0, 0, 0]),
])
def test_split_batch(batch, replicas, expected):
    assert split_batch(batch, replicas) == expected


def test_the_batchnorm_trap_plan():
    plan = plan_batches(1030, 64, 4)
    assert len(plan) == 17 and plan[:16] == [[16] * 4] * 16 and plan[-1] == [2, 2, 2, 0]
    assert empty_slots(plan) == [(16, 3)]
    assert plan_batches(1030, 64, 4, drop_remainder=True) == [[16] * 4] * 16
    assert sum(map(sum, plan)) == 1030


def test_plan_batches_does_not_import_tensorflow():
    code = "import sys, gputrain_kit as k; k.plan_batches(10, 4, 2); print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("args, fragment", [
    ((0, 4, 2), "n_samples must be at least 1"),
    ((10, -1, 2), "global_batch must be at least 1"),
    ((10, 4, 0), "replicas must be at least 1"),
    ((10.5, 4, 2), "n_samples must be a whole number"),
    ((10, "4", 2), "global_batch must be a whole number"),
    ((10, 4, 2, "yes"), "drop_remainder must be True or False"),
])
def test_bad_arguments(args, fragment):
    with pytest.raises(ValueError, match=fragment):
        plan_batches(*args)


def test_matches_experimental_distribute_dataset_over_a_grid():
    """Including last batches smaller than the replica count, and global batches not divisible by it."""
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=4)
        import tensorflow as tf
        strategies = {r: tf.distribute.MirroredStrategy(k.device_names(r)) for r in (1, 3, 4)}
        rows = []
        for n in (1, 5, 6, 62, 130):
            for b in (1, 5, 6, 62, 64):
                if -(-n // b) > 20:
                    continue
                for r, s in strategies.items():
                    for drop in (False, True):
                        if drop and n < b:
                            continue
                        ds = tf.data.Dataset.range(n).batch(b, drop_remainder=drop)
                        got = [[int(t.shape[0]) for t in s.experimental_local_results(x)]
                               for x in s.experimental_distribute_dataset(ds)]
                        rows.append([n, b, r, drop, got])
        print(json.dumps(rows))
    """)
    rows = last_json(proc)
    assert len(rows) > 50
    mismatches = [(n, b, r, d, got, plan_batches(n, b, r, d)) for n, b, r, d, got in rows
                  if got != plan_batches(n, b, r, d)]
    assert not mismatches
    assert any(0 in step for *_, got in rows for step in got), "the grid must include empty replica slots"


def test_via_function_matches_distribute_datasets_from_function_over_a_grid():
    """distribute_datasets_from_function deals whole per-replica batches: 1030/64/4 ends [6, 0, 0, 0]."""
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=4)
        import tensorflow as tf
        from gputrain_kit.training import distributed_split
        strategies = {r: tf.distribute.MirroredStrategy(k.device_names(r)) for r in (1, 2, 4)}
        rows = []
        for n in (1, 5, 6, 62, 130, 1030, 1040):
            for b in (4, 8, 64):
                if -(-n // b) > 20:
                    continue
                for r, s in strategies.items():
                    for drop in (False, True):
                        if drop and n < b // r:
                            continue
                        rows.append([n, b, r, drop, distributed_split(s, n, b, drop, via="function")])
        print(json.dumps(rows))
    """)
    rows = last_json(proc)
    assert len(rows) > 50
    mismatches = [(n, b, r, d, got, plan_batches(n, b, r, d, via="function")) for n, b, r, d, got in rows
                  if got != plan_batches(n, b, r, d, via="function")]
    assert not mismatches
    by_key = {(n, b, r, d): got for n, b, r, d, got in rows}
    assert by_key[(1030, 64, 4, False)][-1] == [6, 0, 0, 0]
    assert by_key[(1040, 64, 4, False)][-1] == [16, 0, 0, 0]
    assert by_key[(1040, 64, 4, True)] == [[16] * 4] * 16, "a step that cannot fill every replica is dropped"
    assert plan_batches(1040, 64, 4) == [[16] * 4] * 16 + [[4, 4, 4, 4]], "the dataset path differs"


def test_via_argument_errors():
    with pytest.raises(ValueError, match=r"via must be one of 'dataset', 'function', got 'fn'"):
        plan_batches(10, 4, 2, via="fn")
    with pytest.raises(ValueError, match=r"via='function' needs global_batch divisible by replicas, got "
                                         r"global_batch=10 and replicas=4.*e\.g\. 8"):
        plan_batches(100, 10, 4, via="function")


def test_check_batch_plan_warns_before_an_uneven_first_step_that_fit_refuses():
    """A newcomer's check_batch_plan(1000, 62, 4) said nothing, though fit then refuses [16, 16, 16, 14] (notebook 02)."""
    import warnings

    from gputrain_kit.replicas import EmptyReplicaWarning, UnevenBatchWarning, check_batch_plan

    with pytest.warns(UnevenBatchWarning, match=r"Keras 3 fit refuses this at its first step.*step 1 splits "
                                                r"\[16, 16, 16, 14\]"):
        assert check_batch_plan(1000, 62, 4)[0] == [16, 16, 16, 14]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_batch_plan(1000, 64, 4)                          # an even first step: no warning
        check_batch_plan(1001, 64, 4)                          # an uneven *last* step, which fit accepts
    with pytest.warns(EmptyReplicaWarning, match="default scale=True the NaN can then reach every replica"):
        check_batch_plan(1030, 64, 4)


@pytest.mark.parametrize("policy, full, last", [
    ("auto", [2, 2, 2, 0], [1, 1, 1, 1]), ("data", [2, 2, 2, 0], [1, 1, 1, 1]),
    ("off", [2, 2, 1, 1], [2, 2, 0, 0]), ("OFF", [2, 2, 1, 1], [2, 2, 0, 0]),
    ("file", [2, 2, 1, 1], [2, 2, 0, 0]), ("hint", [2, 2, 1, 1], [2, 2, 0, 0]),
])
def test_the_auto_shard_policy_picks_the_split(policy, full, last):
    """Review (ninth read): the split is the legacy ceil one only under AUTO (in-memory data) and DATA; OFF, FILE (one
    machine) and HINT keep tf.distribute's even rebatching, a short last batch poured into its shares in order."""
    plan = plan_batches(22, 6, 4, shard_policy=policy)
    assert plan[0] == full and plan[-1] == last and sum(map(sum, plan)) == 22


def test_off_plans_the_short_last_batch_into_the_first_replicas():
    assert plan_batches(1030, 64, 4, shard_policy="off")[-1] == [6, 0, 0, 0]
    assert plan_batches(1000, 96, 8)[-1] == [5] * 8                       # the default: no replica empty
    assert plan_batches(1000, 96, 8, shard_policy="off")[-1] == [12, 12, 12, 4, 0, 0, 0, 0]
    for b in (5, 6, 9):                                                   # no full step leaves one empty with OFF
        assert 0 not in split_batch(b, 4, "off") and 0 in split_batch(b, 4)
    assert plan_batches(1030, 64, 4, drop_remainder=True, shard_policy="off") == [[16] * 4] * 16
    # the function path does no rebatching: every policy plans it alike
    assert plan_batches(1030, 64, 4, via="function", shard_policy="off") == plan_batches(1030, 64, 4, via="function")


def test_shard_policy_takes_an_autoshardpolicy_member_and_refuses_other_values():
    class Member:                   # as tf.data.experimental.AutoShardPolicy.OFF: an enum member named OFF
        name = "OFF"

    assert plan_batches(22, 6, 4, shard_policy=Member()) == plan_batches(22, 6, 4, shard_policy="off")
    for bad in ("of", 1, None):
        with pytest.raises(ValueError, match=r"plan_batches: shard_policy must be one of 'auto', 'data', 'off', "
                                             r"'file', 'hint' .* got .*Fix: shard_policy=\"auto\""):
            plan_batches(22, 6, 4, shard_policy=bad)
    with pytest.raises(ValueError, match="split_batch: shard_policy must be one of"):
        split_batch(6, 4, "sideways")
