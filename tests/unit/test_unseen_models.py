"""The kit's tools on models no notebook uses: a functional model with two inputs and BatchNorm, a Conv2D
model, a model with a nested sub-model, and a mixed-precision model, under MirroredStrategy on 4 devices.
Each tool works on each, or says clearly why not."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CHILD = """
    import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
    kit.setup(devices=4)
    import tensorflow as tf, keras

    def two_inputs():
        a, b = keras.Input((6,), name="a"), keras.Input((3,), name="b")
        h = keras.layers.Concatenate()([keras.layers.Dense(8)(a), b])
        h = keras.layers.BatchNormalization()(h)
        return keras.Model([a, b], keras.layers.Dense(2)(h), name="two_inputs")

    def conv():
        return keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, padding="same"),
                                 keras.layers.BatchNormalization(), keras.layers.GlobalAveragePooling2D(),
                                 keras.layers.Dense(2)], name="conv")

    def nested():
        inner = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.BatchNormalization()], name="inner")
        x = keras.Input((6,))
        return keras.Model(x, keras.layers.Dense(2)(inner(x)), name="outer")

    def mixed():
        policy = keras.mixed_precision.dtype_policy()
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        try:
            return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), keras.layers.BatchNormalization(),
                                     keras.layers.Dense(2, dtype="float32")], name="mixed")
        finally:
            keras.mixed_precision.set_dtype_policy(policy)

    rng = np.random.default_rng(0)
    data = {"two_inputs": ((rng.normal(size=(128, 6)), rng.normal(size=(128, 3))),),
            "conv": (rng.normal(size=(128, 8, 8, 1)),), "nested": (rng.normal(size=(128, 6)),),
            "mixed": (rng.normal(size=(128, 6)),)}
    y = rng.integers(0, 2, size=128)
    strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
    out = {}
    folder = tempfile.mkdtemp()
    for name, build in [("two_inputs", two_inputs), ("conv", conv), ("nested", nested), ("mixed", mixed)]:
        row = {}
        with strategy.scope():
            model = build()
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = data[name][0]
        inputs = tuple(v.astype("float32") for v in x) if isinstance(x, tuple) else x.astype("float32")
        ds = tf.data.Dataset.from_tensor_slices((inputs, y)).batch(32, drop_remainder=True)
        health = kit.ReplicaHealth()
        model.fit(ds, epochs=1, verbose=0, callbacks=[health])
        report = kit.replica_report(model, strategy)
        row["report"] = [report.replicas, report.healthy, len(report.rows) == len(model.weights)]
        row["health_reports"] = len(health.reports)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kit.check_batch_plan(128, 32, 4)
            kit.check_batch_plan(130, 32, 4)
        row["plan_warnings"] = [type(w.message).__name__ for w in caught]
        try:
            estimate = kit.estimate_memory(model, batch_size=32, strategy="data", devices=4)
            row["estimate"] = [len(estimate.per_device), all(v > 0 for v in estimate.per_device[0].values()
                                                             if isinstance(v, (int, float)))]
        except (TypeError, ValueError) as err:
            row["estimate"] = f"{type(err).__name__}: {err}"
        path = os.path.join(folder, f"{name}.weights.h5")
        kit.save_verified(model, path)
        with strategy.scope():
            again = build()
            again.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        again(inputs if not isinstance(inputs, tuple) else list(inputs), training=False)
        kit.load_verified(again, path)
        row["reloaded_equal"] = all(np.array_equal(a, b) for a, b in zip(model.get_weights(), again.get_weights()))
        row["dtypes"] = sorted({str(v.dtype) for v in model.weights})
        out[name] = row
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def rows():
    return last_json(run_python(CHILD, timeout=300))


@pytest.mark.parametrize("name", ["two_inputs", "conv", "nested", "mixed"])
def test_the_tools_work_on_a_model_no_notebook_uses(rows, name):
    row = rows[name]
    assert row["report"] == [4, True, True]
    assert row["health_reports"] == 1
    assert row["plan_warnings"] == ["EmptyReplicaWarning"]          # 130 = 4 x 32 + 2: the last step leaves replicas empty
    assert isinstance(row["estimate"], list) and row["estimate"][0] == 4, row["estimate"]
    assert row["reloaded_equal"]


def test_mixed_precision_variables_stay_float32(rows):
    assert rows["mixed"]["dtypes"] == ["float32"]


def test_replica_health_says_before_training_what_it_cannot_check():
    """A reader's callback on a model built outside any strategy ran silently; another strategy than the model's
    failed only after the first epoch, naming replica_report. Both are said when training begins."""
    proc = run_python("""
        import json, warnings, gputrain_kit as kit
        kit.setup(devices=2)
        import keras, numpy as np, tensorflow as tf
        x, y = np.ones((64, 4), "float32"), np.ones((64, 1), "float32")
        build = lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        out = {}
        plain = build()
        plain.compile("sgd", "mse")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            plain.fit(x, y, epochs=1, verbose=0, callbacks=[kit.ReplicaHealth()])
        out["outside"] = [str(w.message) for w in caught if "ReplicaHealth" in str(w.message)]
        strategy, other = (tf.distribute.MirroredStrategy(kit.device_names(2)) for _ in range(2))
        with strategy.scope():
            mirrored = build()
            mirrored.compile("sgd", "mse")
        epochs = []
        logger = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: epochs.append(epoch))
        try:
            mirrored.fit(x, y, epochs=1, verbose=0, callbacks=[logger, kit.ReplicaHealth(strategy=other)])
            out["other"] = "trained"
        except ValueError as err:
            out["other"] = str(err)
        out["epochs before"] = len(epochs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            mirrored.fit(x, y, epochs=1, verbose=0, callbacks=[kit.ReplicaHealth(strategy=strategy)])
        out["own"] = [str(w.message) for w in caught if "ReplicaHealth" in str(w.message)]
        print(json.dumps(out))
    """, timeout=300)
    out = last_json(proc)
    assert len(out["outside"]) == 1 and "one copy of each variable" in out["outside"][0]
    assert out["other"].startswith("ReplicaHealth: strategy= is not the strategy this model was built under")
    assert out["epochs before"] == 0                                  # refused before the first epoch ended
    assert out["own"] == []
