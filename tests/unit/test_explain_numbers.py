"""kit.explain speaks about the learner's error, not the course's: each corrected entry meets the real error,
made here in a fresh process under each CPU kernel family (oneDNN and Eigen, ``TF_ENABLE_ONEDNN_OPTS``), and the
explanation must name the real mechanism and the numbers of *that* error (a split [1, 1, 1, 0], shapes of 2 and 5
channels), never the course's examples ([2, 2, 2, 0], 62 samples, [0,8,8,1]).

The mechanisms, as the installed sources show them and these children reproduce:

- ``uneven-replica-batches``: each ``fit``/``evaluate`` under a strategy first averages the replicas' first input
  batch (keras/src/backend/tensorflow/trainer.py ``_maybe_symbolic_build``: ``strategy.reduce("MEAN", ...)``), an
  AddN of the per-replica tensors; a custom loop and a later uneven step train on.
- ``empty-replica-conv`` / ``collective-shape-mismatch``: with oneDNN CPU kernels, a Conv2D on an empty batch returns
  a tensor in its input's shape ([0,6,6,2] for 2 input channels and 5 filters); BatchNorm, its synchronized
  all-reduce of per-channel sums [1, ..., C] (keras/src/backend/tensorflow/nn.py ``_compute_moments_sync``) or the
  Dense after pooling then fail. A smaller but non-empty replica batch trains with synchronized BatchNorm; Eigen
  kernels train on every case.
- ``weights-mismatch``: Keras 3 matches by attribute path, class and position (keras/src/saving/saving_lib.py); the
  layer names are written, never read.

The collective abort poisons the process (every later collective fails), so it runs last in its child.
"""
from __future__ import annotations

import functools
import re

import pytest

import gputrain_kit as kit
from conftest import last_json, run_python

CHILD = """
    import json, os, signal, tempfile, warnings, numpy as np
    warnings.simplefilter("ignore")          # plan_batches(3, 3, 4) warns that 3 < 4 replicas: meant here
    from gputrain_kit._children.lifecycle import quiet_tensorflow
    quiet_tensorflow()
    import tensorflow as tf, keras, gputrain_kit as kit   # imported once; each group below forks and starts its own
                                                          # runtime, as the kit's own case servers do (_children)
    out = {}

    def in_fork(group):
        # run group() in a forked child with a fresh TensorFlow runtime: a crash or a poisoned collective stays there
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            signal.alarm(500)                   # a hung collective must not hang the test
            try:
                kit.setup(devices=4)
                got = group()
            except BaseException as err:
                got = {group.__name__ + " failed": repr(err)}
            with os.fdopen(write, "w") as pipe:
                pipe.write(json.dumps(got))
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            text = pipe.read()
        os.waitpid(pid, 0)
        out.update(json.loads(text) if text else {group.__name__ + " failed": "no result (killed?)"})

    def catch(got, name, fn, plan=None):
        try:
            fn()
            got[name] = None
        except Exception as err:
            found = kit.explain(err, plan=plan)
            got[name] = {"type": type(err).__name__, "text": str(err), "key": found.key,
                         "explained": " ".join(str(found).split())}

    def strategy(to_one=False):
        return tf.distribute.MirroredStrategy(kit.device_names(4), cross_device_ops=(
            tf.distribute.ReductionToOneDevice() if to_one else None))

    def fit_dense(s, n, batch, validation=None, trained=None, **kw):
        with s.scope():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
            model.compile("sgd", "mse")
        data = lambda m: (np.zeros((m, 8), "float32"), np.zeros((m, 2), "float32"))
        steps = [keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs=None: trained.append(b))
                 ] if trained is not None else []
        model.fit(*data(n), batch_size=batch, epochs=1, verbose=0, callbacks=steps,
                  validation_data=data(validation) if validation else None, **kw)
        return model

    def loop_dense(s, n, batch):
        with s.scope():
            model, opt = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)]), keras.optimizers.SGD()
        data = tf.data.Dataset.from_tensor_slices((np.zeros((n, 8), "float32"), np.zeros((n, 2), "float32")))
        @tf.function
        def step(x, y):
            def one(x, y):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(tf.reduce_mean((model(x) - y) ** 2, axis=-1),
                                                      global_batch_size=batch)
                opt.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
                return loss
            return s.reduce("SUM", s.run(one, (x, y)), axis=None)
        for x, y in s.experimental_distribute_dataset(data.batch(batch)):
            step(x, y)

    def fit_conv(s, bn, n, channels, batch=8):
        rng = np.random.default_rng(0)
        norm = [] if bn is None else [keras.layers.BatchNormalization(synchronized=bn, name="bn")]
        with s.scope():
            model = keras.Sequential([keras.Input((6, 6, channels)), keras.layers.Conv2D(5, 3, padding="same"),
                                      *norm, keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(),
                                      keras.layers.Dense(3)])
            model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x = rng.normal(size=(n, 6, 6, channels)).astype("float32")
        model.fit(tf.data.Dataset.from_tensor_slices((x, np.arange(n) % 3)).batch(batch), epochs=1, verbose=0)

    EMPTY = kit.plan_batches(11, 8, 4)      # 11 samples, global batch 8: steps [2, 2, 2, 2] and [1, 1, 1, 0]

    def training():                         # nothing here poisons the process
        got, s = {"family": kit.cpu_kernels.detect().family}, strategy()
        # fit's first step: 3 samples over 4 replicas are [1, 1, 1, 0], 7 are [2, 2, 2, 1]
        catch(got, "uneven first step 3", lambda: fit_dense(s, 3, 3), plan=kit.plan_batches(3, 3, 4))
        catch(got, "uneven first step 7", lambda: fit_dense(s, 7, 7))
        catch(got, "custom loop on the same batches", lambda: (loop_dense(s, 3, 3), loop_dense(s, 7, 7)))
        catch(got, "uneven later step in fit", lambda: fit_dense(s, 15, 8))      # [2, 2, 2, 2] then [2, 2, 2, 1]
        catch(got, "sync BN, smaller replica batch", lambda: fit_conv(s, True, 15, 2))    # last step [2, 2, 2, 1]
        if not KERAS_LOGIC:
            return got
        # every first batch: a validation set of 27 smaller than the batch of 32 is one batch [7, 7, 7, 6]
        trained = []
        catch(got, "validation smaller than the batch", lambda: fit_dense(s, 64, 32, 27, trained))
        got["steps trained before"] = len(trained)
        catch(got, "validation smaller than the batch, plan passed", lambda: fit_dense(s, 64, 32, 27),
              plan=kit.plan_batches(64, 32, 4))
        catch(got, "a training batch of 28, still larger than the set", lambda: fit_dense(s, 64, 28, 27))
        catch(got, "validation of 24", lambda: fit_dense(s, 64, 32, 24))
        catch(got, "validation of 27 at validation_batch_size 16",                # [4, 4, 4, 4], then [3, 3, 3, 2]
              lambda: fit_dense(s, 64, 32, 27, validation_batch_size=16))
        model = fit_dense(s, 64, 32)
        catch(got, "evaluate 27 at 32", lambda: model.evaluate(np.zeros((27, 8)), np.zeros((27, 2)), batch_size=32,
                                                               verbose=0))
        catch(got, "training set of 27 at 32", lambda: fit_dense(s, 27, 32))
        return got

    def conv_bn_1_channel():
        got = {}
        catch(got, "conv BN, empty replica, 1 channel", lambda: fit_conv(strategy(), False, 11, 1), plan=EMPTY)
        return got

    def conv_bn_2_channels():
        got = {}
        catch(got, "conv BN, empty replica, 2 channels", lambda: fit_conv(strategy(), False, 11, 2), plan=EMPTY)
        return got

    def conv_without_bn():
        got = {}
        catch(got, "conv without BN, empty replica", lambda: fit_conv(strategy(), None, 11, 2))
        return got

    def sync_to_one_device():
        got = {}
        catch(got, "sync BN, empty replica, ReductionToOneDevice", lambda: fit_conv(strategy(True), True, 11, 2))
        return got

    def sync_collective():
        got, s = {}, strategy()
        catch(got, "sync BN, empty replica", lambda: fit_conv(s, True, 11, 2), plan=EMPTY)
        if got["sync BN, empty replica"] is not None:            # the abort poisons every later collective
            catch(got, "a later fit", lambda: fit_conv(s, True, 8, 2))
        return got

    def weights():
        got, folder = {}, tempfile.mkdtemp()
        def template():
            return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="t1"),
                                     keras.layers.Dense(2, name="t2")], name="template")
        inputs = keras.Input((4,))
        wrapper = keras.Model(inputs, template()(inputs), name="wrapper")    # a parallel model around its template
        wrapper.save_weights(os.path.join(folder, "wrapper.weights.h5"))
        catch(got, "wrapper's file into its template",
              lambda: template().load_weights(os.path.join(folder, "wrapper.weights.h5")))
        wide = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), keras.layers.Dense(2)])
        wide.save_weights(os.path.join(folder, "wide.weights.h5"))
        narrow = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
        catch(got, "layers of another size", lambda: narrow.load_weights(os.path.join(folder, "wide.weights.h5")))
        renamed = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, name="zz"),
                                    keras.layers.Dense(2, name="aa")])
        catch(got, "other names, same positions", lambda: renamed.load_weights(os.path.join(folder, "wide.weights.h5")))
        got["renamed got the values"] = bool(np.array_equal(renamed.layers[0].kernel.numpy(),
                                                            wide.layers[0].kernel.numpy()))
        return got

    for group in (training, conv_bn_1_channel, conv_bn_2_channels, conv_without_bn, sync_to_one_device,
                  sync_collective) + ((weights,) if KERAS_LOGIC else ()):
        in_fork(group)
    print(json.dumps(out))
"""

FAMILIES = {"onednn": "1", "eigen": "0"}
#: The course's own example numbers: an explanation of another error must not quote them.
COURSE = ("[2, 2, 2, 0]", "[16, 16, 16, 14]", "62", "[0,8,8,1]", "[1,1,1,8]", "6 samples", "1030")


#: The family whose child also runs what computes no kernel arithmetic of its own: a validation set's first batch
#: (Keras's trainer averages it with an AddN) and the weights file's matching (Python in keras/src/saving). Strict
#: nbval compares notebook 02's and 04's instances of both under both families.
KERAS_LOGIC_FAMILY = "onednn"


@functools.cache
def _run(name: str) -> dict:
    """The child under one family, once per test process (the two fixtures below share the oneDNN run)."""
    code = f"KERAS_LOGIC = {name == KERAS_LOGIC_FAMILY!r}\n" + CHILD.replace("\n    ", "\n")
    proc = run_python(code, env={"TF_ENABLE_ONEDNN_OPTS": FAMILIES[name]}, timeout=900)
    got = last_json(proc)
    assert not [k for k in got if k.endswith(" failed")], got
    return got


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request):
    return request.param, _run(request.param)


@pytest.fixture(scope="module")
def keras_logic():
    return KERAS_LOGIC_FAMILY, _run(KERAS_LOGIC_FAMILY)


def _ours(got: dict, *numbers: str) -> str:
    """The explanation, after checking it quotes ``numbers`` and none of the course's."""
    text = got["explained"]
    for n in numbers:
        assert n in text, (n, text)
    for n in COURSE:
        assert n not in text, (n, text)
    return text


def test_fits_first_step_averages_the_replicas_first_batches(family):
    name, got = family
    assert got["family"] == name, "TF_ENABLE_ONEDNN_OPTS did not pick the kernel family"
    three, seven = got["uneven first step 3"], got["uneven first step 7"]
    for case in (three, seven):             # the same under both kernel families
        assert case["type"] == "InvalidArgumentError" and "AddN" in case["text"], case
        assert case["key"] == "uneven-replica-batches"
    assert "Input 0: [1,8] != input 3: [0,8]" in three["text"]
    # with the plan passed (3 samples in all), the fix is the data's: 4 or 8 would leave a replica empty again
    text = _ours(three, "[1, 1, 1, 0]", "a first batch of 3 split [1, 1, 1, 0].", "(tensors [1,8] and [0,8])",
                 "all 3 samples fill one step, split [1, 1, 1, 0]", "at least 4 samples at a global batch of 4")
    assert "4 or 8 instead of 3" not in text and "validation data, say" not in text    # the plan tells: training data
    assert "_maybe_symbolic_build" in text and "average" in text and "trac" not in text
    _ours(seven, "split [2, 2, 2, 1]", "a first batch of 7", "as the global batch, 4 or 8 instead of 7",
          "kit.explain(err, plan=kit.plan_batches(n_samples, global_batch, replicas))")
    # what the explanation says trains, trains: the same batches in a custom loop, an uneven later step in fit
    assert got["custom loop on the same batches"] is None and got["uneven later step in fit"] is None


def test_a_data_set_smaller_than_the_batch_is_its_own_first_batch(keras_logic):
    """A divisible global batch is not enough: the validation fit runs after each epoch, and evaluate, average their
    data's first batch too, and a set smaller than the batch is that batch. The error cannot say which data set it
    was: without a plan the explanation names both readings; with a plan whose step 1 splits evenly, the other data
    set's. Its fixes (a set of a multiple of the replica count, a validation batch that is one and at most the set's
    size) train, and a later uneven validation batch runs."""
    name, got = keras_logic
    for case in ("validation smaller than the batch", "validation smaller than the batch, plan passed",
                 "a training batch of 28, still larger than the set", "evaluate 27 at 32", "training set of 27 at 32"):
        assert got[case] is not None and got[case]["key"] == "uneven-replica-batches", (case, got[case])
        assert "Input 0: [7,8] != input 3: [6,8]" in got[case]["text"], (case, got[case]["text"])
    assert got["steps trained before"] == 2, "the whole epoch (64 samples at 32) trained before the validation failed"
    _ours(got["validation smaller than the batch"], "a first batch of 27 split [7, 7, 7, 6], which is the global "
          "batch or, when a data set (often the validation data) is smaller than the batch, that whole set",
          "as the global batch, 24 or 28 instead of 27 on 4 replicas", "as a data set smaller than the batch "
          "(validation data, say), 24 samples (28 if the data hold that many), or a `validation_batch_size` "
          "(`batch_size` in `evaluate`) that is a multiple of 4 and at most 27", "the validation `fit` runs after "
          "each epoch included")
    planned = _ours(got["validation smaller than the batch, plan passed"], "The plan passed splits step 1 evenly "
                    "[8, 8, 8, 8]: so the batch that failed is another data set's first batch, such as validation "
                    "data (or evaluate's) smaller than the batch", "Here: validation data (or evaluate's) of 24 "
                    "samples (28 if the data hold that many) instead of 27, or a `validation_batch_size`")
    assert "as the global batch" not in planned and "is it the plan of this run?" not in planned
    for fixed in ("validation of 24", "validation of 27 at validation_batch_size 16"):
        assert got[fixed] is None, (fixed, got[fixed])


def test_the_kits_own_uneven_error_names_the_global_batch_only():
    """train_digits' UnevenBatchError says the failing batch was its global batch: no validation reading then."""
    text = ("UnevenBatchError: Keras 3 fit failed: global batch 18 over 4 replicas splits unevenly [5, 5, 5, 3], ...\n"
            "InvalidArgumentError: {{function_node __wrapped__AddN_N_4_device_/job:localhost/replica:0/task:0/device:"
            "CPU:0}} Inputs to operation AddN of type AddN must have the same size and shape.  Input 0: [5,64] != "
            "input 3: [3,64] [Op:AddN]")
    said = " ".join(str(kit.explain(text)).split())
    assert "a first batch of 18 split [5, 5, 5, 3]." in said and "Here: 16 or 20 instead of 18 on 4 replicas" in said
    assert "validation data, say" not in said and "which is the global batch or" not in said


def test_a_conv_net_with_an_empty_replica_is_explained_by_its_own_shapes(family):
    name, got = family
    one, two = got["conv BN, empty replica, 1 channel"], got["conv BN, empty replica, 2 channels"]
    bare = got["conv without BN, empty replica"]
    if name == "eigen":                      # Eigen returns the right shape: no crash, as the explanation says
        assert one is None and two is None and bare is None
        return
    assert one["key"] == two["key"] == bare["key"] == "empty-replica-conv", (one, two, bare)
    if "Unable to broadcast" in one["text"]:
        assert "Unable to broadcast tensor of shape [1,1,1,5] to tensor of shape [0,6,6,1]" in one["text"]
        text = _ours(one, "shape [0,6,6,1]: 0 samples, with 1 channel where", "statistics [1,1,1,5] have 5",
                     "step 2 of 2 splits 3 samples [1, 1, 1, 0]")
    else:    # which replica's op fails first is a race: under load BatchNorm's gradient (RsqrtGrad) was seen first
        assert "RsqrtGrad" in one["text"], one
        text = _ours(one, "BatchNormalization's gradient (RsqrtGrad)", "step 2 of 2 splits 3 samples [1, 1, 1, 0]")
    assert "oneDNN" in text and "in the shape of its input" in text and "Eigen" in text
    assert "Incompatible shapes: [5] vs. [2]" in two["text"]         # 2 input channels: BN's moving-mean update
    _ours(two, "met 5 values (one per channel of the layer) and 2", "[1, 1, 1, 0]")
    assert "Matrix size-incompatible: In[0]: [0,2], In[1]: [5,3]" in bare["text"]
    _ours(bare, "shape [0,2] (0 samples of 2 features) for a kernel of shape [5,3]", "replica 3")


def test_synchronized_bn_fails_on_an_empty_replica_only_and_only_with_onednn(family):
    name, got = family
    assert got["sync BN, smaller replica batch"] is None, "per-channel sums do not depend on the batch size"
    collective, to_one = got["sync BN, empty replica"], got["sync BN, empty replica, ReductionToOneDevice"]
    if name == "eigen":
        assert collective is None and to_one is None
        return
    assert "Shape mismatch in the collective instance" in collective["text"]
    # which member reports the mismatch is a race: the empty replica (CPU:3, 2 channels) or another one (5)
    reported = re.search(r"device:CPU:(\d) expected shape \[(\d)\] but another member in the group expected shape "
                         r"\[(\d)\]", collective["text"])
    assert reported and (reported[1] == "3") == (reported.group(2, 3) == ("2", "5")), collective["text"]
    assert collective["key"] == "collective-shape-mismatch"
    text = _ours(collective, f"replica on CPU:{reported[1]} sent shape [{reported[2]}] and another replica "
                             f"[{reported[3]}]", "2 channels where the layer has 5", "[1, ..., C]",
                 "_compute_moments_sync", "[1, 1, 1, 0]", "Restart the kernel")
    assert "smaller or uneven replica batches train" in text and "empty" in text
    assert got["a later fit"] is not None, "after the abort a later fit fails too, as the explanation says"
    # ReductionToOneDevice adds the replicas' sums with AddN: the same cause, explained as such, not as fit's batch
    assert "AddN" in to_one["text"] and "[1,1,1,5]" in to_one["text"] and "[1,1,1,2]" in to_one["text"]
    assert to_one["key"] == "collective-shape-mismatch"
    _ours(to_one, "[1,1,1,5] and [1,1,1,2]: per-channel shapes [1, ..., C] for 5 and for 2 channels")
    assert "Restart" not in to_one["explained"]


def test_weights_are_matched_by_path_and_position_not_by_name(keras_logic):
    name, got = keras_logic
    wrapped = got["wrapper's file into its template"]
    assert wrapped["key"] == "weights-mismatch"
    assert "Layer 't1' expected 2 variables, but received 0" in wrapped["text"]
    text = _ours(wrapped, "2 objects of the model found nothing usable in the file: 't1' (Dense), 't2' (Dense)",
                 "Layer 't1' expected 2 variables and the file holds nothing at its path", "attribute path",
                 "never read")
    assert "by structure and name" not in text
    other = got["layers of another size"]
    assert other["key"] == "weights-mismatch"
    _ours(other, "has shape (4, 8), the file's value at its place (4, 16)")
    # the explanation's claim: names are never read, so other names at the same positions load
    assert got["other names, same positions"] is None and got["renamed got the values"]


def test_the_general_explanations_quote_no_example_numbers():
    """Where an error carries no numbers (docs/errors.md shows these texts), nothing is invented."""
    for entry in kit.explainer._ENTRIES:
        if entry.explanation.key in ("empty-replica-conv", "collective-shape-mismatch", "uneven-replica-batches",
                                     "weights-mismatch"):
            text = " ".join(str(entry.explanation).split())
            assert not any(n in text for n in COURSE), text
            assert "[2, 2, 2" not in text and "by structure and name" not in text


def test_plan_is_checked_and_read():
    err = ("InvalidArgumentError: Unable to broadcast tensor of shape [1,1,1,4] to tensor of shape [0,5,5,3]")
    plain = str(kit.explain(err))
    assert "pass `plan=kit.plan_batches(" in " ".join(plain.split())
    planned = " ".join(str(kit.explain(err, plan=[[3, 3, 3, 3], [1, 0, 0, 0]])).split())
    assert "step 2 of 2 splits 1 sample [1, 0, 0, 0]: replicas 1, 2, 3 get none" in planned
    assert "[1, 1, 1, 0]" in str(kit.explain(err, plan=[1, 1, 1, 0]))
    with pytest.raises(TypeError, match=r"explain: plan must be the per-replica split of every step"):
        kit.explain(err, plan="[1, 1, 1, 0]")
    with pytest.raises(TypeError, match=r"explain: plan must be"):
        kit.explain(err, plan=[[1, 1], [1, 1, 1]])
    # a plan that gives every replica data cannot be the plan of an empty-replica crash: it says so
    assert "is it the plan of this run" in " ".join(str(kit.explain(err, plan=[[2, 2, 2, 2]])).split())
    with pytest.raises(ValueError) as caught, kit.explain_errors(plan=[[2, 2, 2, 2], [1, 1, 1, 0]]):
        raise ValueError(err)                  # explain_errors passes the plan on to the note it attaches
    assert "step 2 of 2 splits 3 samples [1, 1, 1, 0]: replica 3 gets none" in " ".join(caught.value.__notes__[0].split())


def test_an_uneven_addn_without_the_replica_count_names_the_two_replicas_only():
    text = ("Inputs to operation AddN of type AddN must have the same size and shape.  Input 0: [5,3] != "
            "input 2: [4,3]")
    found = kit.explain(text)
    said = " ".join(str(found).split())
    assert found.key == "uneven-replica-batches"
    assert "replica 0's first batch had 5 samples and replica 2's 4" in said and "split [" not in said


@pytest.mark.parametrize("reporter, sent, other", [("3", "2", "5"), ("0", "5", "2"), ("1", "5", "2")])
def test_the_odd_replica_is_the_plans_empty_one_whichever_member_reports(reporter, sent, other):
    """Which member of the collective reports the mismatch is a race (both orders were met under load): with the
    plan, the explanation names the empty replica's channel count against the layer's either way; without it, it
    does not guess."""
    text = ("Shape mismatch in the collective instance 12. Op at device /job:localhost/replica:0/task:0/device:"
            f"CPU:{reporter} expected shape [{sent}] but another member in the group expected shape [{other}]. "
            "[[{{node sequential_1/bn_1/CollectiveReduceV2}}]]")
    said = " ".join(str(kit.explain(text, plan=kit.plan_batches(11, 8, 4))).split())
    assert f"replica on CPU:{reporter} sent shape [{sent}] and another replica [{other}]" in said
    assert "2 channels where the layer has 5" in said and "5 channels where" not in said
    unplanned = " ".join(str(kit.explain(text)).split())
    assert "another channel count than the other's (" in unplanned and "where the layer has" not in unplanned


def test_the_odd_replica_is_named_only_where_the_plan_and_the_device_tell_it():
    """The run aborts at its first step with an empty replica: only that step's empty replicas count (plan_batches(20,
    6, 4) empties replica 3 in step 1, replicas 2 and 3 only in the last); a device outside the plan's replicas, or
    another worker's, names no replica."""
    def said(device: str, plan) -> str:
        text = (f"Shape mismatch in the collective instance 12. Op at device {device} expected shape [5] but another "
                "member in the group expected shape [2].")
        return " ".join(str(kit.explain(text, plan=plan)).split())

    local = "/job:localhost/replica:0/task:0/device:CPU:"
    assert "the other replica's activations had 2 channels where the layer has 5" in said(local + "2",
                                                                                          kit.plan_batches(20, 6, 4))
    for device, plan in ((local + "5", [[1, 1, 1, 0]]), (local + "3", [[1, 0]]),
                         ("/job:worker/replica:0/task:3/device:CPU:0", [[1, 1, 1, 0]]),
                         ("/job:localhost/replica:0/task:0/device:GPU:2", [[1, 1, 1, 0]])):
        assert "where the layer has" not in said(device, plan), (device, plan)
        assert "another channel count than the other's (5 and 2)" in said(device, plan)


def test_one_steps_split_says_nothing_of_the_data():
    """plan=[2, 2, 2, 0] (one step's split, as the docstring allows) names the step, never a sample count or a fix
    that assumes the data hold one step; a whole plan of one step gets the data's fix."""
    text = "Unable to broadcast tensor of shape [1,1,1,5] to tensor of shape [0,6,6,1]"
    one = " ".join(str(kit.explain(text, plan=[2, 2, 2, 0])).split())
    assert "Here:" not in one and "6 samples" not in one.split("Fix:")[1]
    whole = " ".join(str(kit.explain(text, plan=kit.plan_batches(5, 8, 4))).split())
    assert "Here: all 5 samples fill one step, split [2, 2, 1, 0]: a global batch of at most 4" in whole
    assert "cannot help" not in whole
    later = " ".join(str(kit.explain(text, plan=kit.plan_batches(11, 8, 4))).split())
    assert "trains only the full step (1 of 2), split [2, 2, 2, 2]" in later
