"""Every behaviour notebook 02 shows, checked on the installed TensorFlow/Keras (each group in a fresh process)."""
from __future__ import annotations

import re

import pytest

from gputrain_kit import check
from gputrain_kit.batching import describe_plan, plan_batches, plan_verdict
from gputrain_kit.parallel import slice_bounds
from conftest import last_json, run_python


def test_slice_bounds_match_multi_gpu_model():
    assert slice_bounds(10, 4) == [(0, 2), (2, 4), (4, 6), (6, 10)]   # the last slice takes the remainder
    assert slice_bounds(8, 2) == [(0, 4), (4, 8)]


def test_plan_descriptions():
    assert describe_plan(plan_batches(1030, 64, 4)) == [(1, 16, [16] * 4), (17, 17, [2, 2, 2, 0])]
    assert "step 17 gives replica 3 no data" in plan_verdict(plan_batches(1030, 64, 4))
    assert "step 17 gives replicas 6 and 7 no data:" in plan_verdict(plan_batches(1030, 64, 8))
    several = [[1, 0, 0], [1, 1, 0], [0, 0, 0]]                     # three steps with empty replicas
    assert plan_verdict(several).startswith("step 1 gives replicas 1 and 2 no data, and 2 more steps leave a "
                                            "replica without data:")
    assert "and 1 more step leaves a replica" in plan_verdict(several[:2])
    assert "Keras 3 fit refuses such a first step" in plan_verdict(several)    # empty in step 1: uneven first
    assert "fit refuses" not in plan_verdict(plan_batches(1030, 64, 4))         # empty only in the last step
    assert plan_batches(1030, 64, 4, via="fit") == plan_batches(1030, 64, 4)     # the explorer's label for it
    assert "Keras 3 fit refuses" in plan_verdict(plan_batches(1438, 62, 4))
    assert "fit accepts" in plan_verdict(plan_batches(1438, 256, 4))
    assert "splits evenly" in plan_verdict(plan_batches(1024, 256, 4))


def test_multi_gpu_like_trains_the_shared_template():
    proc = run_python("""
        import json, os, tempfile, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import keras
        from gputrain_kit.parallel import MultiGpuLike
        (x, y), (xv, yv) = kit.data.digits()
        t = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(10)])
        p = MultiGpuLike(t, kit.device_names(4))
        p.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        before = t.get_weights()[0].copy()
        h = p.fit(x, y, batch_size=128, epochs=3, verbose=0)
        path = os.path.join(tempfile.mkdtemp(), "w.weights.h5")
        p.save_weights(path)
        try:
            t.load_weights(path); load_error = None
        except ValueError as e:
            load_error = str(e)
        # a two-output template: outputs are concatenated per output
        i = keras.Input((64,)); h2 = keras.layers.Dense(8)(i)
        two = keras.Model(i, {"a": keras.layers.Dense(3)(h2), "b": keras.layers.Dense(2)(h2)})
        pt = MultiGpuLike(two, kit.device_names(3))
        out2, ref2 = pt(xv[:11]), two(xv[:11])
        print(json.dumps({
            "changed": float(np.abs(t.get_weights()[0] - before).max()),
            "loss": h.history["loss"], "shared": all(a is b for a, b in zip(p.weights, t.weights)),
            "gap": float(np.abs(p.predict(xv, verbose=0) - t.predict(xv, verbose=0)).max()),
            "slices": p.slice_devices(xv[:10]), "load_error": load_error,
            "two": {k: [list(out2[k].shape), float(np.abs(out2[k] - ref2[k]).max())] for k in out2}}))
    """)
    out = last_json(proc)
    assert out["changed"] > 0 and out["loss"][-1] < out["loss"][0] and out["shared"]
    assert out["gap"] < 1e-5
    assert out["slices"] == [["CPU:0", [2, 10]], ["CPU:1", [2, 10]], ["CPU:2", [2, 10]], ["CPU:3", [4, 10]]]
    assert "could not be loaded" in out["load_error"] and "expected 2 variables, but received 0" in out["load_error"]
    assert out["two"]["a"][0] == [11, 3] and out["two"]["b"][0] == [11, 2]
    assert out["two"]["a"][1] < 1e-5 and out["two"]["b"][1] < 1e-5


def test_mirrored_strategy_split_allreduce_and_reductions():
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        from gputrain_kit.parallel import reduction_in_use
        from gputrain_kit.training import strategy_for, build_digits_model, distributed_split
        (x, y), _ = kit.data.digits()
        s = strategy_for(4)
        with s.scope():
            m = build_digits_model()
        m.fit(x, y, batch_size=256, epochs=2, verbose=0)
        copies = [c.numpy() for c in s.experimental_local_results(m.layers[0].kernel.value)]
        results = {}
        for name, ops in [("default", None), ("rtod", tf.distribute.ReductionToOneDevice()),
                          ("hier", tf.distribute.HierarchicalCopyAllReduce()), ("nccl", tf.distribute.NcclAllReduce())]:
            st = tf.distribute.MirroredStrategy(kit.device_names(2), cross_device_ops=ops)
            with st.scope():
                mm = build_digits_model()
            try:
                mm.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0)
                results[name] = reduction_in_use(st)
            except tf.errors.InvalidArgumentError as e:
                results[name] = "FAIL " + str(e).splitlines()[0]
        print(json.dumps({"spread": max(float(np.abs(c - copies[0]).max()) for c in copies), "n": len(copies),
                          "split": distributed_split(s, 1438, 62)[0], "results": results}))
    """)
    out = last_json(proc)
    assert out["n"] == 4 and out["spread"] == 0.0
    assert out["split"] == plan_batches(1438, 62, 4)[0] == [16, 16, 16, 14]
    r = out["results"]
    assert r["default"] == "CollectiveAllReduce (RING)"
    assert r["rtod"] == "ReductionToOneDevice" and r["hier"] == "HierarchicalCopyAllReduce"
    assert r["nccl"].startswith("FAIL No OpKernel was registered to support Op 'NcclAllReduce'")


def test_default_strategies_of_different_sizes_collide():
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        from gputrain_kit.training import build_digits_model
        (x, y), _ = kit.data.digits()
        out = {}
        for k in (4, 2):
            s = tf.distribute.MirroredStrategy(kit.device_names(k))
            with s.scope():
                m = build_digits_model()
            try:
                m.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0); out[k] = "ok"
            except tf.errors.OpError as e:
                out[k] = str(e)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["4"] == "ok"
    # which device reports it first varies; the notebook shows TensorFlow's own words with CPU:N
    from gputrain_kit import error_summary
    summary = re.sub(r"CPU:[0-9]", "CPU:N", error_summary(out["2"]))
    assert summary == ("Collective ops is aborted by: Device CPU:N is joining a group with size2, but that group "
                       "has size 4 (group_key=1)")


SAME_MATH = """
    import json, numpy as np, gputrain_kit as kit
    kit.setup(devices=4)
    import keras, tensorflow as tf
    strategy = tf.distribute.MirroredStrategy(kit.device_names(4), cross_device_ops=tf.distribute.ReductionToOneDevice())
    rng = np.random.default_rng(1)
    KIND = "{kind}"

    def build():
        keras.utils.set_random_seed(0)
        if KIND == "conv":
            inputs = keras.Input((6, 6, 1))
            h = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
            outputs = keras.layers.Dense(3)(keras.layers.Flatten()(h))
            model = keras.Model(inputs, outputs)
        elif KIND == "nested":
            inner = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="tanh")], name="inner")
            model = keras.Sequential([keras.Input((8,)), inner, keras.layers.Dense(3)])
        else:
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(6, activation="relu"), keras.layers.Dense(3)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    def flat(ws):
        return np.concatenate([w.ravel() for w in ws])

    def run(model, x, y, batch):
        snaps = [model.get_weights()]
        cb = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: snaps.append(model.get_weights()))
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[cb])
        return snaps

    shape = (6, 6, 1) if KIND == "conv" else (8,)
    out = {{}}
    for first, second, slices in [(64, 6, [(0, 2), (2, 4), (4, 6)]), (160, 158, [(0, 40), (40, 80), (80, 120), (120, 158)])]:
        x = rng.normal(size=(first + second,) + shape).astype("float32"); y = rng.integers(0, 3, first + second)
        with strategy.scope():
            mirrored = build()
        single = build()
        single.set_weights(mirrored.get_weights())
        try:
            m_snaps = run(mirrored, x, y, first)
        except Exception as err:
            out[second] = {{"crash": kit.error_summary(err)}}
            continue
        s_snaps = run(single, x, y, first)
        step1 = float(np.abs((flat(m_snaps[1]) - flat(m_snaps[0])) - (flat(s_snaps[1]) - flat(s_snaps[0]))).max())
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        def update(xs, ys):
            single.set_weights(m_snaps[1])
            with tf.GradientTape() as tape:
                loss = loss_fn(ys, single(xs, training=True))
            return np.concatenate([-0.1 * g.numpy().ravel() for g in tape.gradient(loss, single.trainable_weights)])
        measured = flat(m_snaps[2]) - flat(m_snaps[1])
        x2, y2 = x[first:], y[first:]
        rule = sum(update(x2[a:b], y2[a:b]) for a, b in slices) / 4
        plain = update(x2, y2)
        out[second] = {{"step1": step1, "rule": float(np.abs(measured - rule).max()),
                       "ratio": float(np.linalg.norm(measured) / np.linalg.norm(plain)),
                       "plain": float(np.abs(measured - plain).max() / np.abs(plain).max())}}
    print(json.dumps(out))
"""


@pytest.mark.parametrize("kind, kernels", [("dense", None), ("conv", "onednn"), ("conv", "eigen"), ("nested", None)])
def test_data_parallel_step_equals_one_device_only_on_even_splits(kind, kernels):
    """A full even step equals one device; [2, 2, 2, 0] applies 0.75 of it; [40, 40, 40, 38] follows 1/(r n_i)."""
    env = {"TF_ENABLE_ONEDNN_OPTS": "1" if kernels == "onednn" else "0"} if kernels else None
    out = last_json(run_python(SAME_MATH.format(kind=kind), env=env))
    crashes = kernels == "onednn"   # oneDNN's Conv2D gradient fails on an empty replica batch, BatchNorm or not
    for second in ("158",) if crashes else ("6", "158"):
        assert out[second]["step1"] < 1e-6, "an even step must equal the single-device step"
        assert out[second]["rule"] < 1e-6, "each sample counts 1/(replicas x its replica's samples)"
    assert out["158"]["plain"] > 1e-3, "an uneven step differs from the single-device step"
    if crashes:
        assert "ReluGrad" in out["6"]["crash"] or "Conv2DBackpropFilter" in out["6"]["crash"]
    else:   # Eigen kernels (and GPUs) take the empty replica's zero gradient
        assert abs(out["6"]["ratio"] - 0.75) < 1e-5


def test_seed_002_conclusions_and_uneven_first_step():
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        from gputrain_kit.training import train_digits, UnevenBatchError
        small, large = train_digits(1, 32, epochs=5), train_digits(1, 512, epochs=5)
        again = train_digits(1, 32, epochs=5)
        one, four = train_digits(1, 256, epochs=2), train_digits(4, 256, epochs=2)
        try:
            train_digits(4, 62, epochs=1); uneven = None
        except UnevenBatchError as e:
            uneven = str(e)
        last_uneven_ok = train_digits(3, 60, epochs=1).last_step       # only the last step is uneven
        print(json.dumps({"small": small.val_accuracy, "large": large.val_accuracy, "again": again.val_accuracy,
                          "speedup": four.samples_per_s / one.samples_per_s, "kind": four.device_kind,
                          "uneven": uneven, "last": last_uneven_ok}))
    """)
    out = last_json(proc)
    assert out["small"] > out["large"] + 0.1, "a bigger batch at fixed epochs must lose accuracy"
    assert out["small"] == out["again"], "runs must be reproducible whatever ran before"
    assert out["kind"] == "simulated" and out["speedup"] < 1.5, "simulated devices give no real speed-up"
    assert "splits unevenly [16, 16, 16, 14]" in out["uneven"]
    assert out["last"] == [20, 20, 18]


def test_multi_output_and_callbacks_under_the_strategy():
    proc = run_python("""
        import json, os, tempfile, gputrain_kit as kit
        kit.setup(devices=4)
        import keras
        from gputrain_kit.training import strategy_for
        (x, y), (xv, yv) = kit.data.digits()
        s, d = strategy_for(4), tempfile.mkdtemp()
        with s.scope():
            i = keras.Input((64,)); h = keras.layers.Dense(32, activation="relu")(i)
            m = keras.Model(i, {"digit": keras.layers.Dense(10, name="digit")(h), "parity": keras.layers.Dense(2, name="parity")(h)})
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
            m.compile(keras.optimizers.Adam(3e-3), loss={"digit": loss, "parity": loss},
                      loss_weights={"digit": 1.0, "parity": 0.5}, metrics={"digit": ["accuracy"], "parity": ["accuracy"]})
        cbs = [keras.callbacks.TensorBoard(log_dir=os.path.join(d, "logs")),
               keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=1, min_delta=1.0),
               keras.callbacks.EarlyStopping(monitor="val_loss", patience=2, min_delta=1.0),
               keras.callbacks.ModelCheckpoint(os.path.join(d, "best.keras"), save_best_only=True)]
        h = m.fit(x, {"digit": y, "parity": y % 2}, batch_size=256, epochs=20, verbose=0, callbacks=cbs,
                  validation_data=(xv, {"digit": yv, "parity": yv % 2}))
        events = [f for _, _, fs in os.walk(os.path.join(d, "logs")) for f in fs if "tfevents" in f]
        best = keras.models.load_model(os.path.join(d, "best.keras"))
        print(json.dumps({"epochs": len(h.history["loss"]), "lr": [float(v) for v in h.history["learning_rate"]],
                          "keys": sorted(h.history), "events": len(events), "outputs": sorted(best.predict(xv[:2], verbose=0))}))
    """)
    out = last_json(proc)
    assert out["epochs"] == 3                                   # EarlyStopping(patience=2)
    assert out["lr"] == pytest.approx([0.003, 0.003, 0.0015])   # ReduceLROnPlateau halves
    assert "val_digit_accuracy" in out["keys"] and "val_parity_accuracy" in out["keys"]
    assert out["events"] > 0 and out["outputs"] == ["digit", "parity"]


@pytest.mark.timing      # a wall-clock bound: run alone, after the parallel tests (`make unit`)
def test_scaling_explorer_headless():
    proc = run_python("""
        import json, time, gputrain_kit as kit
        kit.setup(devices=4)
        e = kit.widgets.ScalingExplorer(epochs=2)
        t = time.perf_counter(); e.replicas.value = 2; preview_s = time.perf_counter() - t
        e.batch.value = 64; e.mode.value = "per replica"
        row = e.run()
        progress_label = e.progress.description
        computed = e.activity.computed()
        shown = e.timeline_figure.axes[0].get_title(loc="left")
        e.mode.value = "global"; e.batch.value = 62; e.replicas.value = 4
        refused = e.run()
        after_refused = [e.activity, e.timeline_figure]
        refused_status = e.status.value
        e.batch.value = 5000                                  # the box stops at the training set's size
        whole_set = e.split.value
        from tensorflow.python.profiler import profiler_v2
        profiler_free = profiler_v2._profiler is None
        print(json.dumps({"row": row, "refused": refused, "rows": len(e.rows), "table": e.table.value,
                          "split": e.split.value, "status": refused_status, "status_after": e.status.value,
                          "preview_s": preview_s,
                          "computed": computed, "shown": shown, "after_refused": after_refused,
                          "profiler_free": profiler_free, "progress_label": progress_label, "whole_set": whole_set,
                          "progress": [e.progress.value, e.progress.max], "disabled": e.button.disabled,
                          "label_widths": [w.style.description_width for w in (e.replicas, e.batch, e.mode)]}))
    """)
    out = last_json(proc)
    assert out["row"]["replicas"] == 2 and out["row"]["global batch"] == 128 and out["row"]["devices"] == "simulated"
    assert 0 < out["row"]["val accuracy"] <= 1
    assert out["refused"]["devices"] == "refused" and out["rows"] == 2
    assert out["label_widths"] == ["initial"] * 3          # labels shown in full, never "batch i..."
    assert out["table"].count("<tr>") == 3 and "<td>128</td>" in out["table"]
    assert "Keras 3 fit refuses" in out["split"] and "splits unevenly" in out["status"]
    assert out["status_after"] == ""          # a reader saw the refusal stay above settings that split evenly
    assert out["preview_s"] < 0.5 and not out["disabled"]
    assert out["progress_label"] == "epoch 2 of 2"          # the bar says its count (issue 30)
    assert "global batch 1438 over 4 replica(s): 1 step per epoch (the batch box stops at 1438" in out["whole_set"]
    # The last run's activity: the two replicas' devices computed, and the timeline is shown; a refused
    # run clears it, and the profiler is never left running.
    assert out["computed"] == ["/device:CPU:0", "/device:CPU:1"]
    assert out["shown"] == "last run: 2 replica(s), global batch 128, steps 2-4 of epoch 1"
    assert out["after_refused"] == [None, None] and out["profiler_free"]


def test_nb02_exercise_checks():
    assert check.nb02_per_replica(48) and not check.nb02_per_replica(384)
    assert check.nb02_steps_per_epoch(4) and not check.nb02_steps_per_epoch(3)
    assert check.nb02_steps_per_epoch("4 steps per epoch") and not check.nb02_steps_per_epoch("5 steps per epoch")
    assert check.nb02_last_step([36] * 7 + [34]) and not check.nb02_last_step([36] * 8)
    assert "Not answered" in repr(check.nb02_last_step(...))


def test_scaling_figure_is_readable():
    """The explorer's plot: integer ticks for replica counts, the batches run as plain tick labels, each point
    labelled, the legend outside the axes."""
    import matplotlib
    matplotlib.use("Agg")
    from gputrain_kit.plots import scaling_figure

    rows = [{"replicas": r, "global batch": b, "per replica": b // r, "samples/s": s, "val accuracy": a,
             "devices": "simulated"} for r, b, s, a in [(1, 64, 9000, 0.9), (2, 128, 5000, 0.85), (4, 512, 2000, 0.7)]]
    rows.append({"replicas": 3, "global batch": 62, "per replica": 21, "samples/s": None, "val accuracy": None,
                 "devices": "refused"})
    fig = scaling_figure(rows)
    speed, acc = fig.axes
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in speed.get_xticks())
    assert [t.get_text() for t in acc.get_xticklabels()] == ["64", "128", "512"]
    assert len(acc.texts) == 3 and len(speed.texts) == 3
    legend = acc.get_legend()
    box, axes_box = legend.get_window_extent(), acc.get_window_extent()
    assert box.x0 >= axes_box.x1                          # legend right of the data, not over it
    # readers: a 0.003 gap filled the whole axis, and two runs of one setting wrote their labels on top of each other
    close = [dict(rows[0], **{"val accuracy": a, "replicas": r}) for r, a in ((1, 0.7159), (2, 0.7159), (4, 0.7187))]
    close.append(dict(close[-1]))
    fig = scaling_figure(close)
    speed, acc = fig.axes
    low, high = acc.get_ylim()
    assert high - low >= 0.1 and low <= 0.7159 and high >= 0.7187
    offsets = [text.xyann for text in speed.texts if text.xy == (4, close[-1]["samples/s"])]
    assert len(offsets) == 2 and offsets[0] != offsets[1]


def test_keras_and_tf_keras_have_no_multi_gpu_model():
    """Notebook 02 section 1: the installed Keras (and tf.keras, which is Keras 3 here) has no multi_gpu_model."""
    import keras

    proc = run_python("""
        import json, tensorflow as tf, keras
        print(json.dumps([hasattr(keras.utils, "multi_gpu_model"), hasattr(tf.keras.utils, "multi_gpu_model")]))
    """)
    assert last_json(proc) == [False, False]
    assert not hasattr(keras.utils, "multi_gpu_model")


def _nb02_prose() -> str:
    """Notebook 02's markdown, whitespace collapsed (a quoted phrase may be broken over two lines)."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "02_data_parallel.ipynb").read_text(
        encoding="utf-8"))["cells"]
    return " ".join(" ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown").split())


def test_the_2020_post_is_quoted_as_it_concludes_and_the_accuracy_loss_is_read_from_its_table():
    """Section 5: the post's third conclusion is about speed ("只有在增加gpu数量的同时，同步增加批次(batch)，模型的训练
    速度才会提高": training gets faster only when the batch grows with the GPU count); the accuracy loss at fixed
    epochs is in its table only, so the notebook presents it as its own reading, with the table's own numbers."""
    from gputrain_kit.training import CSDN_2020_CIFAR10

    prose = _nb02_prose()
    assert "(3) training gets faster only when the batch grows with the GPU count" in prose
    assert "real gift" not in prose and "(3) a bigger batch at a fixed number of epochs loses accuracy" not in prose
    assert "this notebook's reading of the post's table, not one of the post's conclusions" in prose
    table = {(gpus, batch): accuracy for gpus, batch, _, accuracy in CSDN_2020_CIFAR10}
    for gpus, batch in ((1, 32), (1, 128), (4, 128), (4, 512)):
        assert f"{table[gpus, batch]:g}% at batch {batch}" in prose, (gpus, batch)
    assert table[1, 32] > table[1, 128] and table[4, 128] > table[4, 512]


def test_the_reduction_exceptions_are_told_without_private_names_and_the_uneven_error_as_it_reads():
    """Section 3 defines XLA where it names it and keeps TensorFlow's private method names out of the prose;
    section 5 quotes the AddN error itself instead of an issue whose thread this course did not check."""
    prose = _nb02_prose()
    assert "XLA (TensorFlow's compiler for whole functions" in prose
    for private in ("`_reduce_to`", "`_get_cross_device_ops`", "`reduce_to`"):
        assert private not in prose, private
    assert "keras-team/keras#19246" not in prose
    assert '"Inputs to operation AddN ... must have the same size and shape"' in prose


def test_scaling_explorer_caps_the_per_replica_batch_at_the_training_set():
    """Per replica, the batch box stops at n_train // replicas: 1438 per replica on 4 replicas (a global 5752, one
    partial step of 1438 split [360, 360, 360, 358]) was refused as 'uneven'; now it is cut to 359 and runs."""
    proc = run_python("""
        import json, warnings, gputrain_kit as kit
        kit.setup(devices=4)
        e = kit.widgets.ScalingExplorer(epochs=1, batch=256, mode="global")
        e.batch.value = 5000
        out = {"global_cut": [e.batch.value, e.batch.max]}
        e.mode.value = "per replica"
        out["switched"] = [e.batch.value, e.batch.max, e.global_batch()]          # 1438 per replica: cut to 359
        e.batch.value = 256
        out["per_replica_cut"] = [e.batch.value, e.batch.max, e.global_batch()]
        e.batch.value = 1438
        out["typed"] = [e.batch.value, e.global_batch()]
        out["note"] = e.split.value
        e.replicas.value = 1
        out["one_replica"] = [e.batch.max, e.batch.value]
        e.batch.value = 1438; e.replicas.value = 4
        out["back_to_four"] = [e.batch.value, e.global_batch()]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            row = e.run()
        out["row"], out["warnings"], out["status"] = row, [str(w.message) for w in caught], e.status.value
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["global_cut"] == [1438, 1438]                      # global: the training set's size
    assert out["switched"] == [359, 359, 1436]
    assert out["per_replica_cut"] == [256, 359, 1024]
    assert out["typed"] == [359, 1436]
    assert "per replica, the batch box stops at 359: 359 x 4 replica(s) stays within the 1438 training samples" \
        in out["note"] and "the training set's size" not in out["note"]
    assert out["one_replica"] == [1438, 359]
    assert out["back_to_four"] == [359, 1436]
    assert out["row"]["devices"] == "simulated" and out["row"]["global batch"] == 1436, out
    assert out["status"] == "done." and out["warnings"] == []
