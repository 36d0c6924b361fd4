"""device_activity under a tf.device scope: the profiler records no device for an op, so the kit infers it. A fit
inside ``with tf.device("/device:CPU:2")`` computes on CPU:2 (TensorFlow's partition graphs and the eager forward
pass say so), but the ops that read or update the model's variables run where the variables live, CPU:0 (the
partition graphs say so too). The kit must say the same, op by op, with the scope around the recording block or
inside it, and CPU:0 for everything without one. Under both CPU kernel families."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

VARIABLE_OPS = ["AssignAddVariableOp", "AssignSubVariableOp", "AssignVariableOp", "ReadVariableOp"]


@pytest.fixture(scope="module", params=["1", "0"], ids=["onednn", "eigen"])
def scoped(request):
    return last_json(run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf, keras
        from tensorflow.python.eager import context
        from gputrain_kit.placement import short_device, normalize_device
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, name="hidden"),
                              keras.layers.Dense(10, name="logits")])
        m.compile("adam", "mse")
        x = np.ones((256, 64), "float32"); y = np.zeros((256, 10), "float32")
        m.fit(x, y, batch_size=64, verbose=0)
        out = {}

        def by_op_type(activity):
            # op type -> the devices the kit shows it on
            found = {}
            for device, _, _, op in activity.intervals:
                found.setdefault(op.rsplit(":", 1)[1], set()).add(short_device(device))
            return {op: sorted(d) for op, d in found.items()}

        def compare(activity, run_metadata):
            # TensorFlow's own placement (the partition graphs of the functions it instantiated in the block)
            # against the kit's, for every op the kit shows that TensorFlow reports on one device
            placed = {}
            for fg in run_metadata.function_graphs:
                for pg in fg.partition_graphs:
                    for node in pg.node:
                        placed.setdefault(node.name, set()).add(short_device(normalize_device(node.device)))
            checked, differ, variable_ops = 0, [], set()
            for device, _, _, op in activity.intervals:
                node, op_type = op.rsplit(":", 1)
                if node in placed and len(placed[node]) == 1:
                    checked += 1
                    tf_device = next(iter(placed[node]))
                    if "VariableOp" in op_type:
                        variable_ops.add((op_type, tf_device))
                    if short_device(device) != tf_device:
                        differ.append([op, short_device(device), tf_device])
            return {"checked": checked, "differ": differ[:5],
                    "variable ops": sorted({f"{t} on {d}" for t, d in variable_ops})}

        with kit.device_activity() as plain:
            m.fit(x, y, batch_size=64, verbose=0)
        out["plain"] = by_op_type(plain)
        context.enable_run_metadata()
        with tf.device("/device:CPU:2"):
            with kit.device_activity() as outside:
                m.fit(x, y, batch_size=64, verbose=0)
            out["eager forward"] = short_device(m(x[:8]).device)
        out["outside vs TensorFlow"] = compare(outside, context.export_run_metadata())
        context.disable_run_metadata()
        out["scope outside the block"] = by_op_type(outside)
        context.enable_run_metadata()
        with kit.device_activity() as inside:
            with tf.device("/device:CPU:3"):
                m.fit(x, y, batch_size=64, verbose=0)
        out["inside vs TensorFlow"] = compare(inside, context.export_run_metadata())
        context.disable_run_metadata()
        out["scope inside the block"] = by_op_type(inside)
        out["computed inside"] = [short_device(d) for d, s in inside.busy.items() if s > 0]
        out["variables"] = sorted({short_device(v.value.device) for v in m.weights})
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": request.param}))


def test_tensorflow_computes_a_scoped_fit_on_the_scopes_device_and_its_variable_ops_on_the_variables(scoped):
    assert scoped["eager forward"] == "CPU:2" and scoped["variables"] == ["CPU:0"]
    for name in ("outside vs TensorFlow", "inside vs TensorFlow"):
        assert scoped[name]["variable ops"] == [f"{op} on CPU:0" for op in VARIABLE_OPS], scoped[name]


@pytest.mark.parametrize("name", ["outside vs TensorFlow", "inside vs TensorFlow"])
def test_the_kit_puts_every_op_where_tensorflow_placed_it(scoped, name):
    """Pins the rule (requested device, else the scope's, else device 0; a variable op where its variable lives,
    read from the trace's _Send events) to the installed TensorFlow, op by op."""
    assert scoped[name]["checked"] >= 100 and scoped[name]["differ"] == [], scoped[name]


def test_the_kit_follows_the_scope_around_the_block_and_inside_it(scoped):
    assert {devices for devices in map(tuple, scoped["plain"].values())} == {("CPU:0",)}, scoped["plain"]
    for name, scope in [("scope outside the block", "CPU:2"), ("scope inside the block", "CPU:3")]:
        ops = scoped[name]
        for op in VARIABLE_OPS:
            assert ops[op] == ["CPU:0"], (name, ops)                 # where the variables live
        for op in ("MatMul", "BiasAdd", "Sub", "Mul"):
            if op in ops:                                            # oneDNN renames some (_MklMatMul)
                assert ops[op] == [scope], (name, ops)
        assert {d for op, devices in ops.items() if op not in VARIABLE_OPS for d in devices} == {scope}, ops
    assert scoped["computed inside"] == ["CPU:0", "CPU:3"]
