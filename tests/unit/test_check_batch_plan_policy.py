"""check_batch_plan plans the split of the auto-shard policy it is told (notebook 05: the policy decides it)."""
from __future__ import annotations

import warnings

import pytest

import gputrain_kit as kit
from gputrain_kit.replicas import EmptyReplicaWarning


def test_an_off_policy_last_step_that_leaves_replicas_empty_is_warned_about():
    with warnings.catch_warnings():
        warnings.simplefilter("error")                     # the default policy's plan: nothing to say
        assert kit.check_batch_plan(1000, 96, 8)[-1] == [5] * 8
    with pytest.warns(EmptyReplicaWarning, match="replica"):
        plan = kit.check_batch_plan(1000, 96, 8, shard_policy="off")
    assert plan[-1] == [12, 12, 12, 4, 0, 0, 0, 0]


def test_a_policy_the_kit_does_not_know_is_refused_naming_the_call():
    with pytest.raises(ValueError, match="shard_policy"):
        kit.check_batch_plan(1000, 96, 8, shard_policy="sideways")
