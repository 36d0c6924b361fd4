"""The doctor's smoke test, in a process of its own: set up 2 devices, train one epoch under
``MirroredStrategy``, and read the allocator's memory statistics (notebooks 01, 03 and 08 need them)."""
from __future__ import annotations

from typing import Any


def run() -> dict[str, Any]:
    import keras
    import numpy as np
    import tensorflow as tf

    import gputrain_kit as kit

    kit.setup(devices=2)
    strategy = tf.distribute.MirroredStrategy(kit.device_names(2))
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer="sgd", loss="mse")
    model.fit(np.ones((8, 4), "float32"), np.zeros((8, 2), "float32"), batch_size=4, epochs=1, verbose=0)
    try:
        tf.config.experimental.get_memory_info(kit.device_names(1)[0])
        statistics = "ok"
    except ValueError as err:
        statistics = f"missing: {err}"
    return {"replicas": strategy.num_replicas_in_sync, "memory_statistics": statistics}
