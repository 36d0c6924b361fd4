"""Exercise checks read answers in any equivalent form, say which form they want, and hint without telling."""
from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from gputrain_kit import check
from gputrain_kit.check._common import as_bool, as_choice, as_int, as_int_list, as_number


@pytest.mark.parametrize("answer, expected", [
    (0.25, 0.25), (3, 3.0), (np.float32(0.5), 0.5), (np.int64(7), 7.0), (np.array(2.5), 2.5), ("0.27", 0.27),
    (" 3/11 ", 3 / 11), ("27%", 0.27), (Fraction(1, 4), 0.25), (True, None), ("a lot", None), ([1], None),
    ("1/0", None), (..., None),
])
def test_as_number(answer, expected):
    got = as_number(answer)
    assert (got is None) if expected is None else got == pytest.approx(expected)


def test_as_int_list_and_friends():
    assert as_int_list([6, 7]) == as_int_list((6, 7)) == as_int_list(np.array([6, 7])) == as_int_list("[6, 7]") == [6, 7]
    assert as_int_list("6, 7") == [6, 7] and as_int_list([]) == [] and as_int_list("[]") == []
    assert as_int_list([6.5]) is None and as_int_list("six") is None and as_int_list(6) is None
    # issue 30: a range, a tensor, and "no replica" said as None or 'none'
    assert as_int_list(range(7, 11)) == [7, 8, 9, 10]
    assert as_int_list(None) is None and as_int_list("none") is None                  # a list is asked for
    assert as_int_list(None, none_is_empty=True) == as_int_list(" None ", none_is_empty=True) == []
    assert check.nb05_empty_replicas_b(None) and check.nb05_empty_replicas_b("none")    # "no replica": []

    class Tensor:                       # what a TensorFlow tensor offers: .numpy() and .shape
        def __init__(self, value):
            self.value, self.shape = np.asarray(value), np.asarray(value).shape

        def numpy(self):
            return self.value

    assert as_int_list(Tensor([6, 7])) == [6, 7]
    assert as_number(Tensor(0.25)) == 0.25 and as_int(Tensor(7)) == 7
    assert as_int(7.0) == 7 and as_int("7") == 7 and as_int(7.5) is None
    assert as_choice(" 'B' ", "abc") == "b" and as_choice(2, "abc") is None
    assert as_bool(np.bool_(False)) is False and as_bool("yes") is True and as_bool(0) is None


def test_every_check_handles_not_answered_and_a_wrong_form():
    names = [n for n in check.__all__ if n.startswith("nb0")]
    assert len(names) >= 21
    for name in names:
        func = getattr(check, name)
        assert not func(...) and "Not answered yet" in repr(func(...)), name
        odd = func(object())
        assert not odd and "Not a form this check reads" in repr(odd), name


def test_wrong_values_get_a_hint_not_the_answer():
    wrong = check.nb05_empty_replicas_a([7])
    assert not wrong and repr(wrong).startswith("Not yet.") and "[6, 7]" not in repr(wrong)
    wrong = check.nb03_bubble(0.5)
    assert not wrong and "0.273" not in repr(wrong)
    assert check.nb03_bubble("3/11") and check.nb03_bubble(np.float64(0.2727))
    assert check.nb02_last_step(np.array([36] * 7 + [34])) and check.nb02_last_step(tuple([36] * 7 + [34]))
    assert "list of 8 numbers" in repr(check.nb02_last_step([40, 40]))
