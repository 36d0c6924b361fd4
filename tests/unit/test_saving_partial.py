"""load_verified on partial loads, in both formats: a file's optimizer state into a freshly compiled model
(restored), into an uncompiled model (weights loaded, a warning), into another optimizer (refused); a file
with an extra layer (refused, named), a file missing a layer, another shape (refused). save_verified checks
the optimizer's variables it writes, and refuses a missing folder. Tiny Dense stacks: seconds."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import last_json, run_python

FORMATS = ("weights.h5", "keras")

PARTIAL = """
    import json, os, tempfile, warnings
    from unittest import mock
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=2)
    import keras, tensorflow as tf
    from gputrain_kit.saving import LoadError, SaveError, OptimizerStateWarning, _components

    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 4)).astype("float32"), rng.normal(size=(64, 2)).astype("float32")

    def make(widths=(8, 2), compile="adam", extra=None):
        layers = [keras.Input((4,))] + [keras.layers.Dense(w, name=f"d{i}") for i, w in enumerate(widths)]
        model = keras.Sequential(layers + ([extra] if extra is not None else []))
        if compile:
            model.compile(compile, "mse")
        return model

    def trained(widths=(8, 2), extra=None, steps=8):
        keras.utils.set_random_seed(1)
        model = make(widths, extra=extra)
        target = y if widths[-1] == 2 and extra is None else model.predict(x, verbose=0) + 1
        model.fit(x[:8 * steps], target[:8 * steps], batch_size=8, epochs=1, shuffle=False, verbose=0)
        return model

    def values(variables):
        return [[c.numpy().tolist() for c in _components(v)] for v in variables]

    def state(model):
        optimizer = getattr(model, "optimizer", None)
        return {"weights": values(model.weights),
                "optimizer": values(optimizer.variables) if optimizer is not None else None,
                "built": getattr(optimizer, "built", None)}

    def attempt(model, path):
        before = state(model)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                kit.load_verified(model, path)
                error = None
            except LoadError as err:
                error = {"text": str(err), "missing": err.missing, "extra": err.extra}
        after = state(model)
        kept = (before["weights"] == after["weights"]       # every variable that existed holds its value
                and (after["optimizer"] is None if before["optimizer"] is None
                     else after["optimizer"][:len(before["optimizer"])] == before["optimizer"]))
        return {"error": error, "warnings": [[type(w.message).__name__, str(w.message)] for w in caught
                                             if not issubclass(w.category, DeprecationWarning)],
                "unchanged": kept, "built_before": before["built"], "before": before, "after": after}

    def busy_model():                                             # built, with a state of its own
        model = make()
        model.optimizer.build(model.trainable_variables)
        for v in model.optimizer.variables:
            v.assign(np.full(v.shape, 3, v.dtype))
        return model

    sources = {"source": trained(), "seven": trained(steps=7),     # step 7: the old integer marker value
               "deeper": trained(widths=(8, 2, 3)), "normed": trained(extra=keras.layers.LayerNormalization(name="norm"))}
    early = make(compile=keras.optimizers.Adam(0.01))             # compiled, saved before any training step
    early.predict(x[:1], verbose=0)
    sources["early"] = early
    source = sources["source"]
    out = {"optimizer_name": source.optimizer.name, "saved": state(source), "seven_saved": state(sources["seven"]),
           "saved_iterations": int(_components(source.optimizer.iterations)[0].numpy())}
    resumed = []
    for fmt in ("weights.h5", "keras"):
        row = out[fmt] = {}
        p = lambda name: os.path.join(folder, f"{name}.{fmt}")
        for name, model in sources.items():
            kit.save_verified(model, p(name))
        fresh = make()                                            # compiled, optimizer not built yet
        row["fresh"] = attempt(fresh, p("source"))
        resumed.append(fresh)
        row["busy"] = attempt(busy_model(), p("source"))
        slow = make(compile=keras.optimizers.Adam(0.5))
        row["slow"] = attempt(slow, p("source"))
        row["slow_learning_rate"] = float(_components(slow.optimizer.learning_rate)[0].numpy())
        row["uncompiled"] = attempt(make(compile=None), p("source"))
        row["sgd"] = attempt(make(compile=keras.optimizers.SGD(momentum=0.9)), p("source"))
        row["seven"] = attempt(make(), p("seven"))
        row["early_fresh"] = attempt(make(), p("early"))
        row["early_busy"] = attempt(busy_model(), p("early"))
        row["extra_layer"] = attempt(make(), p("deeper"))
        row["extra_layer_uncompiled"] = attempt(make(compile=None), p("deeper"))
        row["extra_other_class"] = attempt(make(), p("normed"))
        row["missing_layer"] = attempt(make(widths=(8, 2, 3)), p("source"))
        row["other_shape"] = attempt(make(widths=(16, 2)), p("source"))

        # save_verified checks the optimizer's variables: one written wrong, one not read back
        kit.save_verified(source, p("guarded"))
        def wrong_step(store):
            for i, v in enumerate(source.optimizer.variables):
                store[str(i)] = v.numpy() + (1 if i == 0 else 0)
        errors = {}
        for name, target, patched in (("written", "save_own_variables", wrong_step),
                                      ("readback", "load_own_variables", lambda store: None)):
            with mock.patch.object(source.optimizer, target, patched):
                try:
                    kit.save_verified(source, p("guarded")); errors[name] = None
                except SaveError as err:
                    errors[name] = str(err)
        row["save_errors"] = errors
        row["save_left_model"] = state(source) == out["saved"]
        check = make(); kit.load_verified(check, p("guarded"))
        row["guarded_still_old"] = state(check)["optimizer"] == out["saved"]["optimizer"]
        row["leftovers"] = sorted(n for n in os.listdir(folder) if n.startswith("."))

    for model in [source] + resumed:                              # a resume continues exactly
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    out["resume_identical"] = [state(m)["weights"] == state(source)["weights"] for m in resumed]

    strategy = tf.distribute.MirroredStrategy(kit.device_names(2))
    with strategy.scope():
        mirrored = make()
    kit.load_verified(mirrored, os.path.join(folder, "source.keras"))
    out["mirrored"] = state(mirrored)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def partial():
    return last_json(run_python(PARTIAL, timeout=600))


def replica0(values):
    return [copies[0] for copies in values]


@pytest.mark.parametrize("fmt", FORMATS)
def test_optimizer_state_is_restored_into_a_freshly_compiled_model(partial, fmt):
    fresh = partial[fmt]["fresh"]
    assert fresh["error"] is None and fresh["warnings"] == []
    assert fresh["built_before"] is False and fresh["after"]["built"] is True
    assert partial["saved_iterations"] == 8
    assert replica0(fresh["after"]["optimizer"]) == replica0(partial["saved"]["optimizer"])   # iterations, Adam's slots
    assert int(fresh["after"]["optimizer"][0][0]) == partial["saved_iterations"]
    assert replica0(fresh["after"]["weights"]) == replica0(partial["saved"]["weights"])


def test_a_restored_model_resumes_exactly_as_the_saved_one_continues(partial):
    assert partial["resume_identical"] == [True, True]          # .weights.h5, .keras


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_built_optimizer_gets_the_files_state_and_learning_rate(partial, fmt):
    row = partial[fmt]
    assert row["busy"]["error"] is None and row["busy"]["built_before"] is True
    assert replica0(row["busy"]["after"]["optimizer"]) == replica0(partial["saved"]["optimizer"])
    assert row["slow"]["error"] is None
    assert row["slow_learning_rate"] == pytest.approx(partial["saved"]["optimizer"][1][0])   # the file's, not 0.5
    assert row["slow_learning_rate"] != pytest.approx(0.5)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_step_count_equal_to_the_old_integer_marker_loads(partial, fmt):
    got = partial[fmt]["seven"]
    assert got["error"] is None, got["error"]
    assert int(got["after"]["optimizer"][0][0]) == 7
    assert replica0(got["after"]["optimizer"]) == replica0(partial["seven_saved"]["optimizer"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_file_saved_before_the_first_step_loads_into_a_fresh_model_and_not_into_a_built_one(partial, fmt):
    fresh, busy = partial[fmt]["early_fresh"], partial[fmt]["early_busy"]
    assert fresh["error"] is None and fresh["after"]["built"] is False             # nothing to build for
    assert int(fresh["after"]["optimizer"][0][0]) == 0
    assert fresh["after"]["optimizer"][1][0] == pytest.approx(0.01)              # the file's learning rate
    assert busy["error"] is not None and busy["unchanged"] and busy["after"] == busy["before"]
    assert "saved before its first training step" in busy["error"]["text"] and len(busy["error"]["text"]) <= 600


@pytest.mark.parametrize("fmt", FORMATS)
def test_optimizer_state_into_an_uncompiled_model_loads_the_weights_and_warns(partial, fmt):
    got = partial[fmt]["uncompiled"]
    assert got["error"] is None and got["after"]["optimizer"] is None
    assert replica0(got["after"]["weights"]) == replica0(partial["saved"]["weights"])
    assert [kind for kind, _ in got["warnings"]] == ["OptimizerStateWarning"]
    text = got["warnings"][0][1]
    assert text.startswith(f"load_verified: source.{fmt} also holds the state of optimizer "
                           f"{partial['optimizer_name']!r} at step {partial['saved_iterations']}")
    assert "not compiled" in text and "compile the model before loading" in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_optimizer_state_of_another_optimizer_is_refused(partial, fmt):
    got = partial[fmt]["sgd"]
    assert got["error"] is not None and got["unchanged"]
    text = got["error"]["text"]
    assert f"optimizer {partial['optimizer_name']!r}" in text and "(SGD," in text
    assert "The model was left unchanged" in text and "compile the model with the optimizer it was saved with" in text
    assert len(text) <= 600
    # the optimizer was built for the load, as fit would build it: its new variables hold their initial zeros
    before, after = got["before"]["optimizer"], got["after"]["optimizer"]
    assert got["after"]["built"] is True and len(after) > len(before)
    assert all(not np.any(copies[0]) for copies in after[len(before):])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", ["extra_layer", "extra_layer_uncompiled", "extra_other_class"])
def test_a_file_with_variables_the_model_lacks_is_refused_and_names_them(partial, fmt, case):
    got = partial[fmt][case]
    group, name = ("layers/layer_normalization", "norm") if case == "extra_other_class" else ("layers/dense_2", "d2")
    assert got["error"] is not None and got["unchanged"], got["error"]
    assert got["error"]["extra"] == [f"{group}/vars/0", f"{group}/vars/1"] and got["error"]["missing"] == []
    text = got["error"]["text"]
    assert text.startswith("load_verified: ") and f"{group} (layer '{name}', 2 variables)" in text
    assert "no place for" in text and len(text) <= 600
    assert got["after"] == got["before"]                      # refused before anything, the optimizer not even built


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_file_missing_a_layer_is_refused_and_names_it(partial, fmt):
    got = partial[fmt]["missing_layer"]
    assert got["error"] is not None and got["after"] == got["before"]
    assert [m.split("/", 1)[1] for m in got["error"]["missing"]] == ["d2/kernel", "d2/bias"]
    assert "2 of 6 variable(s) were not loaded" in got["error"]["text"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_another_shape_is_refused_naming_both_shapes(partial, fmt):
    got = partial[fmt]["other_shape"]
    assert got["error"] is not None and got["after"] == got["before"]
    assert "(4, 16) in the model, (4, 8) in the file" in got["error"]["text"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_save_verified_checks_the_optimizer_variables_it_writes(partial, fmt):
    row, step = partial[fmt], f"{partial['optimizer_name']}/iteration"
    written, readback = row["save_errors"]["written"], row["save_errors"]["readback"]
    assert written is not None and f"(0 variable(s) missing, 1 different: {step});" in written
    assert readback is not None and f"variable(s) missing, 0 different: {step}, " in readback
    assert row["save_left_model"] and row["guarded_still_old"] and row["leftovers"] == []


def test_a_model_under_a_strategy_gets_the_optimizer_state_in_every_replica(partial):
    got, saved = partial["mirrored"], replica0(partial["saved"]["optimizer"])
    assert got["built"] is True and len(got["optimizer"]) == len(saved)
    for copies, expected in zip(got["optimizer"], saved):
        assert len(copies) == 2 and all(c == expected for c in copies)


def test_save_verified_refuses_a_missing_folder_and_creates_nothing(tmp_path):
    import keras
    from gputrain_kit import save_verified
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    target = tmp_path / "no" / "such" / "m.keras"
    with pytest.raises(FileNotFoundError) as caught:
        save_verified(model, target)
    text = str(caught.value)
    assert text.startswith("save_verified: path ") and repr(str(target.parent)) in text     # in full
    assert f"nothing from {str(tmp_path / 'no')!r} on exists" in text                          # where the typo is
    assert f"os.makedirs({str(target.parent)!r}, exist_ok=True)" in text
    assert not (tmp_path / "no").exists()
    # a very long path keeps its end (the folders nearest the file, which a fix needs) and the fix
    deep = tmp_path / ("long_folder_name_" * 12)
    deep.mkdir()
    with pytest.raises(FileNotFoundError) as caught:
        save_verified(model, deep / "missing" / "m.keras")
    text = str(caught.value)
    assert "'..." in text and "/missing'" in text and "exist_ok=True)" in text
    assert not (deep / "missing").exists()
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        save_verified(model, tmp_path / "plain" / "m.weights.h5")


def test_load_verified_names_path_and_a_missing_folder(tmp_path):
    import keras
    from gputrain_kit import load_verified
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(FileNotFoundError) as caught:
        load_verified(model, tmp_path / "no" / "m.keras")
    text = str(caught.value)
    assert text.startswith("load_verified: path must be an existing file, got ")
    assert f"nor does its folder {str(tmp_path / 'no')!r}" in text
    with pytest.raises(FileNotFoundError) as caught:
        load_verified(model, tmp_path / "m.keras")
    assert "does not exist;" in str(caught.value) and "folder '" not in str(caught.value)
