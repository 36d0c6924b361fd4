"""Notebook 06's kit functions: the warm-up schedule saves and loads with a model, and bad input is refused
clearly (linear_scaled_lr, predict_curve, feeding.measure_steps); one-server links warn beyond 8 GPUs."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.05, 0])
def test_linear_scaled_lr_refuses_a_rate_that_is_not_positive_and_finite(bad):
    from gputrain_kit.lrscaling import linear_scaled_lr, warmup_schedule

    with pytest.raises(ValueError, match="linear_scaled_lr: base_lr"):
        linear_scaled_lr(bad, 32, 48)
    with pytest.raises(ValueError, match="warmup_schedule: peak_lr"):
        warmup_schedule(0.05, bad, 3)


def _compiled(schedule):
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(schedule), "mse")
    return model


def test_warmup_schedule_survives_a_save_and_load(tmp_path):
    import keras

    from gputrain_kit.lrscaling import LinearWarmup, warmup_schedule

    schedule = warmup_schedule(0.05, 0.8, 3)
    assert isinstance(schedule, LinearWarmup)
    path = str(tmp_path / "warmup.keras")
    _compiled(schedule).save(path)
    loaded = keras.models.load_model(path).optimizer.get_config()["learning_rate"]
    assert loaded["registered_name"] == "gputrain_kit>LinearWarmup"
    assert loaded["config"] == {"start_lr": 0.05, "peak_lr": 0.8, "warmup_steps": 3}
    back = keras.optimizers.schedules.deserialize(loaded)
    assert [round(float(back(s)), 4) for s in range(5)] == [0.05, 0.3, 0.55, 0.8, 0.8]
    # a new process loads it once the class is imported, and not without (what notebook 06 tells a learner)
    load = f"import keras\nm = keras.models.load_model({path!r})\nprint(type(m.optimizer._learning_rate).__name__)"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, "-c", "from gputrain_kit.lrscaling import LinearWarmup\n" + load],
                          capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("LinearWarmup"), done.stderr[-2000:]
    bare = subprocess.run([sys.executable, "-c", load], capture_output=True, text=True, env=env)
    assert bare.returncode != 0 and "LinearWarmup" in bare.stderr


def test_an_unregistered_schedule_does_not_load_and_a_registered_one_does(tmp_path):
    """Notebook 06, cell of LinearWarmup: registering the class is what lets load_model find it."""
    code = textwrap.dedent('''
        import sys, keras
        register = sys.argv[1] == "1"
        class Warm(keras.optimizers.schedules.LearningRateSchedule):
            def __init__(self, lr):
                self.lr = lr
            def __call__(self, step):
                return self.lr
            def get_config(self):
                return {"lr": self.lr}
        if register:
            Warm = keras.saving.register_keras_serializable(package="probe")(Warm)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        m.compile(keras.optimizers.SGD(Warm(0.1)), "mse")
        m.save(sys.argv[2])
        try:
            keras.models.load_model(sys.argv[2])
            print("loaded")
        except TypeError as err:
            print("TypeError", "could not be deserialized properly" in str(err))
        ''')
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    out = {flag: subprocess.run([sys.executable, "-c", code, flag, str(tmp_path / f"m{flag}.keras")],
                                capture_output=True, text=True, env=env).stdout.strip().splitlines()[-1]
           for flag in ("0", "1")}
    assert out == {"0": "TypeError True", "1": "loaded"}


@pytest.mark.parametrize("bad, message", [(0, "max_gpus must be at least 1"), (2.5, "max_gpus must be a whole")])
def test_predict_curve_refuses_a_gpu_count_below_one(bad, message):
    from gputrain_kit.scaling import predict_curve

    with pytest.raises(ValueError, match=message):
        predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, bad)


def test_one_server_links_warn_beyond_8_gpus_and_network_links_do_not():
    from gputrain_kit.scaling import LINKS, predict_curve

    for link, spec in LINKS.items():
        curve = predict_curve("VGG-16", link, 64, 16)
        notes = [p.note for p in curve]
        if spec.max_gpus is None:
            assert not any(notes), link
        else:
            assert spec.max_gpus == 8 and not any(notes[:8]) and all(notes[8:]), link
            assert "one server" in repr(curve[-1]) and "Not a real setup" in repr(curve[-1])
    assert {link for link, spec in LINKS.items() if spec.max_gpus} == {"PCIe 3.0 x16 (one server)",
                                                                      "NVLink 2 (V100 SXM2)"}


def test_explorer_says_so_in_its_summary():
    pytest.importorskip("ipywidgets")
    from gputrain_kit.widgets import ScalingModelExplorer

    explorer = ScalingModelExplorer(link="NVLink 2 (V100 SXM2)", gpus=8)
    assert "Not a real setup" not in explorer.summary.value
    explorer.gpus.value = 64
    assert "Not a real setup" in explorer.summary.value and "at most 8" in explorer.summary.value
    explorer.link.value = "InfiniBand EDR 100 Gbit/s (servers)"
    assert "Not a real setup" not in explorer.summary.value


@pytest.fixture(scope="module")
def model():
    import keras

    m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
    m.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(32, 64)).astype("float32"), rng.integers(0, 10, 32).astype("int32")


def test_measure_steps_refuses_bad_input_before_any_step(model):
    import tensorflow as tf

    from gputrain_kit.feeding import measure_steps

    x, y = _data()
    good = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    cases = [
        (dict(dataset=good, steps=2.5), TypeError, "steps must be a whole number"),
        (dict(dataset=good, steps="3"), TypeError, "steps must be a whole number"),
        (dict(dataset=good, steps=0), ValueError, "steps must be at least 1"),
        (dict(dataset=good, warmup=-1), ValueError, "warmup must be at least 0"),
        (dict(dataset=(x, y)), TypeError, "tf.data.Dataset of batched"),
        (dict(dataset=tf.data.Dataset.from_tensor_slices((x, y, y)).batch(8)), ValueError, "3 parts"),
        (dict(dataset=tf.data.Dataset.from_tensor_slices(x).batch(8)), ValueError, "not pairs"),
        (dict(dataset=tf.data.Dataset.from_tensor_slices((x, y))), ValueError, "unbatched"),
        (dict(dataset=good.take(0)), ValueError, "gave no batch"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            measure_steps(model, **kwargs)
    with pytest.raises(TypeError, match="model must be a Keras model"):
        measure_steps("model", good)


@pytest.mark.parametrize("warmup", [0, 2])
def test_measure_steps_times_every_step(model, warmup):
    import tensorflow as tf

    from gputrain_kit.feeding import measure_steps

    x, y = _data()
    times = measure_steps(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(8), steps=5, warmup=warmup)
    assert len(times.wait_s) == len(times.compute_s) == 5
    assert all(t >= 0 for t in times.wait_s + times.compute_s) and 0 <= times.input_bound_fraction <= 1


def test_measure_steps_says_unbatched_for_a_subclassed_model_too():
    """A subclassed model has no ``inputs`` to compare the dataset's x with: its first step fails on one example's
    shape, and the kit says why (Keras alone says 'as_list() is not defined on an unknown TensorShape')."""
    import keras
    import tensorflow as tf

    from gputrain_kit.feeding import measure_steps

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(10)

        def call(self, x):
            return self.dense(x)

    sub = Sub()
    sub.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data()
    with pytest.raises(ValueError, match=r"x of shape \(64,\) .* is it unbatched\? Call \.batch\(64\)") as caught:
        measure_steps(sub, tf.data.Dataset.from_tensor_slices((x, y)), steps=1)
    assert caught.value.__cause__ is not None                        # Keras's own error, kept as the cause
    times = measure_steps(sub, tf.data.Dataset.from_tensor_slices((x, y)).batch(8), steps=2, warmup=0)
    assert len(times.wait_s) == 2


@pytest.mark.parametrize("argument", ["compute_time_per_sample", "gradient_bytes", "bandwidth", "latency",
                                      "input_ceiling"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_scaling_model_refuses_nan_and_infinity(argument, bad):
    """NaN once gave "efficiency 100%" and infinity a bare ZeroDivisionError."""
    from gputrain_kit.scaling import scaling_model

    kwargs = dict(compute_time_per_sample=1 / 130, gradient_bytes=4 * 138e6, per_gpu_batch=64, bandwidth=12e9)
    kwargs[argument] = bad
    with pytest.raises(ValueError, match=rf"scaling_model: {argument} must be a finite .*, got -?(nan|inf); "
                                         "pass a number, not NaN or infinity"):
        scaling_model(8, **kwargs)
