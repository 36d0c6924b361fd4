"""Every exercise check, swept: the literal forms learners write are right ('CUDA GPU 5', 'GPU 7', '300 samples',
'1.99x less'), and wrong answers are refused: NaN, infinities, None, blank strings, a negated choice
('synchronized=False', 'async'), a right number in the wrong unit, and the naive answer each exercise warns
against (09's 2 for "a little less than 2"). One reader does it for all (``check._common.read``)."""
from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

import gputrain_kit.counting as counting
import gputrain_kit.measure as measure
from gputrain_kit import check, devices
from gputrain_kit import multiworker as mw
from gputrain_kit.check._common import as_amount, as_choice, as_device, as_int, as_int_list, as_number, read
from gputrain_kit.measure import MemoryMeasurement

NOT_A_NUMBER = [float("nan"), float("inf"), float("-inf"), np.float32("nan"), np.array(np.inf), "nan", "NaN", "inf",
                "-inf", " Infinity ", "1e999", [float("nan")], np.array([1.0, np.nan]), "nan GB", "inf samples"]
NO_ANSWER = ["", "   ", "''", " \" \" ", None]


@pytest.fixture(autouse=True)
def _no_child_processes(monkeypatch):
    """nb01_locking_call probes in a fresh process and nb08_measured_peak measures in one: both faked here (their
    own tests run them for real); a fake setup() for nb00_last_device."""
    class Probe:
        locked = True

        def row(self):
            return "a Keras model built: LOCKS it"

    monkeypatch.setattr(counting, "probe_locks", lambda calls: [Probe()])
    monkeypatch.setattr(measure, "measure_memory",
                        lambda build, **kwargs: MemoryMeasurement(17_000_000, 41_000_000, "CPU:0", kwargs))
    report = devices.SetupReport(mode="cpu", devices=("/device:CPU:0", "/device:CPU:1"), physical_gpus=(),
                                 memory_limit_mb=None, seed=0, tensorflow="x", keras="y")
    monkeypatch.setitem(devices._state, "report", report)


def _live():
    """The right answers a check computes from the kit's estimates (memory.py may move them): computed the same
    way here, never written down."""
    from gputrain_kit.memory import estimate_memory, preset_profile
    from gputrain_kit.scaling import predict_curve
    from gputrain_kit.sharding import mesh_bytes

    full = preset_profile(check.FULL_MODEL)
    accumulation = next(k for k in (2 ** i for i in range(12))
                        if estimate_memory(full, batch_size=check.FULL_BATCH, accumulation_steps=k).fits(check.CARD_GB))
    devices_ = next(n for n in range(1, 9) if check.FULL_BATCH % n == 0 and estimate_memory(
        full, batch_size=check.FULL_BATCH, strategy="data", devices=n).peak / 1e9 <= check.CARD_GB)
    fullest = max(estimate_memory(preset_profile("dense_stack"), batch_size=32, strategy="split", devices=3).per_device,
                  key=lambda d: d["total"])
    split_gb = (fullest["parameters"] + fullest["gradients"] + fullest["optimizer"]) / 1e9
    per_device, whole, _ = mesh_bytes(check.NB09_MLP, 2, True)
    return {
        "accumulation": accumulation, "devices": devices_, "split_gb": split_gb, "mesh": (per_device, whole),
        "pcie4": predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 4, 0.1)[-1].efficiency,
        "pcie8": predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 8, 0.1)[-1].efficiency,
        "ethernet": predict_curve("VGG-16", "25 Gbit/s Ethernet (servers)", 64, 8, 0.1)[-1].efficiency,
        "peak_mb": estimate_memory(check.twin(), batch_size=2048, optimizer="sgd", dtype_policy="mixed_bfloat16",
                                   accumulation_steps=4).peak / 1e6,
        # exercise 1 with mixed precision left out: 3% above the right answer (the kernel copies eat its saving)
        "peak_no_mixed_mb": estimate_memory(check.twin(), batch_size=2048, optimizer="sgd",
                                            accumulation_steps=4).peak / 1e6,
    }


LIVE = _live()
ACC, DEV, GB, PEAK = LIVE["accumulation"], LIVE["devices"], LIVE["split_gb"], LIVE["peak_mb"]
PER_DEVICE, WHOLE = LIVE["mesh"]
TF_CONFIG = mw.tf_config(check.NB07_HOSTS, 2)

# check: (literal right answers, wrong answers). Every wrong answer must be refused, every right one accepted.
CASES = {
    "nb00_last_device": (["/device:CPU:1", "CPU:1", "cpu:1", "cpu 1", "CPU1", "'/device:CPU:1'",
                          "/job:localhost/replica:0/task:0/device:CPU:1"],
                         ["/device:CPU:0", "GPU:1", 1, "CPU 2", "not CPU:1", "CPU:1 or CPU:0"]),
    "nb00_simulated_speedup": ([False, "False", "false", "no", "'False'", np.bool_(False), "False."],
                               [True, "True", "yes", "not false", 0, "maybe"]),
    "nb00_more_devices": (["b", " B ", "'b'", "(b)", "option b"], ["a", "c", "not b", "a or b", "ab", "not a"]),
    "nb00_server_mode": (["split-gpu", "split_gpu", "Split GPU", "SplitGPU", "'split-gpu' mode"],
                         ["gpu", "cpu", "not split-gpu", "splitgpu", "non-split gpu", "no split-gpu"]),
    "nb00_logical_per_gpu": ([3, 3.0, "3", np.int64(3), "3 logical GPUs", "3 each", "3 per GPU"],
                             [6, 2, 1, "3 GB", "6 logical GPUs", 3.5, "three", "not 3"]),
    "nb00_last_gpu_name": (["/device:GPU:3", "GPU:3", "/gpu:3", "GPU 3", "gpu3", "GPU #3", 3, "3", np.int64(3)],
                           ["/device:CPU:3", "GPU 7", "GPU:4", 4, "7", "not GPU 3", "GPU 3 or 4", -3, True,
                            "CUDA GPU 3", "cuda:3"]),       # other numberings than TensorFlow's: a hint (notebook 01)
    "nb00_cpu_devices": ([[1, 8], (1, 8), "[1, 8]", "1, 8", "1 and 8", np.array([1, 8])],
                         [[8, 1], [16, 8], [1, 16], [0, 8], [1], [1, 8, 8], 8, [1, float("nan")]]),
    "nb01_physical_behind": ([5, "5", "CUDA GPU 5", "GPU 5", "cuda gpu 5", "physical GPU 5", np.int64(5),
                              " 'CUDA GPU 5' "],
                             [1, 3, "GPU 1", "/GPU:1", "CUDA GPU 3", "5 GB", "not 5", "GPU 5 or 3", 5.5, "5 samples",
                              "GPU:5", "/GPU:5"]),       # TensorFlow's names: there it is /GPU:1 (the lesson)
    "nb01_count_with_garbage": ([0, "0", "0 GPUs", "0 devices", 0.0],
                                [2, 3, 1, 8, "2 GPUs", "0 GB", "0 samples", "not 0", "no GPUs at all"]),
    "nb01_locking_call": ([True, "True", "yes", np.bool_(True)], [False, "no", "not true", 1]),
    "nb01_visible_after_drop": ([[5, 4], (5, 4), "5, 4", "[5, 4]", "5 and 4", "CUDA GPUs 5 and 4", "GPUs 5, 4",
                                 np.array([5, 4])],
                                [[5, 4, 2], [4, 5], [5], [5, 4, 9, 2], "5 4 2", "[5, nan]", "5 GB, 4 GB"]),
    "nb01_smi_behind": ([7, "7", "GPU 7", "nvidia-smi GPU 7", "nvidia-smi 7", "GPU #7"],
                        [3, 6, 4, "GPU 3", "CUDA GPU 3", "7 GB", "not 7"]),
    "nb02_per_replica": ([48, "48", "48 samples", "48 samples per replica", "48 each", "48 examples"],
                         [384, 8, 3072, "48 GB", "48 steps", 47.9]),
    "nb02_steps_per_epoch": ([4, "4", "4 steps", 4.0], [3, 5, 3.74, "4 samples", "about 3.74"]),
    "nb02_last_step": ([[36] * 7 + [34], "36, 36, 36, 36, 36, 36, 36, 34", tuple([36] * 7 + [34])],
                       [[36] * 8, [34] + [36] * 7, [35.75] * 8, [36] * 7, [286], [48] * 8]),
    "nb02_last_step_three": ([[32, 32, 30], "32, 32, 30", "32 and 32 and 30"],
                             [[32, 32, 32], [31, 31, 32], [30, 32, 32], [94], [32, 30]]),
    "nb02_sample_weight": ([0.25, "1/4", "25%", "0.25", "about 0.25", Fraction(1, 4), np.float32(0.25)],
                           [0.1, 1 / 12, 1, 4, "1/4 GB", "not 1/4", 25, "1/10"]),
    "nb03_less_memory": (["split", "Split", "'split'", "model parallel", "split x2", "2-way split", "layer split"],
                         ["data", "data x4", "data parallel", "not split", "unsplit", "non-split", "no split"]),
    "nb03_bubble": (["3/11", 3 / 11, 0.27, "27%", "27.3%", "0.273", "about 0.27", np.float64(0.2727)],
                    [0.28, 0.25, 0.75, 0.375, 0.5, 27, "3/11 GB", "not 3/11", "3 / 8"]),
    "nb03_microbatches": ([28, "28", "28 micro-batches", "28 microbatches", "28 micro batches", 28.0, "at least 28",
                           "M = 28"],      # the question asks for the smallest M: "at least 28" is its literal answer
                          [27, 29, 30, 32, "28 GB", "28 stages", "27 micro-batches", "at least 27", "at most 28"]),
    "nb03_split_state_gb": ([round(GB, 2), f"{GB:.2f}", f"{GB:.2f} GB", f"{GB * 1e9:.3e} bytes", f"{GB * 1000:.0f} MB",
                             f"{GB * 1e9 / 2 ** 30:.2f} GiB", f"about {GB:.2f} GB", f"{GB:.2f} gigabytes"],
                            [round(3 * GB, 1), round(1.5 * GB, 1), round(0.75 * GB, 2), f"{GB:.2f} MB",
                             f"{GB:.2f} GHz", GB * 1e9, f"{GB * 1e9 / 2 ** 30:.2f}"]),
    "nb04_what_to_save": (["template", "Template", "the template", "'template'", "template model"],
                          ["wrapper", "not template", "not the wrapper", "the wrapper model", "both"]),
    "nb04_reshuffle": ([False, "False", "no", np.bool_(False)], [True, "True", "yes", "not false", 0]),
    "nb04_resumed_epochs": ([[7, 8, 9, 10], (7, 8, 9, 10), range(7, 11), "7, 8, 9, 10", "[7, 8, 9, 10]", "7 to 10",
                             "7-10", "epochs 7 to 10", np.arange(7, 11)],
                            [[8, 9, 10], [7], [6, 7, 8, 9, 10], list(range(1, 11)), "6 to 10", "7 to 10 GB", 7,
                             "8-10"]),
    "nb04_weight_group": (["layers/dense_2", "dense_2", " 'layers/dense_2' ", "/layers/dense_2/", "layers/dense_2/vars"],
                          ["layers/logits", "layers/dense_1", "layers/dense_3", "dense", 2,
                           "LAYERS/DENSE_2/", "layers/dense_2/vars/0"]),     # issue 44: keys are case-sensitive
    "nb05_empty_replicas_a": ([[6, 7], (7, 6), "6, 7", "[6, 7]", "6 and 7", "replicas 6 and 7", {6, 7},
                               np.array([6, 7])],
                              [[7, 8], [], "none", None, [1, 1, 1, 1, 1, 1, 0, 0], 2, "2", 0, "0",
                               [1, 2, 3, 4, 5, 6, 7], [6], [6, 7, 8]]),
    "nb05_empty_replicas_b": ([[], "[]", (), "none", "None", "no replica", None],
                              [[7], [0], 0, "0", [4, 5, 6, 7], [6, 7], 8]),
    "nb05_identical_copies": (["synchronized", " 'Synchronized' ", "synchronized=True", "synchronized = True",
                               "BatchNormalization(synchronized=True)",
                               "keras.layers.BatchNormalization(synchronized=True)", "SyncBatchNorm", "sync",
                               "synchronised", "synchronized batchnorm", "Synchronized BatchNormalization"],
                              ["synchronized=False", "synchronized = false", "unsynchronized", "async",
                               "asynchronous", "not synchronized", "no sync", "non-synchronized", "desynchronized",
                               "sync=False", "without sync", "synchronized: no", "Unsynchronized BatchNorm",
                               "BatchNormalization(synchronized=False)", "pad", "drop_remainder=True", "repeat",
                               "ds.repeat()", "batchnorm"]),
    "nb05_pad_samples": ([56, "56", "56 samples", "56 padded samples", "56 more samples", np.int64(56)],
                         [40, 96, 1056, 152, "56 batches", "56 GB", "not 56", "56 or 40"]),
    "nb06_scaled_lr": ([3.2, "3.2", "16/5", "lr = 3.2", "a learning rate of 3.2", np.float32(3.2)],
                       [0.05, 0.8, 1.6, 0.4, 3.21, "3.2%", "320%", "320 percent", "3.2 GB", "not 3.2"]),
    "nb06_efficiency": ([round(LIVE["pcie4"], 2), f"{100 * LIVE['pcie4']:.0f}%", f"{LIVE['pcie4']:.2f}"],
                        [round(LIVE["pcie8"], 2), round(100 * LIVE["pcie4"]), 1.0, 0.5, "not 0.96"]),
    "nb06_warmup_step": ([0.825, "33/40", "82.5%", 0.83, 0.82, "lr = 0.825"],
                         [1.6, 0.05, 0.4375, 0.8, 0.85, 82.5, "0.825 GB"]),
    "nb06_ethernet_efficiency": ([round(LIVE["ethernet"], 2), f"{100 * LIVE['ethernet']:.0f}%"],
                                 [round(LIVE["pcie8"], 2), round(LIVE["pcie4"], 2), round(100 * LIVE["ethernet"]),
                                  1.0]),
    "nb07_tf_config": ([TF_CONFIG, json.loads(TF_CONFIG), f" '{TF_CONFIG}' "],
                       [repr(json.loads(TF_CONFIG)), mw.tf_config(check.NB07_HOSTS, 1), mw.tf_config(check.NB07_HOSTS, 0),
                        mw.tf_config(check.NB07_HOSTS[::-1], 0), "gpu-c", "{}", "NaN", {"task": {"index": 2}}]),
    "nb07_global_batch": ([66, "66", "66 samples", "a global batch of 66", 66.0],
                          [64, 69, 96, 63, 65, "66 GB", "66 devices", "not 66"]),
    "nb07_resume_step": ([400, "400", "step 400", "at step 400"], [399, 437, 450, 350, "400 GB", "not 400"]),
    "nb07_per_replica_batch": ([8, "8", "8 examples", "8 per replica", "8 samples", "16/2"],
                               [32, 24, 96, 12, "8 GB", "8 devices"]),
    "nb07_is_chief": ([False, "False", "no", np.bool_(False)], [True, "yes", "not false"]),
    "nb08_measured_peak": ([round(PEAK, 1), f"{PEAK:.1f}", f"{PEAK:.1f} MB", f"{PEAK / 1000:.4f} GB",
                            f"about {PEAK:.0f} MB", PEAK * 1e6],
                           [f"{PEAK:.1f} GB", f"{PEAK:.1f} GHz", f"{PEAK * 1e6:.0f} MB", 15, 2 * PEAK, PEAK / 2,
                            f"not {PEAK:.1f}", round(LIVE["peak_no_mixed_mb"], 1)]),
    "nb08_accumulation_to_fit": ([ACC, str(ACC), f"x{ACC}", f"X{ACC}", f"{ACC}x", f"×{ACC}", f"{ACC} steps",
                                  f"{ACC} accumulation steps", f"accumulation x{ACC}"],
                                 [ACC // 2, ACC * 2, f"{ACC} devices", f"{ACC} GB", f"not {ACC}", ACC + 0.5]),
    "nb08_devices_without_zero": ([DEV, str(DEV), f"{DEV} GPUs", f"{DEV} devices", f"{DEV} replicas", f"{DEV} cards"],
                                  [DEV - 1, DEV * 2, 1, f"{DEV} steps", f"{DEV} GB"]),
    "nb09_mesh_ratio": ([1.99, "1.99", "1.99x", "1.99x less", "1.99 times less", "1.99 x", 1.995, WHOLE / PER_DEVICE,
                         f"{WHOLE}/{PER_DEVICE}", f"{WHOLE / PER_DEVICE:.2f}x", "~1.99x"],
                        [2, 2.0, "2", "2x", "2x less", "2 times less", "2.00x", 1.98, 2.01, 4, 3.97, 0.5,
                         round(PER_DEVICE / WHOLE, 3), "not 1.99", "almost 2", "1.99 GB"]),
    "nb09_key_matches": ([True, "True", "yes", np.bool_(True)], [False, "False", "no", "not true"]),
    "nb09_largest_batch": ([300, "300", "300 samples", "a global batch of 300", "300 examples", 300.0],
                           [296, 298, 150, 304, 8, "300 GPUs", "300 GB", "not 300", "296 samples"]),
}


def test_every_check_is_swept():
    assert sorted(CASES) == sorted(n for n in check.__all__ if n.startswith("nb0"))


@pytest.mark.parametrize("name, answer", [(n, a) for n, (right, _) in CASES.items() for a in right],
                         ids=lambda v: repr(v)[:40])
def test_literal_right_answers_are_accepted(name, answer):
    result = getattr(check, name)(answer)
    assert result and repr(result).startswith("Correct."), (name, answer, result)


@pytest.mark.parametrize("name, answer", [(n, a) for n, (_, wrong) in CASES.items() for a in wrong],
                         ids=lambda v: repr(v)[:40])
def test_wrong_answers_are_refused(name, answer):
    result = getattr(check, name)(answer)
    assert not result and not repr(result).startswith("Correct."), (name, answer, result)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("answer", NOT_A_NUMBER, ids=repr)
def test_nan_and_infinities_are_not_a_number_you_can_have(name, answer):
    result = getattr(check, name)(answer)
    assert not result and repr(result).startswith("Not a number you can have"), (name, answer, result)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("answer", NO_ANSWER, ids=repr)
def test_blank_strings_and_none_are_no_answer(name, answer):
    if name.startswith("nb05_empty_replicas") and answer is None:
        pytest.skip("None reads as 'no replica' there (issue 30): right in b, wrong in a (CASES)")
    result = getattr(check, name)(answer)
    assert not result and "which is no answer" in repr(result), (name, answer, result)


@pytest.mark.parametrize("name", sorted(CASES))
def test_not_answered_yet_is_still_said(name):
    assert repr(getattr(check, name)(...)) == "Not answered yet: replace ... with your answer and run the cell again."


@pytest.mark.parametrize("answer", ["synchronized=False", "unsynchronized", "async", "not synchronized", "no sync",
                                    "non-synchronized", "without sync", "BatchNormalization(synchronized=False)"])
def test_a_negated_choice_is_named_as_such(answer):
    result = check.nb05_identical_copies(answer)
    assert not result and "turns a choice off or negates it" in repr(result)
    assert as_choice(answer, ("synchronized",), aliases={"sync": "synchronized"}) is None


def test_the_issue_s_answers():
    """The user report, answer by answer."""
    for negated in ("synchronized=False", "unsynchronized", "async"):
        assert not check.nb05_identical_copies(negated)
    assert not check.nb08_measured_peak(float("nan"))
    naive = check.nb09_mesh_ratio(2)
    assert not naive and "What stays whole" in repr(naive) and "1.99" not in repr(naive)
    assert check.nb09_largest_batch("300 samples") and check.nb05_pad_samples("56 samples")
    assert check.nb01_physical_behind("CUDA GPU 5") and check.nb01_smi_behind("GPU 7")


def test_wrong_values_keep_their_hints():
    assert "numbers the visible GPUs anew" in repr(check.nb01_physical_behind("GPU 1"))
    assert "share of a full copy" in repr(check.nb09_mesh_ratio(round(PER_DEVICE / WHOLE, 3)))
    assert "DataParallel's 8 devices" in repr(check.nb09_largest_batch("296 samples"))
    assert "at most 300" in repr(check.nb09_largest_batch(304))
    assert "what the last batch already has" in repr(check.nb05_pad_samples("40 samples"))
    assert "reads as a percentage" in repr(check.nb03_bubble(27))
    assert "right amount in bytes" in repr(check.nb03_split_state_gb(GB * 1e9))


def test_the_reader():
    assert read(..., "int", form="f").refusal is not None
    assert read("300 samples", "int", words=("sample",), form="f").value == 300
    assert read("300 samples", "int", form="f").refusal is not None               # a word the check did not allow
    assert read(None, "int_list", none_is_empty=True, form="f").value == []
    assert "which is no answer" in repr(read(None, "int", form="f").refusal)
    assert "Not a number you can have" in repr(read("-inf", "number", form="f").refusal)
    with pytest.raises(ValueError, match="kind must be one of"):
        read(3, "integer", form="f")
    assert as_int("32,768") == 32768 and as_int("1_000") == 1000 and as_int("CUDA GPU 5", words=("cuda", "gpu")) == 5
    assert as_int("5 or 3", words=("or",)) is None                                 # two numbers: which?
    assert as_int(10 ** 30) == 10 ** 30 and as_number("1e999") is None and as_number(float("nan")) is None
    assert as_number("1.99x less", words=("x", "less")) == 1.99 and as_number("almost 2") is None
    assert as_amount("29.5 megabytes", "MB") == 29.5 and as_amount("8.6 GHz", "GB") is None
    assert as_int_list("5,400") == [5, 400] and as_int_list("7 to 10", ranges=True) == [7, 8, 9, 10]
    assert as_int_list("6 & 7") == [6, 7] and as_int_list("GPUs 5 and 4", words=("gpu",)) == [5, 4]
    assert as_device("CUDA GPU 3") == "/device:GPU:3" and as_device(3) is None and as_device("3", number_as="GPU")
    assert as_choice("SplitGPU", ("gpu", "split-gpu")) == "split-gpu" and as_choice("splitgpu", ("split-gpu",)) is None
