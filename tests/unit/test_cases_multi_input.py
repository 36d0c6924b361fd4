"""``run_cases``/``start_cases`` with a learner's multi-input model (a dict or a list of NumPy arrays as x): the data
file and each case's process carry every input, the cut to whole batches + 3 applies to every input alike, and
mismatched inputs are refused at the call, before any case's process starts."""
from __future__ import annotations

import numpy as np
import pytest

from gputrain_kit import batchnorm


def two_inputs():
    """A two-input functional model: a conv branch with BatchNorm on "img", a Dense branch on "vec"."""
    import keras

    img, vec = keras.Input((8, 8, 1), name="img"), keras.Input((5,), name="vec")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv")(img)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(h))
    g = keras.layers.Dense(8, activation="relu", name="vec_dense")(vec)
    out = keras.layers.Dense(4, name="logits")(keras.layers.Concatenate()([h, g]))
    return keras.Model({"img": img, "vec": vec}, out)


def two_inputs_listed():
    """The same model with its inputs as a list (so data's x is a list, in that order)."""
    import keras

    img, vec = keras.Input((8, 8, 1), name="img"), keras.Input((5,), name="vec")
    h = keras.layers.Conv2D(8, 3, padding="same", name="conv")(img)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.GlobalAveragePooling2D()(keras.layers.ReLU()(h))
    g = keras.layers.Dense(8, activation="relu", name="vec_dense")(vec)
    out = keras.layers.Dense(4, name="logits")(keras.layers.Concatenate()([h, g]))
    return keras.Model([img, vec], out)


def two_input_data(n=200, seed=6):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 4, n)
    img = (rng.normal(size=(n, 8, 8, 1)) + y[:, None, None, None]).astype("float32")
    vec = (rng.normal(size=(n, 5)) + y[:, None]).astype("float32")
    return img, vec, y


LOSS = "sparse_categorical_crossentropy"


@pytest.mark.parametrize("form, families", [("dict", ("onednn", "eigen")), ("list", ("onednn",))])
def test_a_two_input_model_runs_under_both_families(form, families):
    """The conv branch meets the empty replica: oneDNN crashes it, Eigen trains on; drop_remainder trains under both.
    Every input is cut alike (200 samples -> 12 x 16 + 3), and the matrix reads as for a one-input model. The list
    form differs from the dict form only in how the data travels: it runs under oneDNN only (the crash's family)."""
    img, vec, y = two_input_data()
    build, x = ((two_inputs, {"img": img, "vec": vec}) if form == "dict" else (two_inputs_listed, [img, vec]))
    name = build.__name__
    m = batchnorm.run_cases(build=build, data=(x, y), loss=LOSS, batch_size=16, epochs=1, kernels=families)
    assert m.cases == ((name, "as built", "last step empty"), (name, "as built", "drop_remainder"))
    assert m.note.startswith("Your data: 200 samples, cut to 195 = 12 x 16 + 3")
    for family in families:
        fixed = m.outcome(name, "as built", "drop_remainder", family)
        assert fixed.outcome == "healthy" and fixed.rows == 195 and len(fixed.losses) == 1, fixed
        assert fixed.diverged == ()
    crash = m.outcome(name, "as built", "last step empty", "onednn")
    assert crash.outcome == "crash" and crash.rows == 195, crash
    assert "left NaN in moving_mean, moving_variance on replica 3" in crash.detail, crash
    # a crashed step can leave trainable copies apart (a race: see test_replica_divergence); when it does, it is said
    assert all(path.split("/")[-1] in ("kernel", "bias", "gamma", "beta") for path in crash.diverged)
    assert ("now differ" in crash.detail) == bool(crash.diverged)
    if "eigen" in families:
        assert m.outcome(name, "as built", "last step empty", "eigen").outcome != "crash"


def test_start_cases_takes_a_dict_of_inputs():
    img, vec, y = two_input_data(120, seed=7)
    pending = batchnorm.start_cases(["drop_remainder"], build=two_inputs, data=({"img": img, "vec": vec}, y),
                                    loss=LOSS, batch_size=16, epochs=1, processes=1)
    result = pending.result(timeout=300).outcome("two_inputs", "as built", "drop_remainder")
    assert result.outcome == "healthy" and result.rows == 7 * 16 + 3, result


@pytest.mark.parametrize("func", [batchnorm.run_cases, batchnorm.start_cases])
def test_mismatched_inputs_are_refused_before_any_case_starts(func, monkeypatch):
    import gputrain_kit._children as children

    monkeypatch.setattr(children, "run_jobs", None)          # a case that started would fail with a TypeError
    name = func.__name__
    img, vec, y = two_input_data(99)
    with pytest.raises(ValueError, match=rf"^{name}: data's inputs and y must have the same number of rows "
                                         r"\(samples\), got x\['img'\] 99, x\['vec'\] 98, y 99\. Pass arrays"):
        func(build=two_inputs, data=({"img": img, "vec": vec[:98]}, y), loss=LOSS)
    with pytest.raises(ValueError, match=rf"^{name}: data's inputs and y .* got x\[0\] 99, x\[1\] 99, y 97\."):
        func(build=two_inputs_listed, data=([img, vec], y[:97]), loss=LOSS)
    with pytest.raises(TypeError, match=rf"^{name}: data's x\[1\] must be a NumPy array .*got \[1, 2\] \(list\)"):
        func(build=two_inputs_listed, data=([img, [1, 2]], y), loss=LOSS)
    with pytest.raises(TypeError, match=rf"^{name}: data's x is a dict, so its keys must be the model's input names"):
        func(build=two_inputs, data=({0: img, 1: vec}, y), loss=LOSS)
    with pytest.raises(ValueError, match=rf"^{name}: data's x is an empty list"):
        func(build=two_inputs, data=([], y), loss=LOSS)
    with pytest.raises(TypeError, match=rf"^{name}: data must be a tuple \(x, y\), got a list of 2 items "
                                        r"\(ndarray of shape \(99, 8, 8, 1\)"):
        func(build=two_inputs, data=[img, y], loss=LOSS)


def test_every_input_is_cut_alike_and_travels_in_the_data_file():
    img, vec, y = two_input_data(99)
    for x in ({"img": img, "vec": vec}, [img, vec], (img, vec), img):
        users = batchnorm._users_model("run_cases", two_inputs, (x, y), 32, LOSS)
        assert users.rows == 3 * 32 + 3 == len(users.y)
        path = batchnorm._users_data_file(users)
        try:
            got, got_y = batchnorm.load_users_data(path)
        finally:
            import os
            os.unlink(path)
        assert np.array_equal(got_y, y[:99])
        if isinstance(x, dict):
            assert list(got) == ["img", "vec"] and all(np.array_equal(got[k], x[k][:99]) for k in x)
        elif isinstance(x, (list, tuple)):
            assert isinstance(got, tuple) and all(np.array_equal(a, b[:99]) for a, b in zip(got, x))
        else:
            assert np.array_equal(got, img[:99])
    # the cut applies to every input: 130 samples -> 3 x 32 + 3 = 99 rows of each
    img, vec, y = two_input_data(130)
    users = batchnorm._users_model("run_cases", two_inputs, ({"img": img, "vec": vec}, y), 32, LOSS)
    assert {k: len(v) for k, v in users.x.items()} == {"img": 99, "vec": 99} and len(users.y) == 99
    assert np.array_equal(users.x["vec"], vec[:99])
