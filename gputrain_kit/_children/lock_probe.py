"""Device counting in processes of their own (``counting`` sends these): whether a call locks TensorFlow's
device configuration shows only when it is the first thing a process's runtime does."""
from __future__ import annotations

import os
from typing import Any, Callable


def _physical(tf: Any) -> None:
    tf.config.list_physical_devices()


def _device_lib(tf: Any) -> None:
    from tensorflow.python.client import device_lib

    device_lib.list_local_devices()


def _logical(tf: Any) -> None:
    tf.config.list_logical_devices()


def _first_op(tf: Any) -> None:
    tf.constant(1.0) + 1


def _keras_model(tf: Any) -> None:
    import keras

    keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])


#: Calls people use to count devices (as a learner writes them) and what each one runs.
CALLS: dict[str, Callable[[Any], None]] = {
    "tf.config.list_physical_devices()": _physical,
    "device_lib.list_local_devices()": _device_lib,
    "tf.config.list_logical_devices()": _logical,
    "a first op: tf.constant(1.0) + 1": _first_op,
}
#: Probed only when asked for (notebook 01's exercise 3 predicts it before its check probes it).
KERAS_MODEL = "a Keras model built: keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])"
EXTRA_CALLS: dict[str, Callable[[Any], None]] = {KERAS_MODEL: _keras_model}


def prepare() -> None:
    """TensorFlow imported, never started: each forked probe is the first thing its runtime does."""
    import tensorflow  # noqa: F401


def run(probe: str = "", count_gpus: bool = False, late_value: str | None = None) -> dict[str, Any]:
    """``probe``: make that call of CALLS, then try to configure devices, and say what each attempt raised.
    ``count_gpus``: how many GPUs TensorFlow sees under this process's CUDA_VISIBLE_DEVICES.
    ``late_value``: count GPUs, set CUDA_VISIBLE_DEVICES to it, count again."""
    import tensorflow as tf

    if count_gpus:
        return {"cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpus": len(tf.config.list_physical_devices("GPU"))}
    if late_value is not None:
        before = len(tf.config.list_logical_devices("GPU"))
        os.environ["CUDA_VISIBLE_DEVICES"] = late_value
        after = len(tf.config.list_logical_devices("GPU"))
        return {"before": before, "after": after, "physical_after": len(tf.config.list_physical_devices("GPU"))}
    {**CALLS, **EXTRA_CALLS}[probe](tf)
    cpu = tf.config.list_physical_devices("CPU")[0]
    results: dict[str, str | None] = {}
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        results["split"] = None
    except RuntimeError as e:
        results["split"] = str(e)
    try:
        tf.config.set_visible_devices([], "GPU" if tf.config.list_physical_devices("GPU") else "CPU")
        results["visible"] = None
    except RuntimeError as e:
        results["visible"] = str(e)
    return results
