"""The BatchNorm NaN trap on the installed Keras: if Keras fixes it, these tests say which notebook to update."""
from __future__ import annotations

import platform
import warnings

import pytest

from gputrain_kit import check, check_batch_plan, plan_batches
from gputrain_kit.replicas import EmptyReplicaWarning
from gputrain_kit.widgets import SplitExplorer
from conftest import last_json, run_python


def test_check_batch_plan_warns_only_when_a_replica_is_empty():
    with pytest.warns(EmptyReplicaWarning, match="step 17 gives replica 3 no data") as caught:
        check_batch_plan(1030, 64, 4)
    advice = str(caught[0].message)
    assert "Fix: fixed-size batches (drop_remainder=True on the global batch" in advice
    assert "synchronized=True) is no fix for empty steps" in advice
    # the crash is named with its kernels (issue 29): oneDNN crashes, Eigen and the H100 train into NaN
    assert "a conv net may crash fit (it does with TensorFlow's oneDNN CPU kernels, not with its Eigen kernels " \
           "or on an H100)" in advice
    assert "depends on the kernels and the model (notebook 05)" in advice
    with pytest.warns(EmptyReplicaWarning, match="drop_remainder=True on each replica's batch"):
        assert check_batch_plan(1040, 64, 4, via="function")[-1] == [16, 0, 0, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_batch_plan(1040, 64, 4)                     # the dataset path splits 1040 evenly
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_batch_plan(1030, 64, 4, drop_remainder=True)
        check_batch_plan(1024, 64, 4)
    # fewer samples than one step with drop_remainder (a small validation set): no step at all, said as such
    # (it raised IndexError)
    for via in ("dataset", "function"):
        with pytest.warns(EmptyReplicaWarning, match="leaves no step at all: 60 samples do not fill one whole step"):
            assert check_batch_plan(60, 64, 4, drop_remainder=True, via=via) == []


def test_trap_detection_beyond_the_notebooks_cells():
    """Notebook 05 section 2 prints the trap, its fixes and ReplicaHealth's error under both families (strict nbval
    compares them). Here what no cell shows: replica_report reads the strategy from the model, evaluate's loss shows
    the NaN the training loss hides, and ReplicaHealth's tolerance: it flags the drift drop_remainder leaves and not
    synchronized BatchNorm's identical copies."""
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import bntrap
        from gputrain_kit.training import strategy_for
        s = strategy_for(4)
        out = {}
        m, _ = bntrap.train(s, None)
        out["default_strategy_same"] = kit.replica_report(m).poisoned == kit.replica_report(m, s).poisoned
        out["poisoned"] = sorted(kit.replica_report(m, s).poisoned)
        x, y = bntrap.trap_data()
        out["evaluate_loss_nan"] = bool(np.isnan(m.evaluate(x, y, batch_size=64, verbose=0)[0]))
        drift = kit.ReplicaHealth(tolerance=0.01)
        try:
            bntrap.train(s, "drop_remainder", callbacks=[drift]); out["drift"] = None
        except kit.ReplicaHealthError as e:
            out["drift"] = str(e)
        calm = kit.ReplicaHealth(tolerance=1e-6)
        bntrap.train(s, "synchronized", callbacks=[calm]); out["calm"] = calm.reports[-1].spread
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["default_strategy_same"] is True and [p[1] for p in out["poisoned"]] == [3, 3]
    assert out["evaluate_loss_nan"] is True          # silent to the training loss, not to evaluate (a reader's catch)
    assert "a replica's copy differs from replica 0's by" in out["drift"] and "tolerance 0.01" in out["drift"]
    assert out["calm"] == 0.0


np = pytest.importorskip("numpy")


def test_replica_report_table_and_heatmap_headless():
    import matplotlib
    matplotlib.use("Agg")
    from gputrain_kit.replicas import ReplicaReport, VariableRow
    report = ReplicaReport(2, (VariableRow("bn/moving_mean", (True, False), (0.0, float("nan"))),
                               VariableRow("dense/kernel", (True, True), (0.0, 0.25))))
    assert report.poisoned == [("bn/moving_mean", 1)] and report.spread == 0.25 and not report.healthy
    text = repr(report)
    assert "NaN/inf" in text and "1 non-finite copies" in text
    fig = report.heatmap()
    image = fig.axes[0].images[0]
    assert image.get_array().mask.tolist() == [[False, True], [False, False]]   # the NaN cell is masked -> red
    assert tuple(float(v) for v in image.get_cmap().get_bad()[:3]) == (1.0, 0.0, 0.0)
    # every copy but replica 0's NaN: no spread to speak of, said so (it printed "spread 0", which read as healthy)
    all_nan = ReplicaReport(2, (VariableRow("bn/moving_mean", (True, False), (0.0, float("nan"))),))
    assert "spread: none, no finite copy to compare" in repr(all_nan) and "spread 0" not in repr(all_nan)


def test_split_explorer_headless():
    e = SplitExplorer()
    assert "step 17 gives replica 3 no data" in e.output.value and "f8d7da" in e.output.value
    assert "Tick drop_remainder to see the fix" in e.output.value
    e.drop.value = True
    assert "splits evenly" in e.output.value and "Tick drop_remainder" not in e.output.value
    e.drop.value = False
    e.n_samples.value = 1000
    e.global_batch.value = 96
    e.replicas.value = 8
    assert "no data" not in e.output.value
    e.n_samples.value = 10
    e.global_batch.value = 64
    e.drop.value = True
    assert "no step at all" in e.output.value
    f = SplitExplorer(n_samples=1040)
    assert "no data" not in f.output.value
    f.via.value = "function"
    assert "step 17 gives replicas 1, 2 and 3 no data" in f.output.value
    f.global_batch.value = 66
    assert "needs global_batch divisible by replicas" in f.output.value
    with pytest.raises(ValueError, match="SplitExplorer: via must be one of"):
        SplitExplorer(via="fn")
    # the dataset's auto-shard policy: OFF splits evenly and pours a short last batch into the first replicas
    g = SplitExplorer(n_samples=1000, global_batch=96, replicas=8)
    assert "no data" not in g.output.value                       # the default policy: [5] * 8
    g.shard_policy.value = "off"
    assert "gives replicas 4, 5, 6 and 7 no data" in g.output.value       # [12, 12, 12, 4, 0, 0, 0, 0]
    g.via.value = "function"
    assert g.shard_policy.disabled
    k = SplitExplorer(global_batch=6, shard_policy="off")              # [2, 2, 1, 1]: uneven, no replica empty
    assert "fit refuses this at its first step" in k.output.value and "[2, 2, 1, 1]" in k.output.value
    assert "empty in every full step" not in k.output.value
    with pytest.raises(ValueError, match="SplitExplorer: shard_policy must be one of 'auto', 'off'"):
        SplitExplorer(shard_policy="none")
    # a global batch that does not fill the replicas leaves one empty in every step: drop_remainder is no fix there,
    # and fit refuses it at its first step (it said "a conv net may crash fit" as for a later empty step)
    h = SplitExplorer(global_batch=6)
    assert "drop_remainder, repeat() or padding alone cannot help" in h.output.value
    assert "Tick drop_remainder" not in h.output.value
    assert "Keras 3 fit refuses this at its first step, before any BatchNormalization update: step 1 splits " \
           "[2, 2, 2, 0]" in h.output.value and "may crash fit" not in h.output.value
    assert "A custom loop (strategy.run over experimental_distribute_dataset) accepts it" in h.output.value
    h.via.value = "function"                              # not fit's path: the empty-step verdict, no refusal
    assert "fit refuses" not in h.output.value
    with pytest.warns(EmptyReplicaWarning, match=r"Fix: a global batch that is a multiple of the replica count \(4 or 8\)"):
        check_batch_plan(1030, 6, 4, drop_remainder=True)
    with pytest.warns(EmptyReplicaWarning, match=r"multiple of the replica count \(4 or 8\)"):
        check_batch_plan(1030, 3, 4)                      # below the replica count: not "(4 or 4)"
    with pytest.warns(EmptyReplicaWarning, match="drop_remainder=True on the global batch"):
        check_batch_plan(1030, 64, 4, via="fit")          # fit is the dataset path, advice included


@pytest.mark.timing      # a wall-clock bound: run alone, after the parallel tests (`make unit`)
def test_split_explorer_answers_at_once_on_its_largest_dataset():
    """The largest dataset the explorer takes, at a global batch of 1 (100,000 steps), still answers at once."""
    from support import answer_seconds

    g = SplitExplorer()
    g.global_batch.value, g.replicas.value = 1, 1
    seconds = answer_seconds(g.n_samples, g.n_samples.max)
    assert g.n_samples.value == 100_000 and "100000 step(s) per epoch" in g.output.value
    assert seconds < 1.0


def test_nb05_exercise_checks():
    assert check.nb05_empty_replicas_a([6, 7]) and not check.nb05_empty_replicas_a([7])
    assert check.nb05_empty_replicas_b([]) and not check.nb05_empty_replicas_b([7])
    assert check.nb05_identical_copies("synchronized") and not check.nb05_identical_copies("pad")


def test_replica_heatmap_has_a_labelled_colour_bar():
    import numpy as np
    from types import SimpleNamespace

    from gputrain_kit.plots import replica_heatmap

    rows = [SimpleNamespace(path=f"bn_net/bn/{name}", finite=[True, True, True, name == "beta"],
                            max_diff=[0.0, 0.1, 0.2, 0.3]) for name in ("beta", "moving_mean")]
    fig = replica_heatmap(SimpleNamespace(rows=rows, replicas=4))
    heat, bar = fig.axes
    assert bar.get_ylabel() and "replica 0" in bar.get_ylabel()
    assert [t.get_text() for t in heat.get_xticklabels()] == ["0", "1", "2", "3"] and heat.get_xlabel() == "replica"
    assert [t.get_text() for t in heat.get_yticklabels()] == ["bn_net/bn/beta", "bn_net/bn/moving_mean"]
    assert np.isnan(heat.images[0].get_array().filled(np.nan)[1, 3])


def test_split_explorer_labels_in_full():
    e = SplitExplorer()
    for control in (e.via, e.n_samples, e.global_batch, e.replicas):
        assert control.style.description_width == "initial"


def test_tf_keras_keeps_every_replicas_statistics_finite_through_the_empty_step():
    """Notebook 05 section 4: tf-keras (TF_USE_LEGACY_KERAS=1) skips the moving-average update of a replica with
    no samples; run on the trap (1030 samples, global batch 64, 4 replicas: the last step [2, 2, 2, 0]).
    One run, in this process's kernel family: the outcome is Keras's or TensorFlow's Python (no kernel arithmetic of its
    own decides it), and strict nbval compares the notebook's instance of it under both families."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, tensorflow as tf
        tfk = tf.keras
        rng = np.random.default_rng(0)
        y = rng.integers(0, 4, 1030); x = (rng.normal(size=(1030, 16)) + y[:, None]).astype("float32")
        strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
        tfk.utils.set_random_seed(0)
        with strategy.scope():
            m = tfk.Sequential([tfk.Input((16,)), tfk.layers.Dense(32), tfk.layers.BatchNormalization(scale=False,
                                name="bn"), tfk.layers.ReLU(), tfk.layers.Dense(4)])
            m.compile("adam", tfk.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64), epochs=2, verbose=0)
        bn = m.get_layer("bn")
        copies = [np.asarray(v) for var in (bn.moving_mean, bn.moving_variance)
                  for v in strategy.experimental_local_results(var)]
        print(json.dumps([tfk.layers.Dense.__module__.split(".")[0], len(copies),
                          all(np.isfinite(c).all() for c in copies),
                          int(np.isnan(m.predict(x, verbose=0)).any(axis=1).sum())]))
    """, env={"TF_USE_LEGACY_KERAS": "1"})
    assert last_json(proc) == ["tf_keras", 8, True, 0]


def test_one_step_with_an_empty_replica_nans_only_keras3s_copy():
    """Notebook 05 section 4's cell: one BatchNormalization of each Keras under MirroredStrategy, one training
    step (traced) where replica 3 gets no samples: Keras 3's copy on replica 3 becomes NaN, tf-keras's stay
    finite (its update skips a replica without samples); both with 2 and with 5 samples on the others.
    One run, in this process's kernel family: the outcome is Keras's or TensorFlow's Python (no kernel arithmetic of its
    own decides it), and strict nbval compares the notebook's instance of it under both families."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import keras, numpy as np, tensorflow as tf, tf_keras
        strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
        out = {}
        for samples in (2, 5):
            with strategy.scope():
                k3 = keras.layers.BatchNormalization(); k3.build((None, 4))
                k2 = tf_keras.layers.BatchNormalization(); k2.build((None, 4))
            def batch(ctx):
                n = 0 if ctx.replica_id_in_sync_group == 3 else samples
                return tf.random.stateless_normal((n, 4), seed=(1, ctx.replica_id_in_sync_group))
            x = strategy.experimental_distribute_values_from_function(batch)
            for name, layer, moving_mean in (("keras3", k3, k3.moving_mean.value), ("tf_keras", k2, k2.moving_mean)):
                tf.function(lambda x: strategy.run(lambda b: layer(b, training=True), args=(x,)))(x)
                copies = strategy.experimental_local_results(moving_mean)
                out[f"{name}/{samples}"] = [bool(np.isnan(c.numpy()).any()) for c in copies]
        print(json.dumps(out))
    """)
    out = last_json(proc)
    for samples in (2, 5):
        assert out[f"keras3/{samples}"] == [False, False, False, True]
        assert out[f"tf_keras/{samples}"] == [False, False, False, False]


def test_a_replica_is_empty_exactly_when_the_rule_says():
    """Notebook 05 section 1: each replica takes ceil(b / r) in order, so one gets nothing exactly when
    ceil(b / r) x (r - 1) >= b, for a batch larger than the replica count too (multi_gpu_model's split, the 2018
    article's Keras, left a GPU empty only below the GPU count: the next test)."""
    from gputrain_kit.batching import split_batch

    for replicas in range(1, 9):
        for batch in range(1, 70):
            assert (0 in split_batch(batch, replicas)) == (-(-batch // replicas) * (replicas - 1) >= batch)
    larger = [b for b in range(5, 70) if 0 in split_batch(b, 4)]
    assert larger == [5, 6, 9]                         # batches above the 4 replicas that still leave one empty
    for b, step in ((5, [2, 2, 1, 0]), (6, [2, 2, 2, 0]), (9, [3, 3, 3, 0])):
        for drop in (False, True):                     # every full step, drop_remainder or not
            full = plan_batches(1030, b, 4, drop_remainder=drop)[:1030 // b]
            assert len(full) == 1030 // b and all(sizes == step for sizes in full)
    assert plan_batches(1030, 64, 4)[-1] == [2, 2, 2, 0] and 1030 % 64 == 6 > 4   # the notebook's own data


def test_multi_gpu_models_split_leaves_a_gpu_empty_only_below_the_gpu_count():
    """Notebook 05 section 1 (issue 44): multi_gpu_model gave each of G GPUs b // G samples and the last one the
    rest (kit.parallel.slice_bounds, MultiGpuLike.call), so GPUs 0..G-2 got nothing exactly when b < G; 1030
    samples in batches of 64, 5, 6 or 9 never left a GPU empty there. The notebook's table prints it as its
    multi_gpu_model column (all "safe") beside tf.distribute's rule."""
    from gputrain_kit.parallel import slice_bounds

    def sizes(b, g):
        return [stop - start for start, stop in slice_bounds(b, g)]

    for g in range(1, 9):
        for b in range(1, 100):
            assert (0 in sizes(b, g)) == (b < g), (b, g)
            assert sum(sizes(b, g)) == b
    assert sizes(6, 4) == [1, 1, 1, 3] and sizes(3, 4) == [0, 0, 0, 3]
    for b in (64, 5, 6, 9):
        assert 0 not in sizes(b, 4) and 0 not in sizes(1030 % b or b, 4)
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import keras, numpy as np
        from gputrain_kit.parallel import MultiGpuLike
        template = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        wrapper = MultiGpuLike(template, kit.device_names(4))
        x = np.ones((6, 4), "float32")
        print(json.dumps({n: [shape[0] for _, shape in wrapper.slice_devices(x[:n])] for n in (3, 6)}))
    """)
    assert last_json(proc) == {"3": [0, 0, 0, 3], "6": [1, 1, 1, 3]}


def test_notebook_05_quotes_the_article_as_it_is():
    """Issue 44: the 2018 article says the very last batch may hold less data than defined, leaving some GPUs
    without data, and fixes it with fixed-size batches of a multiple of the GPU count; "smaller than the number
    of GPUs" was the course digest's wording (multi_gpu_model's rule), and the table's "article" column is gone."""
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "05_batchnorm_nan.ipynb").read_text())
    text = " ".join(" ".join("".join(c["source"]) for c in nb["cells"]).split())
    for stale in ("smaller than the number of GPUs", "would call this data safe", "{'article':",
                  "Use it against drift", "needs no fix", "with the input's channel count"):
        assert stale not in text, stale
    assert ("the very last batch of an epoch can hold fewer samples than the batch size (when the data set's size "
            "is not a multiple of it), some GPUs can then get no data in the last step") in text
    assert "and a batch size that is a multiple of the number of GPUs" in text
    assert "{'multi_gpu_model':<16}" in text
    table = next("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                 and "multi_gpu_model_empty" in "".join(c["source"]) for o in c["outputs"]
                 if "global batch 64" in "".join(o.get("text", "")))
    assert "safe" in table and "last step" in table


def test_tensorflow_leaves_a_replica_empty_in_every_step_for_5_6_9_on_4():
    """Notebook 05 section 1's table, against TensorFlow: distributed_split (experimental_distribute_dataset, as
    fit) for 1030 samples over 4 replicas; kit.plan_batches predicts each. batching.py's note: under tf.data's
    auto-shard policy OFF the split is balanced instead (5 over 4 -> [2, 1, 1, 1]). tf.data's split computes no
    kernel arithmetic: one run, in this process's kernel family (strict nbval compares the notebook's tables under
    both)."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        s = kit.training.strategy_for(4)
        out = {}
        for b in (64, 5, 6, 9):
            for drop in (False, True):
                real = kit.training.distributed_split(s, 1030, b, drop_remainder=drop)
                out[f"{b}/{drop}"] = [real[0], real[-1], sum(0 in step for step in real), len(real),
                                      real == kit.plan_batches(1030, b, 4, drop_remainder=drop)]
        for policy in ("AUTO", "OFF"):
            options = tf.data.Options()
            options.experimental_distribute.auto_shard_policy = getattr(tf.data.experimental.AutoShardPolicy, policy)
            dist = s.experimental_distribute_dataset(tf.data.Dataset.range(40).batch(5).with_options(options))
            out[policy] = [[int(t.shape[0]) for t in s.experimental_local_results(x)] for x in dist][0]
        # the notebook's OFF table, every policy against plan_batches's prediction for it
        for policy in ("auto", "data", "off", "file", "hint"):
            for n, b in ((10, 5), (22, 6), (18, 9), (70, 64)):
                real = kit.training.distributed_split(s, n, b, shard_policy=policy)
                out[f"{policy} {n}/{b}"] = [real[0], real[-1], real == kit.plan_batches(n, b, 4, shard_policy=policy)]
        # the policy as an AutoShardPolicy member, and the function path, which no policy changes
        out["enum"] = kit.training.distributed_split(s, 22, 6, shard_policy=tf.data.experimental.AutoShardPolicy.OFF)
        out["function off"] = kit.training.distributed_split(s, 1030, 64, via="function", shard_policy="off")[-1]
        # AUTO on a pipeline that reads files shards by file (one machine: no change), so the split stays even
        import os, tempfile
        folder = tempfile.mkdtemp()
        for k in range(2):
            with open(os.path.join(folder, f"f{k}.txt"), "w") as f:
                f.write("".join(f"{i}\\n" for i in range(11 * k, 11 * k + 11)))
        files = tf.data.TextLineDataset([os.path.join(folder, f"f{k}.txt") for k in range(2)]).batch(6)
        out["files auto"] = [[int(t.shape[0]) for t in s.experimental_local_results(x)]
                             for x in s.experimental_distribute_dataset(files)]
        # fit on a dataset with OFF: 6 over 4 splits [2, 2, 1, 1], still uneven, and fit refuses it at step 1
        import keras, numpy as np
        with s.scope():
            tiny = keras.Sequential([keras.Input((16,)), keras.layers.Dense(4)])
            tiny.compile("sgd", "mse")
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        six = tf.data.Dataset.from_tensor_slices((np.ones((24, 16), "float32"), np.zeros((24, 4), "float32")))
        try:
            tiny.fit(six.batch(6).with_options(options), verbose=0); out["fit off 6"] = "trained"
        except tf.errors.InvalidArgumentError as err:
            out["fit off 6"] = str(err)[:300]
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["64/False"] == [[16] * 4, [2, 2, 2, 0], 1, 17, True]
    assert out["64/True"] == [[16] * 4, [16] * 4, 0, 16, True]
    assert out["5/False"] == out["5/True"] == [[2, 2, 1, 0], [2, 2, 1, 0], 206, 206, True]
    assert out["6/False"] == [[2, 2, 2, 0], [1, 1, 1, 1], 171, 172, True]
    assert out["6/True"] == [[2, 2, 2, 0], [2, 2, 2, 0], 171, 171, True]
    assert out["9/False"] == [[3, 3, 3, 0], [1, 1, 1, 1], 114, 115, True]
    assert out["9/True"] == [[3, 3, 3, 0], [3, 3, 3, 0], 114, 114, True]
    assert out["AUTO"] == [2, 2, 1, 0] and out["OFF"] == [2, 1, 1, 1]
    # notebook 05's OFF table (and "file" and "hint", which keep the even split on one machine; "data" the legacy)
    legacy = {"10/5": [[2, 2, 1, 0], [2, 2, 1, 0]], "22/6": [[2, 2, 2, 0], [1, 1, 1, 1]],
              "18/9": [[3, 3, 3, 0], [3, 3, 3, 0]], "70/64": [[16] * 4, [2, 2, 2, 0]]}
    even = {"10/5": [[2, 1, 1, 1], [2, 1, 1, 1]], "22/6": [[2, 2, 1, 1], [2, 2, 0, 0]],
            "18/9": [[3, 2, 2, 2], [3, 2, 2, 2]], "70/64": [[16] * 4, [6, 0, 0, 0]]}
    for policy in ("auto", "data", "off", "file", "hint"):
        for case in legacy:
            expected = (legacy if policy in ("auto", "data") else even)[case]
            assert out[f"{policy} {case}"] == expected + [True], (policy, case)
    assert out["enum"] == [[2, 2, 1, 1]] * 3 + [[2, 2, 0, 0]]
    assert out["function off"] == [6, 0, 0, 0]
    assert out["files auto"] == [[2, 2, 1, 1]] * 3 + [[2, 2, 0, 0]]          # 22 lines in two files, batch 6
    assert "AddN" in out["fit off 6"] and "must have the same size and shape" in out["fit off 6"]


def test_default_batchnorm_goes_from_6_nan_copies_to_26_in_one_step():
    """Notebook 05 section 5, "How 6 NaN copies become 26": the Dense net with BatchNormalization(scale=True) on
    the trap. After epoch 1 (loss finite): gamma NaN on every replica, replica 3's moving statistics NaN (6). One
    step later (loss NaN): every trainable copy NaN (24), the moving statistics still only replica 3's (26).
    One run, in this process's kernel family: NaN spreads alike through either family's kernels, and strict nbval
    compares the notebook's table (the same model and data) under both."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, tensorflow as tf
        import bntrap
        s = kit.training.strategy_for(4)
        def nan_copies(m):
            report = kit.replica_report(m, s)
            return {"/".join(row.path.split("/")[-2:]): [r for p, r in report.poisoned if p == row.path]
                    for row in report.rows}
        m, h = bntrap.train(s, None, scale=True)
        out = {"loss_1": bool(np.isfinite(h.history["loss"][-1])), "epoch_1": nan_copies(m)}
        ds = tf.data.Dataset.from_tensor_slices(bntrap.trap_data()).batch(64)
        out["loss_2"] = bool(np.isfinite(m.fit(ds.take(1), verbose=0, shuffle=False).history["loss"][-1]))
        out["step_1"] = nan_copies(m)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    every, three = [0, 1, 2, 3], [3]
    stats = {"bn/moving_mean": three, "bn/moving_variance": three}
    assert out["loss_1"] is True and out["loss_2"] is False
    assert {k: v for k, v in out["epoch_1"].items() if v} == {"bn/gamma": every, **stats}
    assert sum(map(len, out["epoch_1"].values())) == 6
    trainable = {k: v for k, v in out["step_1"].items() if k not in stats}
    assert len(trainable) == 6 and all(v == every for v in trainable.values())   # 2 Dense x 2 + gamma, beta
    assert {k: out["step_1"][k] for k in stats} == stats
    assert sum(map(len, out["step_1"].values())) == 26


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_onednn_conv2d_returns_an_empty_batch_in_the_inputs_shape(family):
    """Notebook 05 section 5 (the "no BN" row and the probe cell after the matrix): on x86, oneDNN's forward Conv2D
    on an empty batch returns the input's whole shape (spatial size and channels: VALID 8x8x1 stays [0,8,8,1]),
    Eigen the right one ([0,6,6,8]); with 3 channels into 16 filters, traced as fit, evaluate and predict run it,
    it returns [0,8,8,3] too (TensorFlow fuses the bias add into the convolution), and only called eagerly does
    Keras's Conv2D fail in its own bias add (eleventh read: the notebook showed the eager call only). So without BatchNorm the Dense
    after pooling fails with oneDNN (MatMul [0,1] x [8,4]); the gradient of the kernel is not what fails (it has
    the kernel's shape under both)."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras, tensorflow as tf
        x, kernel = tf.zeros([0, 8, 8, 1]), tf.ones([3, 3, 1, 8])
        def through(layer, channels):
            try:
                return layer(tf.zeros([0, 8, 8, channels])).shape.as_list()
            except tf.errors.InvalidArgumentError as err:
                return " ".join(str(err).split())
        out = {"family": kit.cpu_kernels.detect().family,
               "nn": tf.nn.conv2d(x, kernel, 1, "SAME").shape.as_list(),
               "keras": keras.layers.Conv2D(8, 3, padding="same")(x).shape.as_list(),
               "nonempty": keras.layers.Conv2D(8, 3, padding="same")(tf.zeros([2, 8, 8, 1])).shape.as_list(),
               "valid": through(keras.layers.Conv2D(8, 3), 1),
               "nn_rgb": tf.nn.conv2d(tf.zeros([0, 8, 8, 3]), tf.ones([3, 3, 3, 16]), 1, "VALID").shape.as_list(),
               "rgb": through(keras.layers.Conv2D(16, 3), 3),
               "rgb_traced": through(tf.function(keras.layers.Conv2D(16, 3),
                                                 input_signature=[tf.TensorSpec([None, 8, 8, 3])]), 3)}
        with tf.GradientTape() as tape:
            tape.watch(kernel)
            total = tf.reduce_sum(tf.nn.conv2d(x, kernel, 1, "SAME"))
        out["kernel_gradient"] = tape.gradient(total, kernel).shape.as_list()
        net = kit.batchnorm.bn_model("conv", "no BN")          # the notebook's conv net without BatchNorm
        forward = tf.function(lambda t: net(t), input_signature=[tf.TensorSpec([None, 8, 8, 1])])   # as in fit
        out["net"] = through(forward, 1)
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    out = last_json(proc)
    assert out["family"] == family and out["nonempty"] == [2, 8, 8, 8]
    assert out["kernel_gradient"] == [3, 3, 1, 8]
    if family == "onednn" and platform.machine().lower() in ("x86_64", "amd64"):   # the probe allows ARM to differ
        assert out["nn"] == out["keras"] == out["valid"] == [0, 8, 8, 1]
        assert out["nn_rgb"] == [0, 8, 8, 3]
        assert "Incompatible shapes: [0,8,8,3] vs. [1,1,1,16]" in out["rgb"] and "Conv2D" in out["rgb"]
        assert out["rgb_traced"] == [0, 8, 8, 3]
        assert "Matrix size-incompatible: In[0]: [0,1], In[1]: [8,4]" in out["net"]
    elif family == "eigen":
        assert out["nn"] == out["keras"] == [0, 8, 8, 8] and out["valid"] == [0, 6, 6, 8]
        assert out["nn_rgb"] == out["rgb"] == out["rgb_traced"] == [0, 6, 6, 16]
        assert out["net"] == [0, 4]


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_evaluating_a_healthy_conv_net_with_an_empty_replica_depends_on_the_kernels(family):
    """Notebook 05 section 4, "Evaluation of a healthy model" (issue 44): a conv net trained without any empty step
    (1024 samples, global batch 64), then evaluate and predict on 1030 under 4 replicas: the last batch [2, 2, 2, 0]
    runs the forward pass on 0 samples on replica 3. oneDNN: both fail (Matrix size-incompatible); Eigen: both work,
    as does the Dense net under both. The fixes the notebook names: predict on rows padded to a multiple of the
    global batch (padding cut off) and evaluate a copy loaded outside the strategy; padding evaluate's data with
    sample_weight=0 is no fix (the loss and `metrics` count the padded rows)."""
    proc = run_python("""
        import json, os, tempfile, gputrain_kit as kit
        kit.setup(devices=4)
        import keras, numpy as np, tensorflow as tf
        strategy = kit.training.strategy_for(4)
        import importlib.util
        source = os.path.join(tempfile.mkdtemp(), "calls.py")
        with open(source, "w") as f:
            f.write("def evaluate(m, x, y):\\n    return m.evaluate(x, y, batch_size=64, verbose=0)\\n"
                    "def predict(m, x, y):\\n    return m.predict(x, batch_size=64, verbose=0)\\n")
        spec = importlib.util.spec_from_file_location("calls", source)
        calls = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(calls)
        rng = np.random.default_rng(0)
        y = rng.integers(0, 4, 1030)
        data = {"conv": rng.normal(size=(1030, 8, 8, 1)).astype("float32"),
                "dense": rng.normal(size=(1030, 16)).astype("float32")}
        out = {}
        for kind, x in data.items():
            keras.utils.set_random_seed(0)
            with strategy.scope():
                m = kit.batchnorm.bn_model(kind, "no BN")
                m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
            m.fit(x[:1024], y[:1024], batch_size=64, epochs=1, verbose=0)      # no empty step: healthy
            for name, call in (("evaluate", lambda: m.evaluate(x, y, batch_size=64, verbose=0)),
                               ("predict", lambda: m.predict(x, batch_size=64, verbose=0))):
                try:
                    call(); out[f"{kind} {name}"] = "works"
                except tf.errors.InvalidArgumentError as err:
                    out[f"{kind} {name}"] = " ".join(str(err).split())
                    out[f"{kind} {name} unsourced"] = kit.explain(err).fix    # `python -c`: no line to read
                    try:
                        getattr(calls, name)(m, x, y)                         # the same call, from a file
                    except tf.errors.InvalidArgumentError as again:
                        out[f"{kind} {name} explained"] = kit.explain(again).fix
            if kind != "conv":
                continue
            path = os.path.join(tempfile.mkdtemp(), "m.keras")
            m.save(path)
            copy = keras.models.load_model(path)                              # outside the strategy's scope
            reference = copy.predict(x, batch_size=64, verbose=0)
            pad = -len(x) % 64
            padded = np.concatenate([x, x[:pad]])
            out["padded predict = the copy's"] = bool(np.allclose(
                m.predict(padded, batch_size=64, verbose=0)[:len(x)], reference, atol=1e-5))
            loss, acc = copy.evaluate(x, y, batch_size=64, verbose=0)
            logits = reference - reference.max(axis=1, keepdims=True)
            by_hand = float(np.mean(np.log(np.exp(logits).sum(axis=1)) - logits[np.arange(len(y)), y]))
            out["the copy's evaluate"] = [abs(loss - by_hand) < 1e-4,
                                          abs(acc - float(np.mean(reference.argmax(1) == y))) < 1e-6]
            w = np.r_[np.ones(len(x)), np.zeros(pad)].astype("float32")
            wl, wacc = m.evaluate(padded, np.r_[y, y[:pad]], sample_weight=w, batch_size=64, verbose=0)
            out["sample_weight 0 padding is off"] = [abs(wl - loss) > 1e-3, abs(wacc - acc) > 1e-6]
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    out = last_json(proc)
    assert out["dense evaluate"] == out["dense predict"] == "works"
    if family == "onednn" and platform.machine().lower() in ("x86_64", "amd64"):
        for name in ("evaluate", "predict"):
            assert "Matrix size-incompatible: In[0]: [0,1], In[1]: [8,4]" in out[f"conv {name}"], out[f"conv {name}"]
            # kit.explain gives the evaluation's fix, not training's drop_remainder (a review found it did)
            fix = out[f"conv {name} explained"]
            assert fix.startswith(f"{name} must ") and "(`drop_remainder=True`) are no fix" in fix, fix
            assert "outside `strategy.scope()`" in fix and "give every step a batch" not in fix, fix
        assert "pad the rows to a multiple of the global batch" in out["conv predict explained"]
        assert "sample_weight=0 is no fix" in out["conv evaluate explained"]
        # without a line of source to read, evaluate's error names no call: the training fix, and evaluation's
        assert out["conv evaluate unsourced"].startswith("give every step a batch"), out["conv evaluate unsourced"]
        assert "If it was `evaluate` or `predict` that failed" in out["conv evaluate unsourced"]
        assert out["conv predict unsourced"] == out["conv predict explained"]       # predict_step is in its text
    elif family == "eigen":
        assert out["conv evaluate"] == out["conv predict"] == "works"
    assert out["padded predict = the copy's"] is True
    assert out["the copy's evaluate"] == [True, True]
    assert out["sample_weight 0 padding is off"] == [True, True]


def test_synchronized_batchnorm_costs_five_all_reduces_per_layer_and_averaging_removes_drift():
    """Notebook 05 section 4 (issue 44): Keras's synchronized BatchNorm all-reduces the sum, the sum of squares and
    the sample count in the forward pass (_compute_moments_sync), and the gradients of the first two in the backward
    pass: 5 all-reduces per layer per replica in a training step, none without it and none in predict (inference
    reads the moving statistics). Its statistics are the global batch's. And the cheap way to one model at
    inference: the replicas' copies of the moving statistics averaged and assigned from outside the replicas
    (every copy written), after which predict under the strategy equals the model's own forward pass."""
    import inspect

    from keras.src.backend.tensorflow import nn

    sync = inspect.getsource(nn._compute_moments_sync)
    assert sync.count("replica_ctx.all_reduce(") == 3
    assert "y_sum, count_sum" in sync and "y_squared_sum, count_sum" in sync
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import keras, numpy as np, tensorflow as tf
        from tensorflow.python.distribute import distribute_lib
        strategy = kit.training.strategy_for(4)
        calls, original = [], distribute_lib.ReplicaContext.all_reduce
        def counting(self, reduce_op, value, options=None):
            calls.append([list(t.shape) for t in tf.nest.flatten(value)])
            return original(self, reduce_op, value, options)
        distribute_lib.ReplicaContext.all_reduce = counting
        rng = np.random.default_rng(0)
        y = rng.integers(0, 4, 1030); x = (rng.normal(size=(1030, 16)) + y[:, None]).astype("float32")
        out = {}
        for bn in ("scale=True", "synchronized"):
            keras.utils.set_random_seed(0)
            with strategy.scope():
                m = kit.batchnorm.bn_model("dense", bn)
                m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            calls.clear()
            m.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0)           # one training step, traced once
            stats = [c for c in calls if c == [[1, 32]]]                          # one value per channel (32)
            calls.clear()
            m.predict(x[:128], batch_size=64, verbose=0)
            out[bn] = [len(stats) / 4, len(calls)]
        keras.utils.set_random_seed(0)
        with strategy.scope():
            m = kit.batchnorm.bn_model("dense", "scale=False")
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        m.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(64, drop_remainder=True), verbose=0)
        before = kit.replica_report(m, strategy).spread
        layer = m.get_layer("bn")
        for v in (layer.moving_mean, layer.moving_variance):
            v.assign(np.mean([c.numpy() for c in strategy.experimental_local_results(v.value)], axis=0))
        gap = float(np.abs(m.predict(x, batch_size=64, verbose=0) - m(x, training=False).numpy()).max())
        out["averaged"] = [before, kit.replica_report(m, strategy).spread, gap]
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["scale=True"] == [0, 0] and out["synchronized"] == [5, 0]
    before, after, gap = out["averaged"]
    assert before > 0.01 and after == 0 and gap < 1e-4


def test_every_step_empty_is_a_first_step_fit_refuses():
    """kit.check_batch_plan(1030, 6, 4) warned of NaN and a crashing conv net, yet fit refuses [2, 2, 2, 0] at its
    first step (its uneven-first-step branch came after the every-step-empty one and was never reached)."""
    for batch, first in ((6, [2, 2, 2, 0]), (5, [2, 2, 1, 0]), (9, [3, 3, 3, 0])):
        for drop in (False, True):
            with pytest.warns(EmptyReplicaWarning) as caught:
                check_batch_plan(1030, batch, 4, drop_remainder=drop)
            said = str(caught[0].message)
            assert said.startswith("Keras 3 fit refuses this at its first step, before any BatchNormalization "
                                   f"update: step 1 splits {first}"), said
            assert "may crash fit" not in said and "notebook 02, section 5" in said
            assert (f"a global batch of {batch} over 4 replicas leaves replica 3 empty in every full step, "
                    "drop_remainder or not") in said
            assert "multiple of the replica count (4 or 8)" in said or "(8 or 12)" in said
    # an uneven first step and a later empty step: fit still stops at step 1, said first
    with pytest.warns(EmptyReplicaWarning) as caught:
        assert check_batch_plan(626, 62, 4)[-1] == [2, 2, 2, 0]
    said = str(caught[0].message)
    assert said.startswith("Keras 3 fit refuses this at its first step") and "step 11 gives replica 3 no data" in said
    # an uneven first step alone: UnevenBatchWarning, as before
    from gputrain_kit.replicas import UnevenBatchWarning
    with pytest.warns(UnevenBatchWarning, match=r"refuses this at its first step.*\[16, 16, 16, 14\].*\(60 or 64\)"):
        check_batch_plan(1000, 62, 4)
    # the custom-loop path keeps the empty-step warning: nothing refuses there
    with pytest.warns(EmptyReplicaWarning, match="step 17 gives replicas 1, 2 and 3 no data"):
        check_batch_plan(1030, 64, 4, via="function")
    # data that fill no whole global batch: the fix is not "a multiple of the replica count" they already are
    with pytest.warns(EmptyReplicaWarning, match=r"there are fewer samples \(5\) than one global batch of 8: a global batch of "
                                                 "at most 4"):
        check_batch_plan(5, 8, 4)


def test_fit_refuses_a_global_batch_that_leaves_a_replica_empty_in_every_step():
    """Notebook 05 section 1: fit under a 4-replica MirroredStrategy refuses global batches of 6 and 5 at the first
    step (Keras's _maybe_symbolic_build averages the replicas' first batches: AddN of [2,16] and [0,16]), before
    BatchNorm updates anything; a custom loop (strategy.run over experimental_distribute_dataset) runs the same
    batches, and BatchNorm's copy on the empty replica turns NaN at the first step.
    One run, in this process's kernel family: the outcome is Keras's or TensorFlow's Python (no kernel arithmetic of its
    own decides it), and strict nbval compares the notebook's instance of it under both families."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import keras, numpy as np, tensorflow as tf
        strategy = kit.training.strategy_for(4)
        out = {}
        for b in (6, 5):
            with strategy.scope():
                tiny = keras.Sequential([keras.Input((16,)), keras.layers.BatchNormalization(name="bn"),
                                         keras.layers.Dense(4)])
                tiny.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            data = tf.data.Dataset.from_tensor_slices((np.ones((4 * b, 16), "float32"), np.zeros(4 * b, "int64")))
            try:
                tiny.fit(data.batch(b), verbose=0, shuffle=False); said = "trained"
            except tf.errors.InvalidArgumentError as err:
                said = str(err)
            bn = tiny.get_layer("bn")
            untouched = all((c.numpy() == 0).all() for c in strategy.experimental_local_results(bn.moving_mean.value))
            step = tf.function(lambda batch: strategy.run(lambda xb: bn(xb, training=True), args=(batch,)))
            sizes = []
            for batch in strategy.experimental_distribute_dataset(data.map(lambda a, _: a).batch(b)):
                sizes.append([int(t.shape[0]) for t in strategy.experimental_local_results(batch)])
                step(batch)
                break                                        # the first step is enough
            nan = [bool(np.isnan(c.numpy()).any()) for c in strategy.experimental_local_results(bn.moving_mean.value)]
            out[b] = {"said": said, "untouched": untouched, "sizes": sizes, "nan": nan}
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert "AddN" in out["6"]["said"] and "[2,16] != input 3: [0,16]" in out["6"]["said"]
    assert "AddN" in out["5"]["said"] and "must have the same size and shape" in out["5"]["said"]
    assert out["6"]["untouched"] and out["5"]["untouched"]
    assert out["6"]["sizes"] == [[2, 2, 2, 0]] and out["5"]["sizes"] == [[2, 2, 1, 0]]
    assert out["6"]["nan"] == out["5"]["nan"] == [False, False, False, True]


def test_other_cases_are_every_combination_but_no_bn_with_drop_remainder():
    """Notebook 05 cell 'The kit knows 14 cases': OTHER_CASES is the other 8, every combination of model, BatchNorm
    setting and batching except the two without BatchNorm with drop_remainder (it said 'every model x BatchNorm
    setting x batching', 16)."""
    from itertools import product

    from gputrain_kit import batchnorm

    every = set(product(batchnorm.MODELS, batchnorm.BN_SETTINGS, batchnorm.BATCHINGS))
    known = set(batchnorm.DEFAULT_CASES) | set(batchnorm.OTHER_CASES)
    assert len(batchnorm.DEFAULT_CASES) == 6 and len(batchnorm.OTHER_CASES) == 8 and len(known) == 14
    assert every - known == {("dense", "no BN", "drop_remainder"), ("conv", "no BN", "drop_remainder")}


def test_the_auto_shard_policy_decides_between_the_legacy_and_the_balanced_rebatch():
    """Section 1: tf.distribute rebatches by batch_sizes_for_worker (even), then wraps every dataset whose
    auto_shard_policy is not OFF in _AutoShardDataset, even on one worker; sharding by data (DATA, or AUTO without
    files) rewrites the even rebatch to the legacy one, whose docstring shows 4 samples on 3 replicas as [2, 2, 0].
    Keras sets DATA for NumPy arrays. (fit fell back on the legacy class "only when the batch size cannot be
    computed", the notebook said: the policy decides, shown live by the OFF table.)"""
    import inspect

    from keras.src.trainers.data_adapters import array_data_adapter
    from tensorflow.python.data.experimental.ops import distribute
    from tensorflow.python.distribute import input_lib, input_ops

    assert "[0, 1], [2, 3], [], [4, 5], [6, 7], []" in distribute._LegacyRebatchDataset.__doc__
    assert "is written to legacy RebatchDataset for correctness reasons" in distribute._AutoShardDataset.__doc__
    assert "If it cannot find a reader dataset, it falls back to doing data-based" in distribute._AutoShardDataset.__doc__
    source = inspect.getsource(input_lib)
    assert "distribute.batch_sizes_for_worker(" in source and "dataset.rebatch(batch_sizes)" in source
    assert "input_ops.auto_shard_dataset(" in source
    wrap = inspect.getsource(input_ops.auto_shard_dataset)
    assert "auto_shard_policy !=\n      AutoShardPolicy.OFF" in wrap and "_AutoShardDataset(" in wrap
    assert "AutoShardPolicy.DATA" in inspect.getsource(array_data_adapter)
    assert distribute.batch_sizes_for_worker(5, 1, 4, 0).numpy().tolist() == [2, 1, 1, 1]

@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_synchronized_statistics_at_a_fixed_global_batch_do_not_change_with_the_replica_count(family):
    """Notebook 05 section 4 (issue 44, eleventh read: the tenth read's "the loss changes with the replica count" was
    backwards): at a fixed global batch of 64, synchronized BatchNorm's first-step loss is the one-device model's on 2
    and 4 replicas (to float32 summation order), per-replica statistics' is not; with a fixed batch of 16 per replica
    (the global batch growing with the replicas) synchronized statistics change with the replica count."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import numpy as np, keras, tensorflow as tf
        rng = np.random.default_rng(0)
        x = (rng.normal(size=(64, 16)) * np.linspace(0.2, 3, 64)[:, None]).astype("float32")
        y = rng.integers(0, 4, 64)
        def first_loss(replicas, sync, batch):
            strategy = kit.training.strategy_for(replicas) if replicas > 1 else tf.distribute.get_strategy()
            keras.utils.set_random_seed(0)
            with strategy.scope():
                m = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32),
                                      keras.layers.BatchNormalization(synchronized=sync), keras.layers.ReLU(),
                                      keras.layers.Dense(4)])
                m.compile(keras.optimizers.SGD(0.0), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            return float(m.fit(x[:batch], y[:batch], batch_size=batch, epochs=1, verbose=0,
                               shuffle=False).history["loss"][0])
        out = {f"{r} {s}": first_loss(r, s, 64) for r in (1, 2, 4) for s in (False, True)}
        out["per replica 16"] = [first_loss(r, True, 16 * r) for r in (1, 2, 4)]
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    out = last_json(proc)
    one = out["1 True"]
    assert abs(out["1 False"] - one) < 1e-6                       # one device: the same statistics either way
    assert abs(out["2 True"] - one) < 1e-4 and abs(out["4 True"] - one) < 1e-4, out
    assert abs(out["4 False"] - one) > 1e-3, out                  # per-replica statistics: another loss
    grown = out["per replica 16"]
    assert abs(grown[2] - grown[0]) > 1e-3, grown                 # a global batch that grows: another loss
    import json as _json
    from pathlib import Path

    nb = _json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "05_batchnorm_nan.ipynb").read_text())
    text = " ".join(" ".join("".join(c["source"]) for c in nb["cells"]).split())
    assert "so the statistics, and the loss, change with the replica count" not in text
    assert "At a fixed global batch that gives the one-device model's statistics on any replica count" in text
    assert "they fail on a healthy conv net too" not in text and "can fail on a healthy conv net too" in text
