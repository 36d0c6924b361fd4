"""load_verified refuses what a plain comparison of layouts let through, and names the true cause.

- A trained SGD's state (step 2: its step counter and learning rate, no slots) looks exactly like the state of an
  Adam that is compiled and not built yet (as a restarted job has it): load_verified builds the model's optimizer
  whenever the file's step is above 0, so the SGD file is refused instead of loading SGD's step and learning rate
  into Adam without a word (it already was refused by a built Adam).
- A file of MultiHeadAttention(2, 8) loaded into MultiHeadAttention(4, 8): Keras says only "expected 2 variables,
  but received 0"; the layouts show every group in the file with other shapes, and the error names them (it said
  the file held only some of the model's layers).
"""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

MISMATCH = """
    import json, os, tempfile, warnings
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=1)
    import keras
    from gputrain_kit.saving import LoadError

    folder = tempfile.mkdtemp()
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(64, 10)).astype("float32"), rng.integers(0, 3, 64)

    def mlp(optimizer):
        model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(16), keras.layers.Dense(3)])
        model.compile(optimizer, keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def attempt(model, path):
        before = [w.copy() for w in model.get_weights()]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                kit.load_verified(model, path)
                error = None
            except LoadError as err:
                error = str(err)
        optimizer = getattr(model, "optimizer", None)
        return {"error": error, "kept": all(np.array_equal(a, b) for a, b in zip(before, model.get_weights())),
                "class": type(optimizer).__name__ if optimizer is not None else None,
                "step": int(optimizer.iterations) if optimizer is not None else None,
                "lr": float(optimizer.learning_rate) if optimizer is not None else None,
                "built": optimizer.built if optimizer is not None else None}

    out = {}
    sgd = mlp("sgd")
    sgd.fit(x, y, batch_size=32, epochs=1, verbose=0)                      # 2 steps
    trained = kit.save_verified(sgd, os.path.join(folder, "sgd.weights.h5"))
    out["sgd_variables"] = len(sgd.optimizer.variables)
    fresh_adam = mlp("adam")
    out["fresh_adam_variables"] = len(fresh_adam.optimizer.variables)      # not built: [iterations, learning_rate]
    out["unbuilt_adam"] = attempt(fresh_adam, trained)
    built = mlp("adam")
    built.optimizer.build(built.trainable_variables)
    out["built_adam"] = attempt(built, trained)
    out["unbuilt_sgd"] = attempt(mlp("sgd"), trained)

    def attention(heads):
        inputs = keras.Input((8, 16))
        return keras.Model(inputs, keras.layers.MultiHeadAttention(heads, 8)(inputs, inputs))

    mha_path = os.path.join(folder, "mha.weights.h5")
    attention(2).save_weights(mha_path)
    wider = attention(4)
    try:
        wider.load_weights(mha_path)
        out["keras_said"] = None
    except ValueError as err:
        out["keras_said"] = str(err)
    out["mha"] = attempt(wider, mha_path)
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def mismatch():
    return last_json(run_python(MISMATCH))


def test_a_trained_sgd_state_looks_like_an_unbuilt_adams(mismatch):
    """The premise: both hold 2 variables, so comparing layouts without building the optimizer matched them."""
    assert mismatch["sgd_variables"] == mismatch["fresh_adam_variables"] == 2


def test_a_trained_sgd_file_into_an_unbuilt_adam_is_refused(mismatch):
    got = mismatch["unbuilt_adam"]
    assert got["error"] is not None, got          # it loaded: "Adam step 2 lr 0.01", without a word
    assert "holds the state of optimizer 'sgd' at step 2, 2 variables" in got["error"]
    assert "does not fit the model's optimizer 'adam' (Adam, 10 variables)" in got["error"]
    # nothing loaded; the optimizer was built to compare, and stays built at step 0 with compile's learning rate
    assert got["kept"] and got["built"] and got["step"] == 0 and abs(got["lr"] - 1e-3) < 1e-9


def test_a_trained_sgd_file_into_a_built_adam_stays_refused(mismatch):
    got = mismatch["built_adam"]
    assert got["error"] is not None and "does not fit the model's optimizer" in got["error"] and got["kept"]


def test_a_trained_sgd_file_still_loads_into_an_unbuilt_sgd(mismatch):
    got = mismatch["unbuilt_sgd"]
    assert got["error"] is None and got["class"] == "SGD" and got["step"] == 2 and got["built"]


def test_multi_head_attention_with_other_heads_is_named_as_a_shape_difference(mismatch):
    assert "expected 2 variables, but received 0" in mismatch["keras_said"]    # Keras names no shape
    got = mismatch["mha"]
    text = got["error"]
    assert text is not None and got["kept"]
    assert "Cause: the shapes differ" in text
    assert ("layers/multi_head_attention/query_dense/vars/0 (layer 'query'): (16, 4, 8) in the model, "
            "(16, 2, 8) in the file") in text
    assert "and 3 more" in text                   # 7 variables differ: query, key, value (kernel, bias), output kernel
    assert "only some of the model's layers" not in text and "fewer layers" not in text
