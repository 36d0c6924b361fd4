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
