"""MemoryExplorer takes your model (a built Keras model or a profile) as well as a preset, checks every argument
with the kit's one error shape before a widget is built (never a widget's TraitError), and says what it clamps or
refuses in the controls' words, not estimate_memory's. visibility_explorer's arguments likewise."""
from __future__ import annotations

import colorsys
import html

import pytest

from gputrain_kit import estimate_memory
from gputrain_kit.memory import LayerStat, dense_stack_profile, preset_profile, profile
from gputrain_kit.widgets import MemoryExplorer, visibility_explorer


def said(explorer: MemoryExplorer) -> str:
    return html.unescape(explorer.summary.value)


def small_functional(name: str = "my_net", layers: int = 3):
    """A small functional model of ``layers`` Dense layers on 16 inputs."""
    import keras

    inputs = keras.Input((16,))
    x = inputs
    for i in range(layers - 1):
        x = keras.layers.Dense(32, activation="relu", name=f"hidden_{i}")(x)
    return keras.Model(inputs, keras.layers.Dense(4, name="head")(x), name=name)


BAD = [  # (kwargs, argument named, the error's type)
    ({"preset": "my model"}, "preset", ValueError),
    ({"preset": 3}, "preset", TypeError),
    ({"preset": []}, "preset", TypeError),
    ({"preset": [1, 2]}, "preset", TypeError),
    ({"preset": lambda: None}, "preset", TypeError),
    ({"batch": 0}, "batch", ValueError),
    ({"batch": "32"}, "batch", TypeError),
    ({"devices": 0}, "devices", ValueError),
    ({"devices": 12}, "devices", ValueError),
    ({"devices": 2.5}, "devices", TypeError),
    ({"strategy": "model"}, "strategy", ValueError),
    ({"strategy": 2}, "strategy", TypeError),
    ({"capacity_gb": 0}, "capacity_gb", ValueError),
    ({"capacity_gb": "12"}, "capacity_gb", TypeError),
    ({"capacity_gb": 12e9}, "capacity_gb", ValueError),
    ({"optimizer": "lamb"}, "optimizer", ValueError),
    ({"optimizer": 3}, "optimizer", ValueError),
    ({"dtype_policy": "float16"}, "dtype_policy", ValueError),
    ({"dtype_policy": "fp8"}, "dtype_policy", ValueError),
    ({"remat": "yes"}, "remat", TypeError),
    ({"accumulation_steps": 0}, "accumulation_steps", ValueError),
    ({"accumulation_steps": 3}, "accumulation_steps", ValueError),
    ({"accumulation_steps": 64}, "accumulation_steps", ValueError),
    ({"zero_stage": 5}, "zero_stage", ValueError),
    ({"zero_stage": True}, "zero_stage", TypeError),
    ({"zero_stage": 2, "strategy": "split"}, "zero_stage", ValueError),
    ({"levers": "no"}, "levers", TypeError),
]


@pytest.mark.parametrize("kwargs, argument, kind", BAD,      # ids without addresses: xdist's workers must agree
                         ids=[f"{a}=" + ("a lambda" if callable(k[a]) else repr(k[a])) for k, a, _ in BAD])
def test_every_bad_argument_gets_the_kits_error_naming_it(kwargs, argument, kind):
    from traitlets import TraitError

    with pytest.raises(Exception) as caught:
        MemoryExplorer(**kwargs)
    err = caught.value
    assert not isinstance(err, TraitError), err
    assert isinstance(err, kind) and isinstance(err, ValueError), type(err)     # ArgumentTypeError is both
    message = str(err)
    assert message.startswith("MemoryExplorer: ") and argument in message, message
    assert "0x7f" not in message and len(message) <= 600, message


def test_the_reported_spellings_are_taken():
    """The user report: a preset's key, a card of 40 GB and 'mirrored' all raised a TraitError."""
    e = MemoryExplorer(preset="resnet50", capacity_gb=40, strategy="mirrored")
    assert e.preset.value == "ResNet50 224x224" and e.strategy.value == "data"
    assert e.capacity.value == 40 and list(e.capacity.options) == [12, 16, 24, 40, 80]
    assert "of a 40 GB card" in said(e)
    assert MemoryExplorer(preset=" RESNET50 ").preset.value == "ResNet50 224x224"       # any case
    assert MemoryExplorer(capacity_gb=24.0).capacity.options == (12, 16, 24, 80)         # 24.0 is the 24 card
    assert MemoryExplorer(capacity_gb=40.5).capacity.value == 40.5
    assert MemoryExplorer(strategy="Split", devices=4).strategy.value == "split"


def test_optimizer_and_precision_take_what_estimate_memory_takes():
    import keras

    assert MemoryExplorer(optimizer="Adam").optimizer.value == "adam"
    assert MemoryExplorer(optimizer="SGD_momentum").optimizer.value == "sgd-momentum"
    assert MemoryExplorer(optimizer=keras.optimizers.SGD(momentum=0.9)).optimizer.value == "sgd-momentum"
    assert MemoryExplorer(optimizer=keras.optimizers.RMSprop).optimizer.value == "rmsprop"
    assert MemoryExplorer(dtype_policy="Mixed_BFloat16").precision.value == "mixed_bfloat16"
    assert MemoryExplorer(dtype_policy=keras.DTypePolicy("mixed_float16")).precision.value == "mixed_float16"


def test_your_keras_model_is_added_to_the_dropdown_and_selected():
    import keras

    model = small_functional()
    e = MemoryExplorer(model)
    assert e.preset.value == "your model (my_net)" == e.preset.options[0]
    assert "ResNet50 224x224" in e.preset.options
    assert e.batch.value == 32 and e.strategy.value == "data" and e.devices.value == 2
    expected = estimate_memory(model, batch_size=32, strategy="data", devices=2, optimizer="adam")
    assert e.estimate.per_device == expected.per_device and "fits" in said(e)
    e.preset.value = "ResNet50 224x224"                                 # a preset, then your model again
    e.batch.value = 128
    e.preset.value = "your model (my_net)"
    assert e.batch.value == 32 and e.estimate.per_device == expected.per_device    # with the batch it came with
    assert MemoryExplorer(model, batch=64).estimate.batch_size == 64

    model.compile(keras.optimizers.SGD(momentum=0.9), "mse")           # compiled: its optimizer, unless told
    assert MemoryExplorer(model).optimizer.value == "sgd-momentum"
    assert MemoryExplorer(model, optimizer="adam").optimizer.value == "adam"
    model.compile(keras.optimizers.Adagrad(), "mse")                   # one the estimate does not know
    unknown = MemoryExplorer(model)
    assert unknown.optimizer.value == "adam" and "compiled with Adagrad" in said(unknown)

    with pytest.raises(ValueError, match="MemoryExplorer: preset .* not built yet"):
        MemoryExplorer(keras.Sequential([keras.layers.Dense(2)]))


def built_by_a_function():
    """A build function, as estimate_memory takes it: built without weights."""
    return small_functional(name="from_build")


def test_a_build_function_works_as_your_model_and_a_lambda_is_named():
    e = MemoryExplorer(built_by_a_function, batch=16, strategy="single")
    assert e.preset.value == "your model (from_build)"
    assert e.estimate.per_device == estimate_memory(built_by_a_function, batch_size=16).per_device
    with pytest.raises(TypeError, match="MemoryExplorer: preset as a function must be one defined with def"):
        MemoryExplorer(lambda: small_functional())

    def needs_width(width):
        return small_functional()

    with pytest.raises(TypeError, match=r"MemoryExplorer: preset: needs_width\(\) must take no arguments"):
        MemoryExplorer(needs_width)


def test_a_recurrent_model_keeps_the_note_the_estimate_gives_it():
    import keras

    rnn = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(4, name="lstm"), keras.layers.Dense(1)],
                           name="rnn")
    e = MemoryExplorer(rnn, strategy="single")
    notes = estimate_memory(rnn, batch_size=32).assumptions[3:]        # what it leaves out of an LSTM, say
    assert any("lstm" in note for note in notes)
    assert all(note in said(e) for note in notes)
    e.preset.value = "ResNet50 224x224"
    assert "lstm" not in said(e)


def test_a_profile_works_as_your_model():
    stats = dense_stack_profile(4, 256)
    e = MemoryExplorer(stats, batch=64, strategy="single")
    assert e.preset.value == "your model (4 layers)"
    assert e.estimate.per_device == estimate_memory(stats, batch_size=64, optimizer="adam").per_device
    assert MemoryExplorer(tuple(preset_profile("digits"))).preset.value == "your model (2 layers)"


def test_a_split_over_more_devices_than_layers_is_clamped_in_the_controls_words():
    model = small_functional(layers=3)
    e = MemoryExplorer(model, strategy="split", devices=8)              # at the call
    assert e.devices.value == 3 == e.estimate.devices
    assert ("Split over 8 devices needs at least 8 layers (every device holds one or more): this model has 3; the "
            "devices slider was set to 3.") in said(e)
    e.devices.value = 2
    assert "slider was set" not in said(e)                              # said once, after the change that did it
    e.strategy.value = "data"
    e.devices.value = 8
    assert e.estimate.devices == 8
    e.strategy.value = "split"                                          # by a change of strategy
    assert e.devices.value == 3 and "this model has 3; the devices slider was set to 3" in said(e)
    e.devices.value = 6                                                 # by the slider
    assert e.devices.value == 3 and "Split over 6 devices" in said(e)
    e.preset.value = "ResNet50 224x224"
    e.devices.value = 8
    e.preset.value = "course digits model"                               # by a model of fewer layers
    assert e.devices.value == 2 and "this model has 2" in said(e)
    assert "estimate_memory" not in said(e) and e.estimate is not None


def test_single_shows_one_device_and_gives_the_slider_its_value_back():
    e = MemoryExplorer(devices=4, strategy="data")
    e.strategy.value = "single"
    assert e.devices.value == 1 and e.devices.disabled and e.estimate.devices == 1
    e.strategy.value = "data"
    assert e.devices.value == 4 and not e.devices.disabled and e.estimate.devices == 4
    e.strategy.value = "single"
    e.strategy.value = "split"
    assert e.devices.value == 4 == e.estimate.devices
    at_call = MemoryExplorer(devices=4, strategy="single")              # at the call: 1 shown, 4 kept
    assert at_call.devices.value == 1 and at_call.devices.disabled
    at_call.devices.value = 6                                           # set from code while disabled: kept for later
    assert at_call.devices.value == 1 and at_call.estimate.devices == 1
    at_call.strategy.value = "data"
    assert at_call.devices.value == 6 == at_call.estimate.devices


def test_accumulation_that_does_not_divide_the_batch_is_said_in_the_controls_words():
    e = MemoryExplorer(preset="course digits model", batch=64, strategy="single", accumulation_steps=8)
    assert e.estimate.per_device[0]["accumulators"] > 0
    e.batch.value = 4
    text = said(e)
    assert e.estimate is None and "estimate_memory" not in text
    assert ("8 accumulation steps do not divide the global batch of 4: every step must get the same number of "
            "samples, and measure_memory refuses such a batch. Set 'accumulation steps' to 4, or the batch to a "
            "multiple of 8.") in text
    e.accumulation.value = 4
    assert e.estimate is not None and e.estimate.batch_size == 4


def test_replicas_with_no_sample_are_said_in_the_controls_words_not_warned():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")                                  # nothing on the notebook's stderr
        e = MemoryExplorer(preset="course digits model", batch=4, devices=8, strategy="data")
        assert ("A global batch of 4 on 8 devices: 4 of them get no sample in every step (split [1, 1, 1, 1, 0, 0, "
                "0, 0]): Keras 3's fit refuses such a first step (notebook 02), a custom loop runs it and "
                "BatchNormalization's statistics turn NaN there (notebook 05). Set a global batch that is a multiple of 8 (8 or 16), or "
                "devices=2 or 4 (dividing each step's 4 samples)."
                ) in said(e)
        assert "evenly" not in said(e) and "estimate_memory" not in said(e)
        e.batch.value = 64
        e.accumulation.value = 16
        assert "Each step's 4 samples (64 in 16 accumulation steps) on 8 devices: 4 of them get no sample" in said(e)
        e.accumulation.value = 1
        e.batch.value = 8
        e.devices.value = 6                           # more samples than devices, still empty replicas: ceil(8/6) each
        assert ("A global batch of 8 on 6 devices: 2 of them get no sample in every step (split [2, 2, 2, 2, 0, 0])"
                in said(e))
        assert "evenly" not in said(e)
        e.batch.value = 64
        e.accumulation.value = 8
        e.devices.value = 3
        assert "Each step's 8 samples (64 in 8 accumulation steps) do not split evenly over 3 devices" in said(e)


def test_accumulators_are_not_drawn_in_the_card_lines_red():
    from matplotlib.colors import to_rgb

    from gputrain_kit.plots import memory_figure

    estimate = estimate_memory(dense_stack_profile(8, 8192, head=16), batch_size=32768, accumulation_steps=8)
    fig = memory_figure(estimate, 12)
    ax = fig.axes[0]
    bars = {container.get_label(): to_rgb(container.patches[0].get_facecolor()) for container in ax.containers}
    card = to_rgb(next(line for line in ax.get_lines() if line.get_label() == "12 GB card").get_color())
    hue = lambda rgb: colorsys.rgb_to_hsv(*rgb)[0] * 360
    distance = abs(hue(bars["accumulators"]) - hue(card)) % 360
    assert min(distance, 360 - distance) > 60, (bars["accumulators"], card)     # not a shade of red either
    assert len(set(bars.values())) == len(bars)                                # every part its own colour


@pytest.mark.timing      # a wall-clock bound: run alone, after the parallel tests (`make unit`)
def test_your_model_answers_as_fast_as_a_preset():
    e = MemoryExplorer(small_functional(), strategy="data", devices=4)
    from support import answer_seconds

    for control, value in ((e.batch, 256), (e.strategy, "split"), (e.strategy, "single"), (e.devices, 8)):
        assert answer_seconds(control, value) < 0.5, control.description     # the quickest of three answers


def test_visibility_explorer_checks_its_arguments():
    from traitlets import TraitError

    from gputrain_kit._args import ArgumentTypeError

    for kwargs, argument in (({"value": 5}, "value"), ({"value": [2, 0]}, "value"), ({"value": b"2,0"}, "value"),
                             ({"n_gpus": "8"}, "n_gpus"), ({"n_gpus": True}, "n_gpus"), ({"n_gpus": 17}, "n_gpus")):
        with pytest.raises(ValueError) as caught:
            visibility_explorer(**kwargs)
        assert not isinstance(caught.value, TraitError)
        assert str(caught.value).startswith("visibility_explorer: ") and argument in str(caught.value)
    with pytest.raises(ArgumentTypeError, match="Pass value='5'"):
        visibility_explorer(value=5)
    with pytest.raises(ArgumentTypeError, match="Pass value='2,0'"):
        visibility_explorer(value=[2, 0])
    unset = visibility_explorer(value=None)                             # None: the variable unset
    assert unset.unset.value and unset.text.disabled and "all 8 GPU(s) visible" in unset.table.value
    assert visibility_explorer(n_gpus=4, value="").table.value        # an empty value is a value (no GPU)


def test_layerstat_profiles_from_models_and_lists_agree():
    model = small_functional()
    assert MemoryExplorer(profile(model)).estimate.per_device == MemoryExplorer(model).estimate.per_device
    assert isinstance(profile(model)[0], LayerStat)
