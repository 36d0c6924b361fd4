"""save_verified and load_verified under every float dtype a policy gives, and with integer variables (issue 44).

The marker load_verified writes into every variable before a load was 7.7e-37, which float16 rounds to 0.0: an
untrained float16 model's zero biases, BatchNormalization's beta and moving mean then looked "not loaded", and a
correct file was refused. The marker is now exact in each dtype, and a variable still holding it after the load is
loaded once more after a second marker: one holding both was not loaded. Each dtype policy runs in its own child
(a policy is global to the process)."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CHILD = """
    import json, os, tempfile, warnings
    from unittest import mock
    import numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    from gputrain_kit.saving import LoadError, _marker
    keras.config.set_dtype_policy(os.environ["POLICY"])
    d = tempfile.mkdtemp()

    class Counter(keras.layers.Layer):          # integer weights, as a layer keeping counts has them
        def build(self, shape):
            self.count = self.add_weight(shape=(), dtype="int32", initializer="zeros", trainable=False, name="count")
            self.big = self.add_weight(shape=(3,), dtype="int64", initializer="zeros", trainable=False, name="big")

        def call(self, x):
            return x

    def make():
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.BatchNormalization(), Counter(), keras.layers.Dense(1)])
        m.compile("adam", "mse"); m.optimizer.build(m.trainable_variables)     # Adam at step 0: an int64 zero
        return m

    def attempt(call):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                call(); return "ok"
            except Exception as err:
                return f"{type(err).__name__}: {err}"[:400]

    def same(a, b):
        return all(np.array_equal(u, v) for u, v in zip(a.get_weights(), b.get_weights()))

    out = {}
    m = make()                                # untrained: zero biases, beta and moving mean; zero counts
    out["dtypes"] = sorted({str(v.dtype) for v in m.weights})
    out["zeros"] = sorted(v.path.split("/", 1)[1] for v in m.weights if not np.any(v.numpy()))
    out["save weights.h5"] = attempt(lambda: kit.save_verified(m, os.path.join(d, "m.weights.h5")))
    out["save keras"] = attempt(lambda: kit.save_verified(m, os.path.join(d, "m.keras")))
    m.save_weights(os.path.join(d, "by_keras.weights.h5"))                  # a file Keras wrote itself
    n = make()
    out["load"] = attempt(lambda: kit.load_verified(n, os.path.join(d, "by_keras.weights.h5")))
    out["loaded equal"] = same(m, n)
    out["iterations"] = [str(m.optimizer.iterations.dtype), int(n.optimizer.iterations)]

    # values equal to the first marker, in a float and an int variable, save and load too
    last, counter = m.layers[-1], m.layers[-2]
    last.bias.assign(_marker(last.bias, False)); counter.big.assign(_marker(counter.big, False))
    out["marked values"] = [float(last.bias.numpy()[0]), int(counter.big.numpy()[0])]
    out["save marked"] = attempt(lambda: kit.save_verified(m, os.path.join(d, "marked.weights.h5")))
    n = make()
    out["load marked"] = attempt(lambda: kit.load_verified(n, os.path.join(d, "marked.weights.h5")))
    out["marked equal"] = same(m, n)

    # a file missing the last Dense (a save that failed there) is still refused, naming its zero bias
    def disk_full(store):
        raise OSError("simulated: disk full")
    with mock.patch.object(m.layers[-1], "save_own_variables", disk_full):
        attempt(lambda: m.save_weights(os.path.join(d, "half.weights.h5")))
    n = make(); kept = [w.copy() for w in n.get_weights()]
    try:
        kit.load_verified(n, os.path.join(d, "half.weights.h5")); out["half"] = None
    except LoadError as err:
        out["half"] = err.missing == [v.path for v in n.layers[-1].weights]     # the last Dense's kernel and bias
    out["half unchanged"] = all(np.array_equal(a, b) for a, b in zip(kept, n.get_weights()))
    # an int weight the file lacks is refused too: a Counter added after the save
    bigger = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                               keras.layers.BatchNormalization(), Counter(), keras.layers.Dense(1), Counter()])
    try:
        kit.load_verified(bigger, os.path.join(d, "by_keras.weights.h5")); out["int missing"] = None
    except LoadError as err:
        out["int missing"] = sorted(err.missing) == sorted(v.path for v in bigger.layers[-1].weights)
    print(json.dumps(out))
"""

POLICIES = {"float16": ["float16", "int32", "int64"], "bfloat16": ["bfloat16", "int32", "int64"],
            "float32": ["float32", "int32", "int64"], "mixed_float16": ["float32", "int32", "int64"]}


@pytest.fixture(scope="module", params=list(POLICIES))
def row(request):
    return request.param, last_json(run_python(CHILD, env={"POLICY": request.param}))


def test_an_untrained_model_with_zero_variables_saves_and_loads_under_every_dtype(row):
    policy, out = row
    assert out["dtypes"] == POLICIES[policy]
    # the variables that hold zeros: the old marker's float16 value, and the int counters
    assert {"dense/bias", "batch_normalization/beta", "batch_normalization/moving_mean", "counter/count",
            "counter/big", "dense_1/bias"} <= set(out["zeros"])
    assert out["save weights.h5"] == out["save keras"] == "ok", out
    assert out["load"] == "ok" and out["loaded equal"], out
    assert out["iterations"] == ["int64", 0]


def test_a_variable_holding_the_first_marker_still_saves_and_loads(row):
    policy, out = row
    tiny = {"float16": 6.103515625e-05, "bfloat16": 1.1754943508222875e-38}.get(policy, 1.1754943508222875e-38)
    assert out["marked values"][0] == pytest.approx(3 * tiny, rel=1e-6)
    assert out["marked values"][1] == -(2 ** 63) + 7
    assert out["save marked"] == "ok" and out["load marked"] == "ok" and out["marked equal"], out


def test_a_file_missing_a_layer_or_an_int_weight_is_still_refused(row):
    _, out = row
    assert out["half"] is True and out["half unchanged"]
    assert out["int missing"] is True
