"""Notebook 09 (review of notebooks 07-09): which failed step loses a model's variables on JAX, and which kernels a
"model" axis can cut. Keras's JAX trainer (keras/src/backend/jax/trainer.py) hands the variables back in a
``finally`` in ``fit`` only: ``evaluate`` and ``predict`` lose them at any failed step, a last partial batch
included. A LayoutMap that cuts a kernel whose columns do not divide makes building the model fail. Each claim in
a fresh process on 8 simulated devices (the backend is fixed when Keras is imported)."""
from __future__ import annotations

from conftest import last_json, run_python
from support import JAX_MODELS

MODELS = '''
import json, numpy as np, gputrain_kit as kit
kit.setup(devices=8, backend="jax")
import keras
from keras import distribution

def error(call):
    """What call() raised, as 'Type: message', or '' when it ran."""
    try:
        call()
        return ""
    except Exception as err:
        return type(err).__name__ + ": " + str(err)
''' + JAX_MODELS

STEPS = '''
import os
folder = os.environ["GPUTRAIN_TEST_FOLDER"]
rng = np.random.default_rng(0)
data = {"mlp": rng.normal(size=(320, 256)).astype("float32"), "block": rng.integers(0, 128, (320, 16)).astype("int32")}
y = rng.integers(0, 8, 320)
devices = distribution.list_devices()
layouts = distribution.LayoutMap(distribution.DeviceMesh((2, 4), ["batch", "model"], devices))
layouts["(.*/)?(d[0-9]+|ff[0-9]+|head)/kernel"] = (None, "model")
kinds = {"DataParallel": (distribution.DataParallel(devices=devices), 300),          # 256, then 44 over 8
         "ModelParallel": (distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch"), 257)}  # 1 over 2

results = {}
cases = (("mlp", mlp, "DataParallel", ("fit", "evaluate", "predict")), ("mlp", mlp, "ModelParallel", ("fit", "evaluate", "predict")),
         ("block", block, "ModelParallel", ("evaluate", "predict")))
for name, make, kind, calls in cases:
    dist, n = kinds[kind]
    row = {}
    for what in calls:
        with dist.scope():
            model = make()
            model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            model.fit(data[name][:256], y[:256], batch_size=256, epochs=1, verbose=0)
            path = os.path.join(folder, name + kind + what + ".weights.h5")
            model.save_weights(path)
            before = model.predict(data[name][:64], verbose=0) if what == "predict" else None
            run = {"fit": lambda: model.fit(data[name][:n], y[:n], batch_size=256, epochs=1, verbose=0),
                   "evaluate": lambda: model.evaluate(data[name][:n], y[:n], batch_size=256, verbose=0),
                   "predict": lambda: model.predict(data[name][:n], batch_size=256, verbose=0)}[what]
            failed = error(run)
            after = error(lambda: model.predict(data[name][:8], verbose=0))
            kit_says = error(lambda: kit.sharding.check_distributed(model))
            same = None
            if what == "predict":                   # the fix: the saved weights, loaded into a rebuilt model
                again = make()
                again.load_weights(path)
                same = bool(np.allclose(again.predict(data[name][:64], verbose=0), before, atol=1e-6))
        row[what] = [failed.split(":")[0], after, kit_says, same]
    results[name + " " + kind] = row
print(json.dumps(results))
'''


def test_evaluate_and_predict_lose_the_variables_at_any_step_fit_only_at_its_first(tmp_path):
    """Notebook 09 section 5: after a first step of 256 succeeded, a last partial step that the mesh cannot divide
    fails in all three. fit hands the variables back (its finally), so the model still predicts; evaluate and
    predict do not: the trained model raises TypeError ('NoneType' object is not callable), and the kit names the
    rule and the fix. The fix the notebook shows: weights saved before the failure, loaded into a rebuilt model,
    predict as before. The MLP under DataParallel (8 devices) and ModelParallel (2 x 4), the block under
    ModelParallel."""
    out = last_json(run_python(MODELS + STEPS, env={"GPUTRAIN_TEST_FOLDER": str(tmp_path)}))
    assert set(out) == {"mlp DataParallel", "mlp ModelParallel", "block ModelParallel"}
    for case, row in out.items():
        assert all(failed == "IndivisibleError" for failed, *_ in row.values()), (case, row)
        if "fit" in row:
            assert row["fit"][1] == "" and row["fit"][2] == "", (case, row["fit"])    # fit kept its variables
        for what in ("evaluate", "predict"):
            _, after, kit_says, _ = row[what]
            assert after.startswith("TypeError") and "'NoneType' object is not callable" in after, (case, what)
            assert "unusable after a failed fit, evaluate or predict" in kit_says, kit_says
            assert "evaluate and predict when any step fails" in kit_says, kit_says
            assert "load the weights you saved" in kit_says and "rebuild it" in kit_says, kit_says
        assert row["predict"][3] is True, (case, row["predict"])


def test_keras_trainer_hands_the_variables_back_in_a_finally_only_in_fit():
    """The source of the rule, read in the installed Keras: fit's epoch loop ends in a finally that calls
    jax_state_sync; evaluate and predict call it after their loop, outside any finally."""
    import inspect

    from keras.src.backend.jax.trainer import JAXTrainer

    fit = inspect.getsource(JAXTrainer.fit)
    assert "finally:\n            self.jax_state_sync()" in fit
    for method in (JAXTrainer.evaluate, JAXTrainer.predict):
        source = inspect.getsource(method)
        assert "purge_model_variables=True" in source and "self.jax_state_sync()" in source, method.__name__
        assert "finally:" not in source, method.__name__


DONATED = '''
import jax, logging
logging.getLogger("jax._src.callback").disabled = True
rng = np.random.default_rng(0)
x, y = rng.normal(size=(256, 256)).astype("float32"), rng.integers(0, 8, 256)

out = {}
for fail_at in (1, 4):
    steps = {"run": 0}
    def check_on_host(batch):
        steps["run"] += 1
        if steps["run"] == fail_at:
            raise RuntimeError("planned failure")
        return batch
    class HostCheck(keras.layers.Layer):
        def call(self, inputs):
            checked = jax.pure_callback(check_on_host, jax.ShapeDtypeStruct(inputs.shape, inputs.dtype),
                                        jax.lax.stop_gradient(inputs))
            return inputs + 0 * checked
    model = keras.Sequential([keras.Input((256,)), keras.layers.Dense(32), HostCheck(), keras.layers.Dense(8)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    failed = error(lambda: model.fit(x, y, batch_size=32, epochs=1, verbose=0))
    out[fail_at] = {"failed at": steps["run"], "planned": "planned failure" in failed,
                    "none": [v._value is None for v in model.weights],
                    "deleted": [v._value is not None and v._value.is_deleted() for v in model.weights],
                    "optimizer deleted": sum(v._value is not None and v._value.is_deleted()
                                             for v in model.optimizer.variables),
                    "after": error(lambda: model.predict(x[:8], verbose=0)).split(" with shape")[0],
                    "kit": error(lambda: kit.sharding.bytes_per_device(model))}
print(json.dumps(out))
'''


def test_a_fit_step_that_fails_while_it_runs_leaves_deleted_arrays_and_the_kit_says_so():
    """Keras on JAX donates the training state to each step (donate_argnums=0): a step that raises while it runs
    (a host callback raising at step 4, on one device) has consumed the arrays, and fit's finally hands back
    deleted ones: predict raises "Array has been deleted", and every kit.sharding helper refuses the model with
    "rebuild it". At the first step the values are None instead (nothing to hand back)."""
    import inspect

    from keras.src.backend.jax.trainer import JAXTrainer

    assert "donate_argnums=0" in inspect.getsource(JAXTrainer.make_train_function)
    out = last_json(run_python(MODELS + DONATED))
    first, later = out["1"], out["4"]
    assert first["failed at"] == 1 and first["planned"] and all(first["none"]) and not any(first["deleted"])
    assert first["after"].startswith("TypeError: 'NoneType' object is not callable")
    assert later["failed at"] == 4 and later["planned"] and not any(later["none"]) and all(later["deleted"])
    assert later["optimizer deleted"] > 0
    assert later["after"] == "RuntimeError: Array has been deleted"
    for case in (first, later):
        assert "is unusable after a failed fit" in case["kit"] and "rebuild it" in case["kit"], case["kit"]
        assert "a later one fails while it runs" in case["kit"] and "Array has been deleted" in case["kit"]


BUILD = '''
mesh = distribution.DeviceMesh((2, 4), ["batch", "model"], distribution.list_devices())

def with_head():
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, name="d1"), keras.layers.Dense(10, name="d2")],
                            name="ten")

def conv(width):
    return keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(32, width, name="c1")], name="cnn")

every, left_out, convs = distribution.LayoutMap(mesh), distribution.LayoutMap(mesh), distribution.LayoutMap(mesh)
every["(.*/)?d[0-9]+/kernel"] = (None, "model")
left_out["(.*/)?d1/kernel"] = (None, "model")
convs["(.*/)?c1/kernel"] = (None, "model")
out = {}
try:
    with distribution.ModelParallel(layout_map=every, batch_dim_name="batch").scope():
        with_head()
    out["every"] = "built"
except Exception as err:
    out["every"] = [type(err).__name__, isinstance(err, ValueError), "evenly divide" in str(err)]
with distribution.ModelParallel(layout_map=left_out, batch_dim_name="batch").scope():
    ten = with_head()
explorer = kit.widgets.MeshExplorer([(v.path, tuple(v.shape), 4) for v in ten.weights], mesh=(2, 4))
out["left_out"] = [kit.sharding.variable_layouts(ten)["ten/d2/kernel"],
                   sorted(set(kit.sharding.bytes_per_device(ten).values())), explorer.per_device,
                   "ten/d2/kernel: 10 columns over 4" in explorer.summary.value]
for width in (3, 4):
    try:
        with distribution.ModelParallel(layout_map=convs, batch_dim_name="batch").scope():
            model = conv(width)
        out[f"conv{width}"] = list(model.layers[0].kernel.value.addressable_shards[0].data.shape)
    except Exception as err:
        out[f"conv{width}"] = type(err).__name__
print(json.dumps(out))
'''


def test_keras_refuses_to_build_a_kernel_whose_columns_do_not_divide_and_the_explorer_counts_it_whole():
    """Notebook 09 section 3 and kit.widgets.MeshExplorer: a LayoutMap that lays a Dense kernel of 10 columns out
    (None, "model") over a "model" axis of 4 makes building the model raise IndivisibleError (a ValueError);
    left out of the map, the kernel stays whole, and the explorer's bytes per device are what the arrays hold.
    (None, "model") on a Conv2D's 4-D kernel cuts its axis 1, the kernel's width: 3 over 4 fails, 4 over 4 is cut
    there, not in its 32 output channels, which is why the explorer splits only 2-D kernels."""
    out = last_json(run_python(MODELS + BUILD))
    assert out["every"] == ["IndivisibleError", True, True]
    spec, held, counted, named = out["left_out"]
    assert spec == "P(None, None)" and held == [counted] and named
    assert out["conv3"] == "IndivisibleError" and out["conv4"] == [4, 1, 3, 32]       # the width cut, not channels


def test_the_notebook_states_both_rules_and_the_fix():
    """Notebook 09's prose says fit loses the variables at its first step or a step that fails while it runs,
    evaluate and predict at any step;
    shows predict failing at its last batch on a trained model, and the fix (weights saved first, a rebuilt model
    loads them); and that Keras refuses to build a kernel whose columns do not divide."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "09_keras_distribution.ipynb").read_text())
    prose = " ".join(" ".join("".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "markdown").split())
    code = "\n".join("".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "code")
    for said in ("`fit` hands them back even when a step fails (in a `finally`), so a later step that fails "
                 "*before it runs*, as on a batch that does not divide, loses nothing",
                 "Its *first* step failing loses them",
                 "a step that fails *while it runs* leaves `fit` only deleted arrays to hand back",
                 "`evaluate` and `predict` have no such `finally`: a failure at *any* of their steps, a last partial "
                 "batch included, loses them",
                 "save the weights before an `evaluate` or a `predict`",
                 "Keras refuses such a layout when the model is *built*",
                 "left out of the `LayoutMap`, the kernel stays whole"):
        assert said in prose, said
    assert "A `fit` whose first step fails leaves a trained model" not in prose
    assert "judged.save_weights(weights_file)" in code and 'match="dimension size is 12"' in code
    assert "judged.load_weights(weights_file)" in code and 'match="evenly divide"' in code
