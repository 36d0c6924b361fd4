"""estimate_memory warns on every uneven data-parallel split, as check_batch_plan does (the reviewer's case: 33 on 4
devices, which Keras 3's fit refuses at its first step, gave no warning), with the same warning
classes; the memory explorer says it in its own words instead of repeating the warning."""
from __future__ import annotations

import warnings

import pytest

from gputrain_kit.batching import split_batch
from gputrain_kit.memory import estimate_memory, preset_profile
from gputrain_kit.replicas import EmptyReplicaWarning, UnevenBatchWarning, check_batch_plan


def _warned(**kwargs) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimate_memory(preset_profile("dense_stack"), **kwargs)
    return list(caught)


def test_the_reviewers_uneven_split_warns_naming_the_split_and_the_fix():
    caught = _warned(batch_size=33, strategy="data", devices=4)
    assert [w.category for w in caught] == [UnevenBatchWarning]
    said = str(caught[0].message)
    assert said.startswith("estimate_memory: a step of 33 samples on devices=4 splits unevenly (split [9, 9, 9, 6]): "
                           "Keras 3's fit refuses such a first step"), said
    assert "Use a global batch that is a multiple of 4." in said


def test_an_empty_replica_still_warns_as_before_now_as_empty_replica_warning():
    caught = _warned(batch_size=3, strategy="data", devices=4)
    assert [w.category for w in caught] == [EmptyReplicaWarning] and issubclass(EmptyReplicaWarning, UserWarning)
    assert "leaves 1 replica(s) with no sample in every step (split [1, 1, 1, 0])" in str(caught[0].message)


@pytest.mark.parametrize("kwargs", [dict(batch_size=33), dict(batch_size=33, strategy="split", devices=4),
                                    dict(batch_size=32, strategy="data", devices=4),
                                    dict(batch_size=32, strategy="data", devices=4, accumulation_steps=4)])
def test_even_splits_and_other_strategies_say_nothing(kwargs):
    assert _warned(**kwargs) == []


def test_each_accumulation_steps_batch_is_what_must_split_evenly():
    caught = _warned(batch_size=40, strategy="data", devices=4, accumulation_steps=4)    # steps of 10: [3, 3, 3, 1]
    assert [w.category for w in caught] == [UnevenBatchWarning]
    said = str(caught[0].message)
    assert "a step of 10 samples on devices=4 splits unevenly (split [3, 3, 3, 1])" in said
    assert "a multiple of 16" in said and "2 accumulation steps (steps of 20, a multiple of 4)" in said


@pytest.mark.parametrize("devices", [2, 3, 4, 8])
def test_the_warning_class_is_check_batch_plans_for_every_batch(devices):
    """The same batch over the same devices: estimate_memory and check_batch_plan (fit's first step) agree."""
    for batch in range(1, 3 * devices + 2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_batch_plan(batch * 5, batch, devices, drop_remainder=True)
        planned = [w.category for w in caught if w.category in (EmptyReplicaWarning, UnevenBatchWarning)]
        estimated = [w.category for w in _warned(batch_size=batch, strategy="data", devices=devices)]
        assert estimated == planned, (batch, devices, split_batch(batch, devices))


def test_the_memory_explorer_says_an_uneven_split_once_in_its_own_words():
    from gputrain_kit.widgets import MemoryExplorer

    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # nothing on the notebook's stderr
        explorer = MemoryExplorer(preset="course digits model", batch=96, devices=4, strategy="data")
        explorer._set_quietly(explorer.devices, 5)
        explorer.update()
    text = explorer.summary.value
    assert "does not split evenly over 5 devices" in text and "splits unevenly" not in text, text
