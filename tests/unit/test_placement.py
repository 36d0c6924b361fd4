"""gputrain_kit.placement.variable_devices: a model with no variables yet is refused with the fix, not answered {}."""
from __future__ import annotations

import pytest


def test_variable_devices_refuses_an_unbuilt_model_and_reads_a_built_one():
    import keras

    from gputrain_kit.placement import variable_devices

    class Sub(keras.Model):
        def __init__(self):
            super().__init__(name="sub")
            self.dense = keras.layers.Dense(3, name="dense")

        def call(self, x):
            return self.dense(x)

    for unbuilt in (Sub(), keras.Sequential([keras.layers.Dense(3)], name="seq"), keras.layers.Dense(3, name="d")):
        with pytest.raises(ValueError, match=r"variable_devices: the model '(sub|seq|d)' is not built yet") as err:
            variable_devices(unbuilt)
        assert "keras.Input(shape)" in str(err.value) and "build(input_shape)" in str(err.value)
    built = Sub()
    built(keras.ops.ones((2, 4)))
    devices = variable_devices(built)
    assert sorted(devices) == ["sub/dense/bias", "sub/dense/kernel"]
    assert all(len(where) == 1 and where[0].startswith("CPU:") for where in devices.values())
    with pytest.raises(ValueError, match="variable_devices: expected a Keras model or layer, got int"):
        variable_devices(3)


def test_run_on_replicas_refuses_a_batch_that_is_not_distributed():
    """A plain tensor would reach every replica whole (strategy.run does not split it): refused, with the fix; a
    distributed batch still runs, a quarter on each of 4 replicas."""
    from conftest import last_json, run_python

    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, tensorflow as tf
        from gputrain_kit.placement import run_on_replicas
        strategy = tf.distribute.MirroredStrategy(kit.device_names())
        out = {}
        for name, batch in [("tensor", tf.ones((16, 3))), ("array", np.ones((16, 3))), ("dict", {"x": tf.ones((16, 3))})]:
            try:
                out[name] = run_on_replicas(strategy, lambda b: b, batch)
            except ValueError as err:
                out[name] = str(err)
        batch = next(iter(strategy.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(
            np.ones((64, 3), "float32")).batch(16))))
        out["distributed"] = run_on_replicas(strategy, lambda b: b * 2, batch)
        one = tf.distribute.MirroredStrategy(kit.device_names(1))        # one replica: nothing to split
        out["one replica"] = run_on_replicas(one, lambda b: b, tf.ones((16, 3)))
        print(json.dumps(out))
    """))
    for name in ("tensor", "array", "dict"):
        message = out[name]
        assert isinstance(message, str) and message.startswith("run_on_replicas: distributed_batch must be split"), out
        assert "every one of the 4 replicas" in message and "experimental_distribute_dataset" in message
    assert "EagerTensor of shape (16, 3)" in out["tensor"] and "ndarray of shape (16, 3)" in out["array"]
    assert out["distributed"] == [[f"CPU:{i}", [4, 3]] for i in range(4)]
    assert out["one replica"] == [["CPU:0", [16, 3]]]


def test_variable_devices_finds_a_mirrored_models_copies_without_strategy():
    """A model built under MirroredStrategy's scope: every copy is listed whether or not ``strategy=`` is passed (it
    used to list replica 0's only); a model built outside the scope keeps one copy even with ``strategy=``."""
    from conftest import last_json, run_python

    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=3)
        import keras, tensorflow as tf
        from gputrain_kit.placement import variable_devices
        strategy = tf.distribute.MirroredStrategy(kit.device_names())
        with strategy.scope():
            inside = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")], name="inside")
        outside = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="d")], name="outside")
        print(json.dumps({"plain": variable_devices(inside), "given": variable_devices(inside, strategy),
                          "outside": variable_devices(outside, strategy)}))
    """))
    three = ["CPU:0", "CPU:1", "CPU:2"]
    assert out["plain"] == out["given"] == {"inside/d/kernel": three, "inside/d/bias": three}
    assert out["outside"] == {"outside/d/kernel": ["CPU:0"], "outside/d/bias": ["CPU:0"]}


def test_variable_devices_keeps_variables_that_share_a_path():
    """Two layers given the same name in a subclassed model give their variables the same ``path``: keyed by path
    alone, 6 weights came back as 4 entries. Every variable now has its own key, the repeats suffixed " (2)", in
    ``model.weights`` order; the result stays a dict of device lists."""
    import keras

    from gputrain_kit.placement import variable_devices

    class Twin(keras.Model):
        def __init__(self):
            super().__init__(name="twin")
            self.first, self.second = keras.layers.Dense(3, name="proj"), keras.layers.Dense(3, name="proj")
            self.third, self.out = keras.layers.Dense(3, name="proj"), keras.layers.Dense(2, name="out")

        def call(self, x):
            return self.out(self.third(self.second(self.first(x))))

    model = Twin()
    model(keras.ops.ones((2, 4)))
    assert len(model.weights) == 8 and len({w.path for w in model.weights}) == 4     # the paths do collide
    devices = variable_devices(model)
    assert list(devices) == ["twin/proj/kernel", "twin/proj/bias", "twin/proj/kernel (2)", "twin/proj/bias (2)",
                             "twin/proj/kernel (3)", "twin/proj/bias (3)", "twin/out/kernel", "twin/out/bias"]
    assert all(isinstance(where, list) and len(where) == 1 and where[0].startswith("CPU:")
               for where in devices.values())
