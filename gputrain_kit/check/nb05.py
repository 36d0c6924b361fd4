"""Exercise checks of notebook 05."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_choice, as_int, as_int_list, verdict

_LIST = "Give a list of replica numbers (0-based), e.g. [2, 3], or [] for none."


def _empty_replicas(n: int, batch: int, replicas: int, via: str = "dataset") -> list[int]:
    from ..batching import plan_batches

    return [i for i, size in enumerate(plan_batches(n, batch, replicas, via=via)[-1]) if size == 0]


def _empty_list(answer: Any, right: list[int], why: str, hint: str, other_path: list[int] | None = None) -> Verdict:
    """A list of replicas. A bare number is refused with the reason: 0 reads both as "no replica" and as
    "replica 0", and any other number as a count."""
    count = as_int(answer) if not isinstance(answer, (list, tuple, range)) else None
    if count is not None:                # '2' as a string is a count too, as 2 is
        answer = count if not (isinstance(answer, str) and answer.strip() == "0") else answer
    if count is not None and not isinstance(answer, str) or isinstance(answer, str) and answer.strip() == "0":
        if count == 0 or isinstance(answer, str):
            return verdict(answer, False, "", "", form="0 reads both as 'no replica' and as 'replica 0': answer "
                           "with a list, [] for none or [0] for replica 0.")
        return verdict(answer, False, "", "", form="Give which replicas get nothing, as a list (0-based), not how "
                       "many: e.g. [2, 3], or [] for none.")
    values = as_int_list(answer, none_is_empty=True)
    if values and right and len(values) > len(right) and [i for i, v in enumerate(values) if v == 0] == right:
        hint = "That is the last step's split itself; which replicas (their positions, from 0) hold 0 samples?"
    elif values is not None and other_path is not None and sorted(values) == other_path != right:
        hint = ("That is the answer for distribute_datasets_from_function (whole per-replica batches); the question "
                "is about fit, which deals the last step's samples out one replica at a time.")
    elif values and right and sorted(values) == [r + 1 for r in right]:
        hint = f"Counted from 1? Replicas count from 0: the first is replica 0. {hint}"
    return verdict(answer, values is not None and sorted(values) == right, why, hint,
                   form=None if values is not None else _LIST)


def nb05_empty_replicas_a(answer: Any) -> Verdict:
    """1030 samples, global batch 64, 8 replicas: which replicas get nothing in the last step? (a list)"""
    right = _empty_replicas(1030, 64, 8)
    return _empty_list(answer, right, f"{right}: the last 6 samples go 1 per replica to replicas 0-5.",
                       "How many samples does the last step hold, and how does fit deal them out to 8 replicas "
                       "(section 1)?", _empty_replicas(1030, 64, 8, "function"))


def nb05_empty_replicas_b(answer: Any) -> Verdict:
    """1000 samples, global batch 96, 8 replicas: which replicas get nothing in the last step? (a list)"""
    right = _empty_replicas(1000, 96, 8)
    return _empty_list(answer, right,
                       f"{right or 'none'}: the last 40 samples split 5 per replica, so every replica gets data.",
                       "How many samples does the last step hold, and are there enough for fit to give each of the "
                       "8 replicas at least one?", _empty_replicas(1000, 96, 8, "function"))


def nb05_identical_copies(answer: Any) -> Verdict:
    """Which fix keeps every replica's moving statistics identical: 'drop_remainder', 'repeat', 'pad' or
    'synchronized'?"""
    import re

    if isinstance(answer, str):      # the argument as written in code: 'synchronized=True', 'drop_remainder=True',
        # 'BatchNormalization(synchronized=True)'

        written = re.fullmatch(r"\s*(?:(?:keras\.layers\.)?BatchNormalization\()?\s*(\w+)\s*=\s*True\s*\)?\s*",
                               answer.strip("'\""))
        answer = written.group(1) if written else answer
    if isinstance(answer, str) and "sync" in answer.lower() and not re.search(r"\b(not?|without)\b", answer.lower()):
        answer = "synchronized"                      # 'synchronized batchnorm', 'SyncBatchNorm'; not 'not synchronized'
    choice = as_choice(answer, ("drop_remainder", "repeat", "pad", "synchronized"))
    return verdict(answer, choice == "synchronized",
                   "Synchronized BatchNormalization computes the statistics over the global batch, "
                   "so every replica writes the same values.", "Look at section 4's table: which row's copies are identical?",
                   form=None if choice is not None else "Answer 'drop_remainder', 'repeat', 'pad' or 'synchronized'.")


def nb05_pad_samples(answer: Any) -> Verdict:
    """1000 samples padded for a global batch of 96 (section 2's "pad" recipe): how many samples are added?"""
    right = -1000 % 96
    value = as_int(answer, units=("sample", "samples"))
    hint = "How many samples does the last batch hold, and how many more does it need to be full?"
    if value is not None and value >= 96:
        hint = "Pad up to the next multiple of the global batch, not by a whole extra batch."
    if value == 1000 % 96:
        hint = f"{value} samples are what the last batch already has; how many more does it need to be full?"
    elif value == 1000 + right:
        hint = f"{value} is the padded size; how many samples were added to reach it?"
    return verdict(answer, value == right,
                   f"{right}: 1000 = 10 x 96 + 40, and the last batch needs 96 - 40 more samples.", hint,
                   form=None if value is not None else "Give a whole number of samples, e.g. 12.")
