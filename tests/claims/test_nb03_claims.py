"""Every behaviour notebook 03 shows, checked on the installed TensorFlow/Keras."""
from __future__ import annotations

from importlib.metadata import version

import pytest

from gputrain_kit import check
from gputrain_kit.pipeline import bubble_fraction, gpipe_schedule
from conftest import last_json, run_python

KERAS = tuple(int(part) for part in version("keras").split(".")[:2])


def test_construction_time_placement_pins_variables_not_computation_and_call_placement_works():
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf, keras
        from gputrain_kit.branches import construction_time_placement, digits_as_sequences, traced_op_devices, PlacedBranches
        from gputrain_kit.placement import variable_devices, short_device
        (x, y), (xv, yv) = kit.data.digits()
        r, c = digits_as_sequences(x); rv, cv = digits_as_sequences(xv)
        spec = tf.TensorSpec((None, 8, 8), tf.float32)
        built = construction_time_placement(kit.device_names(4)[1:])
        p = PlacedBranches(kit.device_names(3)[1:], merge_device=kit.device_names(1)[0])
        p.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        h = p.fit([r, c], y, batch_size=64, epochs=5, verbose=0, validation_data=([rv, cv], yv))
        print(json.dumps({"built_vars": variable_devices(built), "built_ops": traced_op_devices(built, spec, spec),
                          "built_eager": short_device(built([rv[:4], cv[:4]]).device),
                          "placed_ops": traced_op_devices(p, spec, spec), "where": p.where([rv[:4], cv[:4]]),
                          "acc": h.history["val_accuracy"][-1]}))
    """)
    out = last_json(proc)
    assert out["built_vars"]["classifier/kernel"] == ["CPU:3"]             # the scopes placed the variables
    assert out["built_vars"]["shared_lstm/lstm_cell/kernel"] == ["CPU:1"]  # (first call of the shared LSTM)
    assert list(out["built_ops"]) == [""]                                  # no traced op is pinned
    assert out["built_eager"] == "CPU:0"
    ops = out["placed_ops"]
    assert ops.get("/device:CPU:1", 0) > 10 and ops.get("/device:CPU:2", 0) > 10 and ops.get("/device:CPU:0", 0) > 0
    assert out["where"] == {"branch 1": "CPU:1", "branch 2": "CPU:2", "merge": "CPU:0"}
    assert out["acc"] > 0.5


def test_graph_mode_keeps_the_device_scope_an_op_was_built_in():
    """TF1-style graph: an op built under tf.device requests that device (what multi_gpu_model relied on);
    the Keras 3 re-trace in the test above requests none."""
    import tensorflow as tf
    from gputrain_kit.placement import short_device
    with tf.Graph().as_default(), tf.device("/device:CPU:1"):
        product = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
    assert short_device(product.op.device) == "CPU:1"
    with tf.Graph().as_default():
        unpinned = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
    assert unpinned.op.device == ""


def test_mirrored_strategy_keeps_the_whole_model_state_on_every_device():
    """Notebook 03, section 4: the digits model under a 4-device MirroredStrategy, bytes per device."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        from gputrain_kit.placement import short_device
        strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
        with strategy.scope():
            m = kit.training.build_digits_model()
            m.optimizer.build(m.trainable_variables)
        held = {}
        for v in m.weights + [v for v in m.optimizer.variables if len(v.shape) > 0]:
            for c in strategy.experimental_local_results(v.value):
                held[short_device(c.device)] = held.get(short_device(c.device), 0) + c.numpy().nbytes
        single = kit.estimate_memory(kit.training.build_digits_model(), batch_size=1).per_device[0]
        print(json.dumps({"held": held, "state": single["parameters"] + single["optimizer"]}))
    """)
    out = last_json(proc)
    assert out["held"] == {f"CPU:{i}": out["state"] for i in range(4)}


@pytest.mark.xfail(KERAS < (3, 15), strict=True, reason=(
    "Keras before 3.15 cannot construct keras.distribution.DataParallel or ModelParallel on the TensorFlow backend: "
    "their __init__ calls backend distribution_lib.num_processes(), which keras/src/backend/tensorflow/"
    "distribution_lib.py does not define (AttributeError); 3.15 falls back to one process (hasattr check)"))
def test_keras_distribution_on_tensorflow_runs_but_does_not_shard():
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import keras
        from gputrain_kit.placement import short_device
        out = {"devices": keras.distribution.list_devices()}
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]); m.compile("sgd", "mse")
        m.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0)
        mesh = keras.distribution.DeviceMesh((2,), ["model"], devices=keras.distribution.list_devices()[:2])
        layout = keras.distribution.LayoutMap(mesh); layout[".*kernel"] = (None, "model")
        keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout))
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)]); m.compile("sgd", "mse")
        m.fit(np.ones((8, 64)), np.ones((8, 10)), verbose=0)
        out["shape"], out["device"] = list(m.layers[0].kernel.shape), short_device(m.layers[0].kernel.value.device)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert out["shape"] == [64, 10] and out["device"] == "CPU:0"   # whole kernel, one device: not sharded


def test_pipeline_schedule_and_timeline():
    for s in range(1, 6):
        for m in range(1, 40, 7):
            assert abs(bubble_fraction(s, m) - (s - 1) / (m + s - 1)) < 1e-12
    slots = gpipe_schedule(2, 3)
    assert [(x.stage, x.microbatch, x.start) for x in slots] == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 0, 1), (1, 1, 2), (1, 2, 3)]
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=2)
        import keras
        from support import time_stages
        stages = [keras.Sequential([keras.Input((64,)), keras.layers.Dense(64)]) for _ in range(2)]
        print(json.dumps(time_stages(stages, kit.device_names(2), np.ones((32, 64), "float32"))))
    """)
    (d0, s0, e0), (d1, s1, e1) = last_json(proc)
    assert d0.endswith("CPU:0") and d1.endswith("CPU:1") and 0 <= s0 < e0 <= s1 < e1   # one after the other


def test_nb03_exercise_checks():
    assert check.nb03_less_memory("split") and not check.nb03_less_memory("data")
    assert check.nb03_bubble(3 / 11) and check.nb03_bubble(0.27) and not check.nb03_bubble(0.5)
    assert "Not answered" in repr(check.nb03_bubble(...))


def test_memory_presets_show_no_source_numbers():
    """The preset the notebook's explorer shows is named after the model, by its display name or its key."""
    from gputrain_kit.memory import PRESETS, preset_profile

    assert "InceptionV3 299x299" in PRESETS and not any("seed" in name.lower() for name in PRESETS)
    assert preset_profile("InceptionV3 299x299") == preset_profile("inception_v3")


def test_branches_source_shown_by_the_notebook_names_no_source_numbers():
    import inspect

    from gputrain_kit.branches import construction_time_placement

    assert "seed" not in inspect.getsource(construction_time_placement).lower()


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_estimate_against_the_allocator_bands_hold_under_both_kernel_families(family):
    """Notebook 03 section 5: SGD's step is estimated right, Adam's is above 1.2x its estimate (one to three
    temporaries the size of the weights, by the order the step frees them), a Dense+ReLU stack at a large batch below 0.8x; plus two models of other
    widths and batches, each in a fresh process of the family."""
    from conftest import last_json, run_python

    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=2)
        import tensorflow as tf, keras
        from gputrain_kit.measure import measure_training_step
        def stack(width, pairs):
            return keras.Sequential([keras.Input((width,))] + [l for _ in range(pairs)
                                    for l in (keras.layers.Dense(width), keras.layers.Activation("relu"))])
        out = {}
        for name, width, build, opt, batch in [("sgd", 2048, lambda: keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)]), "sgd", 8),
                                       ("adam", 2048, lambda: keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)]), "adam", 8),
                                       ("adam_wide", 1536, lambda: keras.Sequential([keras.Input((1536,)), keras.layers.Dense(1536)]), "adam", 16),
                                       ("relu", 128, lambda: stack(128, 16), "adam", 8192),
                                       ("relu_wide", 256, lambda: stack(256, 8), "adam", 4096),
                                       ("relu_sgd", 128, lambda: stack(128, 16), "sgd", 8192)]:
            net = build()
            net.compile(keras.optimizers.get(opt), "mse")
            x, y = tf.ones((batch, width)), tf.ones((batch, width))
            out[name] = measure_training_step(net, x, y)["total"] / kit.estimate_memory(net, batch_size=batch, optimizer=opt).peak
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    r = last_json(proc)
    assert 0.8 <= r["sgd"] <= 1.2, r
    assert 1.2 < r["adam"] < 2.0 and 1.2 < r["adam_wide"] < 2.0, r      # 1 to 3 weight-sized temporaries
    assert r["relu"] < 0.8 and r["relu_sgd"] < 0.8, r
    # Fewer, wider pairs: still too high, as the notebook says. 0.68-0.91 measured (0.91 in CI, and up to 0.82
    # here with 8 or 16 threads): the share moves with how many threads run the step, the verdict does not.
    assert r["relu_wide"] < 1.0, r


@pytest.mark.timing      # shares of measured time: run alone, after the parallel tests (`make unit`)
@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_micro_batches_shrink_the_bubble_as_gpipes_formula_says(family):
    """Notebook 03 section 6: the idle share falls with every doubling of the micro-batches and stays within 0.1
    of (S-1)/(M+S-1), the median of five recordings (three flipped 4 and 8 micro-batches once under oneDNN on a
    Zen 3); here also with stages of another width and depth."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=2)
        import keras, tensorflow as tf
        d1, d2 = kit.device_names(2)
        out = {}
        for width, depth in ((512, 4), (768, 3)):
            with tf.device(d1):
                s1 = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, activation="relu")
                                                                 for _ in range(depth)])
            with tf.device(d2):
                s2 = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, activation="relu")
                                                                 for _ in range(depth)])
            batch = tf.ones((1024, width))
            def pipelined(m):
                @tf.function
                def step(x):
                    outs, l1, l2 = [], [], []
                    for chunk in tf.split(x, m):
                        with tf.device(d1), tf.control_dependencies(l1):
                            h = s1(chunk)
                        with tf.device(d2), tf.control_dependencies(l2):
                            o = s2(h)
                        l1, l2 = [h], [o]
                        outs.append(o)
                    return tf.concat(outs, axis=0)
                return step
            shares = []
            for m in (1, 2, 4, 8):
                step = pipelined(m)
                step(batch)
                runs = []
                for _ in range(5):
                    with kit.device_activity([d1, d2]) as a:
                        step(batch).numpy()
                    runs.append(a.idle_fraction())
                shares.append(sorted(runs)[2])
            out[f"{width}x{depth}"] = shares
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    from gputrain_kit.pipeline import bubble_fraction

    for name, shares in last_json(proc).items():
        assert all(later < earlier for earlier, later in zip(shares, shares[1:])), (name, shares)
        assert all(abs(s - bubble_fraction(2, m)) <= 0.1 for s, m in zip(shares, (1, 2, 4, 8))), (name, shares)
