"""The BatchNorm matrix (notebook 05): model kind x BN setting x batching -> outcome, on the installed Keras,
under both of TensorFlow's CPU kernel families (oneDNN and Eigen, forced per process), whatever this CPU's default.

If Keras or TensorFlow changes one of these outcomes, the failing assertion names the row of notebook 05
to update.

Three of notebook 05's four conv cases run there, not here: its cells 47 and 49 print their outcome and what the
learner sees under both families, and strict nbval compares those outputs in every kernel family's run
(``test_the_notebooks_conv_cases_as_nbval_compares_them`` reads them). The fourth, synchronized BatchNorm with an
empty step, stays in ``both``: the forked-versus-fresh check needs a crash that poisons its process.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import gputrain_kit as kit
from gputrain_kit import batchnorm
from gputrain_kit.errors import error_summary
from conftest import last_json, run_python


FAMILIES = ("onednn", "eigen")


#: Notebook 05 runs these under both families (cells 13, 47 and 49); strict nbval compares what they print.
IN_THE_NOTEBOOK = [("conv", "no BN", "last step empty"), ("conv", "scale=True", "last step empty"),
                   ("conv", "synchronized", "drop_remainder")]
NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "05_batchnorm_nan.ipynb"


@pytest.fixture(scope="module")
def both():
    cases = [case for case in batchnorm.DEFAULT_CASES + batchnorm.OTHER_CASES if case not in IN_THE_NOTEBOOK]
    return batchnorm.run_cases(cases, kernels=FAMILIES)


class _OneFamily:
    """``both`` seen through one family: ``outcome(model, bn, batching)`` as on a one-family matrix."""

    def __init__(self, matrix, family):
        self.matrix, self.family = matrix, family

    def outcome(self, model, bn, batching):
        return self.matrix.outcome(model, bn, batching, kernels=self.family)


@pytest.fixture(params=FAMILIES)
def matrix(both, request):
    return _OneFamily(both, request.param)


@pytest.fixture
def onednn(both):
    return _OneFamily(both, "onednn")


@pytest.fixture
def eigen(both):
    return _OneFamily(both, "eigen")


def test_both_families_ran_every_case(both):
    assert both.families == FAMILIES and len(both.results) == 2 * len(both.cases) == 2 * (14 - len(IN_THE_NOTEBOOK))
    assert {r.kernels for r in both.results} == set(FAMILIES)


def test_the_cases_cover_every_combination():
    every = {(m, bn, b) for m in batchnorm.MODELS for bn in batchnorm.BN_SETTINGS for b in batchnorm.BATCHINGS
             if not (bn == "no BN" and b == "drop_remainder")}
    assert set(batchnorm.DEFAULT_CASES) | set(batchnorm.OTHER_CASES) == every and len(every) == 14
    assert not set(batchnorm.DEFAULT_CASES) & set(batchnorm.OTHER_CASES)


def test_dense_scale_false_poisons_silently(matrix):
    r = matrix.outcome("dense", "scale=False", "last step empty")
    assert r.outcome == "silent NaN" and len(r.losses) == 2 and all(v == v for v in r.losses)
    assert "moving_mean, moving_variance on replica 3" in r.detail and r.nan_rows == 256


def test_dense_default_bn_gets_loud_in_epoch_two(matrix):
    r = matrix.outcome("dense", "scale=True", "last step empty")
    assert r.outcome == "loud NaN" and "loss NaN in epoch 2" in r.detail and r.nan_rows == 1030
    assert r.losses[0] == r.losses[0], "epoch 1's loss is still finite: one epoch is not enough to notice"


def _stored(cell: int) -> str:
    outputs = json.loads(NOTEBOOK.read_text())["cells"][cell]["outputs"]
    return "".join("".join(o.get("text") or o.get("data", {}).get("text/plain", "")) for o in outputs)


def test_the_notebooks_conv_cases_as_nbval_compares_them():
    """The three cases ``both`` leaves to notebook 05: its cells print them under both families and strict nbval
    compares the prints in each family's run, so what is read here is what this TensorFlow does."""
    table, detail = " ".join(_stored(47).split()), " ".join(_stored(49).split())
    assert "conv no BN last step empty crash healthy" in table
    assert "conv scale=True last step empty crash loud NaN" in table
    assert "conv synchronized drop_remainder healthy healthy" in table
    onednn, eigen = detail.split("Eigen (portable)", 1)
    # oneDNN: the scale=True crash leaves NaN statistics behind; without BatchNorm it leaves nothing poisoned
    assert ("conv scale=True last step empty oneDNN crash InvalidArgumentError: Unable to broadcast tensor of shape "
            "[1,1,1,8] to tensor of shape [0,8,8,1] | left NaN in moving_mean, moving_variance on replica 3") in onednn
    no_bn = onednn.split("conv no BN last step empty oneDNN crash", 1)[1].split("conv ", 1)[0]
    assert "Matrix size-incompatible" in no_bn and "left NaN" not in no_bn, "without BatchNorm nothing is poisoned"
    assert kit.explain(no_bn).key == "empty-replica-conv"      # the Dense after the conv meets 0 rows
    assert kit.explain("InvalidArgumentError: Unable to broadcast tensor of shape [1,1,1,8] to tensor of shape "
                       "[0,8,8,1]").key == "empty-replica-conv"
    # Eigen trains on: healthy without BatchNorm, loud NaN with it (26 copies, every row)
    assert "conv no BN last step empty Eigen (portable) healthy all copies finite and identical" in detail
    assert ("conv scale=True last step empty Eigen (portable) loud NaN loss NaN in epoch 2, TerminateOnNaN stops; "
            "NaN in beta, bias, gamma, kernel, moving_mean, moving_variance (26 copies), 1030 of 1030 rows NaN") \
        in detail
    # fixed-size batches with synchronized BatchNorm: healthy and identical on every replica, both families
    assert detail.count("conv synchronized drop_remainder") == 2
    assert all(part.split("conv ", 1)[0].strip().endswith("healthy all copies finite and identical")
               for part in detail.split("conv synchronized drop_remainder")[1:])


def test_conv_crashes_on_an_empty_replica_batch_with_onednn_kernels(onednn):
    r = onednn.outcome("conv", "scale=False", "last step empty")
    assert r.outcome == "crash" and "Unable to broadcast tensor of shape [1,1,1,8] to tensor of shape [0,8,8,1]" \
        in r.detail
    assert r.later_fit == "works" and r.nan_copies == 2, "the crash still leaves NaN statistics behind"
    assert "left NaN in moving_mean, moving_variance on replica 3" in r.detail
    assert kit.explain(r.detail).key == "empty-replica-conv"


def test_the_same_conv_cases_train_on_with_eigen_kernels(eigen):
    """Eigen (most laptops) meets the empty batch without crashing, as the H100 did (docs/gpu.md)."""
    assert eigen.outcome("conv", "synchronized", "last step empty").outcome == "healthy"
    assert eigen.outcome("conv", "scale=False", "last step empty").outcome in ("silent NaN", "loud NaN")


def test_synchronized_bn_is_no_fix_for_empty_steps_on_conv(onednn):
    r = onednn.outcome("conv", "synchronized", "last step empty")
    assert r.outcome == "crash" and "Shape mismatch in the collective instance" in r.detail
    assert r.later_fit != "works" and "later fit in the same process fails too" in r.detail
    assert kit.explain(r.detail).key == "collective-shape-mismatch"


def test_synchronized_bn_survives_the_empty_step_on_this_dense_model(matrix):
    r = matrix.outcome("dense", "synchronized", "last step empty")
    assert r.outcome == "healthy" and r.spread == 0.0


def test_without_batchnorm_dense_survives(matrix):
    """(The conv net without BatchNorm crashes under oneDNN: notebook 05's, test_the_notebooks_conv_cases_...)"""
    dense = matrix.outcome("dense", "no BN", "last step empty")
    assert dense.outcome == "healthy" and dense.spread == 0.0


def test_fixed_size_batches_are_healthy_and_only_synchronized_removes_drift(matrix):
    for model in batchnorm.MODELS:
        for bn in batchnorm.BN_SETTINGS[1:]:
            if (model, bn, "drop_remainder") in IN_THE_NOTEBOOK:
                continue
            r = matrix.outcome(model, bn, "drop_remainder")
            assert r.outcome == "healthy", r
            assert (r.spread == 0.0) == (bn == "synchronized"), r


def test_error_summary_finds_the_message_under_graph_execution_error():
    multi = ("Graph execution error:\n\nDetected at node x\n  File ...\n3 root error(s) found.\n"
             "  (0) INVALID_ARGUMENT:  Unable to broadcast tensor of shape [1] to tensor of shape [0]\n"
             "\t [[{{node x}}]]\n0 successful operations.")
    assert error_summary(multi) == "Unable to broadcast tensor of shape [1] to tensor of shape [0]"
    single = ("Graph execution error:\n\nDetected at node n\nCollective ops is aborted by: Shape mismatch in the "
              "collective instance 212. Op at device /job:localhost/replica:0/task:0/device:CPU:3 expected shape "
              "[1]\nThe error could be from a previous operation. Restart your program to reset.\n"
              "\t [[{{node n}}]] [Op:f]")
    assert error_summary(single, limit=500) == ("Collective ops is aborted by: Shape mismatch in the collective "
                                                "instance. (The replicas' shapes differ; which device reports it "
                                                "varies.)")
    two = multi.replace("0 successful", "  (1) INVALID_ARGUMENT:  An earlier message\n\t [[{{node y}}]]\n0 successful")
    assert error_summary(two) == "An earlier message", "several root errors: the same one every run (sorted)"
    assert error_summary(ValueError("plain message")) == "ValueError: plain message"
    assert error_summary("word " * 100, limit=20).endswith(" ...") and len(error_summary("word " * 100, limit=20)) <= 24


def test_run_cases_rejects_bad_cases():
    with pytest.raises(ValueError, match="run_cases: model must be one of 'dense', 'conv', got 'cnn'"):
        batchnorm.run_cases([("cnn", "scale=False", "drop_remainder")])
    with pytest.raises(ValueError, match=r"each case is \(model, bn, batching\)"):
        batchnorm.run_cases([("dense", "scale=False")])


def test_start_cases_checks_at_once_and_runs_in_the_background():
    with pytest.raises(ValueError, match="start_cases: bn must be one of"):
        batchnorm.start_cases([("dense", "batchnorm", "drop_remainder")])
    pending = batchnorm.start_cases([("dense", "no BN", "drop_remainder")], processes=1)
    row = pending.progress_bar()
    bar, count = row.children
    assert bar.max == 1 and count.value == "0 of 1 case" and repr(row) == "cases run: 0 of 1 case"
    with pytest.raises(TimeoutError, match="still running"):
        pending.result(timeout=0.01)
    matrix = pending.result(timeout=300)
    assert [r.outcome for r in matrix.results] == ["healthy"] and bar.value == 1 and pending.done == 1
    assert count.value == "1 of 1 case" and repr(row) == "cases run: 1 of 1 case"     # the text without widgets


def test_start_cases_leaves_the_kernel_a_core_by_default(monkeypatch):
    """Background cases take every core but one (at least one, at most the cases), so that the notebook's
    own cells run at the speed they would alone (issue 33: notebook 05's time varied most)."""
    from gputrain_kit import processes

    # (cores, jobs) -> at a time while the notebook works, and once it waits; 2 cores: 2 (one at a time made
    # notebook 05 a third slower there and its own cells barely faster)
    for cores, jobs, working, waiting in ((2, 12, 2, 2), (1, 12, 1, 1), (4, 12, 3, 4), (8, 12, 7, 8),
                                          (16, 12, 12, 12), (8, 3, 3, 3)):
        monkeypatch.setattr(processes.os, "sched_getaffinity", lambda _pid, n=cores: set(range(n)))
        assert processes.background_processes(jobs) == working
        assert processes.background_processes(jobs, waiting=True) == waiting
    monkeypatch.setattr(processes.os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    cases = [("dense", "no BN", "drop_remainder"), ("dense", "scale=False", "drop_remainder")]
    default = batchnorm.start_cases(cases, kernels=("onednn", "eigen"))     # 4 jobs on 4 cores: 3 at a time
    fixed = batchnorm.start_cases(cases[:1], processes=1)
    assert (default.processes, fixed.processes) == (3, 1)
    # once the notebook waits for them, the cases take its core too (not when a count was given)
    results = default.result(timeout=300).results + fixed.result(timeout=300).results
    assert (default.processes, fixed.processes) == (4, 1)
    assert [r.outcome for r in results][:1] + [r.outcome for r in results][4:] == ["healthy"] * 2


def test_forked_cases_report_what_a_fresh_interpreter_reports(both, monkeypatch):
    """On Linux each case runs in a child forked from one process that imported TensorFlow once (two at a
    time: the module's ``both`` matrix ran so); a crash then costs no new import. The outcomes must be those of the
    plain path (one interpreter, a fresh one after each crash), for a silent-NaN case and a crash that poisons its
    process."""
    from gputrain_kit import batchnorm

    cases = [("dense", "scale=False", "last step empty"), ("conv", "synchronized", "last step empty")]
    forked = [both.outcome(*case, kernels="onednn") for case in cases]
    monkeypatch.setenv("GPUTRAIN_FORK", "0")
    plain = batchnorm.run_cases(cases, processes=1, kernels="onednn")
    for a, b in zip(forked, plain.results):
        assert (a.outcome, a.nan_copies, a.nan_rows, a.later_fit[:40]) == (b.outcome, b.nan_copies, b.nan_rows,
                                                                         b.later_fit[:40]), (a, b)
    assert [r.outcome for r in forked] == ["silent NaN", "crash"]


def users_dense():
    """A learner's own model: an extra hidden layer, BN without scale, one regression output (no kit model)."""
    import keras

    return keras.Sequential([keras.Input((10,)), keras.layers.Dense(24, activation="relu"), keras.layers.Dense(16),
                             keras.layers.BatchNormalization(scale=False), keras.layers.ReLU(),
                             keras.layers.Dense(1)])


def users_compiled_conv():
    """A learner's conv model that compiles itself inside build() (so inside the strategy's scope)."""
    import keras

    model = keras.Sequential([keras.Input((6, 6, 2)), keras.layers.Conv2D(4, 3), keras.layers.BatchNormalization(),
                              keras.layers.ReLU(), keras.layers.Flatten(), keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def test_run_cases_takes_your_own_model_and_data_under_both_families():
    """The trap is the model's, not the kit's: a learner's Dense model with BN(scale=False) on their own data goes
    silently NaN on the replica the last step leaves empty, under both CPU kernel families, and stays finite with
    drop_remainder; the data is cut to whole batches plus 3 samples (the last step [1, 1, 1, 0])."""
    import numpy as np

    rng = np.random.default_rng(3)
    x = rng.normal(size=(500, 10)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    m = batchnorm.run_cases(build=users_dense, data=(x, y), loss="mse", batch_size=32, kernels=("onednn", "eigen"))
    assert m.cases == (("users_dense", "as built", "last step empty"), ("users_dense", "as built", "drop_remainder"))
    for family in ("onednn", "eigen"):
        empty = m.outcome("users_dense", "as built", "last step empty", family)
        assert empty.outcome == "silent NaN" and empty.rows == 15 * 32 + 3, empty
        assert "moving_mean" in empty.detail and "replica 3" in empty.detail
        assert m.outcome("users_dense", "as built", "drop_remainder", family).outcome == "healthy"
    assert "users_dense as built" in repr(m)
    # the cut is said above the table (a reader read "483 of 483 rows NaN" as his own data size hitting the trap)
    assert m.note.startswith("Your data: 500 samples, cut to 483 = 15 x 32 + 3, so that the last step splits")
    assert "check_batch_plan(500, 32, 4)" in m.note and "under oneDNN and Eigen" in m.note
    assert repr(m).startswith("Your data: 500 samples") and all(len(line) <= 100 for line in repr(m).splitlines())


def test_start_cases_runs_a_model_that_compiles_itself():
    import numpy as np

    rng = np.random.default_rng(4)
    y = rng.integers(0, 3, 200)
    x = (rng.normal(size=(200, 6, 6, 2)) + y[:, None, None, None]).astype("float32")
    pending = batchnorm.start_cases(["drop_remainder"], build=users_compiled_conv, data=(x, y), batch_size=16)
    result = pending.result(timeout=120).outcome("users_compiled_conv", "as built", "drop_remainder")
    assert result.outcome == "healthy" and result.rows == 12 * 16 + 3 and len(result.losses) == 2


def test_an_uncompiled_model_without_a_loss_is_named():
    import numpy as np

    x, y = np.zeros((40, 10), "float32"), np.zeros((40, 1), "float32")
    # here TensorFlow's runtime has not started, so the case's own process finds it: its message, no traceback
    with pytest.raises(ValueError, match="uncompiled model and no loss was given.*loss=") as caught:
        batchnorm.run_cases(["drop_remainder"], build=users_dense, data=(x, y), batch_size=8)
    assert "Traceback" not in str(caught.value)


def test_in_a_notebook_an_uncompiled_model_is_refused_before_any_case_starts():
    """After setup() (a notebook), build() is tried here, without allocating weights: no process starts."""
    proc = run_python("""
        import json, sys
        import numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import gputrain_kit._children as children
        children.run_jobs = None                      # a case that started would fail with a TypeError
        sys.path.insert(0, "tests/claims")
        from test_batchnorm import users_dense
        x, y = np.zeros((40, 10), "float32"), np.zeros((40, 1), "float32")
        try:
            kit.batchnorm.run_cases(["drop_remainder"], build=users_dense, data=(x, y), batch_size=8)
        except ValueError as err:
            print(json.dumps({"error": str(err)}))
    """)
    assert "run_cases: users_dense() returns an uncompiled model and no loss was given" in last_json(proc)["error"]


def test_your_batch_size_must_divide_over_the_four_replicas():
    """A reader's batch_size=30 reached the cases and came back as 'your model did not train in any case' with
    an AddN shape error: Keras 3's fit refuses an uneven first step (notebook 02), so it is refused at the call."""
    import numpy as np

    x, y = np.zeros((200, 10), "float32"), np.zeros((200, 1), "float32")
    with pytest.raises(ValueError, match=r"run_cases: batch_size=30 does not divide over the 4 replicas.*28 or 32"):
        batchnorm.run_cases(build=users_dense, data=(x, y), loss="mse", batch_size=30)


def users_classifier():
    """A learner's 10-class classifier (logits)."""
    import keras

    return keras.Sequential([keras.Input((10,)), keras.layers.Dense(16), keras.layers.BatchNormalization(),
                             keras.layers.Dense(10)])


def test_a_loss_that_does_not_match_the_targets_is_the_models_error_not_the_traps():
    """A reader's one-hot targets with sparse_categorical_crossentropy crashed every case, and the matrix read as
    if the empty step had crashed it: a model that crashes with drop_remainder too is refused in those words."""
    import numpy as np

    rng = np.random.default_rng(5)
    x = rng.normal(size=(120, 10)).astype("float32")
    y = np.eye(10, dtype="float32")[rng.integers(0, 10, 120)]            # one-hot: needs categorical_crossentropy
    with pytest.raises(ValueError, match=r"run_cases: your model did not train in any case, also with "
                                         r"drop_remainder .*not the empty-replica trap: .*target"):
        batchnorm.run_cases(build=users_classifier, data=(x, y), loss="sparse_categorical_crossentropy",
                            batch_size=16, epochs=1)


def test_a_case_out_of_time_says_so_plainly():
    """A reader's Run All of notebook 05 on a machine with a load of 6 on 2 cores stopped at `pending.result()` with
    "did not report" and the kit's internals: a case that runs out of time now says it did, that the machine is
    probably busy, and which argument gives it more (900 s by default, for a case that takes seconds)."""
    import inspect

    assert inspect.signature(batchnorm.run_cases).parameters["timeout"].default == 900
    assert inspect.signature(batchnorm.start_cases).parameters["timeout"].default == 900
    with pytest.raises(RuntimeError, match=r"did not finish within 0.5 s; .* start_cases\(timeout=\.\.\.\)"):
        batchnorm.run_cases([("dense", "scale=False", "last step empty")], timeout=0.5)


def test_one_epoch_ending_in_the_empty_step_is_no_silent_nan_when_the_weights_are_nan():
    """Review (ninth read): run_cases(epochs=1) on the conv net with default BatchNorm called the case "silent NaN"
    while every replica's gamma (replica 0's, which a saved file keeps, included) was NaN. Eigen kernels: oneDNN
    crashes the conv net first. The Dense net with scale=False stays silent (NaN only in replica 3's statistics)."""
    with pytest.warns(UserWarning, match="epochs=1 ends with the empty step"):
        m = batchnorm.run_cases([("dense", "scale=False", "last step empty"), ("conv", "scale=True", "last step empty")],
                                epochs=1, kernels="eigen")
    silent = m.outcome("dense", "scale=False", "last step empty")
    assert silent.outcome == "silent NaN" and "on replica 3," in silent.detail, silent
    conv = m.outcome("conv", "scale=True", "last step empty")
    assert conv.outcome == "NaN weights", conv
    assert all(v == v for v in conv.losses)                       # the loss is still finite
    assert "replica 0's copy of" in conv.detail and "gamma" in conv.detail and "a saved file keeps it" in conv.detail
