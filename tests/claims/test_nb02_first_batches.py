"""Notebook 02 after the tenth expert read (issue 44): Keras 3 averages the *first batch of every data set* ``fit`` and
``evaluate`` see (``_maybe_symbolic_build`` in keras/src/backend/tensorflow/trainer.py, called by ``fit``, by
``evaluate`` and so by the validation ``fit`` runs after each epoch), so a data set smaller than the batch, being its
own first batch, must split evenly too; only that first batch counts. The default ``MirroredStrategy()`` is the one
the notebook recommends for real GPUs. Each TensorFlow claim in a fresh process."""
from __future__ import annotations

import json


from conftest import ROOT, last_json, run_python

NB02 = ROOT / "notebooks" / "02_data_parallel.ipynb"

FIRST_BATCHES = """
    import json, gputrain_kit as kit
    kit.setup(devices=4)
    import keras, tensorflow as tf
    (x, y), (xv, yv) = kit.data.digits()
    s = kit.training.strategy_for(4)
    with s.scope():
        model = kit.training.build_digits_model()
    out = {}

    def attempt(name, fn):
        trained = []
        count = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs=None: trained.append(batch))
        try:
            fn(count)
            out[name] = {"ok": True, "trained": len(trained)}
        except tf.errors.InvalidArgumentError as err:
            out[name] = {"ok": False, "trained": len(trained), "text": str(err)[:400],
                         "key": kit.explain(err).key, "explained": " ".join(str(kit.explain(err)).split())}

    fit = lambda batch, **kw: (lambda cb: model.fit(x[:256], y[:256], batch_size=batch, epochs=1, verbose=0,
                                                    callbacks=[cb], **kw))
    # the notebook's cell: a divisible global batch, a validation set of 30 smaller than it
    attempt("global 256, validation 30", fit(256, validation_data=(xv[:30], yv[:30])))
    attempt("global 64, validation 30", fit(64, validation_data=(xv[:30], yv[:30])))
    attempt("global 32, validation 30", fit(32, validation_data=(xv[:30], yv[:30])))     # 30 < 32: one batch still
    attempt("validation 28", fit(256, validation_data=(xv[:28], yv[:28])))
    attempt("validation 30, validation_batch_size 16",
            fit(256, validation_data=(xv[:30], yv[:30]), validation_batch_size=16))     # [4,4,4,4] then [4,4,4,2]
    attempt("validation 94 at 64: only a later batch uneven",
            fit(64, validation_data=(xv[:94], yv[:94])))                                 # [16,...] then [8,8,8,6]
    attempt("evaluate 30 at 64", lambda cb: model.evaluate(xv[:30], yv[:30], batch_size=64, verbose=0))
    attempt("evaluate 30 at 16", lambda cb: model.evaluate(xv[:30], yv[:30], batch_size=16, verbose=0))
    attempt("training set of 30 at 64", lambda cb: model.fit(x[:30], y[:30], batch_size=64, verbose=0, callbacks=[cb]))
    out["plan of 30"] = kit.plan_batches(30, 30, 4)[0]
    print(json.dumps(out))
"""


def test_every_first_batch_must_split_evenly_validation_included():
    """Keras's first-batch averaging is Python in its trainer: one run, in this process's kernel family (strict nbval
    compares notebook 02's cell, the validation set of 30, its error and kit.explain's text, under both)."""
    out = last_json(run_python(FIRST_BATCHES))
    failing = ("global 256, validation 30", "global 64, validation 30", "global 32, validation 30",
               "evaluate 30 at 64", "training set of 30 at 64")
    for name in failing:
        got = out[name]
        assert not got["ok"], (name, got)
        assert "Input 0: [8,64] != input 3: [6,64]" in got["text"], (name, got["text"])
        assert got["key"] == "uneven-replica-batches"
        # the error cannot tell which data set: kit.explain names both readings and the validation set's fixes
        said = got["explained"]
        assert "a first batch of 30 split [8, 8, 8, 6], which is the global batch or, when a data set (often the " \
               "validation data) is smaller than the batch, that whole set" in said, said
        assert "as the global batch, 28 or 32 instead of 30 on 4 replicas" in said
        assert "as a data set smaller than the batch (validation data, say), 28 samples (32 if the data hold that " \
               "many), or a `validation_batch_size` (`batch_size` in `evaluate`) that is a multiple of 4 and at most " \
               "30" in said
        assert "the validation `fit` runs after each epoch included" in said
    # the whole epoch trained before the validation failed; the training set of 30 failed before any step
    assert out["global 256, validation 30"]["trained"] == 1 and out["global 64, validation 30"]["trained"] == 4
    assert out["global 32, validation 30"]["trained"] == 8
    assert out["training set of 30 at 64"]["trained"] == 0
    # the fixes: a validation set of a multiple of 4, a validation batch that fills a first batch evenly; and only the
    # first batch counts (a later uneven batch of validation or evaluate runs)
    for name in ("validation 28", "validation 30, validation_batch_size 16",
                 "validation 94 at 64: only a later batch uneven", "evaluate 30 at 16"):
        assert out[name]["ok"], (name, out[name])
    assert out["plan of 30"] == [8, 8, 8, 6]


def _sources() -> list[str]:
    return [" ".join("".join(c["source"]).split()) for c in json.loads(NB02.read_text())["cells"]]


def test_notebook_02_says_every_first_batch_and_shows_it():
    sources = _sources()
    uneven = next(s for s in sources if s.startswith("But Keras 3's `fit` refuses a first batch"))
    assert "(Only the first batch is averaged: an uneven *last* step is accepted" in uneven
    rule = next(s for s in sources if s.startswith("**The rule is about every first batch, not only the global"))
    for part in ("`evaluate` averages its data's first batch the same way, and so does the validation that `fit` "
                 "runs after each epoch", "A data set smaller than the batch is its own first batch, so its size "
                 "must split evenly too", "a validation set of 30 samples: the epoch trains, then the validation fails"):
        assert part in rule, part
    shown = next(s for s in sources if s.startswith("trained = []"))
    assert "validation_data=(x_val[:30], y_val[:30])" in shown and "kit.explain(caught.exception)" in shown
    fixes = next(s for s in sources if s.startswith("The error cannot tell which data set's first batch it was"))
    assert "a size that is a multiple of the replica count (28 samples, a first batch of [7, 7, 7, 7])" in fixes
    assert "at `batch_size=32` the 30 samples are still one batch of 30" in fixes
    assert "the 30 samples split [4, 4, 4, 4], then [4, 4, 4, 2], which runs" in fixes
    fixed = next(s for s in sources if "validation_batch_size=16" in s and s.startswith("history = model.fit("))
    assert "validation_data=(x_val[:30], y_val[:30])" in fixed
    from gputrain_kit import plan_batches
    assert plan_batches(30, 16, 4) == [[4, 4, 4, 4], [4, 4, 4, 2]] and plan_batches(28, 28, 4) == [[7, 7, 7, 7]]
    summary = next(s for s in sources if "## Summary" in s)
    assert "Keras 3 `fit` needs a global batch divisible by the replica count" not in summary
    assert "Keras 3 `fit` and `evaluate` need the first batch of every data set they see to split evenly over the " \
           "replicas: a global batch divisible by the replica count, and a training or validation set smaller than " \
           "the batch of a divisible size too" in summary


def test_notebook_02_recommends_the_default_strategy_on_real_gpus():
    """strategy_for's ReductionToOneDevice is the kernel's need (strategies of several sizes), not advice: on a real
    multi-GPU machine the default MirroredStrategy() sums with NCCL, and section 3 calls ReductionToOneDevice a
    bottleneck."""
    sources = _sources()
    section = next(s for s in sources if s.startswith("Why did loading fail?"))
    assert "in your own project the same strategy is" not in section
    assert "so do not copy it onto a real multi-GPU machine: there, create the default, " \
           "`tf.distribute.MirroredStrategy()`, which takes every visible GPU and sums with NCCL" in section
    assert "only where the default cannot work: several strategies of different sizes in one process" in section
    table = next(s for s in sources if s.startswith("<a id=\"cross-device-reductions\"></a>"))
    assert "one device is the bottleneck" in table and "NCCL on physical GPUs" in table
    summary = next(s for s in sources if "## Summary" in s)
    assert "On real GPUs, use the default `MirroredStrategy()` (NCCL)" in summary


def test_train_digits_names_a_first_batch_that_is_all_the_data():
    """A global batch larger than the training set: the first batch is all 1438 samples, [360, 360, 360, 358]; the
    error says so instead of blaming a global batch that divides."""
    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        from gputrain_kit.training import train_digits, UnevenBatchError
        try:
            train_digits(4, 1440, epochs=1); said = None
        except UnevenBatchError as err:
            said = str(err)
        print(json.dumps(said))
    """))
    assert out is not None
    assert "the 1438 training samples fill less than one global batch of 1440, so the first batch is all of them, " \
           "and over 4 replicas it splits unevenly [360, 360, 360, 358]" in out
    assert "Use a global batch divisible by the replica count and at most 1436." in out
