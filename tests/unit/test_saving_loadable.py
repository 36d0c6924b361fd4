"""save_verified on a .keras file checks that keras.saving.load_model can rebuild the model from it (the reviewer's
case: an unregistered subclass of keras.Model saved, and its file refused in a fresh process), warns naming the
class and the fix, still writes the file (its weights load with load_verified), and leaves no trace of the load
(random state, automatic layer names)."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

CLASSES = """
    import keras

    class Sub(keras.Model):
        def __init__(self, heads=4, **kwargs):
            super().__init__(**kwargs)
            self.heads = heads
            self.blocks = [keras.layers.Dense(8 * heads, activation="relu"), keras.layers.Dropout(0.1)]
            self.head = keras.layers.Dense(10)

        def call(self, x, training=False):
            for block in self.blocks:
                x = block(x, training=training)
            return self.head(x)

    class Configured(Sub):                          # its config holds heads; not registered
        def get_config(self):
            return {**super().get_config(), "heads": self.heads}

    @keras.saving.register_keras_serializable(package="tests")
    class Registered(Sub):
        def get_config(self):
            return {**super().get_config(), "heads": self.heads}

    class SquaredError(keras.losses.Loss):          # a loss class, not registered
        def call(self, y_true, y_pred):
            return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)

    @keras.saving.register_keras_serializable(package="tests")
    class ForgetsHeads(Sub):                        # registered, but heads is not in its config: rebuilt with 4
        def get_config(self):
            return {key: value for key, value in super().get_config().items() if key != "heads"}
"""

CHILD = """
    import json, os, random, sys, tempfile, warnings, numpy as np, gputrain_kit as kit
    kit.setup(devices=2)
    import keras
    sys.path.insert(0, os.environ["CLASSES_DIR"])
    from loadable_classes import Sub, Configured, Registered, ForgetsHeads, SquaredError
    d = os.environ["OUT_DIR"]
    (x, y), _ = kit.data.digits()

    def trained(model):
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0)
        return model

    def save(model, name, **scope):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with keras.saving.custom_object_scope(scope):
                path = kit.save_verified(model, os.path.join(d, name))
        said = [str(w.message) for w in caught if issubclass(w.category, kit.saving.UnloadableModelWarning)]
        return {"written": os.path.exists(path), "warned": said,
                # NumPy's note on Keras's __array__ (any save of a model with TensorFlow variables) is no concern here
                "other warnings": [str(w.message)[:200] for w in caught
                                   if not issubclass(w.category, kit.saving.UnloadableModelWarning)
                                   and "__array__ implementation" not in str(w.message)]}

    out = {}
    sub = trained(Sub(heads=2))
    out["unregistered"] = save(sub, "sub.keras")
    out["unregistered weights"] = save(sub, "sub.weights.h5")
    again = Sub(heads=2); again.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    again(x[:2])
    kit.load_verified(again, os.path.join(d, "sub.keras"))
    out["load_verified of the warned file"] = all(np.array_equal(a, b) for a, b in zip(sub.get_weights(),
                                                                                        again.get_weights()))
    out["in scope"] = save(trained(Configured(heads=2)), "scoped.keras", Configured=Configured)
    out["in scope, no get_config"] = save(sub, "scoped_sub.keras", Sub=Sub)     # rebuilt with heads=4: refused
    registered = trained(Registered(heads=2))
    np.save(os.path.join(d, "registered.npy"), np.asarray(registered.predict(x[:16], verbose=0)))
    out["registered"] = save(registered, "registered.keras")
    out["forgets heads"] = save(trained(ForgetsHeads(heads=2)), "forgets.keras")
    inputs = keras.Input((64,))
    out["lambda"] = save(keras.Model(inputs, keras.layers.Dense(10)(keras.layers.Lambda(lambda t: t[:, :32])(inputs))), "lambda.keras")

    # compiled with a loss Keras cannot find (issue 44): load_model(path, compile=False) loads the model
    def squared_error(y_true, y_pred):               # defined here: the file names it as a builtins function
        return keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)
    for name, loss in (("loss function", squared_error), ("loss class", SquaredError())):
        plain = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        plain.compile("adam", loss); plain.fit(x[:64], np.eye(10)[y[:64]], verbose=0)
        out[name] = save(plain, name.replace(" ", "_") + ".keras")
        back = keras.saving.load_model(os.path.join(d, name.replace(" ", "_") + ".keras"), compile=False)
        out[name]["compile=False"] = [back.compiled, all(np.array_equal(a, b) for a, b in zip(
            plain.get_weights(), back.get_weights()))]

    # no trace: the next random draws are those of a save that loads nothing, and the next automatic layer name
    # follows the one before the save (rebuilding Registered names two Dense layers: dense_8, dense_9)
    def after(suffix):
        random.seed(5); np.random.seed(5)
        before = keras.layers.Dense(3).name
        kit.save_verified(registered, os.path.join(d, "trace" + suffix))
        step = int(keras.layers.Dense(3).name.rsplit("_", 1)[1]) - int(before.rsplit("_", 1)[1])
        return [random.random(), float(np.random.random()), step]
    out["trace"] = [after(".weights.h5"), after(".keras")]
    print(json.dumps(out))
"""

FRESH = """
    import json, os, sys, numpy as np, keras
    d = os.environ["OUT_DIR"]
    out = {}
    try:
        keras.saving.load_model(os.path.join(d, "sub.keras")); out["sub"] = "loaded"
    except Exception as err:
        out["sub"] = f"{type(err).__name__}: {err}"[:300]
    sys.path.insert(0, os.environ["CLASSES_DIR"])
    import loadable_classes                          # registers Registered, as the saving process did
    model = keras.saving.load_model(os.path.join(d, "registered.keras"))
    out["registered"] = [type(model).__name__, bool(np.allclose(model.predict(np.load(os.path.join(d, "x.npy")),
        verbose=0), np.load(os.path.join(d, "registered.npy")), atol=1e-6))]
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    import textwrap

    import numpy as np

    folder = tmp_path_factory.mktemp("loadable")
    (folder / "loadable_classes.py").write_text(textwrap.dedent(CLASSES))
    env = {"CLASSES_DIR": str(folder), "OUT_DIR": str(folder)}
    saved = last_json(run_python(CHILD, env=env, timeout=300))
    from gputrain_kit.data import digits

    np.save(folder / "x.npy", digits()[0][0][:16])
    fresh = last_json(run_python(FRESH, env=env, timeout=300, fresh=True))
    return saved, fresh


def test_an_unregistered_subclass_warns_naming_the_class_and_the_fix_and_its_file_fails_in_a_fresh_process(rows):
    saved, fresh = rows
    row = saved["unregistered"]
    assert row["written"] and len(row["warned"]) == 1, row
    said = row["warned"][0]
    assert said.startswith("save_verified: sub.keras was written and its weights read back, but "
                           "keras.saving.load_model cannot rebuild the model from it: it names loadable_classes.Sub")
    assert "register_keras_serializable()" in said and "custom_objects={'Sub': Sub}" in said
    assert "kit.load_verified(model, path)" in said
    assert fresh["sub"].startswith("TypeError: Could not locate class 'Sub'"), fresh["sub"]
    assert saved["load_verified of the warned file"] is True


def test_a_weights_file_or_a_class_in_scope_or_registered_saves_without_a_warning_and_loads_fresh(rows):
    saved, fresh = rows
    for name in ("unregistered weights", "in scope", "registered"):
        assert saved[name]["written"] and saved[name]["warned"] == [], (name, saved[name])
        assert saved[name]["other warnings"] == [], (name, saved[name])
    assert fresh["registered"] == ["Registered", True]


def test_a_get_config_missing_an_argument_and_a_lambda_layer_warn_with_kerass_words(rows):
    saved, _ = rows
    forgets, lam = saved["forgets heads"]["warned"], saved["lambda"]["warned"]
    for said in (forgets, saved["in scope, no get_config"]["warned"]):    # the class is found, its config lacks heads
        assert len(said) == 1 and "cannot rebuild the model from it (ValueError: A total of" in said[0], said
        assert "get_config() that returns every __init__ argument" in said[0]
    assert len(lam) == 1 and "Lambda" in lam[0] and "safe_mode" in lam[0], lam


def test_the_load_leaves_no_trace_in_random_state_or_layer_names(rows):
    saved, _ = rows
    weights_only, keras_file = saved["trace"]
    assert weights_only == keras_file and keras_file[2] == 1, saved["trace"]


def test_a_loss_keras_cannot_find_warns_that_compile_false_loads_the_model(rows):
    """Issue 44: a model compiled with an unregistered loss (a function, or a Loss class) is rebuilt by
    load_model(path, compile=False); the warning says so, and the fix for a model class does not."""
    saved, _ = rows
    for name in ("loss function", "loss class"):
        row = saved[name]
        assert row["written"] and len(row["warned"]) == 1, (name, row)
        said = row["warned"][0]
        assert "keras.saving.load_model(path, compile=False) loads the model all the same, not compiled" in said
        assert "call compile() on it again" in said and "register_keras_serializable()" in said
        assert row["compile=False"] == [False, True], (name, row)
    assert "Could not locate function 'squared_error'" in saved["loss function"]["warned"][0]
    assert "it names loadable_classes.SquaredError" in saved["loss class"]["warned"][0]
    for name in ("unregistered", "forgets heads", "lambda"):          # the model itself does not load: no such hint
        assert "compile=False" not in saved[name]["warned"][0], name
