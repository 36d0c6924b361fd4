"""Notebook 09's claims about Keras 3's distribution API on JAX, each on the notebook's MLP and on a second model
kind (a small transformer block), in fresh processes: the backend is fixed when Keras is imported. JAX is part
of the course's install (`make install`: the `jax` extra), so a missing JAX fails here rather than skipping."""
from __future__ import annotations

import pytest

from gputrain_kit import check
from gputrain_kit.sharding import kernels_not_2d, mesh_bytes
from conftest import last_json, run_python
from support import JAX_MODELS

MODELS = "import keras\n" + JAX_MODELS


def _run(body: str):
    return last_json(run_python("import json, gputrain_kit as kit\nkit.setup(devices=8, backend='jax')\n"
                                + MODELS + body))


def test_setup_puts_keras_on_jax_with_8_simulated_devices():
    out = _run('''
import jax
r = kit.current()
print(json.dumps([keras.backend.backend(), jax.device_count(), r.mode, r.backend, list(r.devices), repr(r)]))
''')
    backend, count, mode, report_backend, devices, text = out
    assert (backend, count, mode, report_backend) == ("jax", 8, "cpu", "jax")
    assert devices == [f"cpu:{i}" for i in range(8)] and "on JAX" in text and "8 simulated devices" in text


def test_setup_refuses_jax_after_keras_was_imported_with_tensorflow():
    proc = run_python('''
import json, keras, gputrain_kit as kit
try:
    kit.setup(devices=8, backend="jax")
except kit.devices.SetupError as err:
    print(json.dumps(str(err)))
''')
    assert "Keras is already imported" in last_json(proc) and "Restart the kernel" in last_json(proc)


@pytest.mark.parametrize("kind", ["mlp", "block"])
def test_model_parallel_bytes_match_the_layout_arithmetic(kind):
    """Kernels cut over a 'model' axis of 4: each device holds what expected_bytes_per_device says, on all 8
    devices, and the model trains; DataParallel keeps a full copy everywhere."""
    out = _run(f'''
import numpy as np
from keras import distribution
make = {kind}
devices = distribution.list_devices()
mesh = distribution.DeviceMesh((2, 4), ["batch", "model"], devices)
layouts = distribution.LayoutMap(mesh)
layouts["(.*/)?(d[0-9]+|ff[0-9]+|head)/kernel"] = (None, "model")
layouts["(.*/)?embed/embeddings"] = (None, "model")
layouts["(.*/)?attention/(query|key|value)/kernel"] = (None, "model", None)     # the 4 heads over "model"
layouts["(.*/)?attention/attention_output/kernel"] = ("model", None, None)
with distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch").scope():
    model = make()
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = (np.random.default_rng(0).normal(size=(512, 256)).astype("float32") if make is mlp
         else np.random.default_rng(0).integers(0, 128, (512, 16)).astype("int32"))
    y = np.random.default_rng(1).integers(0, 8, 512)
    loss = model.fit(x, y, batch_size=64, epochs=1, verbose=0).history["loss"]
    mesh = kit.sharding.check_distributed(model)
held = kit.sharding.bytes_per_device(model)
with_slots = kit.sharding.bytes_per_device(model, include_optimizer=True)
expected = kit.sharding.expected_bytes_per_device(model, layouts)          # the mesh: the LayoutMap's
given = kit.sharding.expected_bytes_per_device(model, layouts, {{"batch": 2, "model": 4}})
with distribution.DataParallel(devices=devices).scope():
    copies = kit.sharding.bytes_per_device(make())
print(json.dumps([sorted(set(held.values())), expected.per_device, expected.replicated, len(held),
                  bool(np.isfinite(loss).all()), sorted(set(copies.values())),
                  max(abs(with_slots[d] / held[d] - 3) for d in held), mesh, given.per_device]))
''')
    held, per_device, replicated, devices, trains, copies, slots_off, mesh, given = out
    assert slots_off < 0.03                                 # Adam's two slots take their variable's layout
    assert mesh == {"batch": 2, "model": 4} and given == per_device
    assert held == [per_device] and devices == 8 and trains
    assert 3.0 < replicated / per_device <= 4.0
    assert copies == [replicated]


@pytest.mark.parametrize("kind", ["mlp", "block"])
def test_a_key_that_matches_nothing_shards_nothing_and_the_kit_says_so(kind):
    """A Sequential model's paths carry its name, a functional model's do not: a key written for the other kind
    matches nothing, every variable stays whole on every device, and check_layout_map says so."""
    out = _run(f'''
from keras import distribution
make = {kind}
mesh = distribution.DeviceMesh((2, 4), ["batch", "model"], distribution.list_devices())
naive = distribution.LayoutMap(mesh)
# A Sequential's paths start with its name ('mlp/d1/kernel'), a functional model's do not ('ff1/kernel'):
# each key below is written for the other kind, and matches nothing.
naive["d.*/kernel" if make is mlp else "block/ff.*/kernel"] = (None, "model")
with distribution.ModelParallel(layout_map=naive, batch_dim_name="batch").scope():
    model = make()
held = kit.sharding.bytes_per_device(model)
full = kit.sharding.expected_bytes_per_device(model, naive, {{"batch": 2, "model": 4}}).replicated
try:
    kit.sharding.check_layout_map(model, naive)
    message = ""
except kit.sharding.LayoutError as err:
    message = str(err)
print(json.dumps([sorted(set(held.values())), full, message]))
''')
    held, full, message = out
    assert held == [full]                                   # replicated everywhere, silently
    assert "match no variable" in message and "(.*/)?" in message and "re.fullmatch" in message


def test_data_parallel_refuses_a_batch_that_does_not_divide_and_matches_one_device():
    """One SGD step on 8 devices gives one device's weights, on the MLP and on the transformer block; a batch of
    300, or a last batch of 33, is refused (JAX's IndivisibleError)."""
    out = _run('''
import contextlib, numpy as np
from keras import distribution
rng = np.random.default_rng(0)
x = rng.normal(size=(512, 256)).astype("float32"); y = rng.integers(0, 16, 512)
tokens, labels = rng.integers(0, 128, (512, 16)).astype("int32"), rng.integers(0, 8, 512)
dp = distribution.DataParallel(devices=distribution.list_devices())
def one_step(make, xs, ys, scope):
    keras.utils.set_random_seed(0)
    with scope:
        m = make(); m.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(xs[:256], ys[:256], batch_size=256, epochs=1, shuffle=False, verbose=0)
    return m.get_weights()
gap = max(float(np.abs(a - b).max()) for make, xs, ys in ((mlp, x, y), (block, tokens, labels))
          for a, b in zip(one_step(make, xs, ys, contextlib.nullcontext()), one_step(make, xs, ys, dp.scope())))
refused = []
for n, batch in ((300, 300), (417, 128)):            # one batch of 300; a last batch of 33
    with dp.scope():
        m = mlp(); m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        try:
            m.fit(x[:n], y[:n], batch_size=batch, epochs=1, verbose=0)
            refused.append("")
        except Exception as err:
            refused.append(type(err).__name__ + ": " + str(err)[:300])
mp = distribution.ModelParallel(layout_map=distribution.LayoutMap(distribution.DeviceMesh(
    (2, 4), ["batch", "model"], distribution.list_devices())), batch_dim_name="batch")
with mp.scope():                                     # a 2 x 4 mesh cuts the batch 2 ways only
    m = mlp(); m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    m.fit(x[:300], y[:300], batch_size=300, epochs=1, verbose=0)
    try:
        m.fit(x[:301], y[:301], batch_size=301, epochs=1, verbose=0)
        odd = ""
    except Exception as err:
        odd = type(err).__name__
print(json.dumps([gap, refused, odd]))
''')
    gap, refused, odd = out
    assert gap < 1e-5 and odd == "IndivisibleError"
    assert all(r.startswith("IndivisibleError") and "evenly divide" in r for r in refused), refused


def test_fit_outside_the_scope_runs_silently_and_cuts_no_batch():
    """Notebook 09 section 3: a model built inside distribution.scope() and fitted outside it trains, with no
    error and no warning, while Keras has no distribution and cuts no batch over the devices (it calls
    distribute_data_input for every batch inside the scope, never outside); its variables stay where they were
    laid out. check_distributed refuses it outside and gives the mesh inside. On the MLP and the block."""
    out = _run('''
import warnings, numpy as np
from keras import distribution
from keras.src.backend.jax import distribution_lib as jax_distribution
cut = []
real = jax_distribution.distribute_data_input
def counted(*args, **kwargs):
    cut.append(1)
    return real(*args, **kwargs)
jax_distribution.distribute_data_input = counted
rng = np.random.default_rng(0)
data = {"mlp": rng.normal(size=(128, 256)).astype("float32"), "block": rng.integers(0, 128, (128, 16)).astype("int32")}
y = rng.integers(0, 8, 128)
layouts = distribution.LayoutMap(distribution.DeviceMesh((2, 4), ["batch", "model"], distribution.list_devices()))
layouts["(.*/)?(d[0-9]+|ff[0-9]+|head)/kernel"] = (None, "model")
mp = distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch")
results = {}
for name, make in (("mlp", mlp), ("block", block)):
    with mp.scope():
        model = make()
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        before = len(cut)
        model.fit(data[name], y, batch_size=64, epochs=1, verbose=0)
        inside = len(cut) - before
        mesh = kit.sharding.check_distributed(model)
    held = kit.sharding.bytes_per_device(model)
    before = len(cut)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = model.fit(data[name], y, batch_size=64, epochs=1, verbose=0).history["loss"]
    try:
        kit.sharding.check_distributed(model)
        refused = ""
    except ValueError as err:
        refused = str(err)
    results[name] = [distribution.distribution() is None, inside, len(cut) - before, [str(w.message) for w in caught],
                     bool(np.isfinite(loss).all()), kit.sharding.bytes_per_device(model) == held, mesh, refused]
print(json.dumps(results))
''')
    for kind, (no_distribution, inside, outside, warned, trains, kept, mesh, refused) in out.items():
        assert no_distribution and inside > 0 and outside == 0 and warned == [] and trains and kept, (kind, out[kind])
        assert mesh == {"batch": 2, "model": 4}
        assert "used outside distribution.scope()" in refused and "build and fit inside distribution.scope()" in refused


def test_a_failed_first_step_loses_the_variables_and_the_kit_says_rebuild_it(tmp_path):
    """Notebook 09 section 5 and exercise 3: on JAX, Keras takes the variables off the model while fit runs its
    steps and hands the last good step's values back in a finally; a fit whose first step fails, on a batch the
    mesh cannot divide, leaves a trained model without them (evaluate and predict at any step:
    test_nb09_failed_steps.py): predict and save raise TypeError ('NoneType' object is
    not callable), and every kit helper says the model is unusable: rebuild it. A fresh model's first fit
    fails before its variables are taken, and keeps them. Under DataParallel and ModelParallel, on the MLP and
    the block."""
    out = _run(f'''
import os, numpy as np
from keras import distribution
rng = np.random.default_rng(0)
data = {{"mlp": rng.normal(size=(320, 256)).astype("float32"), "block": rng.integers(0, 128, (320, 16)).astype("int32")}}
y = rng.integers(0, 8, 320)
devices = distribution.list_devices()
layouts = distribution.LayoutMap(distribution.DeviceMesh((2, 4), ["batch", "model"], devices))
layouts["(.*/)?(d[0-9]+|ff[0-9]+|head)/kernel"] = (None, "model")
kinds = {{"DataParallel": (distribution.DataParallel(devices=devices), 296, 300),
          "ModelParallel": (distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch"), 300, 301)}}
def error(call):
    try:
        call()
        return ""
    except Exception as err:
        return type(err).__name__ + ": " + str(err)
results = {{}}
for name, make in (("mlp", mlp), ("block", block)):
    for kind, (dist, good, bad) in kinds.items():
        with dist.scope():
            model = make()
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            fresh = error(lambda: model.fit(data[name][:bad], y[:bad], batch_size=bad, epochs=1, verbose=0))
            fresh_kept = error(lambda: kit.sharding.check_distributed(model))
            model.fit(data[name][:good], y[:good], batch_size=good, epochs=1, verbose=0)
            failed = error(lambda: model.fit(data[name][:bad], y[:bad], batch_size=bad, epochs=1, verbose=0))
            results[name + " " + kind] = [
                fresh.split(":")[0], fresh_kept, failed.split(":")[0],
                error(lambda: model.predict(data[name][:8], verbose=0)),
                error(lambda: model.save(os.path.join({str(tmp_path)!r}, name + kind + ".keras"))),
                error(lambda: kit.sharding.check_distributed(model)),
                error(lambda: kit.sharding.bytes_per_device(model))]
print(json.dumps(results))
''')
    for case, (fresh, fresh_kept, failed, predict, save, checked, measured) in out.items():
        assert fresh == failed == "IndivisibleError" and fresh_kept == "", (case, out[case])
        for keras_says in (predict, save):
            assert keras_says.startswith("TypeError") and "'NoneType' object is not callable" in keras_says, case
        for kit_says in (checked, measured):
            assert "unusable after a failed fit, evaluate or predict" in kit_says and "rebuild it" in kit_says, \
                (case, kit_says)
            assert "evaluate and predict when any step fails" in kit_says, kit_says


def test_a_reloaded_model_loses_the_name_prefix_and_the_anchored_key_still_matches(tmp_path):
    out = _run(f'''
from keras import distribution
mesh = distribution.DeviceMesh((2, 4), ["batch", "model"], distribution.list_devices())
model = mlp()
model.save({str(tmp_path / "mlp.keras")!r})
first, anchored = distribution.LayoutMap(mesh), distribution.LayoutMap(mesh)
first["mlp/d[0-9]+/kernel"] = (None, "model")
anchored["(.*/)?d[0-9]+/kernel"] = (None, "model")
results = {{}}
for name, layouts in (("first", first), ("anchored", anchored)):
    with distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch").scope():
        back = keras.models.load_model({str(tmp_path / "mlp.keras")!r})
    results[name] = [back.weights[0].path, kit.sharding.variable_layouts(back)[back.weights[0].path]]
print(json.dumps([[v.path for v in model.weights][0], results]))
''')
    original, results = out
    assert original == "mlp/d1/kernel" and results["first"][0] == "d1/kernel"
    assert "None, None" in results["first"][1] and "'model'" in results["anchored"][1]


def test_the_exercise_checks_and_the_explorer_arithmetic():
    per_device, full, refused = mesh_bytes(check.NB09_MLP, 2, True)
    assert check.nb09_mesh_ratio(round(full / per_device, 2)) and not check.nb09_mesh_ratio(2.5)
    ratio = f"{full / per_device:.2f}x"                           # as MeshExplorer prints it
    assert check.nb09_mesh_ratio(ratio) and check.nb09_mesh_ratio(ratio + " less") and not check.nb09_mesh_ratio("2.5x")
    assert 1.95 < full / per_device < 2.0 and not refused
    assert mesh_bytes(check.NB09_MLP, 8, True)[2] == []          # 16 columns divide by 8
    assert mesh_bytes([("m/d/kernel", (4, 10), 4)], 4, True) == (160, 160, ["m/d/kernel: 10 columns over 4"])
    conv = [("c/c1/kernel", (3, 3, 3, 32), 4), ("c/c1/bias", (32,), 4), ("c/d/kernel", (32, 16), 4)]
    whole = 3 * 3 * 3 * 32 * 4 + 32 * 4
    assert mesh_bytes(conv, 4, True) == (whole + 32 * 16, whole + 32 * 16 * 4, [])   # the 4-D kernel whole
    assert kernels_not_2d(conv) == ["c/c1/kernel: 4-D (3, 3, 3, 32)"]
    for bad in (0, 2.0, True, "4"):
        with pytest.raises(TypeError, match="mesh_bytes: model_axis must be"):
            mesh_bytes(conv, bad, True)
    assert check.nb09_key_matches(True) and not check.nb09_key_matches(False)
    assert check.nb09_largest_batch(300) and not check.nb09_largest_batch(296)


@pytest.mark.timing      # a wall-clock bound: run alone, after the parallel tests (`make unit`)
def test_mesh_explorer_answers_at_once():
    from support import answer_seconds

    from gputrain_kit.widgets import MeshExplorer

    e = MeshExplorer(list(check.NB09_MLP), mesh=(2, 4))
    assert answer_seconds(e.mesh, (8, 1)) < 0.5


def test_mesh_explorer_headless():
    from gputrain_kit.widgets import MeshExplorer

    e = MeshExplorer(list(check.NB09_MLP), mesh=(2, 4))
    four = e.per_device
    e.mesh.value = (8, 1)
    assert e.per_device == mesh_bytes(check.NB09_MLP, 1, True)[1] and "a full copy</b>: nothing is cut" in e.summary.value
    assert "its own full copy" in e.summary.value                   # 8 x 1: plain data parallelism
    e.mesh.value = (1, 8)
    assert e.per_device < four and "8 device(s) of its 'model' row together" in e.summary.value
    e.shard.value = False          # a reader: "computed by the 8 devices together" although nothing was split
    assert "nothing is cut" in e.summary.value and "together" not in e.summary.value
    assert "each hold a full copy and compute the same slice" in e.summary.value
    with pytest.raises(ValueError, match="mesh must be one of"):
        MeshExplorer(list(check.NB09_MLP), mesh=(3, 3))
    # a kernel whose columns do not divide, and a kernel that is not 2-D: named, counted whole, in Keras's words
    uneven = MeshExplorer([("m/d1/kernel", (256, 512), 4), ("m/d2/kernel", (512, 10), 4),
                           ("m/c1/kernel", (3, 3, 3, 32), 4)], mesh=(2, 4))
    assert uneven.per_device == 256 * 512 + 512 * 10 * 4 + 3 * 3 * 3 * 32 * 4
    assert "Keras raise IndivisibleError when the model is built" in uneven.summary.value
    assert "leave it out of the map and it stays whole: m/d2/kernel: 10 columns over 4" in uneven.summary.value
    assert "not 2-D" in uneven.summary.value and "m/c1/kernel: 4-D (3, 3, 3, 32)" in uneven.summary.value
    assert "JAX refuses" not in uneven.summary.value and "left replicated" not in uneven.summary.value
    uneven.shard.value = False
    assert "IndivisibleError" not in uneven.summary.value and "not 2-D" not in uneven.summary.value


def test_tensorflow_processes_keep_jax_out():
    """TensorFlow's import loads all of JAX where it is installed (tf.lite tries `from jax import jit`): the kit's
    TensorFlow import and its child processes refuse it, so JAX costs TensorFlow notebooks nothing; a learner can
    still import JAX afterwards, and KERAS_BACKEND=jax is left alone."""
    out = last_json(run_python('''
import json, sys, gputrain_kit as kit
kit.setup(devices=2)
import keras
in_kernel = "jax" in sys.modules
import jax
print(json.dumps([in_kernel, jax.__name__]))
'''))
    assert out == [False, "jax"]
    child = last_json(run_python('''
import json, sys
from gputrain_kit._children.lifecycle import quiet_tensorflow
quiet_tensorflow()
import tensorflow
print(json.dumps("jax" in sys.modules))
'''))
    assert child is False


def test_xla_inserts_the_all_reduce_from_the_layouts_and_keras_calls_none():
    """Notebook 09 section 2: the gradient of a mean loss over a batch cut over 8 devices compiles to a program
    with an all-reduce; over a batch on one device, to none. Keras's JAX training step calls no collective
    itself (its trainer's source has no psum / all-reduce), and a second kind of layer (a conv) gets one too."""
    import inspect
    import re

    from keras.src.backend.jax import trainer
    assert not re.search(r"psum|pmean|all_reduce|all-reduce|all_gather", inspect.getsource(trainer))
    out = _run('''
import jax, numpy as np
from keras import distribution
dp = distribution.DataParallel(devices=distribution.list_devices())
x = np.random.default_rng(0).normal(size=(256, 256)).astype("float32")
batch = jax.device_put(x, dp.get_data_layout((256, 256)).backend_layout)
grad = jax.jit(jax.grad(lambda w, xb: jax.numpy.mean((xb @ w) ** 2)))
w = jax.numpy.ones((256, 16))
images = np.random.default_rng(1).normal(size=(64, 8, 8, 3)).astype("float32")
conv_grad = jax.jit(jax.grad(lambda k, xb: jax.numpy.mean(jax.lax.conv_general_dilated(
    xb, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")) ** 2)))
k = jax.numpy.ones((3, 3, 3, 4))
texts = [grad.lower(w, batch).compile().as_text(), grad.lower(w, jax.device_put(x, jax.devices()[0])).compile().as_text(),
         conv_grad.lower(k, jax.device_put(images, dp.get_data_layout(images.shape).backend_layout)).compile().as_text()]
print(json.dumps(["all-reduce" in t for t in texts]))
''')
    assert out == [True, False, True]
