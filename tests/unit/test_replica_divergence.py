"""After a crashed ``fit`` the replicas' copies of trainable variables can differ, and the kit says so.

Under a MirroredStrategy every replica applies the same all-reduced update, so the copies of a trainable variable
are identical in any model that trained normally. A conv net's empty-replica crash (oneDNN CPU kernels, a last step
split [2, 2, 2, 0]) stops a step half way: with the notebooks' strategy (``strategy_for``: ReductionToOneDevice,
each variable reduced and applied on its own) the updates of some variables can already have reached some replicas
(``bn/beta``, ``bn/gamma``, ``logits/kernel`` seen here; how often depends on thread timing: about half of the
crashes with 8 inter-op threads, rarely with the default). ``replica_report`` lists such variables (``diverged``) and
says that the model must be rebuilt or reloaded; ``run_cases`` results carry them (``CaseResult.diverged``).
"""
from __future__ import annotations

import pytest

from conftest import last_json, run_python
from gputrain_kit import batchnorm
from gputrain_kit.replicas import ReplicaReport, VariableRow

NAN = float("nan")


def test_trainable_copies_that_differ_are_named_with_what_to_do():
    report = ReplicaReport(3, (
        VariableRow("net/bn/beta", (True,) * 3, (0.0, 0.0, 0.01), True, (True, True, False)),
        VariableRow("net/bn/moving_mean", (True,) * 3, (0.0, 0.02, 0.03), False, (True, False, False)),
        VariableRow("net/bn/gamma", (True, True, False), (0.0, 0.0, NAN), True, (True, True, False)),
        VariableRow("net/logits/kernel", (False,) * 3, (NAN,) * 3, True, (True, True, True)),
    ))
    # moving statistics drift by design (not trainable); NaN on every replica alike is no divergence
    assert report.diverged == ["net/bn/beta", "net/bn/gamma"] and not report.healthy
    text = repr(report)
    assert "Diverged: trainable copies differ between replicas: net/bn/beta, net/bn/gamma (replica 2 differs" in text
    assert "rebuild the model, or reload saved weights" in text.replace("\n", " ")
    assert all(len(line) <= 100 for line in text.splitlines()[-4:])
    # rows made by hand without the new fields (older code, the notebook's tests): nothing claimed
    plain = ReplicaReport(2, (VariableRow("dense/kernel", (True, True), (0.0, 0.25)),))
    assert plain.diverged == [] and plain.divergence() == "" and "Diverged" not in repr(plain)


def test_a_case_result_carries_the_diverged_variables_in_its_detail():
    raw = {"case": ["conv", "scale=True", "last step empty"], "losses": [], "later_fit": "works",
           "poisoned": ["moving_mean", "moving_variance"], "poisoned_replicas": [3], "nan_copies": 2, "spread": 0.1,
           "nan_rows": 0, "error": "InvalidArgumentError: Unable to broadcast", "rows": 1030,
           "diverged": ["conv_net/bn/beta", "conv_net/logits/kernel"]}
    r = batchnorm._classify(raw, "onednn")
    assert r.outcome == "crash" and r.diverged == ("conv_net/bn/beta", "conv_net/logits/kernel")
    assert r.detail.split(" | ")[0] == "InvalidArgumentError: Unable to broadcast"     # notebook 05 splits it so
    assert ("| the replicas' copies of trainable conv_net/bn/beta, conv_net/logits/kernel now differ (a step stopped half way updated "
            "some replicas, not others): rebuild the model or reload its weights before using it") in r.detail
    assert batchnorm._classify({**raw, "diverged": []}, "onednn").detail.count("now differ") == 0
    assert batchnorm._classify({k: v for k, v in raw.items() if k != "diverged"}).diverged == ()


CRASH = """
    import json
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=4)
    import keras, tensorflow as tf
    from gputrain_kit.errors import error_summary

    strategy = kit.training.strategy_for(4)                      # notebook 05's strategy
    rng = np.random.default_rng(0)
    y = rng.integers(0, 4, 1030)                                 # 1030 at 64: the last step splits [2, 2, 2, 0]
    img = (rng.normal(size=(1030, 8, 8, 1)) + y[:, None, None, None]).astype("float32")
    vec = (rng.normal(size=(1030, 5)) + y[:, None]).astype("float32")
    keras.utils.set_random_seed(0)
    with strategy.scope():
        a, b = keras.Input((8, 8, 1), name="img"), keras.Input((5,), name="vec")
        h = keras.layers.Conv2D(8, 3, padding="same", name="conv")(a)
        h = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(keras.layers.BatchNormalization(name="bn")(h)))
        g = keras.layers.Dense(8, activation="relu", name="vec_dense")(b)
        out = keras.layers.Dense(4, name="logits")(keras.layers.Concatenate()([h, g]))
        model = keras.Model({"img": a, "vec": b}, out, name="two")
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = {"img": img, "vec": vec}
    result = {"error": ""}
    try:
        model.fit(tf.data.Dataset.from_tensor_slices((data, y)).batch(64), epochs=1, verbose=0)
    except Exception as err:
        result["error"] = error_summary(err)

    def copies(v):
        return [c.numpy() for c in strategy.experimental_local_results(v.value)]

    def truth():                     # independently of the kit: which trainable variables' copies are not all equal
        return [v.path for v in model.trainable_weights
                if not all(np.array_equal(c, copies(v)[0], equal_nan=True) for c in copies(v))]

    report = kit.replica_report(model, strategy)
    result.update(diverged=report.diverged, truth=truth(), nan_copies=len(report.poisoned), text=repr(report))
    if result["error"]:
        # What a step stopped half way leaves when it updated replicas 0-2 and not 3: replayed, since which updates
        # win the race against the crash varies from run to run.
        for v in (model.get_layer("bn").beta, model.get_layer("vec_dense").kernel):
            for copy in strategy.experimental_local_results(v.value)[:3]:
                copy.assign(copy + 0.01)
        replayed = kit.replica_report(model, strategy)
        result.update(replayed=replayed.diverged, replayed_truth=truth(), replayed_text=repr(replayed),
                      healthy=replayed.healthy)
        try:                         # the model stays broken: training on full batches keeps the copies apart
            model.fit(tf.data.Dataset.from_tensor_slices((data, y)).batch(64, drop_remainder=True), epochs=1,
                      verbose=0, callbacks=[kit.ReplicaHealth()])
            result["health"] = "no error"
        except kit.ReplicaHealthError as err:
            result["health"] = str(err)
    print(json.dumps(result))
"""


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_after_the_conv_nets_empty_replica_crash_diverged_copies_are_named(family):
    """The two-input conv net's empty replica under each CPU kernel family, in a fresh process: oneDNN crashes
    ``fit`` and the report names exactly the trainable variables whose copies differ (compared here independently);
    a half-applied step replayed (replicas 0-2 updated, 3 not) is named variable by variable, with what to do,
    and ReplicaHealth stops the next fit. Eigen trains on into NaN: NaN on every replica alike is no divergence."""
    env = {"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"}
    r = last_json(run_python(CRASH, env=env, timeout=600))
    assert r["diverged"] == r["truth"], r
    if family == "eigen":
        assert not r["error"] and r["diverged"] == [], r
        return
    assert "Unable to broadcast" in r["error"] or "InvalidArgumentError" in r["error"], r
    assert r["nan_copies"] == 2, "the crash leaves replica 3's moving statistics NaN"
    assert ("Diverged:" in r["text"]) == bool(r["diverged"])
    assert r["replayed"] == r["replayed_truth"] and {"bn/beta", "vec_dense/kernel"} <= set(r["replayed"]), r
    assert r["healthy"] is False
    text = " ".join(r["replayed_text"].split())
    assert "Diverged: trainable copies differ between replicas:" in text and "bn/beta" in text, text
    assert "vec_dense/kernel" in text and "(replica 3 differs from replica 0)" in text, text
    assert "rebuild the model, or reload saved weights, before training or predicting" in text
    assert r["health"].startswith("ReplicaHealth: after epoch 1, trainable copies differ between replicas: "), r
    assert "bn/beta" in r["health"] and "vec_dense/kernel" in r["health"]


SPREAD = """
    import json
    import gputrain_kit as kit
    kit.setup(devices=3)
    import keras
    strategy = kit.training.strategy_for(3)
    with strategy.scope():
        layer = keras.layers.BatchNormalization(name="bn")
        layer.build((None, 2))
    copies = strategy.experimental_local_results(layer.moving_mean.value)
    copies[1].assign([0.25, 0.0])
    copies[2].assign([-0.25, 0.0])                  # replicas 1 and 2 are 0.5 apart, each 0.25 from replica 0
    report = kit.replica_report(layer, strategy)
    print(json.dumps({"spread": report.spread, "cells": [list(r.max_diff) for r in report.rows], "text": repr(report)}))
"""


def test_spread_is_the_largest_difference_from_replica_0s_copy_not_between_any_two():
    """Notebook 05 (sections 3-4) calls spread the largest difference of a replica's copy from replica 0's: copies
    0, +0.25 and -0.25 give 0.25, not the 0.5 between replicas 1 and 2; the table's cells are the same measure."""
    r = last_json(run_python(SPREAD))
    assert r["spread"] == 0.25, r
    assert max(max(cells) for cells in r["cells"]) == r["spread"]
    assert "(cells: largest |copy - replica 0's copy|;" in r["text"] and "spread 0.25)" in r["text"]
