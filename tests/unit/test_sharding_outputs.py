"""check_layout_map takes a LayoutMap key for a layer's output (``d2/output``, as keras-io's distribution guide
writes it): Keras lays out what a layer returns by looking up ``<the layer's path>/output`` when the layer runs
(``layers/layer.py``, ``Layer.__call__``), so such a key matches no variable and must not be refused. The paths the
kit accepts are checked against the paths Keras itself looks up during fit, on a functional, a Sequential and a
subclassed model; an output key that matches no layer is still refused, in words that say "layer output"."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CHILD = '''
import json, gputrain_kit as kit
kit.setup(devices=4, backend="jax")
import keras, numpy as np
from keras import distribution as d

asked = set()
_lookup = d.ModelParallel.get_tensor_layout
def recording(self, path):
    asked.add(path)
    return _lookup(self, path)
d.ModelParallel.get_tensor_layout = recording

class Sub(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.d1 = keras.layers.Dense(8, name="d1")
        self.d2 = keras.layers.Dense(4, name="d2")
    def call(self, x):
        return self.d2(self.d1(x))

def build(kind):
    if kind == "functional":
        x = keras.Input((6,))
        return keras.Model(x, keras.layers.Dense(4, name="d2")(keras.layers.Dense(8, name="d1")(x)), name="fn")
    if kind == "sequential":
        return keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, name="d1"),
                                 keras.layers.Dense(4, name="d2")], name="seq")
    model = Sub(name="sub")
    model(np.zeros((4, 6), "float32"))
    return model

mesh = d.DeviceMesh((2, 2), ("batch", "model"), d.list_devices())
out = {}
for kind in ("functional", "sequential", "subclassed"):
    layout_map = d.LayoutMap(mesh)
    layout_map["(.*/)?d1/kernel"] = (None, "model")
    layout_map["(.*/)?d2/output"] = ("batch", None)
    with d.ModelParallel(layout_map=layout_map, batch_dim_name="batch").scope():
        model = build(kind)
        matched = kit.sharding.check_layout_map(model, layout_map)
        asked.clear()
        model.compile("sgd", "mse")
        model.fit(np.zeros((8, 6), "float32"), np.zeros((8, 4), "float32"), batch_size=4, verbose=0)
    missing = d.LayoutMap(mesh)
    missing["(.*/)?d3/output"] = ("batch", None)
    try:
        kit.sharding.check_layout_map(model, missing)
        refused = None
    except kit.sharding.LayoutError as err:
        refused = str(err)
    out[kind] = {"matched": matched, "asked": sorted(asked), "refused": refused}
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def result():
    return last_json(run_python(CHILD, timeout=300))


@pytest.mark.parametrize("kind", ["functional", "sequential", "subclassed"])
def test_an_output_key_matches_the_path_keras_looks_up(result, kind):
    got = result[kind]
    outputs = got["matched"]["(.*/)?d2/output"]
    assert len(outputs) == 1 and outputs[0].endswith("d2/output")
    assert outputs[0] in got["asked"]                    # the very path Keras asked the distribution for
    kernels = got["matched"]["(.*/)?d1/kernel"]
    assert len(kernels) == 1 and kernels[0].endswith("d1/kernel")


@pytest.mark.parametrize("kind", ["functional", "sequential", "subclassed"])
def test_an_output_key_that_matches_no_layer_is_refused_in_words(result, kind):
    refused = result[kind]["refused"]
    assert refused is not None
    assert "match no layer output of" in refused and "'(.*/)?d3/output'" in refused
    assert "keep the layout Keras gives them" in refused
    assert "d2/output" in refused                        # the model's real output paths, to write the key from
