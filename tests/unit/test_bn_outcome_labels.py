"""batchnorm._classify: "silent NaN" only where no saved file and no training step reads the NaN (review, ninth
read: a conv net trained one epoch had NaN in every replica's gamma and was called silent)."""
from __future__ import annotations

import warnings

import pytest

from gputrain_kit import batchnorm


def raw(poisoned, replicas, seen, losses=(1.2,)):
    return {"case": ["conv", "scale=True", "last step empty"], "losses": list(losses), "error": None,
            "later_fit": "", "rows": 195, "poisoned": poisoned, "poisoned_replicas": replicas,
            "nan_copies": 6, "spread": 0.0, "nan_rows": 195, "diverged": [], "seen": seen}


def test_nan_only_in_other_replicas_statistics_is_silent():
    r = batchnorm._classify(raw(["moving_mean", "moving_variance"], [3], {"replica_0": [], "trainable": []}))
    assert r.outcome == "silent NaN" and "the empty step was the last one trained" not in r.detail


def test_nan_a_saved_file_or_the_next_step_reads_is_not_silent():
    r = batchnorm._classify(raw(["gamma", "moving_mean", "moving_variance"], [0, 1, 2, 3],
                                {"replica_0": ["gamma"], "trainable": ["gamma"]}))
    assert r.outcome == "NaN weights" and r.outcome in batchnorm.OUTCOMES
    assert "replica 0's copy of gamma is NaN: a saved file keeps it" in r.detail
    assert "trainable gamma NaN: the next step computes with it" in r.detail
    # a NaN loss is loud, whatever the copies
    assert batchnorm._classify(raw(["gamma"], [0], {"replica_0": ["gamma"], "trainable": ["gamma"]},
                                   losses=(1.0, float("nan")))).outcome == "loud NaN"


def test_one_epoch_with_an_empty_last_step_warns():
    with pytest.warns(UserWarning, match=r"run_cases: epochs=1 ends with the empty step.*Fix: epochs=2"):
        batchnorm._check("run_cases", [("conv", "scale=True", "last step empty")], 1, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        batchnorm._check("run_cases", [("conv", "scale=True", "drop_remainder")], 1, 1)   # no empty step
        batchnorm._check("run_cases", None, 2, 1)
