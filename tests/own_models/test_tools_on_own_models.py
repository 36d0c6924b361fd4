"""Every take-home tool on the model families the notebooks never use (tools/memfam/families.py), half of them
under each CPU kernel family (each family in a process of its own; test_planner measures all six under both): the explorer on your model, save and load (both formats, with the
optimizer state), the replica report under MirroredStrategy, explain on a real error, and the planner's misuse."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CHILD = """
    import json, os, sys, tempfile, warnings
    sys.path.insert(0, "tools/memfam")
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=4)
    import keras, tensorflow as tf
    import families

    SMALL = {"gpt_causal": 4, "gpt_dropout": 4, "cnn_bn": 8, "lstm": 8, "vit": 8, "subclassed": 8}
    out = {}
    strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
    for name, batch in SMALL.items():
        if name not in NAMES:
            continue
        build, _ = families.FAMILIES[name]
        row = {}
        model = build()
        # the explorer takes your model and answers for it
        explorer = kit.widgets.MemoryExplorer(model, batch=batch, capacity_gb=12)      # planned, not yet trained
        row["explorer"] = explorer.estimate is not None and "needs" in explorer.summary.value
        explorer.strategy.value = "single"
        row["single shows 1"] = explorer.devices.value == 1
        # a real step on random data, then save and load with the optimizer state, in both formats
        specs = kit.memory.input_specs(model)
        rng = np.random.default_rng(0)
        xs = [rng.integers(0, 50, (batch, *s)).astype("int32") if "int" in d else rng.normal(size=(batch, *s))
              .astype("float32") for s, d in specs]
        x = xs[0] if len(xs) == 1 else xs
        y = np.zeros((batch, *keras.tree.flatten(model.compute_output_spec(
            keras.KerasTensor((batch, *specs[0][0]), dtype=specs[0][1])))[0].shape[1:]), "float32")
        # one model built in MirroredStrategy.scope() over 4 devices, trained one epoch: every tool below reads it
        with strategy.scope():
            model = build()
            model.compile(keras.optimizers.Adam(1e-3), "mse")
        model.fit(x, y, batch_size=batch, epochs=1, verbose=0)
        with tempfile.TemporaryDirectory() as tmp:
            for suffix in (".keras", ".weights.h5"):
                path = os.path.join(tmp, name + suffix)
                kit.save_verified(model, path)
                fresh = build()
                fresh.compile(keras.optimizers.Adam(1e-3), "mse")
                try:
                    kit.load_verified(fresh, path)
                    same = all(np.array_equal(np.asarray(a), np.asarray(b))
                               for a, b in zip(model.weights, fresh.weights))
                    row["load " + suffix] = "weights equal" if same else "weights differ"
                except Exception as err:          # a refusal must name what it did not load
                    row["load " + suffix] = "refused: " + str(err)[:200]
        # the replica report: every replica's trainable copy agrees after a healthy step (BatchNorm's moving
        # statistics drift apart by design in Keras 3: notebook 05)
        row["replicas agree"] = kit.replica_report(model).diverged == []
        # explain on this model's own error (targets for one sample fewer): never the course's numbers
        try:
            model.fit(x, y[:-1], batch_size=batch, epochs=1, verbose=0)
            row["explain"] = "no error"
        except Exception as err:
            row["explain"] = str(kit.explain(err))
        out[name] = row
    print(json.dumps(out))
"""


#: Each model family under one kernel family (the conv net with BatchNorm under oneDNN, whose convolutions and
#: empty batches differ most from Eigen's): all six tools' behaviour, at half the time of running every pair.
SPLIT = {"1": ["gpt_causal", "cnn_bn", "vit"], "0": ["gpt_dropout", "lstm", "subclassed"]}


def test_the_split_covers_six_model_families_once():
    assert sorted(SPLIT["1"] + SPLIT["0"]) == sorted(["gpt_causal", "gpt_dropout", "cnn_bn", "lstm", "vit", "subclassed"])


@pytest.mark.parametrize("family", ["1", "0"])
def test_every_tool_on_six_model_families(family):
    proc = run_python(f"NAMES = {SPLIT[family]!r}\n" + CHILD.replace("\n    ", "\n"),
                      env={"TF_ENABLE_ONEDNN_OPTS": family, "CUDA_VISIBLE_DEVICES": ""}, timeout=1500)
    out = last_json(proc)
    assert set(out) == set(SPLIT[family])
    for name, row in out.items():
        assert row["explorer"] and row["single shows 1"], (name, row)
        for suffix in (".keras", ".weights.h5"):
            verdict = row["load " + suffix]
            # loaded exactly, or refused naming what it could not restore (the optimizer state of a .weights.h5)
            assert verdict == "weights equal" or (verdict.startswith("refused: load_verified") and "optimizer"
                                                  in verdict), (name, suffix, verdict)
        assert row["replicas agree"], (name, row)
        assert row["explain"] != "no error" and "1030" not in row["explain"] and "[2, 2, 2, 0]" not in row["explain"]
