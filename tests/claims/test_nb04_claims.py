"""Every behaviour notebook 04 states, checked on the installed TensorFlow, Keras and h5py.

If one of these fails after an upgrade, the notebook's prose (and probably its outputs) is out of date:
sections are named in each test. Each group of claims runs in one fresh child process (device setup is
per process); the tests below assert on its JSON.
"""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

LOADING = """
    import json, os, tempfile, zipfile, h5py, numpy as np, gputrain_kit as kit
    from unittest import mock
    kit.setup(devices=2)
    import keras
    from gputrain_kit.parallel import MultiGpuLike
    d = tempfile.mkdtemp()
    p = lambda name: os.path.join(d, name)
    (x, y), (xv, yv) = kit.data.digits()

    def mk(names=("hidden", "logits")):
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu", name=names[0]),
                              keras.layers.Dense(10, name=names[1])])
        m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.optimizer.build(m.trainable_variables)
        return m

    def groups(path):
        found = {}
        def visit(key, item):
            if key.endswith("vars") and len(item):
                found[key.removesuffix("/vars")] = item.attrs["name"]
        with h5py.File(path, "r") as f:
            f.visititems(visit)
        return found

    def same(a, b):
        return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))

    out = {}
    # section 1: where the wrapper's file keeps the template's weights
    t = mk(); w = MultiGpuLike(t, kit.device_names(2))
    w.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    w.fit(x, y, batch_size=128, epochs=1, verbose=0)
    w.save_weights(p("wrapper.weights.h5")); t.save_weights(p("template.weights.h5"))
    out["wrapper_groups"], out["template_groups"] = groups(p("wrapper.weights.h5")), groups(p("template.weights.h5"))
    out["shared"] = len(w.weights) == len(t.weights) and all(a is b for a, b in zip(w.weights, t.weights))

    # section 2: keys are class + occurrence, never names
    r = mk(("totally", "different")); r.load_weights(p("template.weights.h5"))
    out["renamed_loads"] = same(r.get_weights(), t.get_weights())
    ab = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="a"), keras.layers.Dense(8, name="b")])
    ab.save_weights(p("ab.weights.h5"))
    ba = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, name="b"), keras.layers.Dense(8, name="a")])
    ba.load_weights(p("ab.weights.h5"))
    out["first_gets_first"] = same(ba.layers[0].get_weights(), ab.get_layer("a").get_weights())
    dense = lambda m: [v for l in m.layers if isinstance(l, keras.layers.Dense) for v in l.get_weights()]
    orig = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.LayerNormalization(), keras.layers.Dense(10)])
    rng = np.random.default_rng(1)
    for v in orig.weights:                       # no initial values: every variable differs from a fresh one
        v.assign(rng.normal(size=v.shape).astype("float32"))
    orig.save_weights(p("orig.weights.h5"))
    out["orig_groups"] = sorted(groups(p("orig.weights.h5")))
    sw = keras.Sequential([keras.Input((64,)), keras.layers.LayerNormalization(),
                           keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    sw.load_weights(p("orig.weights.h5"))
    out["swap_dense_equal"] = same(dense(orig), dense(sw))
    out["swap_norm_equal"] = same(orig.layers[1].get_weights(), sw.layers[0].get_weights())
    out["swap_same_predictions"] = bool(np.allclose(orig.predict(xv, verbose=0), sw.predict(xv, verbose=0)))
    rev = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10, name="logits"), keras.layers.Dense(32, name="hidden")])
    try:
        rev.load_weights(p("template.weights.h5")); out["reordered"] = None
    except ValueError as e:
        out["reordered"] = str(e)

    # section 2: load_verified leaves the model unchanged when it raises
    target = mk(); kept = [v.copy() for v in target.get_weights()]
    try:
        kit.load_verified(target, p("wrapper.weights.h5")); out["load_error"] = None
    except kit.saving.LoadError as e:
        out["load_error"] = str(e)
    out["target_unchanged"] = same(kept, target.get_weights())

    # section 5: a failed plain save_weights leaves a broken file
    def disk_full(store):
        raise OSError("simulated: disk full")
    t.save_weights(p("plain.weights.h5"))
    with mock.patch.object(t.get_layer("logits"), "save_own_variables", disk_full):
        try:
            t.save_weights(p("plain.weights.h5")); out["plain_raised"] = False
        except OSError:
            out["plain_raised"] = True
    out["plain_groups"] = groups(p("plain.weights.h5"))
    half = mk(); half_kept = [v.copy() for v in half.get_weights()]
    try:
        kit.load_verified(half, p("plain.weights.h5")); out["half_missing"] = None
    except kit.saving.LoadError as e:
        out["half_missing"] = e.missing
    out["half_unchanged"] = same(half_kept, half.get_weights())   # 'hidden' was loaded, then put back

    # section 5: a failed save_verified leaves the previous file, and no temporary file
    safe = kit.save_verified(t, p("safe.weights.h5"))
    newer = mk(); newer_kept = [v.copy() for v in newer.get_weights()]
    temporary = lambda: [n for n in os.listdir(d) if n.startswith(".safe.weights.h5.")]
    seen = []
    def disk_full_noting(store):
        seen.append(len(temporary()))
        raise OSError("simulated: disk full")
    with mock.patch.object(newer.get_layer("logits"), "save_own_variables", disk_full_noting):
        try:
            kit.save_verified(newer, safe); out["verified_raised"] = False
        except OSError:
            out["verified_raised"] = True
    out["temporary_during"], out["temporary_after"] = seen, temporary()
    out["safe_is_old"] = same(t.get_weights(), kit.load_verified(mk(), safe).get_weights())
    out["newer_unchanged"] = same(newer_kept, newer.get_weights())
    def wrong_kernel(store):
        layer = newer.get_layer("logits")
        store["0"], store["1"] = np.zeros(layer.kernel.shape, "float32"), layer.bias.numpy()
    with mock.patch.object(newer.get_layer("logits"), "save_own_variables", wrong_kernel):
        try:
            kit.save_verified(newer, safe); out["save_error"] = None
        except kit.saving.SaveError as e:
            out["save_error"] = str(e)
    out["safe_is_still_old"] = same(t.get_weights(), kit.load_verified(mk(), safe).get_weights())
    out["files_after"] = sorted(n for n in os.listdir(d) if n.startswith("."))

    # section 3: Lambda code in the file; safe_mode=False; a registered layer stores its config
    def entry(path, cls):
        with zipfile.ZipFile(path) as z:
            return next(e for e in json.loads(z.read("config.json"))["config"]["layers"] if e["class_name"] == cls)
    i = keras.Input((64,))
    lm = keras.Model(i, keras.layers.Dense(10)(keras.layers.Lambda(lambda q: q[:, :32])(i)))
    lm.save(p("lambda.keras"))
    unsafe = keras.models.load_model(p("lambda.keras"), safe_mode=False)
    out["unsafe_same"] = bool(np.allclose(unsafe.predict(xv, verbose=0), lm.predict(xv, verbose=0)))
    fn = entry(p("lambda.keras"), "Lambda")["config"]["function"]
    out["lambda_function"] = [fn["class_name"], sorted(fn["config"])]
    @keras.saving.register_keras_serializable(package="gputrain")
    class TakeColumns(keras.layers.Layer):
        def __init__(self, start, stop, **kwargs):
            super().__init__(**kwargs); self.start, self.stop = start, stop
        def call(self, inputs):
            return inputs[:, self.start:self.stop]
        def get_config(self):
            return {**super().get_config(), "start": self.start, "stop": self.stop}
    sm = keras.Model(i, keras.layers.Dense(10)(TakeColumns(0, 32)(i)))
    sm.save(p("safe.keras"))
    e = entry(p("safe.keras"), "TakeColumns")
    out["registered"] = [e["registered_name"], e["config"]["start"], e["config"]["stop"], sorted(e["config"])]
    out["safe_loads"] = bool(np.allclose(keras.models.load_model(p("safe.keras")).predict(xv, verbose=0),
                                         sm.predict(xv, verbose=0)))
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def loading():
    return last_json(run_python(LOADING))


def test_wrapper_file_nests_the_template_which_shares_its_variables(loading):
    """Section 1: the wrapper's file keeps everything under layers/sequential/; same variable objects."""
    assert loading["shared"]
    assert set(loading["template_groups"]) == {"layers/dense", "layers/dense_1", "optimizer"}
    nested = {k for k in loading["wrapper_groups"] if k.startswith("layers/sequential/")}
    assert {"layers/sequential/layers/dense", "layers/sequential/layers/dense_1"} <= nested
    assert not set(loading["wrapper_groups"]) & {"layers/dense", "layers/dense_1"}


def test_weights_h5_keys_layers_by_class_and_occurrence_and_records_but_ignores_names(loading):
    """Section 2: groups dense, dense_1, ... each record the layer's name; renamed layers still load."""
    assert loading["template_groups"]["layers/dense"] == "hidden"
    assert loading["template_groups"]["layers/dense_1"] == "logits"
    assert loading["orig_groups"] == ["layers/dense", "layers/dense_1", "layers/layer_normalization"]
    assert loading["renamed_loads"]
    assert loading["first_gets_first"]          # layer 'b' placed first receives 'a's weights


def test_reordered_layers_load_by_class_or_fail_on_shape(loading):
    """Section 2: Dense/LayerNormalization swapped loads (by class) and computes something else;
    two Dense layers of different shapes swapped fail, whatever their names."""
    assert loading["swap_dense_equal"] and loading["swap_norm_equal"]
    assert not loading["swap_same_predictions"]
    msg = loading["reordered"]
    assert msg is not None and "A total of 2 objects could not be loaded" in msg
    assert "<Dense name=logits, built=True>" in msg
    assert "variable.shape=(64, 10), Received: value.shape=(64, 32)" in msg


def test_load_verified_leaves_the_model_unchanged_when_it_raises(loading):
    """Section 2 and 5: failed load (nothing loaded, or half loaded): every value as before."""
    assert "4 of 4 variable(s) were not loaded" in loading["load_error"]
    assert loading["target_unchanged"]
    assert [m.split("/", 1)[1] for m in loading["half_missing"]] == ["logits/kernel", "logits/bias"]
    assert loading["half_unchanged"]


def test_a_failed_plain_save_weights_leaves_a_broken_file(loading):
    """Section 5: save_weights writes into the target; failing at 'logits' leaves only 'hidden'."""
    assert loading["plain_raised"]
    assert list(loading["plain_groups"]) == ["layers/dense"]


def test_a_failed_save_verified_leaves_the_previous_file_and_no_temporary(loading):
    """Section 5: temporary file in the same folder while writing; removed; old file loads, equal."""
    assert loading["verified_raised"]
    assert loading["temporary_during"] == [1] and loading["temporary_after"] == []
    assert loading["safe_is_old"] and loading["newer_unchanged"]


def test_save_verified_refuses_a_file_that_does_not_read_back_identically(loading):
    """Section 5: a wrong kernel written is caught by the bit-for-bit comparison; target untouched."""
    msg = loading["save_error"]
    assert msg is not None and "did not read back identically (0 variable(s) missing, 1 different:" in msg
    assert "/logits/kernel); safe.weights.h5 was left untouched." in msg
    assert loading["safe_is_still_old"] and loading["files_after"] == []


def test_lambda_stores_code_safe_mode_false_loads_registered_layer_stores_config(loading):
    """Section 3: the Lambda entry holds compiled code; safe_mode=False loads it; the registered
    layer is stored as its registered name plus its config, and loads in safe mode."""
    assert loading["lambda_function"][0] == "__lambda__" and "code" in loading["lambda_function"][1]
    assert loading["unsafe_same"]
    name, start, stop, keys = loading["registered"]
    assert (name, start, stop) == ("gputrain>TakeColumns", 0, 32)
    assert "code" not in keys and "function" not in keys
    assert loading["safe_loads"]



PARTIAL = """
    import json, os, tempfile, warnings, h5py, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    d = tempfile.mkdtemp()
    p = lambda name: os.path.join(d, name)
    (x, y), (xv, yv) = kit.data.digits()

    def mk(optimizer="adam", build=True):
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu", name="hidden"),
                              keras.layers.Dense(10, name="logits")])
        if optimizer is None:
            return m
        m.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        if build:
            m.optimizer.build(m.trainable_variables)
        return m

    def groups(path):
        found = {}
        def visit(key, item):
            if key.endswith("vars") and len(item):
                found[key.removesuffix("/vars")] = item.attrs["name"]
        with h5py.File(path, "r") as f:
            f.visititems(visit)
        return found

    def values(variables):
        return [v.numpy() for v in variables]

    def same(a, b):
        return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(a, b))

    def user_warnings(caught):
        return [str(w.message) for w in caught if issubclass(w.category, UserWarning)]

    out = {}
    # a file holding more than the model: Keras loads the rest in silence, load_verified refuses first
    deeper = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu", name="hidden"),
                               keras.layers.Dense(10, name="logits"), keras.layers.Dense(10, name="calibration")])
    deeper.save_weights(p("deeper.weights.h5"))
    bare = mk(None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        bare.load_weights(p("deeper.weights.h5"))
    out["deeper_plain_warnings"] = user_warnings(caught)
    out["deeper_plain_loaded"] = same(bare.get_weights(), deeper.get_weights()[:4])
    target = mk(); kept = values(target.weights) + values(target.optimizer.variables)
    try:
        kit.load_verified(target, p("deeper.weights.h5")); out["deeper_error"] = None
    except kit.saving.LoadError as e:
        out["deeper_error"], out["deeper_extra"] = str(e), e.extra
    out["deeper_unchanged"] = same(kept, values(target.weights) + values(target.optimizer.variables))

    # the optimizer's state: in the file, skipped by load_weights into a compiled model, restored by load_verified
    trained = mk()
    trained.fit(x, y, batch_size=128, epochs=1, verbose=0)
    path = kit.save_verified(trained, p("trained.weights.h5"))
    out["steps_per_epoch"] = int(np.ceil(len(x) / 128))
    out["trained"] = {"groups": sorted(groups(path)), "step": int(trained.optimizer.iterations),
                      "learning_rate": float(trained.optimizer.learning_rate)}
    restarted = mk(keras.optimizers.Adam(learning_rate=1e-4), build=False)
    out["compile_creates"] = len(restarted.optimizer.variables)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        restarted.load_weights(path)
    out["plain"] = {"step": int(restarted.optimizer.iterations), "warnings": user_warnings(caught),
                    "weights": same(restarted.get_weights(), trained.get_weights())}
    restarted = mk(keras.optimizers.Adam(learning_rate=1e-4), build=False)
    kit.load_verified(restarted, path)
    out["verified"] = {"step": int(restarted.optimizer.iterations), "built": restarted.optimizer.built,
                       "learning_rate": float(restarted.optimizer.learning_rate),
                       "optimizer_equal": same(values(restarted.optimizer.variables), values(trained.optimizer.variables)),
                       "weights": same(restarted.get_weights(), trained.get_weights())}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        uncompiled = kit.load_verified(mk(None), path)
    out["uncompiled"] = {"warnings": [[w.category.__name__, str(w.message)] for w in caught
                                      if issubclass(w.category, UserWarning)],
                         "weights": same(uncompiled.get_weights(), trained.get_weights())}
    sgd = mk("sgd", build=False)
    try:
        kit.load_verified(sgd, path); out["sgd_error"] = None
    except kit.saving.LoadError as e:
        out["sgd_error"] = str(e)
    out["sgd_after"] = {"built": sgd.optimizer.built, "step": int(sgd.optimizer.iterations),
                        "weights_kept": not same(sgd.get_weights(), trained.get_weights())}

    # not checked: the architecture (Dense / LayerNormalization swapped, same shapes)
    orig = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                             keras.layers.LayerNormalization(), keras.layers.Dense(10)])
    orig.save_weights(p("orig.weights.h5"))
    sw = keras.Sequential([keras.Input((64,)), keras.layers.LayerNormalization(),
                           keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)])
    try:
        kit.load_verified(sw, p("orig.weights.h5")); out["swapped_verified"] = True
    except kit.saving.LoadError:
        out["swapped_verified"] = False
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def partial():
    return last_json(run_python(PARTIAL))


def test_a_file_with_an_extra_layer_loads_silently_and_load_verified_refuses_naming_it(partial):
    """Section 2: load_weights takes the layers the model has and ignores the file's third one, without a
    warning; load_verified refuses before loading, names the group and the layer, the model unchanged."""
    assert partial["deeper_plain_warnings"] == [] and partial["deeper_plain_loaded"]
    assert partial["deeper_extra"] == ["layers/dense_2/vars/0", "layers/dense_2/vars/1"]
    assert "layers/dense_2 (layer 'calibration', 2 variables)" in partial["deeper_error"]
    assert "no place for" in partial["deeper_error"] and partial["deeper_unchanged"]


def test_the_file_holds_the_optimizer_state_and_no_metrics(partial):
    """Section 2: the groups of a compiled, trained model's file: its layers and its optimizer, not its metrics;
    Adam's step after one epoch is the epoch's steps."""
    assert partial["trained"]["groups"] == ["layers/dense", "layers/dense_1", "optimizer"]
    assert partial["trained"]["step"] == partial["steps_per_epoch"]


def test_load_weights_skips_the_optimizer_state_of_a_freshly_compiled_model_with_one_warning(partial):
    """Section 2: a freshly compiled model's optimizer holds only the step counter and the learning rate (its
    constructor creates them: test_a_fresh_optimizer_holds_two_variables_before_compile); load_weights loads the weights,
    warns once that it skipped the optimizer, and leaves the step at 0."""
    plain = partial["plain"]
    assert partial["compile_creates"] == 2
    assert plain["weights"] and plain["step"] == 0
    assert len(plain["warnings"]) == 1 and plain["warnings"][0].startswith("Skipping variable loading for optimizer")
    assert "because it has 2 variables whereas the saved optimizer has 10 variables" in plain["warnings"][0]


def test_load_verified_builds_the_optimizer_and_restores_all_of_its_state(partial):
    """Section 2: the step, every optimizer variable, and the file's learning rate replacing compile's 1e-4."""
    got = partial["verified"]
    assert got["built"] and got["weights"] and got["optimizer_equal"]
    assert got["step"] == partial["trained"]["step"]
    assert got["learning_rate"] == partial["trained"]["learning_rate"] and got["learning_rate"] != pytest.approx(1e-4)


def test_load_verified_into_an_uncompiled_model_loads_the_weights_and_warns(partial):
    """Section 2: weights loaded; one OptimizerStateWarning naming the step and the fix."""
    got = partial["uncompiled"]
    assert got["weights"] and [kind for kind, _ in got["warnings"]] == ["OptimizerStateWarning"]
    text = got["warnings"][0][1]
    assert f"at step {partial['trained']['step']}, 10 variables" in text and "not compiled" in text
    assert "compile the model before loading it" in text


def test_load_verified_refuses_state_of_another_optimizer_which_stays_built_at_step_0(partial):
    """Section 2: Adam's state does not fit SGD; refused; SGD built for the comparison, at step 0; weights kept."""
    assert "does not fit the model's optimizer 'sgd' (SGD, 2 variables)" in partial["sgd_error"]
    assert partial["sgd_after"] == {"built": True, "step": 0, "weights_kept": True}


def test_load_verified_does_not_check_the_architecture(partial):
    """Section 2: the Dense/LayerNormalization swap (same classes, same shapes) passes load_verified too."""
    assert partial["swapped_verified"]

HDF5 = """
    import json, logging, os, tempfile, zipfile, h5py, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    from keras.src.legacy.saving import legacy_h5_format
    logging.getLogger("absl").setLevel(logging.ERROR)
    d = tempfile.mkdtemp()
    p = lambda name: os.path.join(d, name)
    length = lambda attrs, key: h5py.check_string_dtype(attrs.get_id(key).dtype).length
    out = {"keras_limit": legacy_h5_format.HDF5_OBJECT_HEADER_LIMIT}
    with h5py.File(p("limit.h5"), "w") as f:
        try:
            f.attrs["fixed"] = np.array([b"x" * 70_000]); out["fixed_70k"] = None
        except OSError as e:
            out["fixed_70k"] = str(e)
        f.attrs["fixed_60k"] = np.array([b"x" * 60_000])
        f.attrs["variable"] = b"x" * 1_000_000
        out["raw"] = {k: [len(f.attrs[k][0] if length(f.attrs, k) else f.attrs[k]), length(f.attrs, k)] for k in f.attrs}
    deep = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(4, name=f"layer_{i:04d}_" + "x" * 110)
                                                    for i in range(600)])
    deep.save(p("deep.h5"))
    with h5py.File(p("deep.h5"), "r") as f:
        config = f.attrs["model_config"]
        out["config"] = [len(config), length(f.attrs, "model_config"),
                         sum(l["class_name"] == "Dense" for l in json.loads(config)["config"]["layers"])]
        names = f["model_weights"].attrs
        out["chunks"] = {k: [len(names[k]), length(names, k), int(names[k].nbytes)]
                         for k in names if k.startswith("layer_names")}
    long_name = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="n" * 70_000)])
    try:
        long_name.save(p("long_name.h5")); out["long_h5"] = None
    except RuntimeError as e:
        out["long_h5"] = str(e)[:200]
    long_name.save(p("long_name.keras"))
    out["long_keras"] = [len(keras.models.load_model(p("long_name.keras")).layers[0].name),
                         sorted(zipfile.ZipFile(p("long_name.keras")).namelist())]
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def hdf5():
    return last_json(run_python(HDF5))


def test_hdf5_limit_applies_to_fixed_length_values_not_variable_length(hdf5):
    """Section 6: one fixed-length 70,000-byte string fails (60,000 saves); 1,000,000 variable-length bytes save."""
    assert "object header message is too large" in hdf5["fixed_70k"]
    assert hdf5["raw"] == {"fixed_60k": [60_000, 60_000], "variable": [1_000_000, None]}


def test_legacy_h5_config_is_one_variable_length_string_and_names_are_chunked(hdf5):
    """Section 6: the 600-layer model's config (far over 64 KB) is variable length; the fixed-length
    layer-name list is split into chunks that each stay under Keras's limit."""
    size, length, dense = hdf5["config"]
    assert size > hdf5["keras_limit"] and length is None and dense == 600
    chunks = hdf5["chunks"]
    assert sorted(chunks) == [f"layer_names{i}" for i in range(len(chunks))] and len(chunks) >= 2
    assert all(fixed == 121 and nbytes <= hdf5["keras_limit"] for _, fixed, nbytes in chunks.values())
    assert sum(n for n, _, _ in chunks.values()) == 600
    assert sum(nbytes for _, _, nbytes in chunks.values()) > hdf5["keras_limit"]


def test_one_over_long_layer_name_fails_in_h5_and_saves_in_keras(hdf5):
    """Section 6: Keras's own RuntimeError for one name over 64512 bytes; .keras saves and loads it."""
    assert hdf5["keras_limit"] == 64512
    assert hdf5["long_h5"].startswith("The following attributes cannot be saved to HDF5 file because they "
                                      "are larger than 64512 bytes: [b'nnn")
    assert hdf5["long_keras"] == [70_000, ["config.json", "metadata.json", "model.weights.h5"]]


RESUME = """
    import json, os, tempfile, h5py, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras, tensorflow as tf
    from gputrain_kit.checkpoints import CrashAtEpoch, SimulatedCrash
    from gputrain_kit.training import build_digits_model
    out = {}
    orders = lambda ds, n: [[int(i) for i in ds] for _ in range(n)]
    six = lambda r: tf.data.Dataset.range(6).shuffle(6, seed=0, reshuffle_each_iteration=r)
    out["once"], out["one_process"], out["restarted"] = orders(six(False), 4), orders(six(True), 4), orders(six(True), 2)

    class Recorder(keras.Model):                # what fit feeds each epoch, in order
        def __init__(self):
            super().__init__(); self.dense = keras.layers.Dense(1); self.seen = []
        def call(self, inputs):
            return self.dense(inputs)
        def train_step(self, data):
            self.seen.append([int(v) for v in data[0][:, 0]])
            return {"batches": tf.constant(1.0)}
    def recorder():
        r = Recorder(); r.compile(optimizer="sgd", loss="mse", run_eagerly=True); r(tf.zeros((1, 1))); return r
    pairs = lambda: (tf.data.Dataset.range(6).map(lambda i: (tf.cast([i], "float32"), tf.cast([i], "float32")))
                     .shuffle(6, seed=0, reshuffle_each_iteration=True).batch(6))
    fit_dir = tempfile.mkdtemp()
    straight_rec = recorder(); straight_rec.fit(pairs(), epochs=4, verbose=0, shuffle=False)
    crash_rec = recorder()
    try:
        crash_rec.fit(pairs(), epochs=4, verbose=0, shuffle=False, callbacks=[keras.callbacks.BackupAndRestore(fit_dir), CrashAtEpoch(2)])
    except SimulatedCrash:
        pass
    resumed_rec = recorder()
    resumed_rec.fit(pairs(), epochs=4, verbose=0, shuffle=False, callbacks=[keras.callbacks.BackupAndRestore(fit_dir)])
    out["fit_orders"] = [straight_rec.seen, crash_rec.seen, resumed_rec.seen]

    (x, y), _ = kit.data.digits()
    def fresh():
        keras.utils.set_random_seed(0)
        return build_digits_model()
    def ds():
        return (tf.data.Dataset.from_tensor_slices((x, y))
                .shuffle(len(x), seed=0, reshuffle_each_iteration=False).batch(128))
    straight = fresh(); straight.fit(ds(), epochs=4, verbose=0, shuffle=False)
    d = tempfile.mkdtemp()
    crashed = fresh()
    try:
        crashed.fit(ds(), epochs=4, verbose=0, shuffle=False, callbacks=[keras.callbacks.BackupAndRestore(d), CrashAtEpoch(2)])
    except SimulatedCrash:
        pass
    out["backup_files"] = sorted(os.listdir(d))
    with open(os.path.join(d, "training_metadata.json")) as f:
        out["metadata"] = json.load(f)
    with h5py.File(os.path.join(d, "latest.weights.h5"), "r") as f:
        out["optimizer_vars"] = len(f["optimizer/vars"])
        out["iterations"] = int(f["optimizer/vars/0"][()])
    out["steps_per_epoch"] = int(np.ceil(len(x) / 128))
    bitwise = lambda a, b: all(u.tobytes() == v.tobytes() for u, v in zip(a.get_weights(), b.get_weights()))
    weights_only = fresh(); weights_only.set_weights(crashed.get_weights())     # no optimizer state
    weights_only.fit(ds(), epochs=4, initial_epoch=2, verbose=0, shuffle=False)
    resumed = fresh(); resumed.fit(ds(), epochs=4, verbose=0, shuffle=False, callbacks=[keras.callbacks.BackupAndRestore(d)])
    out["resumed_identical"], out["weights_only_identical"] = bitwise(straight, resumed), bitwise(straight, weights_only)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def resume():
    return last_json(run_python(RESUME))


def test_a_restarted_reshuffle_replays_from_the_first_epoch(resume):
    """Section 5: shuffled once = same order every epoch; reshuffled, a fresh dataset starts again at epoch 1's order."""
    assert all(order == resume["once"][0] for order in resume["once"])
    one = resume["one_process"]
    assert len({tuple(o) for o in one}) == 4                       # a new order every epoch
    assert resume["restarted"] == one[:2] and resume["restarted"] != one[2:]


def test_backup_and_restore_saves_weights_optimizer_state_and_epoch(resume):
    """Section 5: after a crash at the start of epoch 3, the backup holds the epoch reached (2) and the
    optimizer's variables, its step counter at two epochs of steps."""
    assert resume["backup_files"] == ["latest.weights.h5", "training_metadata.json"]
    assert resume["metadata"]["epoch"] == 2
    assert resume["optimizer_vars"] > 1 and resume["iterations"] == 2 * resume["steps_per_epoch"]


def test_fit_resumed_by_backup_and_restore_replays_epoch_1_and_2_orders(resume):
    """Section 5: with reshuffle_each_iteration=True, the resumed fit's epochs 3-4 get epochs 1-2's orders."""
    straight, crashed, resumed = resume["fit_orders"]
    assert len(straight) == 4 and crashed == straight[:2]
    assert resumed == straight[:2] and resumed != straight[2:]


def test_a_bit_for_bit_resume_needs_the_optimizer_state(resume):
    """Section 5: BackupAndRestore's resume matches the straight run bit for bit; the same weights
    without the optimizer's state (fresh Adam from epoch 3) do not."""
    assert resume["resumed_identical"] and not resume["weights_only_identical"]


def test_exercise_answers_group_by_occurrence_and_resume_after_the_last_finished_epoch():
    """Exercises 3 and 4: the layer 'logits' of Dense, LayerNormalization, Dense, Dense is stored under
    layers/dense_2; killed at the start of epoch 7 of 10, a restart with BackupAndRestore trains 7 to 10."""
    out = last_json(run_python("""
        import json, os, tempfile, h5py, numpy as np
        import keras
        from gputrain_kit.checkpoints import CrashAtEpoch, SimulatedCrash
        d = tempfile.mkdtemp()
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, name="encoder"),
                              keras.layers.LayerNormalization(name="norm"), keras.layers.Dense(16, name="bottleneck"),
                              keras.layers.Dense(10, name="logits")])
        m.save_weights(os.path.join(d, "m.weights.h5"))
        groups = {}
        with h5py.File(os.path.join(d, "m.weights.h5"), "r") as f:
            f.visititems(lambda k, item: groups.__setitem__(k.removesuffix("/vars"), item.attrs["name"])
                         if k.endswith("vars") and len(item) else None)
        x, y = np.ones((8, 2), "float32"), np.ones((8, 1), "float32")
        def tiny():
            t = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]); t.compile("adam", "mse"); return t
        backup = os.path.join(d, "backup")
        try:
            tiny().fit(x, y, epochs=10, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(backup), CrashAtEpoch(6)])
        except SimulatedCrash:
            pass
        trained = []
        tiny().fit(x, y, epochs=10, verbose=0, callbacks=[keras.callbacks.BackupAndRestore(backup),
                   keras.callbacks.LambdaCallback(on_epoch_begin=lambda e, logs: trained.append(e + 1))])
        print(json.dumps({"groups": groups, "trained": trained}))
    """))
    assert out["groups"]["layers/dense_2"] == "logits"
    assert out["groups"]["layers/dense_1"] == "bottleneck" and out["groups"]["layers/layer_normalization"] == "norm"
    assert out["trained"] == [7, 8, 9, 10]


def test_a_subclassed_models_layers_are_keyed_by_attribute_name():
    """Section 2: the class-and-occurrence rule is the layers list of Sequential and Functional models; in a
    subclassed model each layer's group is the attribute holding it (enc/vars, head/vars: Keras's writer walks
    dir(model)), so renaming the layer loads and renaming the attribute raises "expected 2 variables, but
    received 0". The notebook's cell, in a child."""
    out = last_json(run_python("""
        import json, os, re, tempfile, h5py, numpy as np, gputrain_kit as kit
        kit.setup(devices=1)
        import keras

        class Encoder(keras.Model):
            def __init__(self, attribute="enc", name="hidden"):
                super().__init__()
                self.attribute = attribute
                setattr(self, attribute, keras.layers.Dense(32, activation="relu", name=name))
                self.head = keras.layers.Dense(10, name="logits")

            def call(self, x):
                return self.head(getattr(self, self.attribute)(x))

        def subclassed(**kwargs):
            model = Encoder(**kwargs)
            model(np.zeros((1, 64), "float32"))
            return model

        path = os.path.join(tempfile.mkdtemp(), "subclassed.weights.h5")
        saved = subclassed()
        saved.save_weights(path)
        groups = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda key, item: groups.update({key[:-5]: item.attrs["name"]})
                         if key.endswith("/vars") and len(item) else None)
        renamed = subclassed(name="totally_different")
        renamed.load_weights(path)
        same = all(np.array_equal(a, b) for a, b in zip(saved.get_weights(), renamed.get_weights()))
        try:
            subclassed(attribute="encoder").load_weights(path)
            error = None
        except ValueError as err:
            error = re.search(r"Layer '\\w+' expected [^.]*", str(err)).group(0)
        print(json.dumps({"groups": groups, "renamed_layer_loads": same, "renamed_attribute": error}))
    """))
    assert out["groups"] == {"enc": "hidden", "head": "logits"}
    assert out["renamed_layer_loads"] is True
    assert out["renamed_attribute"] == "Layer 'hidden' expected 2 variables, but received 0 variables during loading"


def test_a_subclassed_models_list_attribute_keys_its_layers_by_class_and_occurrence():
    """Section 2: layers in a list attribute are keyed by the attribute, then by class and occurrence inside the
    list (Keras's _save_container_state), never by name: the notebook's Stack."""
    out = last_json(run_python("""
        import json, os, tempfile, h5py, numpy as np, gputrain_kit as kit
        kit.setup(devices=1)
        import keras

        class Stack(keras.Model):
            def __init__(self):
                super().__init__()
                self.blocks = [keras.layers.Dense(32, activation="relu", name="first"),
                               keras.layers.LayerNormalization(name="norm"),
                               keras.layers.Dense(32, activation="relu", name="second"), keras.layers.Dense(10, name="out")]

            def call(self, x):
                for block in self.blocks:
                    x = block(x)
                return x

        stack = Stack()
        stack(np.zeros((1, 64), "float32"))
        path = os.path.join(tempfile.mkdtemp(), "stack.weights.h5")
        stack.save_weights(path)
        groups = {}
        with h5py.File(path, "r") as f:
            f.visititems(lambda key, item: groups.update({key[:-5]: item.attrs["name"]})
                         if key.endswith("/vars") and len(item) else None)
        print(json.dumps(groups))
    """))
    assert out == {"blocks/dense": "first", "blocks/dense_1": "second", "blocks/dense_2": "out",
                   "blocks/layer_normalization": "norm"}


def test_a_fresh_optimizer_holds_two_variables_before_compile():
    """Sections 1 and 2: the step counter and the learning rate are the optimizer's constructor's, not
    compile's: an Adam never given to compile has them; compile with an Adam object adds none; a learning-rate
    schedule has no learning-rate variable (load_verified names that when it is the difference)."""
    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        adam = keras.optimizers.Adam()
        before = [v.name for v in adam.variables]
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(adam, "mse")
        scheduled = keras.optimizers.Adam(keras.optimizers.schedules.ExponentialDecay(1e-3, 10, 0.9))
        print(json.dumps({"before": before, "after_compile": len(model.optimizer.variables),
                          "schedule": [v.name for v in scheduled.variables]}))
    """))
    assert out["before"] == ["iteration", "learning_rate"]
    assert out["after_compile"] == 2
    assert out["schedule"] == ["iteration"]


def test_save_verified_warns_when_load_model_cannot_rebuild_an_unregistered_subclassed_model():
    """Section 5, end: an unregistered subclassed model's .keras file is written (its weights read back), and
    save_verified warns naming the class and the fix, since keras.saving.load_model refuses the file here (Keras 3
    looks classes up only by their registered name: in a fresh process too, tests/unit/test_saving_loadable.py);
    the same model registered saves without a warning, and load_model rebuilds it with the same weights."""
    out = last_json(run_python("""
        import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
        kit.setup(devices=2)
        import keras
        workdir = tempfile.mkdtemp()
        x = np.zeros((1, 64), "float32")

        class Widened(keras.Model):
            def __init__(self, width=32, **kwargs):
                super().__init__(**kwargs)
                self.width = width
                self.hidden = keras.layers.Dense(width, activation="relu")
                self.logits = keras.layers.Dense(10)

            def call(self, x):
                return self.logits(self.hidden(x))

            def get_config(self):
                return {**super().get_config(), "width": self.width}

        @keras.saving.register_keras_serializable(package="gputrain")
        class RegisteredWidened(Widened):
            pass

        def save_noting(model, name):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                saved = kit.save_verified(model, os.path.join(workdir, name))
            return saved, [(w.category.__name__, str(w.message)) for w in caught]

        out = {}
        unregistered = Widened(16); unregistered(x)
        path, out["unregistered"] = save_noting(unregistered, "widened.keras")
        out["written"] = os.path.exists(path) and sorted(os.listdir(workdir)) == ["widened.keras"]
        try:
            keras.models.load_model(path); out["load_model"] = "loaded"
        except TypeError as err:
            out["load_model"] = str(err)[:200]
        registered = RegisteredWidened(16); registered(x)
        path, out["registered"] = save_noting(registered, "registered.keras")
        back = keras.models.load_model(path)
        out["same"] = all(np.array_equal(a, b) for a, b in zip(registered.get_weights(), back.get_weights()))
        print(json.dumps(out))
    """))
    assert out["written"] is True
    # Keras's own notes while saving (if any) are no concern here: the kit's warning is exactly one
    [said] = [m for category, m in out["unregistered"] if category == "UnloadableModelWarning"] or [out["unregistered"]]
    assert said.startswith("save_verified: widened.keras was written and its weights read back, but "
                           "keras.saving.load_model cannot rebuild the model from it: it names Widened, which Keras "
                           "finds only by a registered name (TypeError: Could not locate class 'Widened'"), said
    assert "@keras.saving.register_keras_serializable()" in said and "custom_objects={'Widened': Widened}" in said
    assert out["load_model"].startswith("Could not locate class 'Widened'"), out["load_model"]
    assert [c for c, _ in out["registered"] if c == "UnloadableModelWarning"] == [], out["registered"]
    assert out["same"] is True
