"""One memory measurement (``measure.measure_memory`` / ``measure_levers`` send it): train the user's model for
a few steps in a process whose TensorFlow runtime and allocator are new, and read the allocator.

``build_source`` is the user's own ``build`` function (its source; ``keras``, ``tf`` and ``np`` are given to
it), run here because a model measured after another in one process would count what the first one left.
"""
from __future__ import annotations

from typing import Any


def prepare() -> None:
    """TensorFlow and Keras imported, never started: each forked measurement starts its own runtime."""
    import keras  # noqa: F401
    import numpy  # noqa: F401
    import tensorflow  # noqa: F401

    import gputrain_kit  # noqa: F401


def sample_batch(model: Any, n: int) -> tuple[Any, Any]:
    """``n`` seeded samples for each of ``model``'s inputs and zeros for its output. Integer inputs (token ids for
    an Embedding) get ids below the smallest vocabulary, not random floats. Functional and Sequential models give
    their inputs; a subclassed model the shapes of its first call (``memory.input_specs``)."""
    import keras
    import tensorflow as tf

    from gputrain_kit.memory import input_specs

    specs = input_specs(model)
    vocabulary = min((layer.input_dim for layer in model._flatten_layers()
                      if isinstance(layer, keras.layers.Embedding)), default=2)
    xs = []
    for number, (shape, dtype) in enumerate(specs):
        full = (n, *shape)
        if "int" in dtype:
            xs.append(tf.random.stateless_uniform(full, seed=(1, 2 + number), maxval=vocabulary, dtype=tf.int32))
        else:
            xs.append(tf.random.stateless_normal(full, seed=(1, 2 + number)))
    x = xs[0] if len(xs) == 1 else xs
    try:
        out_shape = tuple(keras.tree.flatten(model.outputs)[0].shape[1:])
    except AttributeError:                                          # a subclassed model: its output for these inputs, traced
        out_shape = tuple(model.compute_output_spec(
            [keras.KerasTensor((n, *s), dtype=d) for s, d in specs] if len(specs) > 1
            else keras.KerasTensor((n, *specs[0][0]), dtype=specs[0][1])).shape[1:])
    return x, tf.zeros((n, *out_shape))


def run(config: dict[str, Any], build_source: str, build_name: str) -> dict[str, Any]:
    """The model state held between steps and the peak during a step, in bytes, on the one device's allocator."""
    import keras
    import numpy as np
    import tensorflow as tf

    import gputrain_kit as kit
    from gputrain_kit.memory import rematerialize

    kit.setup(devices=1, seed=0)
    keras.mixed_precision.set_dtype_policy(config["dtype_policy"])
    namespace = {"keras": keras, "tf": tf, "np": np, "__name__": "__gputrain_build__"}
    exec(compile(build_source, "<build>", "exec"), namespace)   # the user's build(), by its source
    model = namespace[build_name]()
    if not isinstance(model, keras.Model):
        raise TypeError("measure_memory: build() must return a Keras model, got " + type(model).__name__)
    # A build() that compiles its model: measured with the configuration's optimizer all the same (the parent
    # says so), since the estimate it is compared with is the configuration's.
    compiled_with = type(model.optimizer).__name__ if getattr(model, "compiled", False) else ""
    if config["remat"]:
        model = rematerialize(model)
    k = config["accumulation_steps"]
    name, options = config["optimizer"]
    optimizer = getattr(keras.optimizers, name)(**options, **({"gradient_accumulation_steps": k} if k > 1 else {}))
    if config["dtype_policy"] == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss="mse")
    device = kit.device_names(1)[0].replace("/device:", "")

    def batch_of(n: int) -> tuple[Any, Any]:
        return sample_batch(model, n)

    def held_between_steps(x: Any, y: Any, steps: int) -> tuple[list[int], int]:
        # The most the allocator holds between two training steps, the batch itself taken off.
        data = int(sum(t.shape.num_elements() * t.dtype.size for t in tf.nest.flatten((x, y))))
        held, peaks = [], []
        for _ in range(steps):
            tf.config.experimental.reset_memory_stats(device)
            model.train_on_batch(x, y)
            info = tf.config.experimental.get_memory_info(device)
            held.append(info["current"] - data)
            peaks.append(info["peak"])
        return held, max(peaks)

    # Model state: one-sample steps (what Keras keeps of a batch between steps is then negligible), over
    # whole updates, since accumulators are held only while they accumulate and some slots appear only
    # at the first update.
    # Some updates leave one more buffer held until the next step begins, depending on how the step's ops
    # were scheduled: a Dense kernel's size (1 MB) after about a third of the steps on a loaded 2-core CPU,
    # still held 300 ms later and after gc.collect(), and not after the others. The least over eight updates
    # is the state (a loaded CI run met it in all three of three; a loaded run here, in all eight).
    x, y = batch_of(1)
    held_between_steps(x, y, k)
    state = min(max(held_between_steps(x, y, k)[0]) for _ in range(8))
    # Peak: the real batch, one whole update to trace, then `steps` updates measured.
    x, y = batch_of(config["batch_size"] // k)
    held_between_steps(x, y, k)
    _, peak = held_between_steps(x, y, config["steps"] * k)
    return {"state": int(state), "peak": int(peak), "device": device, "kernels": kit.cpu_kernels.detect().family,
            "compiled_with": compiled_with}
