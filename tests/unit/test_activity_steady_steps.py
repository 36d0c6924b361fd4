"""DeviceActivity.steady_window keeps the steps (review of notebook 06, ninth read): in the committed timeline of
the fast pipeline a pause before the last of 6 recorded steps was the longest, and the cut at it left one tick of
the 6 steps and an empty input row. A cut may leave out the set-up and the first step, never more."""
from __future__ import annotations

import pytest

from gputrain_kit.activity import DeviceActivity

NAMES = ["sequential/dense/MatMul:MatMul", "sequential/dense/Relu:Relu", "sequential/dense_1/MatMul:MatMul",
         "gradient_tape/sequential/dense_1/MatMul/MatMul:MatMul", "gradient_tape/sequential/dense/MatMul:MatMul",
         "sgd/update/AssignSubVariableOp:AssignSubVariableOp"]


def _steps(starts, op=1e-4):
    """One step of the 6 ops above at each start, op after op."""
    return [("/device:CPU:0", t + i * op, t + (i + 0.8) * op, name) for t in starts for i, name in enumerate(NAMES)]


def _activity(intervals, inputs=()):
    intervals = sorted(intervals, key=lambda i: i[1])
    return DeviceActivity(devices=("/device:CPU:0",), intervals=intervals, input_intervals=list(inputs),
                          functions=["train"] * len(intervals), _done=True)


def test_a_pause_before_the_last_step_cuts_nothing():
    """6 steps 1 ms apart, then the machine stalls 8 ms before the last: the pause is 60% of the window."""
    starts = [0.000, 0.001, 0.002, 0.003, 0.004, 0.012]
    activity = _activity(_steps(starts), inputs=[(s - 0.0004, s - 0.0001, "tf.data") for s in starts])
    lo, hi, cut = activity.steady_window()
    assert (lo, cut) == (0.0, False) and hi == pytest.approx(0.012 + 5.8e-4)
    assert sum(lo <= s for _, s, _, _ in activity.intervals) == 36          # all 6 steps are in the window


def test_a_pause_after_the_first_step_is_still_cut():
    """The first step's set-up and wait (tracing, the input pipeline's warm-up): leaving out 1 of 6 steps is allowed."""
    starts = [0.000, 0.010, 0.011, 0.012, 0.013, 0.014]
    lo, hi, cut = _activity(_steps(starts)).steady_window()
    assert cut and lo == pytest.approx(0.010)


@pytest.mark.parametrize("late", [2, 3, 4])
def test_a_pause_in_the_middle_cuts_nothing_either(late):
    starts = [0.001 * k + (0.008 if k >= late else 0.0) for k in range(6)]
    lo, _, cut = _activity(_steps(starts)).steady_window()
    assert (lo, cut) == (0.0, False)
