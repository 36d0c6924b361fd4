"""kit.measure.measure_training_step refuses a model it cannot measure, naming what is missing and the fix: an
unbuilt model is told to build (not to compile), an uncompiled one to compile, a model that is neither both."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python


@pytest.fixture(scope="module")
def refusals():
    return last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import tensorflow as tf, keras
        from gputrain_kit.measure import measure_training_step

        class Net(keras.Model):
            def __init__(self):
                super().__init__(name="net")
                self.dense = keras.layers.Dense(2)

            def call(self, x):
                return self.dense(x)

        def said(model):
            try:
                measure_training_step(model, tf.ones((2, 4)), tf.ones((2, 2)))
            except ValueError as err:
                return [type(err).__name__, isinstance(err, TypeError), str(err)]
            return None

        compiled_unbuilt = Net(); compiled_unbuilt.compile("sgd", "mse")
        built_uncompiled = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="seq")
        out = {"compiled, not built": said(compiled_unbuilt), "built, not compiled": said(built_uncompiled),
               "neither": said(Net()), "no model": said([1, 2])}
        ready = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]); ready.compile("sgd", "mse")
        out["ready"] = sorted(measure_training_step(ready, tf.ones((2, 4)), tf.ones((2, 2))))
        print(json.dumps(out))
    """))


def test_a_compiled_model_without_weights_is_told_to_build_not_to_compile(refusals):
    kind, _, message = refusals["compiled, not built"]
    assert kind == "ValueError" and message.startswith("measure_training_step: ")
    assert "'net' is not built yet" in message and "model.build(input_shape)" in message and "model(x[:1])" in message
    assert "compile" not in message.split("pass a built, compiled Keras model", 1)[1]


def test_a_built_model_without_an_optimizer_is_told_to_compile(refusals):
    kind, _, message = refusals["built, not compiled"]
    assert kind == "ValueError" and "'seq' is not compiled" in message and "model.compile(" in message
    assert "build" not in message.split("pass a built, compiled Keras model", 1)[1]


def test_a_model_that_is_neither_is_told_both_and_a_non_model_is_a_type_error(refusals):
    message = refusals["neither"][2]
    assert "model.build(input_shape)" in message and "model.compile(" in message
    kind, is_type_error, message = refusals["no model"]
    assert is_type_error and message == ("measure_training_step: model must be a built, compiled Keras model, "
                                         "got [1, 2].")
    assert refusals["ready"] == ["step", "total", "variables"]
