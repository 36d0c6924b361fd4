"""An optimizer's slots come from the optimizer itself, not only its class (a review found Adam(amsgrad=True)
estimated as plain Adam, and measured as plain Adam in the measuring process): each configuration's slots are
checked against the variables Keras builds for it, and estimate_memory, measure_memory's configuration and the
memory explorer all carry the options that add slots."""
from __future__ import annotations

import math

import pytest

from gputrain_kit import estimate_memory
from gputrain_kit.optimizer_slots import optimizer_spec


def model():
    import keras

    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(5), keras.layers.Dense(3)])


def optimizers():
    import keras

    o = keras.optimizers
    return {"Adam": (o.Adam(), 2), "Adam amsgrad": (o.Adam(amsgrad=True), 3), "AdamW amsgrad": (o.AdamW(amsgrad=True), 3),
            "RMSprop": (o.RMSprop(), 1), "RMSprop momentum": (o.RMSprop(momentum=0.9), 2),
            "RMSprop centered": (o.RMSprop(centered=True), 2),
            "RMSprop momentum centered": (o.RMSprop(momentum=0.5, centered=True), 3),
            "SGD": (o.SGD(), 0), "SGD momentum": (o.SGD(momentum=0.9, nesterov=True), 1),
            "Adam EMA": (o.Adam(use_ema=True), 3), "SGD EMA": (o.SGD(use_ema=True), 1),
            "LossScale(Adam amsgrad)": (o.LossScaleOptimizer(o.Adam(amsgrad=True)), 3)}


def kept_by_keras(optimizer, m) -> float:
    """Values per trainable parameter in the optimizer's own variables once built (its scalars left out)."""
    optimizer.build(m.trainable_variables)
    trainable = sum(math.prod(v.shape) for v in m.trainable_variables)
    return sum(math.prod(v.shape) for v in optimizer.variables if math.prod(v.shape) > 1) / trainable


@pytest.mark.parametrize("name", list(optimizers()))
def test_slots_are_what_keras_builds(name):
    optimizer, expected = optimizers()[name]
    m = model()
    spec = optimizer_spec("estimate_memory", optimizer)
    assert spec.slots == expected == kept_by_keras(optimizer, m)
    trainable = sum(math.prod(v.shape) for v in m.trainable_variables)
    assert estimate_memory(m, batch_size=8, optimizer=optimizer).per_device[0]["optimizer"] == 4 * expected * trainable
    # the measuring process rebuilds it from spec.build: the same slots
    import keras

    cls, options = spec.build
    rebuilt = getattr(keras.optimizers, cls)(**options)
    assert kept_by_keras(rebuilt, model()) == expected


def test_the_compiled_optimizer_counts_with_its_options():
    import keras

    m = model()
    m.compile(optimizer=keras.optimizers.RMSprop(momentum=0.9, centered=True), loss="mse")
    estimate = estimate_memory(m, batch_size=8)
    assert estimate.optimizer == "rmsprop, momentum, centered"
    assert "3 optimizer slot(s) per trainable parameter (rmsprop, momentum, centered)" in " ".join(estimate.assumptions)


def build():
    """At the top level, as measure_memory asks."""
    import keras

    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])


def test_measure_memory_builds_the_optimizer_with_its_options():
    import keras

    from gputrain_kit.measure import _measure_config

    child, shown = _measure_config("measure_memory", build, batch_size=8, optimizer=keras.optimizers.Adam(amsgrad=True),
                                   dtype_policy="float32", remat=False, accumulation_steps=1, steps=1)[1:]
    assert child["optimizer"] == ["Adam", {"amsgrad": True}] and shown["optimizer"] == "adam, amsgrad"
    assert _measure_config("measure_memory", build, batch_size=8, optimizer="adam", dtype_policy="float32",
                           remat=False, accumulation_steps=1, steps=1)[1]["optimizer"] == ["Adam", {}]


def test_the_explorer_offers_your_optimizer_as_it_is():
    import keras

    from gputrain_kit.widgets import MemoryExplorer

    m = model()
    m.compile(optimizer=keras.optimizers.Adam(amsgrad=True), loss="mse")
    explorer = MemoryExplorer(m, batch=8, strategy="single")
    assert explorer.optimizer.label == "adam, amsgrad (yours)"
    yours = explorer.estimate.per_device[0]["optimizer"]
    explorer.optimizer.value = "adam"
    assert explorer.estimate.per_device[0]["optimizer"] * 3 == yours * 2
    plain = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5)])
    plain.compile(optimizer="adam", loss="mse")
    assert MemoryExplorer(plain, batch=8, strategy="single").optimizer.label == "adam"
