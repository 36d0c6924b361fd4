"""Helpers only the tests use (they measure or inspect what the kit and the notebooks claim)."""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from gputrain_kit.feeding import standardize_python


def slow_python_pipeline(x: Any, y: Any, batch_size: int = 64):
    """``standardize_python`` on one sample at a time (tf.py_function, which holds the GIL), no overlap."""
    import tensorflow as tf

    def preprocess(image, label):
        image = tf.py_function(standardize_python, [image], tf.float32)
        image.set_shape(x.shape[1:])
        return image, label

    return tf.data.Dataset.from_tensor_slices((x, y)).map(preprocess).batch(batch_size)


def time_stages(stages: Sequence[Callable[[Any], Any]], devices: Sequence[str], x: Any,
                repeats: int = 3) -> list[tuple[str, float, float]]:
    """Run stage i on devices[i], one after the other, as a naive split does; (device, start, end) seconds.

    Each stage's output is waited for (``.numpy()``) before the next starts. The best of ``repeats``
    runs is kept, after one warm-up.
    """
    import tensorflow as tf

    if len(stages) != len(devices):
        raise ValueError(f"time_stages: {len(stages)} stage(s) but {len(devices)} device(s).")
    best: list[tuple[str, float, float]] | None = None
    for attempt in range(repeats + 1):
        t0, h, rows = time.perf_counter(), x, []
        for stage, device in zip(stages, devices):
            start = time.perf_counter() - t0
            with tf.device(device):
                h = stage(h)
            _ = h.numpy()  # wait for the stage to finish
            rows.append((device, start, time.perf_counter() - t0))
        if attempt and (best is None or rows[-1][2] < best[-1][2]):
            best = rows
    return best


def answer_seconds(control: Any, value: Any, repeats: int = 3) -> float:
    """The quickest of ``repeats`` answers of a widget to ``control.value = value`` (set back in between; it ends set
    to ``value``): a hiccup of the machine (a collection, another process) is not the widget's speed, a slow widget
    stays slow in every try."""
    old = control.value
    best = float("inf")
    for attempt in range(repeats):
        if attempt:
            control.value = old
        begun = time.perf_counter()
        control.value = value
        best = min(best, time.perf_counter() - begun)
    return best


#: The two models the JAX claim tests of notebook 09 train (the notebook's MLP and a tiny transformer block), as
#: source for a fresh process: define ``keras`` before it (the backend is fixed when Keras is imported).
JAX_MODELS = '''
def mlp(name="mlp"):
    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu", name="d1"),
                             keras.layers.Dense(512, activation="relu", name="d2"), keras.layers.Dense(16, name="d3")],
                            name=name)

def block(name="block"):
    """Embedding, self-attention and a feed-forward pair: a tiny transformer block."""
    tokens = keras.Input((16,), dtype="int32")
    h = keras.layers.Embedding(128, 64, name="embed")(tokens)
    a = keras.layers.MultiHeadAttention(num_heads=4, key_dim=16, name="attention")(h, h)
    h = keras.layers.LayerNormalization(name="norm")(h + a)
    f = keras.layers.Dense(128, activation="relu", name="ff1")(h)
    f = keras.layers.Dense(64, name="ff2")(f)
    out = keras.layers.Dense(8, name="head")(keras.layers.GlobalAveragePooling1D()(h + f))
    return keras.Model(tokens, out, name=name)
'''


def reduce_dispatch_recorder(tf: Any) -> tuple[Any, Any, list[str]]:
    """For a child that asks which object a MirroredStrategy's reduce goes through (notebooks 00 and 02): a stand-in
    for a replica's value as ``_reduce_to`` reads it (a device and a dtype), a cross-device-ops class whose calls are
    recorded as "configured", and the record, to which ReductionToOneDevice's calls (patched here) add their name."""
    ran: list[str] = []

    class OnDevice:
        def __init__(self, device: str):
            self.device, self.dtype = device, tf.float32

    class Configured(tf.distribute.HierarchicalCopyAllReduce):
        def reduce(self, reduce_op, value, destinations, options=None):
            ran.append("configured")

        def batch_reduce(self, reduce_op, pairs, options=None):
            ran.append("configured")

    tf.distribute.ReductionToOneDevice.reduce = lambda self, *args, **kwargs: ran.append("ReductionToOneDevice")
    tf.distribute.ReductionToOneDevice.batch_reduce = lambda self, *a, **k: ran.append("ReductionToOneDevice")
    return OnDevice, Configured, ran
