"""The known multi-GPU traps (gputrain_kit.known_traps) on the installed Keras, on 2 simulated devices, under both
CPU kernel families: each trap bites exactly where ``Trap.applies`` says, the loud ones are explained by
``kit.explain``, and the doctor lists them. `make test-versions` runs this file on the oldest supported Keras too.
"""
from __future__ import annotations

import pytest

import gputrain_kit as kit
from gputrain_kit import doctor
from gputrain_kit.known_traps import TRAPS, Trap, traps_for
from conftest import last_json, run_python

CHILD = """
    import json, warnings, numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, gputrain_kit as kit
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    x = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    y = np.random.default_rng(1).normal(size=(64, 1)).astype("float32")
    out = {"keras": keras.__version__}

    def failure(err):
        return {"error": type(err).__name__, "explained": kit.explain(err).key}

    # Dropout built under the strategy (keras#20611)
    try:
        with strategy.scope():
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dropout(0.2),
                                  keras.layers.Dense(1)])
            m.compile("sgd", "mse")
        m.fit(x, y, epochs=1, batch_size=16, verbose=0)
        out["dropout"] = "trains"
    except Exception as err:
        out["dropout"] = failure(err)

    # An L2 penalty: one device against two replicas, the same data, the same start
    def regularized():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(
            1, kernel_regularizer=keras.regularizers.L2(0.5), kernel_initializer="ones")])
        m.compile(keras.optimizers.SGD(0.01), "mse")
        return m
    one = regularized()
    with strategy.scope():
        two = regularized()
    losses = [m.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history["loss"][-1] for m in (one, two)]
    out["same_weights"] = bool(np.allclose(one.get_weights()[0], two.get_weights()[0], rtol=1e-4, atol=1e-5))
    out["same_loss"] = bool(np.isclose(losses[0], losses[1], rtol=1e-4))

    # No regularizer: the loss and a metric that fit and evaluate report, one device against two replicas
    def plain():
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1, kernel_initializer="ones")])
        m.compile(keras.optimizers.SGD(0.01), "mse", metrics=["mae"])
        return m
    one = plain()
    with strategy.scope():
        two = plain()
    fitted = [m.fit(x, y, epochs=2, batch_size=16, shuffle=False, verbose=0).history for m in (one, two)]
    evaluated = [m.evaluate(x, y, batch_size=16, verbose=0, return_dict=True) for m in (one, two)]
    out["plain_same_weights"] = bool(np.allclose(one.get_weights()[0], two.get_weights()[0], rtol=1e-4, atol=1e-5))
    out["plain_same_reports"] = {name: bool(np.isclose(a, b, rtol=1e-4)) for name, a, b in (
        ("fit loss", fitted[0]["loss"][-1], fitted[1]["loss"][-1]),
        ("fit mae", fitted[0]["mae"][-1], fitted[1]["mae"][-1]),
        ("evaluate loss", evaluated[0]["loss"], evaluated[1]["loss"]),
        ("evaluate mae", evaluated[0]["mae"], evaluated[1]["mae"]))}

    # jit_compile=True under the strategy (no op determinism here: a plain script)
    try:
        with strategy.scope():
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
            m.compile("adam", "mse", jit_compile=True)
        m.fit(x, y, epochs=1, batch_size=16, verbose=0)
        out["jit"] = "trains"
    except Exception as err:
        out["jit"] = failure(err)

    # ... and after kit-style op determinism: Keras turns jit_compile off itself, with a warning
    tf.config.experimental.enable_op_determinism()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with strategy.scope():
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16), keras.layers.Dense(1)])
            m.compile("adam", "mse", jit_compile=True)
    m.fit(x, y, epochs=1, batch_size=16, verbose=0)
    out["jit_deterministic"] = {"jit_compile": m.jit_compile,
                                "warned": any("jit_compile" in str(w.message) for w in caught)}
    print(json.dumps(out))
"""


@pytest.fixture(scope="module", params=["1", "0"], ids=["onednn", "eigen"])
def observed(request):
    return last_json(run_python(CHILD, env={"TF_ENABLE_ONEDNN_OPTS": request.param}, timeout=300))


def _trap(key: str) -> Trap:
    return next(trap for trap in TRAPS if trap.key == key)


def test_dropout_under_mirrored_fails_exactly_where_the_trap_says(observed):
    if _trap("dropout-under-mirrored").applies(observed["keras"]):
        assert observed["dropout"] == {"error": "ValueError", "explained": "dropout-under-mirrored"}
    else:
        assert observed["dropout"] == "trains"


def test_regularization_is_scaled_right_exactly_where_the_traps_say(observed):
    version = observed["keras"]
    training, metrics = _trap("regularization-training"), _trap("metrics-under-mirrored")
    assert observed["same_weights"] == (not training.applies(version))
    assert observed["same_loss"] == (not (training.applies(version) or metrics.applies(version)))


def test_reported_loss_and_metrics_are_one_devices_exactly_where_the_trap_says(observed):
    """Measured on TensorFlow 2.21 (2 logical CPUs, both kernel families) with no regularizer: Keras 3.8.0 and 3.9.2
    train the same weights but report another loss and MAE, so the trap is the metric variables (keras PR #21072,
    in 3.10), not the penalty (keras PR #20610 unscaled it in 3.8.0); 3.7.0 trains other weights already."""
    training = _trap("regularization-training").applies(observed["keras"])
    assert observed["plain_same_weights"] == (not training)
    if not training:
        same = not _trap("metrics-under-mirrored").applies(observed["keras"])
        assert observed["plain_same_reports"] == {name: same for name in observed["plain_same_reports"]}


def test_jit_compile_under_mirrored_fails_and_is_explained(observed):
    assert _trap("jit-compile-under-mirrored").applies(observed["keras"])
    assert observed["jit"] == {"error": "InvalidArgumentError", "explained": "jit-compile-under-mirrored"}
    assert observed["jit_deterministic"] == {"jit_compile": False, "warned": True}


@pytest.mark.parametrize("version, warned", [
    ("3.6.0", {"regularization-training"}),
    ("3.7.0", {"dropout-under-mirrored", "regularization-training"}),
    ("3.8.0", {"metrics-under-mirrored"}),
    ("3.9.2", {"metrics-under-mirrored"}),
    ("3.10.0", set()),
    ("3.15.1", set()),
])
def test_the_doctor_warns_of_the_traps_of_a_version_and_only_those(version, warned):
    checks = doctor.check_known_traps(version)
    assert {c.name.split()[1] for c in checks if c.status == doctor.WARN} == warned
    assert {c.name.split()[1] for c in checks if c.status == doctor.INFO} == {"jit-compile-under-mirrored"}
    for check in checks:
        if check.status == doctor.WARN:
            assert "pip install -U 'keras>=" in check.detail


def test_the_doctor_reads_the_installed_keras():
    import keras

    assert [(trap.key, applies) for trap, applies in traps_for()] == \
        [(trap.key, trap.applies(keras.__version__)) for trap in TRAPS]
    assert kit.known_traps.TRAPS is TRAPS


def test_keras_37s_dropout_error_is_explained():
    """The message Keras 3.7.0 raised here (TensorFlow 2.21, 2 logical CPUs) for a Dropout model built under
    MirroredStrategy; on a Keras that has the trap, the test above makes it for real."""
    recorded = ("creating distributed tf.Variable with aggregation=MEAN and a non-floating dtype is not supported, "
                "please use a different aggregation or dtype")
    found = kit.explain(ValueError(recorded))
    assert found.key == "dropout-under-mirrored" and "keras>=3.8" in found.fix


def test_the_checked_keras_versions_are_named_exactly():
    """The open trap names the Keras versions it was reproduced on (3.6-3.12 and 3.15), never 3.13 or 3.14."""
    jit = next(t for t in TRAPS if t.key == "jit-compile-under-mirrored")
    assert jit.versions() == "every Keras 3 checked (3.6 to 3.12, and 3.15)"
    assert "3.13" not in jit.versions() and "3.14" not in jit.versions()
    line = next(c for c in doctor.check_known_traps("3.15.1") if jit.key in c.name)
    assert "as every Keras 3 checked (3.6 to 3.12, and 3.15) do" in line.detail, line
