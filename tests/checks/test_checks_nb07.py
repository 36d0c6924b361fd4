"""Notebook 07's exercise checks: right answers in every equivalent form, wrong values get a hint, wrong forms
are named, and ``...`` is "not answered yet"."""
from __future__ import annotations

import json
import os
import unittest.mock

import numpy as np
import pytest

from gputrain_kit import check
from gputrain_kit import multiworker as mw


def _reads_given_tf_config():
    config = json.loads(check.NB07_GIVEN_TF_CONFIG)
    return config["cluster"]["worker"], config["task"]["index"]


def test_the_given_tf_config_is_what_exercises_4_and_5_describe():
    hosts, index = _reads_given_tf_config()
    assert len(hosts) == 3 and hosts[index] == "gpu-a:12345" and hosts[0] == "gpu-b:12345"
    assert check.NB07_GIVEN_TF_CONFIG == mw.tf_config(hosts, index)


@pytest.mark.parametrize("answer", [8, 8.0, "8", " 8 ", np.int64(8), np.float32(8.0), np.array(8), "16/2"])
def test_per_replica_batch_right_in_every_form(answer):
    assert check.nb07_per_replica_batch(answer)
    assert repr(check.nb07_per_replica_batch(answer)).startswith("Correct.")


def test_per_replica_batch_is_what_tensorflow_computes():
    import tensorflow as tf
    hosts, index = _reads_given_tf_config()
    ctx = tf.distribute.InputContext(num_input_pipelines=len(hosts), input_pipeline_id=index,
                                     num_replicas_in_sync=len(hosts) * 4)
    assert check.nb07_per_replica_batch(ctx.get_per_replica_batch_size(96))


@pytest.mark.parametrize("wrong", [32, 24, 96, 12])
def test_per_replica_batch_wrong_value_gets_a_hint_without_the_answer(wrong):
    verdict = check.nb07_per_replica_batch(wrong)
    assert not verdict and repr(verdict).startswith("Not yet.") and "8" not in repr(verdict)


@pytest.mark.parametrize("odd", ["eight", [8], 8.5, None, object(), True])
def test_per_replica_batch_wrong_form_says_which_form(odd):
    verdict = check.nb07_per_replica_batch(odd)
    assert not verdict and "Not a form this check reads" in repr(verdict) and "whole number" in repr(verdict)


@pytest.mark.parametrize("answer", [False, "False", "no", " NO ", np.bool_(False)])
def test_is_chief_right_in_every_form(answer):
    assert check.nb07_is_chief(answer)


def test_is_chief_agrees_with_worker_task(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", check.NB07_GIVEN_TF_CONFIG)
    assert check.nb07_is_chief(mw.worker_task().is_chief)


def test_is_chief_wrong_value_and_wrong_form():
    wrong = check.nb07_is_chief(True)
    assert not wrong and repr(wrong).startswith("Not yet.") and "gpu-b" not in repr(wrong)
    for odd in (1, 0, "maybe", None, object()):
        verdict = check.nb07_is_chief(odd)
        assert not verdict and "Not a form this check reads" in repr(verdict) and "True or False" in repr(verdict)


@pytest.mark.parametrize("name", ["nb07_tf_config", "nb07_global_batch", "nb07_resume_step",
                                  "nb07_per_replica_batch", "nb07_is_chief"])
def test_not_answered_yet(name):
    verdict = getattr(check, name)(...)
    assert not verdict and "Not answered yet" in repr(verdict)


def test_older_checks_read_equivalent_forms_and_hint():
    assert check.nb07_global_batch("66") and check.nb07_global_batch(np.int32(66)) and check.nb07_global_batch(66.0)
    assert "66" not in repr(check.nb07_global_batch(64))
    # a reader's 96 and 69 split evenly over 3 replicas, and were told they must: the hint says what is wrong
    for divides in (69, 96):
        assert not check.nb07_global_batch(divides) and "splits evenly" in repr(check.nb07_global_batch(divides))
    assert "at least 64" in repr(check.nb07_global_batch(63))
    assert "whole number" in repr(check.nb07_global_batch("sixty"))
    assert check.nb07_resume_step(np.int64(400)) and check.nb07_resume_step("400")
    assert "400" not in repr(check.nb07_resume_step(437))
    config = mw.tf_config(check.NB07_HOSTS, 2)
    assert check.nb07_tf_config(config) and check.nb07_tf_config(json.loads(config))
    as_tuple = {"cluster": {"worker": tuple(check.NB07_HOSTS)}, "task": {"type": "worker", "index": 2}}
    assert check.nb07_tf_config(as_tuple)                                    # a tuple of hosts is the same list
    assert not check.nb07_tf_config(dict(as_tuple, cluster={"worker": check.NB07_HOSTS[::-1]}))
    assert not check.nb07_tf_config(dict(as_tuple, cluster={"worker": ",".join(check.NB07_HOSTS)}))
    assert "JSON string or a dict" in repr(check.nb07_tf_config(42))


def test_nb07_tf_config_as_python_prints_a_dict_is_refused_as_tensorflow_refuses_it():
    """str(config) (single quotes) once read as correct; TensorFlow reads TF_CONFIG with json.loads
    (tfconfig_cluster_resolver.py), which raises on it."""
    import tensorflow as tf

    config = json.loads(mw.tf_config(check.NB07_HOSTS, 2))
    with pytest.raises(json.JSONDecodeError):
        json.loads(str(config))                                   # what TensorFlow does with it
    for python_text in (str(config), repr(config), f"'{config}'"):
        got = check.nb07_tf_config(python_text)
        assert not got and "json.dumps(config)" in repr(got) and "single quotes" in repr(got), got
    assert check.nb07_tf_config(json.dumps(config)) and check.nb07_tf_config(config)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver
    with unittest.mock.patch.dict(os.environ, {"TF_CONFIG": json.dumps(config)}):
        assert resolver().task_id == 2                            # the JSON text: read by TensorFlow
    with unittest.mock.patch.dict(os.environ, {"TF_CONFIG": str(config)}), pytest.raises(ValueError):
        resolver().cluster_spec()                                 # JSONDecodeError is a ValueError


def test_nb07_the_likeliest_slips_are_named():
    """A reader's 'chief' job, index 3 (counting from 1), hosts without ports and 399 (the last step saved) each
    got a generic hint; each is now named, and a right answer is still right."""
    hosts = ["gpu-a:12345", "gpu-b:12345", "gpu-c:12345"]
    chief = check.nb07_tf_config({"cluster": {"chief": hosts[:1], "worker": hosts[1:]},
                                  "task": {"type": "worker", "index": 1}})
    assert not chief and "workers only" in repr(chief)
    assert "count from 0" in repr(check.nb07_tf_config({"cluster": {"worker": hosts},
                                                        "task": {"type": "worker", "index": 3}}))
    assert "needs its port" in repr(check.nb07_tf_config({"cluster": {"worker": [h.split(":")[0] for h in hosts]},
                                                          "task": {"type": "worker", "index": 2}}))
    assert check.nb07_tf_config({"cluster": {"worker": hosts}, "task": {"type": "worker", "index": 2}})
    last_saved = check.nb07_resume_step(399)
    assert not last_saved and "last one the checkpoint holds" in repr(last_saved)
