"""The exercise checks added to notebooks 01 and 02: right answers in several forms, wrong values, wrong forms."""
import numpy as np
import pytest

from gputrain_kit import check
from gputrain_kit.batching import plan_batches
from gputrain_kit.visibility import example_fastest_first, parse_cuda_visible_devices

NOT_ANSWERED = "Not answered yet"
WRONG_FORM = "Not a form this check reads"


def test_the_answers_are_what_the_kit_computes():
    assert list(parse_cuda_visible_devices("5,4gpu,9,2", 8).visible) == [5, 4]
    assert list(parse_cuda_visible_devices("3", 8, device_order=None, fastest_first=example_fastest_first(8)).smi) == [7]
    assert plan_batches(1438, 96, 3)[-1] == [32, 32, 30]
    assert plan_batches(10, 10, 4) == [[3, 3, 3, 1]]


@pytest.mark.parametrize("name, right, wrong, bad_form", [
    ("nb01_visible_after_drop", [[5, 4], (5, 4), np.array([5, 4]), "5, 4", "[5, 4]"], [[5, 4, 2], [5], [4, 5]],
     [object(), 5.5, "GPU five"]),
    ("nb01_smi_behind", [7, 7.0, np.int64(7), "7"], [3, 6, 2], [object(), "seven", [7], 7.5]),
    ("nb02_last_step_three", [[32, 32, 30], (32, 32, 30), np.array([32, 32, 30]), "32, 32, 30"],
     [[32, 32, 32], [30, 32, 32], [31, 31, 32]], [object(), 94, [32, 32], "thirty"]),
    ("nb02_steps_per_epoch", [4, "4", "4 steps", "4 steps per epoch", "4 steps in one epoch"],
     [3, 5, "5 steps per epoch", "3 steps per epoch"], [object(), "four", "4 steps per replica", [4]]),
    ("nb02_sample_weight", [0.25, "1/4", "25%", np.float32(0.25), np.array(0.25), "0.25"], [0.1, 1 / 8, 1],
     [object(), [0.25], "a quarter"]),
])
def test_new_checks(name, right, wrong, bad_form):
    fn = getattr(check, name)
    for answer in right:
        assert fn(answer), (name, answer, fn(answer))
        assert repr(fn(answer)).startswith("Correct.")
    for answer in wrong:
        result = fn(answer)
        assert not result and repr(result).startswith("Not yet."), (name, answer, result)
    for answer in bad_form:
        result = fn(answer)
        assert not result and WRONG_FORM in repr(result), (name, answer, result)
    assert not fn(...) and NOT_ANSWERED in repr(fn(...))


def test_hints_do_not_give_the_answer_away():
    assert "[5, 4]" not in repr(check.nb01_visible_after_drop([5]))
    assert "7" not in repr(check.nb01_smi_behind(3))
    assert "30" not in repr(check.nb02_last_step_three([32, 32, 32]))
    hint = repr(check.nb02_sample_weight(0.1))
    assert "1/4" not in hint and "0.25" not in hint


@pytest.mark.parametrize("answer", ["48 samples per replica per step", "48 per replica per step", "48 per step",
                                    "48 samples in one step", "48 samples", "48 per replica"])
def test_nb02_per_replica_reads_the_question_s_own_words(answer):
    """The question asks "how many samples does each replica get per step": its own words are an answer."""
    assert check.nb02_per_replica(answer)
    wrong = check.nb02_per_replica(answer.replace("48", "47"))
    assert not wrong and repr(wrong).startswith("Not yet."), wrong
    assert not check.nb02_per_replica("48 steps") and not check.nb02_per_replica("48 steps per replica")
