"""save_verified / load_verified and notebook 04's traps on the installed versions; the rest of the
notebook's claims (file keys, failed saves, HDF5 string types, reshuffle on restart): test_nb04_claims.py."""
from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from gputrain_kit import check
from conftest import ROOT, last_json, run_python


def test_verified_save_and_load_and_the_traps():
    proc = run_python("""
        import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
        kit.setup(devices=2)
        import keras
        from gputrain_kit.parallel import MultiGpuLike
        d = tempfile.mkdtemp()
        (x, y), (xv, yv) = kit.data.digits()
        def mk(names=("a", "b")):
            m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, name=names[0]), keras.layers.Dense(10, name=names[1])])
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True)); m.optimizer.build(m.trainable_variables)
            return m
        out = {}
        t = mk(); w = MultiGpuLike(t, kit.device_names(2)); w.compile("adam", "mse"); w(xv[:2])
        t.fit(x, y, epochs=1, verbose=0)
        w.save_weights(os.path.join(d, "w.weights.h5"))
        try:
            mk().load_weights(os.path.join(d, "w.weights.h5")); out["wrapper_into_template"] = None
        except ValueError as e:
            out["wrapper_into_template"] = str(e)
        v = mk(); before = v.get_weights()
        with warnings.catch_warnings(record=True) as rec:
            warnings.simplefilter("always")
            v.load_weights(os.path.join(d, "w.weights.h5"), skip_mismatch=True)
        out["skip_warning"] = [str(r.message).splitlines()[0] for r in rec]
        out["skip_unchanged"] = all(np.array_equal(a, b) for a, b in zip(before, v.get_weights()))
        kit.save_verified(t, os.path.join(d, "t.weights.h5")); kit.save_verified(t, os.path.join(d, "t.keras"))
        out["files"] = sorted(os.listdir(d))
        try:
            mk().load_weights(os.path.join(d, "t.weights.h5"), by_name=True)
        except ValueError as e:
            out["by_name"] = str(e)
        r = mk(("p", "q")); r.load_weights(os.path.join(d, "t.weights.h5"))
        out["renamed_equal"] = bool(np.array_equal(r.predict(xv, verbose=0), t.predict(xv, verbose=0)))
        for name in ("t.weights.h5", "t.keras"):
            m = kit.load_verified(mk(), os.path.join(d, name))
            out[name] = bool(np.array_equal(m.predict(xv, verbose=0), t.predict(xv, verbose=0)))
        victim = mk(); keep = victim.get_weights()
        try:
            kit.load_verified(victim, os.path.join(d, "w.weights.h5"))
        except kit.saving.LoadError as e:
            out["load_error"], out["missing"] = str(e), e.missing
        out["victim_unchanged"] = all(np.array_equal(a, b) for a, b in zip(keep, victim.get_weights()))
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert "A total of 2 objects could not be loaded" in out["wrapper_into_template"]
    assert "expected 2 variables, but received 0 variables" in out["wrapper_into_template"]
    assert any("could not be loaded" in m for m in out["skip_warning"]) and out["skip_unchanged"]
    assert out["files"] == ["t.keras", "t.weights.h5", "w.weights.h5"]          # no temporary files left
    assert "`by_name` only supports loading legacy '.h5' or '.hdf5' files" in out["by_name"]
    assert out["renamed_equal"] and out["t.weights.h5"] and out["t.keras"]
    assert "4 of 4 variable(s) were not loaded" in out["load_error"] and len(out["missing"]) == 4
    assert out["victim_unchanged"]


def test_bad_paths_are_clear_errors(tmp_path):
    import keras
    from gputrain_kit import load_verified, save_verified
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="must end with .weights.h5"):
        save_verified(model, tmp_path / "model.h5")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_verified(model, tmp_path / "missing.weights.h5")
    with pytest.raises(TypeError, match="model must be a Keras model, got <object"):
        save_verified(object(), tmp_path / "model.keras")


def test_nonfinite_copies_are_refused_named_by_replica_and_reported_on_load():
    out = last_json(run_python("""
        import json, os, tempfile, warnings, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf, keras
        strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
        with strategy.scope():
            model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")], name="m")
        kernel = model.layers[0].kernel.value.values[3]          # replica 3's copy only
        kernel.assign(np.full((3, 2), np.nan, "float32"))
        folder = tempfile.mkdtemp()
        out = {}
        try:
            kit.save_verified(model, os.path.join(folder, "m.weights.h5"))
        except kit.saving.NonFiniteError as err:
            out["refused"] = str(err)
            out["poisoned"] = err.poisoned
        out["written"] = sorted(os.listdir(folder))
        kit.save_verified(model, os.path.join(folder, "m.weights.h5"), allow_nonfinite=True)
        out["after_allow"] = sorted(os.listdir(folder))
        plain = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")], name="m")
        plain.layers[0].kernel.assign(np.full((3, 2), np.inf, "float32"))
        try:
            kit.save_verified(plain, os.path.join(folder, "inf.weights.h5"))
        except kit.saving.NonFiniteError as err:
            out["refused_replica_0"] = str(err)
        kit.save_verified(plain, os.path.join(folder, "inf.weights.h5"), allow_nonfinite=True)
        fresh = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")], name="m")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kit.load_verified(fresh, os.path.join(folder, "m.weights.h5"))   # the file holds replica 0's copy
            out["clean_load_warnings"] = len(caught)
            kit.load_verified(fresh, os.path.join(folder, "inf.weights.h5"))
            out["load_warnings"] = [(type(w.message).__name__, str(w.message)) for w in caught]
        print(json.dumps(out))
    """))
    assert out["poisoned"] == [["m/d/kernel", 3]]
    assert "m/d/kernel (replica 3)" in out["refused"] and "allow_nonfinite=True" in out["refused"]
    # a reader saw "would ... predict NaN" above a saved copy that predicted no NaN: only replica 0's copy is kept
    assert "keep replica 0's finite copy" in out["refused"] and "predict NaN." not in out["refused"]
    assert "would load without complaint and predict NaN" in out["refused_replica_0"]
    assert out["written"] == [], "a refused save leaves nothing behind"
    assert out["after_allow"] == ["m.weights.h5"]
    assert out["clean_load_warnings"] == 0
    assert out["load_warnings"][0][0] == "NonFiniteWarning" and "m/d/kernel (replica 0)" in out["load_warnings"][0][1]


CHILD = textwrap.dedent("""
    import sys, numpy as np, gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    model = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048), keras.layers.Dense(2048)])
    path = sys.argv[1]
    kit.save_verified(model, path)                      # a good file first
    print("first", float(model.weights[0].numpy()[0, 0]), flush=True)
    while True:                                         # then keep overwriting it with new weights
        for v in model.weights:
            v.assign(v.numpy() + 1.0)
        print("saving", flush=True)
        kit.save_verified(model, path)
""")


@pytest.mark.parametrize("delay", [0.05, 0.3])
def test_a_killed_save_leaves_the_old_file_loadable(tmp_path, delay):
    path = tmp_path / "model.weights.h5"
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        first = child.stdout.readline()
        assert first.startswith("first"), first
        assert child.stdout.readline().strip() == "saving"
        time.sleep(delay)                                # somewhere inside a save
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait(timeout=60)
    proc = run_python(f"""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        m = keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048), keras.layers.Dense(2048)])
        kit.load_verified(m, {str(path)!r})
        print(json.dumps({{"ok": True}}))
    """)
    assert last_json(proc) == {"ok": True}


def test_lambda_safe_mode_and_registered_layer():
    proc = run_python("""
        import json, os, tempfile, numpy as np, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        d = tempfile.mkdtemp()
        i = keras.Input((8,)); m = keras.Model(i, keras.layers.Lambda(lambda t: t[:, :4])(i))
        m.save(os.path.join(d, "l.keras"))
        try:
            keras.models.load_model(os.path.join(d, "l.keras")); err = None
        except ValueError as e:
            err = str(e)
        @keras.saving.register_keras_serializable(package="gputrain_test")
        class Take(keras.layers.Layer):
            def __init__(self, n, **kw):
                super().__init__(**kw); self.n = n
            def call(self, t):
                return t[:, :self.n]
            def get_config(self):
                return {**super().get_config(), "n": self.n}
        m2 = keras.Model(i, Take(4)(i)); m2.save(os.path.join(d, "t.keras"))
        ok = keras.models.load_model(os.path.join(d, "t.keras"))
        x = np.arange(16, dtype="float32").reshape(2, 8)
        print(json.dumps({"err": err, "same": bool(np.array_equal(ok.predict(x, verbose=0), x[:, :4]))}))
    """)
    out = last_json(proc)
    assert "arbitrary code execution" in out["err"] and "safe_mode=False" in out["err"] and out["same"]


def test_across_strategies_checkpoint_and_backup_and_restore():
    proc = run_python("""
        import json, os, tempfile, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import keras
        from gputrain_kit.training import strategy_for, build_digits_model
        from gputrain_kit.checkpoints import resume_experiment
        d = tempfile.mkdtemp()
        (x, y), (xv, yv) = kit.data.digits()
        with strategy_for(4).scope():
            m = build_digits_model()
        h = m.fit(x, y, batch_size=256, epochs=4, verbose=0, validation_data=(xv, yv),
                  callbacks=[keras.callbacks.ModelCheckpoint(os.path.join(d, "best.keras"), save_best_only=True)])
        p = kit.save_verified(m, os.path.join(d, "m.keras"))
        ref = m.predict(xv, verbose=0)
        plain = keras.models.load_model(p)
        with strategy_for(2).scope():
            two = keras.models.load_model(p)
        two_gap = float(np.abs(two.predict(xv, verbose=0) - ref).max())
        h2 = two.fit(x, y, batch_size=256, epochs=2, verbose=0)
        best = keras.models.load_model(os.path.join(d, "best.keras"))
        print(json.dumps({"plain": float(np.abs(plain.predict(xv, verbose=0) - ref).max()),
                          "two": two_gap,
                          "continues": h2.history["loss"],
                          "best": [min(h.history["val_loss"]), best.evaluate(xv, yv, verbose=0)[0]],
                          "fixed": resume_experiment(reshuffle_each_iteration=False),
                          "reshuffled": resume_experiment(reshuffle_each_iteration=True)}))
    """)
    out = last_json(proc)
    assert out["plain"] < 1e-6 and out["two"] < 1e-6
    assert out["continues"][-1] < out["continues"][0]
    assert out["best"][0] == pytest.approx(out["best"][1], abs=1e-5)
    assert out["fixed"]["bit_identical"] and out["fixed"]["resumed_epochs"] == [3, 4]
    assert "simulated crash at the start of epoch 3" == out["fixed"]["crash"]
    assert not out["reshuffled"]["bit_identical"] and out["reshuffled"]["max_difference"] > 0


def test_hdf5_attribute_limit_and_modern_formats(tmp_path):
    import h5py
    import numpy as np
    with h5py.File(tmp_path / "x.h5", "w") as f:
        with pytest.raises(OSError, match="object header message is too large"):
            f.attrs["big"] = np.array([b"x" * 70_000])
    proc = run_python(f"""
        import json, logging, os, zipfile, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        logging.getLogger("absl").setLevel(logging.ERROR)
        m = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(4, name=f"a_long_layer_name_{{i:04d}}") for i in range(600)])
        m.save({str(tmp_path / 'deep.h5')!r}); m.save({str(tmp_path / 'deep.keras')!r})
        print(json.dumps(sorted(zipfile.ZipFile({str(tmp_path / 'deep.keras')!r}).namelist())))
    """)
    assert last_json(proc) == ["config.json", "metadata.json", "model.weights.h5"]


def test_nb04_exercise_checks():
    assert check.nb04_what_to_save("template") and not check.nb04_what_to_save("wrapper")
    assert check.nb04_reshuffle(False) and not check.nb04_reshuffle(True)


def test_load_verified_names_the_likely_cause_by_what_is_missing():
    """A file with only some of the model's layers (a save interrupted after the first layer) is called partly
    written; a file with none of them (a wrapper's file) a different model; Keras's own sentence is quoted
    whole, not cut at a colon."""
    proc = run_python("""
        import json, os, tempfile
        from unittest import mock
        import gputrain_kit as kit
        kit.setup(devices=1)
        import keras

        def make():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="hidden"),
                                     keras.layers.Dense(2, name="logits")], name="net")

        tmp = tempfile.mkdtemp()
        model, out = make(), {}
        half = os.path.join(tmp, "half.weights.h5")
        model.save_weights(half)
        def disk_full(store):
            raise OSError("disk full")
        with mock.patch.object(model.get_layer("logits"), "save_own_variables", disk_full):
            try:
                model.save_weights(half)
            except OSError:
                pass
        wrapped = keras.Sequential([keras.Input((4,)), make()], name="wrapper")
        other = os.path.join(tmp, "wrapper.weights.h5")
        wrapped.save_weights(other)
        for name, path in (("half", half), ("wrapper", other)):
            try:
                kit.load_verified(make(), path)
            except kit.saving.LoadError as err:
                out[name] = str(err)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert "2 of 4 variable(s)" in out["half"] and "written only partly" in out["half"]
    assert "different model" not in out["half"]
    assert "4 of 4 variable(s)" in out["wrapper"] and "None of the model's layers is in the file" in out["wrapper"]
    for text in out.values():
        assert 'Keras said: "A total of' in text and "Example error message" not in text
