"""device_activity records the ops a tf.function runs: a block with eager work only (compile(run_eagerly=True)
with fit, or plain eager ops) recorded nothing, and computed() and plot() say why instead of an empty answer."""
from __future__ import annotations

from conftest import last_json, run_python


def test_eager_only_work_is_said_not_answered_empty():
    out = last_json(run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=2)
        import tensorflow as tf, keras
        from gputrain_kit.activity import NothingRecordedError
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        model.compile("sgd", "mse", run_eagerly=True)
        x, y = np.ones((64, 8), "float32"), np.zeros((64, 4), "float32")
        out = {}
        with kit.device_activity() as eager:
            model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        out["ops"] = len(eager.intervals)
        out["repr"] = repr(eager)
        for what in ("computed", "plot"):
            try:
                getattr(eager, what)()
                out[what] = "answered"
            except NothingRecordedError as err:
                out[what] = str(err)
        compiled = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
        compiled.compile("sgd", "mse")                      # Keras's default: fit's step is a tf.function
        with kit.device_activity() as graph:
            compiled.fit(x, y, batch_size=16, epochs=1, verbose=0)
        out["compiled"] = graph.computed()
        print(json.dumps(out))
    """))
    assert out["ops"] == 0
    for what in ("computed", "plot"):
        message = out[what]
        assert message.startswith(f"DeviceActivity.{what}(): device_activity recorded no op in its block"), out
        assert "tf.function" in message and "run_eagerly=True" in message and "Fix:" in message
    assert "recorded no op" in out["repr"]
    assert out["compiled"] == ["/device:CPU:0"]
