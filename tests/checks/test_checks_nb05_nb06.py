"""The exercise checks of notebooks 05 and 06: right answers in several forms, wrong values, wrong forms."""
from fractions import Fraction

import numpy as np
import pytest

from gputrain_kit import check
from gputrain_kit.batching import plan_batches
from gputrain_kit.scaling import predict_curve


def _says(verdict, text):
    return text in repr(verdict)


@pytest.mark.parametrize("answer", [[6, 7], (7, 6), np.array([6, 7]), "[6, 7]", "6, 7", {6, 7}])
def test_nb05_empty_replicas_a_reads_every_list_form(answer):
    assert check.nb05_empty_replicas_a(answer)


def test_nb05_empty_replicas_answers_match_the_planner():
    assert [i for i, n in enumerate(plan_batches(1030, 64, 8)[-1]) if n == 0] == [6, 7]
    assert all(n > 0 for n in plan_batches(1000, 96, 8)[-1])
    assert check.nb05_empty_replicas_b([]) and check.nb05_empty_replicas_b("[]") and check.nb05_empty_replicas_b(())
    wrong = check.nb05_empty_replicas_b([7])
    assert not wrong and _says(wrong, "Not yet") and "[]" not in repr(wrong)
    assert _says(check.nb05_empty_replicas_a(6.5), "Give a list")
    # None and 'none' mean none; a bare 0 reads both as "none" and "replica 0" (a reader meant replica 0 and was
    # told "Correct"): a form to correct, as a count is, never a verdict
    assert check.nb05_empty_replicas_b(None) and check.nb05_empty_replicas_b("none")
    for zero in (0, "0", np.int64(0)):
        for ask in (check.nb05_empty_replicas_a, check.nb05_empty_replicas_b):
            assert not ask(zero) and _says(ask(zero), "[] for none or [0] for replica 0")
    assert _says(check.nb05_empty_replicas_a(2), "not how many")
    # counted from 1 is told so; any other wrong list is not (and the hint never holds the answer)
    assert _says(check.nb05_empty_replicas_a([7, 8]), "Counted from 1?")
    assert not _says(check.nb05_empty_replicas_a([5, 6, 7]), "Counted from 1?")
    assert "[6, 7]" not in repr(check.nb05_empty_replicas_a([7, 8]))
    # the split itself, given for the replicas (a reader's likeliest misreading), is told so
    assert _says(check.nb05_empty_replicas_a([1, 1, 1, 1, 1, 1, 0, 0]), "the last step's split itself")
    assert _says(check.nb05_pad_samples(1056), "1056 is the padded size")
    assert "synchronized" not in repr(check.nb05_identical_copies("pad")).lower()     # the hint leaves the name out
    assert check.nb05_identical_copies("SyncBatchNorm") and check.nb05_identical_copies("synchronized batchnorm")
    assert not check.nb05_identical_copies("not synchronized")
    # the other input path's answer (section 1 and the explorer show both): told which path it belongs to
    for ask, other in ((check.nb05_empty_replicas_a, [1, 2, 3, 4, 5, 6, 7]), (check.nb05_empty_replicas_b, [4, 5, 6, 7])):
        assert _says(ask(other), "distribute_datasets_from_function")
    assert "ceil" not in repr(check.nb05_empty_replicas_b([7]))          # the hint no longer is the computation
    assert check.nb05_pad_samples("56 samples") and _says(check.nb05_pad_samples(57), "how many more")


@pytest.mark.parametrize("answer", [56, 56.0, np.int64(56), np.float32(56), "56", " 56 "])
def test_nb05_pad_samples_right_in_any_form(answer):
    assert check.nb05_pad_samples(answer)
    assert -1000 % 96 == 56 and (1000 + 56) % 96 == 0


def test_nb05_pad_samples_wrong_value_form_and_unanswered():
    wrong = check.nb05_pad_samples(96)
    assert not wrong and _says(wrong, "Not yet") and "56" not in repr(wrong)
    for bad in ("fifty-six", [56], 56.5):
        v = check.nb05_pad_samples(bad)
        assert not v and _says(v, "Not a form this check reads") and _says(v, "whole number")
    assert _says(check.nb05_pad_samples(...), "Not answered yet")


def test_nb05_identical_copies_forms():
    assert check.nb05_identical_copies("synchronized") and check.nb05_identical_copies(" 'Synchronized' ")
    assert not check.nb05_identical_copies("pad") and _says(check.nb05_identical_copies("pad"), "Not yet")
    assert _says(check.nb05_identical_copies(3), "Answer 'drop_remainder'")


@pytest.mark.parametrize("answer", [0.825, np.float32(0.825), np.float64(0.825), "0.825", "33/40", Fraction(33, 40),
                                    "82.5%", np.array(0.825)])
def test_nb06_warmup_step_right_in_any_form(answer):
    assert check.nb06_warmup_step(answer)


def test_nb06_warmup_step_matches_the_schedule_and_rejects_wrong_answers():
    from gputrain_kit.lrscaling import warmup_schedule

    assert abs(float(warmup_schedule(0.05, 1.6, 4)(2)) - 0.825) < 1e-6
    for wrong in (1.6, 0.05, 0.4375):
        v = check.nb06_warmup_step(wrong)
        assert not v and _says(v, "Not yet") and "0.825" not in repr(v)
    v = check.nb06_warmup_step([0.825])
    assert not v and _says(v, "Not a form this check reads") and _says(v, "Give a number")
    assert _says(check.nb06_warmup_step(...), "Not answered yet")


def test_nb06_ethernet_efficiency():
    right = predict_curve("VGG-16", "25 Gbit/s Ethernet (servers)", 64, 8, 0.1)[-1].efficiency
    assert 0.5 < right < predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 8, 0.1)[-1].efficiency
    for answer in (round(right, 2), np.float32(right), f"{right:.2f}", f"{100 * right:.0f}%"):
        assert check.nb06_ethernet_efficiency(answer)
    wrong = check.nb06_ethernet_efficiency(0.94)
    assert not wrong and _says(wrong, "Not yet") and f"{right:.2f}" not in repr(wrong)
    for published in (0.68, "68%"):             # Horovod's measurement, printed in section 2: not the model's answer
        copied = check.nb06_ethernet_efficiency(published)
        assert not copied and _says(copied, "Horovod's measured VGG-16 efficiency"), published
    assert not check.nb06_ethernet_efficiency(right + 0.025)
    assert _says(check.nb06_ethernet_efficiency("fast"), "Give a fraction")
    assert _says(check.nb06_ethernet_efficiency(...), "Not answered yet")


def test_nb06_scaled_lr_and_efficiency_forms():
    assert check.nb06_scaled_lr("3.2") and check.nb06_scaled_lr(np.float32(3.2))
    assert check.nb06_scaled_lr("16/5") and not check.nb06_scaled_lr(0.05) and not check.nb06_scaled_lr(0.8)
    assert _says(check.nb06_scaled_lr("fast"), "Give a number")
    assert check.nb06_efficiency("96%") and not check.nb06_efficiency("94%") and not check.nb06_efficiency(0.5)


def test_nb06_a_percentage_without_its_sign_and_two_decimals_are_read_as_meant():
    """A reader answered 96 and 65 (percent, no sign) and got direction hints, and 0.83 for 0.825 and was told to
    rethink the warm-up: a bare percentage of the right value is named as such (as notebook 03's check does), and
    a right value rounded to two decimals is right; a wrong value is still refused."""
    for check_, percent in ((check.nb06_efficiency, 96), (check.nb06_ethernet_efficiency, 65)):
        slip = check_(percent)
        assert not slip and "reads as a percentage" in repr(slip) and f"'{percent}%'" in repr(slip)
        assert "reads as a percentage" not in repr(check_(30))                 # a wrong percentage: a hint
    assert check.nb06_warmup_step(0.83) and check.nb06_warmup_step(0.82) and not check.nb06_warmup_step(0.8)
    assert check.nb06_scaled_lr(3.2) and not check.nb06_scaled_lr(3.21)


def test_nb06_a_learning_rate_written_as_a_percentage_is_refused():
    """'320%' once read as the learning rate 3.2: a learning rate is no percentage."""
    for percentage in ("320%", "320 %", "320 percent"):
        got = check.nb06_scaled_lr(percentage)
        assert not got and "not a percentage" in repr(got), got
    assert check.nb06_scaled_lr("3.2")


def test_nb05_a_fix_written_as_code_is_read_and_the_remainder_is_named():
    """Readers answered exercise 3 as code ('synchronized=True', 'BatchNormalization(synchronized=True)') and were
    told it was not a form; exercise 4's 40 (the remainder) got a hint about a whole extra batch."""
    for right in ("synchronized", "synchronized=True", "BatchNormalization(synchronized=True)",
                  "keras.layers.BatchNormalization(synchronized=True)"):
        assert check.nb05_identical_copies(right), right
    wrong = check.nb05_identical_copies("drop_remainder=True")
    assert not wrong and repr(wrong).startswith("Not yet.")
    assert check.nb05_identical_copies("sync") and repr(check.nb05_identical_copies("batchnorm")).startswith("Not a form")
    remainder = check.nb05_pad_samples(40)
    assert not remainder and "what the last batch already has" in repr(remainder)


@pytest.mark.parametrize("answer", ["6-7", "6 to 7", "replicas 6-7", "replica 6 to 7", "6 and 7"])
def test_nb05_empty_replicas_a_reads_ranges(answer):
    assert check.nb05_empty_replicas_a(answer)


@pytest.mark.parametrize("answer", ["5-7", "0-5", "7-8", "6 to 8"])
def test_nb05_empty_replicas_a_refuses_a_wrong_range(answer):
    result = check.nb05_empty_replicas_a(answer)
    assert not result and repr(result).startswith("Not yet.") and "[6, 7]" not in repr(result)


@pytest.mark.parametrize("answer", ["0 replicas", "zero replicas", "no replicas", "none", "[]"])
def test_nb05_empty_replicas_b_reads_a_count_of_zero_replicas_as_none(answer):
    assert check.nb05_empty_replicas_b(answer)


def test_nb05_empty_replicas_a_count_of_replicas_is_no_list():
    assert not check.nb05_empty_replicas_a("0 replicas")               # none: wrong for exercise 1
    assert repr(check.nb05_empty_replicas_a("0 replicas")).startswith("Not yet.")
    for answer in ("2 replicas", "1 replica"):                          # how many, not which
        assert _says(check.nb05_empty_replicas_a(answer), "not how many")
    assert not check.nb05_empty_replicas_b("replica 0") and not check.nb05_empty_replicas_b("[0]")
    assert _says(check.nb05_empty_replicas_b("0"), "0 reads both")


@pytest.mark.parametrize("answer", ["synchronized, with drop_remainder", "synchronized and drop_remainder",
                                    "drop_remainder and synchronized", "synchronized with repeat",
                                    "synchronized=True with drop_remainder=True", "SyncBatchNorm + padding"])
def test_nb05_identical_copies_reads_the_setting_beside_the_fixed_size_batches(answer):
    """The question says 'With fixed-size batches'; naming them beside 'synchronized' was 'not a form this check
    reads'."""
    assert check.nb05_identical_copies(answer), answer


@pytest.mark.parametrize("answer", ["unsynchronized, with drop_remainder", "not synchronized, drop_remainder",
                                    "synchronized=False with drop_remainder"])
def test_nb05_identical_copies_refuses_the_setting_turned_off_beside_the_batches(answer):
    result = check.nb05_identical_copies(answer)
    assert not result and "negates it" in repr(result)


def test_nb05_identical_copies_two_batch_fixes_are_no_setting():
    assert not check.nb05_identical_copies("pad and drop_remainder")
    assert not check.nb05_identical_copies("drop_remainder with repeat")
