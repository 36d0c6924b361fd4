"""device_activity under a tf.device scope: the profiler records no device for an op, so the kit infers it. A fit
inside ``with tf.device("/device:CPU:2")`` runs on CPU:2 (TensorFlow's partition graphs and the eager forward pass
say so); the kit must say CPU:2 too, with the scope around the recording block or inside it, and CPU:0 without
one."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python


@pytest.fixture(scope="module")
def scoped():
    return last_json(run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf, keras
        from tensorflow.python.eager import context
        from gputrain_kit.placement import short_device, normalize_device
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, name="hidden"),
                              keras.layers.Dense(10, name="logits")])
        m.compile("sgd", "mse")
        x = np.ones((256, 64), "float32"); y = np.zeros((256, 10), "float32")
        m.fit(x, y, batch_size=64, verbose=0)
        out = {}
        with kit.device_activity() as plain:
            m.fit(x, y, batch_size=64, verbose=0)
        out["plain"] = [short_device(d) for d in plain.computed()]
        context.enable_run_metadata()
        with tf.device("/device:CPU:2"):
            with kit.device_activity() as outside:
                m.fit(x, y, batch_size=64, verbose=0)
            out["eager forward"] = short_device(m(x[:8]).device)
        placed = {}
        for fg in context.export_run_metadata().function_graphs:
            for pg in fg.partition_graphs:
                for node in pg.node:
                    if node.op in ("MatMul", "BiasAdd"):
                        placed.setdefault(node.op, set()).add(short_device(normalize_device(node.device)))
        context.disable_run_metadata()
        out["partition graphs"] = {op: sorted(d) for op, d in placed.items()}
        out["scope outside the block"] = [short_device(d) for d in outside.computed()]
        with kit.device_activity() as inside:
            with tf.device("/device:CPU:3"):
                m.fit(x, y, batch_size=64, verbose=0)
        out["scope inside the block"] = [short_device(d) for d in inside.computed()]
        print(json.dumps(out))
    """))


def test_tensorflow_runs_a_scoped_fit_on_the_scopes_device(scoped):
    assert scoped["eager forward"] == "CPU:2"
    assert scoped["partition graphs"] == {"MatMul": ["CPU:2"], "BiasAdd": ["CPU:2"]}, scoped


def test_the_kit_follows_the_scope_around_the_block_and_inside_it(scoped):
    assert scoped["plain"] == ["CPU:0"]
    assert scoped["scope outside the block"] == ["CPU:2"], scoped
    assert scoped["scope inside the block"] == ["CPU:3"], scoped
