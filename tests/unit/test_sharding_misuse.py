"""gputrain_kit.sharding refusing what Keras 3 on JAX lets pass silently or answers cryptically: a model used
outside the distribution's scope, a model whose variables a failed fit lost, a mesh_shape that is not the
LayoutMap's mesh, include_optimizer on a model not compiled or not fitted. Each case is made for real in one
fresh process (the backend and the 8 simulated devices are fixed when Keras and JAX are imported); every error
has the kit's shape: the function first, the argument or the model, what was given, the fix."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CHILD = '''
import json, os, tempfile, gputrain_kit as kit
kit.setup(devices=8, backend="jax")
import keras, numpy as np
from keras import distribution
S = kit.sharding

def mlp(name="mlp"):
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(64, activation="relu", name="d1"),
                             keras.layers.Dense(16, name="d2")], name=name)

rng = np.random.default_rng(0)
x = rng.normal(size=(512, 256)).astype("float32"); y = rng.integers(0, 16, 512)
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
devices = distribution.list_devices()
mesh = distribution.DeviceMesh((2, 4), ["batch", "model"], devices)
layouts = distribution.LayoutMap(mesh)
layouts["(.*/)?d[0-9]+/kernel"] = (None, "model")
mp = distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch")
dp = distribution.DataParallel(devices=devices)
out = {}

def answer(name, call):
    try:
        out[name] = {"ok": call()}
    except Exception as err:
        out[name] = {"type": type(err).__name__, "bases": [t.__name__ for t in type(err).__mro__],
                     "message": str(err)}

# -- the scope: build and fit inside distribution.scope()
with mp.scope():
    model = mlp(); model.compile("adam", loss)
    answer("unfitted_slots", lambda: S.bytes_per_device(model, include_optimizer=True))
    model.fit(x[:256], y[:256], batch_size=64, epochs=1, verbose=0)
    answer("inside", lambda: S.check_distributed(model))
answer("outside", lambda: S.check_distributed(model))
answer("step_outside", lambda: kit.collectives.train_step_text(model, x[:64], y[:64]))
with mp.scope():
    answer("step_uncompiled", lambda: kit.collectives.train_step_text(mlp("raw"), x[:64], y[:64]))
    answer("step_bad_x", lambda: kit.collectives.train_step_text(model, 3, y[:64]))
    answer("step_ok", lambda: len(kit.collectives.read_collectives(kit.collectives.train_step_text(model, x[:64], y[:64]))) > 0)
answer("measured_outside", lambda: sorted(set(S.bytes_per_device(model).values())))
answer("keys_outside", lambda: S.check_layout_map(model, layouts))
plain = mlp("plain")
answer("plain_nowhere", lambda: S.check_distributed(plain))
answer("plain_keys", lambda: S.check_layout_map(plain, layouts))            # a path check: passes
with dp.scope():
    answer("plain_in_dp", lambda: S.check_distributed(plain))
    answer("mp_model_in_dp", lambda: S.check_distributed(model))
    copies = mlp("copies")
answer("dp_model_keys", lambda: S.check_layout_map(copies, layouts))
answer("not_a_model", lambda: S.check_distributed("mlp"))

# -- the mesh: read from the LayoutMap, or refused when mesh_shape says another
narrow = distribution.LayoutMap(distribution.DeviceMesh((4, 2), ["batch", "model"], devices))
narrow["(.*/)?d[0-9]+/kernel"] = (None, "model")
with distribution.ModelParallel(layout_map=narrow, batch_dim_name="batch").scope():
    halved = mlp("halved")
out["mesh"] = [S.expected_bytes_per_device(model, layouts).per_device,
               S.expected_bytes_per_device(model, layouts, {"model": 4, "batch": 2}).per_device,
               sorted(set(S.bytes_per_device(model).values())),
               S.expected_bytes_per_device(halved, narrow).per_device,
               sorted(set(S.bytes_per_device(halved).values()))]
answer("mismatch", lambda: S.expected_bytes_per_device(model, layouts, {"batch": 4, "model": 2}))
meshless = distribution.LayoutMap(None)
meshless["(.*/)?d[0-9]+/kernel"] = (None, "model")
answer("meshless", lambda: S.expected_bytes_per_device(model, meshless))
answer("meshless_given", lambda: S.expected_bytes_per_device(model, meshless, {"batch": 2, "model": 4}).per_device)
answer("unknown_axis", lambda: S.expected_bytes_per_device(model, meshless, {"batch": 8}))

# -- the optimizer: compiled and fitted, or said so
answer("uncompiled", lambda: S.bytes_per_device(mlp("bare"), include_optimizer=True))

# -- a failed first step: Keras loses the variables; every helper says to rebuild the model
with mp.scope():
    lost = mlp("lost"); lost.compile("sgd", loss)
    lost.fit(x[:300], y[:300], batch_size=300, epochs=1, verbose=0)
    try:
        lost.fit(x[:301], y[:301], batch_size=301, epochs=1, verbose=0)     # 301 does not divide by 2
    except Exception as err:
        out["failed_fit"] = type(err).__name__
    for name, call in (("predict", lambda: lost.predict(x[:8], verbose=0)), ("save", lambda: lost.save(os.path.join(tempfile.mkdtemp(), "lost.keras")))):
        answer("keras_" + name, call)
    answer("lost_check_distributed", lambda: S.check_distributed(lost))
    answer("lost_bytes", lambda: S.bytes_per_device(lost, include_optimizer=True))
    answer("lost_layouts", lambda: S.variable_layouts(lost))
    answer("lost_keys", lambda: S.check_layout_map(lost, layouts))
    answer("lost_expected", lambda: S.expected_bytes_per_device(lost, layouts))
    answer("lost_step", lambda: kit.collectives.train_step_text(lost, x[:64], y[:64]))
    # a step that fails after others succeeded in the same fit loses nothing: Keras gives the last state back
    late = mlp("late"); late.compile("sgd", loss)
    try:
        late.fit(x[:301], y[:301], batch_size=64, epochs=1, verbose=0)      # 4 steps of 64, then 45
    except Exception as err:
        out["late_fit"] = type(err).__name__
    answer("late_check", lambda: S.check_distributed(late))
with dp.scope():                                                         # evaluate, under DataParallel
    judged = mlp("judged"); judged.compile("sgd", loss)
    judged.fit(x[:256], y[:256], batch_size=256, epochs=1, verbose=0)
    try:
        judged.evaluate(x[:300], y[:300], batch_size=300, verbose=0)      # 300 does not divide by 8
    except Exception as err:
        out["failed_evaluate"] = type(err).__name__
    answer("judged_bytes", lambda: S.bytes_per_device(judged))
print(json.dumps(out))
'''


@pytest.fixture(scope="module")
def out():
    return last_json(run_python(CHILD, timeout=400))


def _refused(out, name, *parts, kind="ValueError", func=None):
    r = out[name]
    assert "message" in r, f"{name} was accepted: {r}"
    message = r["message"]
    assert r["type"] == kind and "ValueError" in r["bases"], r
    if func:
        assert message.startswith(func + ": "), message
    for part in parts:
        assert part in message, (part, message)
    assert "Fix:" in message and len(message) <= 600, message
    return message


def test_a_model_used_outside_its_scope_is_refused_and_measured_anywhere(out):
    assert out["inside"] == {"ok": {"batch": 2, "model": 4}}
    _refused(out, "outside", "model mlp", "{'batch': 2, 'model': 4}", "keras.distribution.distribution() is None",
             "build and fit inside distribution.scope()", func="check_distributed")
    # measuring and checking keys read what is there: outside the scope as inside
    assert len(out["measured_outside"]["ok"]) == 1 and list(out["keys_outside"]["ok"]) == ["(.*/)?d[0-9]+/kernel"]
    _refused(out, "plain_nowhere", "model plain", "on one device", "build and fit inside distribution.scope()",
             func="check_distributed")
    assert out["plain_keys"]["ok"] == {"(.*/)?d[0-9]+/kernel": ["plain/d1/kernel", "plain/d2/kernel"]}


def test_a_model_built_in_another_scope_is_refused(out):
    _refused(out, "plain_in_dp", "model plain", "built outside distribution.scope()", "DataParallel",
             "{'batch': 8}", func="check_distributed")
    _refused(out, "mp_model_in_dp", "model mlp", "another distribution's scope", "{'batch': 2, 'model': 4}",
             "{'batch': 8}", func="check_distributed")
    _refused(out, "dp_model_keys", "model copies", "'copies/d1/kernel'", "(None, 'model')", "ModelParallel",
             kind="LayoutError", func="check_layout_map")
    assert out["not_a_model"]["type"] == "ArgumentTypeError"
    assert out["not_a_model"]["message"].startswith("check_distributed: model must be a Keras model, got 'mlp'")


def test_expected_bytes_read_the_mesh_from_the_layout_map(out):
    default, given, measured, halved, halved_measured = out["mesh"]
    assert default == given and measured == [default]            # the 2 x 4 mesh: a quarter of each kernel
    assert halved_measured == [halved] and halved > default       # the 4 x 2 mesh: a half
    _refused(out, "mismatch", "mesh_shape", "{'batch': 4, 'model': 2}", "layout_map.device_mesh is "
             "{'batch': 2, 'model': 4}", "leave mesh_shape out", func="expected_bytes_per_device")
    _refused(out, "meshless", "mesh_shape", "mesh_shape=None", "LayoutMap(DeviceMesh(...))",
             func="expected_bytes_per_device")
    assert out["meshless_given"] == {"ok": default}
    _refused(out, "unknown_axis", "layout_map", "'model'", "{'batch': 8}", func="expected_bytes_per_device")


def test_include_optimizer_needs_a_compiled_and_fitted_model(out):
    _refused(out, "uncompiled", "include_optimizer=True", "got bare", "not compiled",
             "model.compile(", func="bytes_per_device")
    _refused(out, "unfitted_slots", "include_optimizer=True", "got mlp", "Adam is not built", "fit it first",
             func="bytes_per_device")


def test_a_failed_first_step_loses_the_variables_and_every_helper_says_rebuild_it(out):
    assert out["failed_fit"] == "IndivisibleError" and out["failed_evaluate"] == "IndivisibleError"
    for name in ("keras_predict", "keras_save"):                 # what Keras itself says
        assert out[name]["type"] == "TypeError" and "'NoneType' object is not callable" in out[name]["message"]
    for name, func in (("lost_check_distributed", "check_distributed"), ("lost_bytes", "bytes_per_device"),
                       ("lost_layouts", "variable_layouts"), ("lost_keys", "check_layout_map"),
                       ("lost_expected", "expected_bytes_per_device")):
        _refused(out, name, "model lost is unusable after a failed fit", "(4 of 4, e.g. 'lost/d1/kernel')",
                 "rebuild it", func=func)
    _refused(out, "lost_step", "model lost is unusable after a failed fit", "rebuild it", func="train_step_text")
    _refused(out, "judged_bytes", "model judged is unusable after a failed fit", "rebuild it", func="bytes_per_device")
    # no false alarm: a fit that fails after a step succeeded keeps its variables
    assert out["late_fit"] == "IndivisibleError" and out["late_check"] == {"ok": {"batch": 2, "model": 4}}


def test_train_step_text_compiles_inside_the_scope_and_refuses_in_words(out):
    """kit.collectives.train_step_text: the step fit runs, compiled, only where fit would run distributed."""
    assert out["step_ok"] == {"ok": True}
    _refused(out, "step_outside", "model mlp", "keras.distribution.distribution() is None",
             "build and fit inside distribution.scope()", func="train_step_text")
    _refused(out, "step_uncompiled", "model raw is not compiled", "model.compile(", func="train_step_text")
    assert out["step_bad_x"]["type"] == "ArgumentTypeError"
    assert out["step_bad_x"]["message"].startswith("train_step_text: x must be an array with a batch axis, got 3")
