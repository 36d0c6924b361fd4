"""estimate_memory reads a model without breaking it: a subclassed model that ``model.build(shape)`` marked built
with none of its sublayers built (Keras 3 builds them only in a call), and a model built abstractly."""
from __future__ import annotations

from conftest import last_json, run_python

REPRO = """
    import json, warnings
    warnings.simplefilter("ignore")
    import gputrain_kit as kit
    kit.setup(devices=2)
    import keras, numpy as np, tensorflow as tf
    from keras.src.backend.common import global_state

    class Sub(keras.Model):                      # no build() of its own: model.build(shape) builds no sublayer
        def __init__(self):
            super().__init__()
            self.a, self.b = keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)

        def call(self, x):
            return self.b(self.a(x))

    def fresh():
        m = Sub()
        m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.build((None, 64))
        return m

    x, y = np.random.rand(32, 64).astype("float32"), np.zeros(32, "int32")
    out = {}
    m = fresh()
    out["weights before"] = len(m.weights)
    out["peak"] = kit.estimate_memory(m, batch_size=32).peak
    out["valued"] = all(v._value is not None for v in m.weights) and len(m.weights) == 4
    m.fit(x, y, verbose=0)
    out["fit"] = "ok"
    called = Sub()
    called(x[:1])
    out["same as called once"] = kit.estimate_memory(called, batch_size=32).peak == out["peak"]
    s = tf.distribute.MirroredStrategy(kit.device_names(2))
    with s.scope():
        d = fresh()
    kit.estimate_memory(d, batch_size=32)
    out["mirrored"] = type(d.a.kernel.value).__name__
    d.fit(x, y, batch_size=32, verbose=0)
    out["strategy fit"] = "ok"

    def build():
        return keras.Sequential([keras.Input((64,)), keras.layers.Dense(64), keras.layers.Dense(10)])

    abstract = kit.profiles.build_abstractly("test", build)
    kit.estimate_memory(build, batch_size=32)
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])(np.zeros((1, 3)))   # Keras's next symbolic call
    out["abstract stays abstract"] = all(v._value is None for v in abstract.weights)
    out["pending"] = len(global_state.get_global_attribute("uninitialized_variables") or [])
    print(json.dumps(out))
"""


def test_estimate_memory_then_fit_works_on_a_subclassed_model_built_with_build_shape():
    """Repro of the review (notebooks 02-03): estimate_memory traced the model in a scope that gives new variables
    no value; the sublayers it built there broke the next fit ("'SymbolicTensor' object has no attribute
    'handle'"). Now they get their values, under the model's strategy, and the estimate is the same as for the
    model called once."""
    out = last_json(run_python(REPRO))
    assert out["weights before"] == 0 and out["valued"], out
    assert out["fit"] == out["strategy fit"] == "ok", out
    assert out["same as called once"] and out["peak"] > 0, out
    assert out["mirrored"] == "MirroredVariable", out
    # a model built abstractly keeps no value, even after Keras's next symbolic call (which gives one to every
    # variable left on its list): build_abstractly takes them off it
    assert out["abstract stays abstract"] and out["pending"] == 0, out


def test_measure_training_step_recommends_calling_a_subclassed_model_over_build():
    import numpy as np
    import pytest

    keras = pytest.importorskip("keras")
    from gputrain_kit.measure import measure_training_step

    with pytest.raises(ValueError) as caught:
        measure_training_step(keras.Sequential([keras.layers.Dense(2)]), np.zeros((2, 3)), np.zeros((2, 2)))
    message = str(caught.value)
    assert "call it once on a batch (model(x[:1]))" in message
    assert "model.build(input_shape) builds a subclassed model's layers only if the model defines build()" in message
