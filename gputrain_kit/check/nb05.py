"""Exercise checks of notebook 05."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, read, verdict

_LIST = "Give a list of replica numbers (0-based), e.g. [2, 3], or [] for none."


def _empty_replicas(n: int, batch: int, replicas: int, via: str = "dataset") -> list[int]:
    from ..batching import plan_batches

    return [i for i, size in enumerate(plan_batches(n, batch, replicas, via=via)[-1]) if size == 0]


def _empty_list(answer: Any, right: list[int], why: str, hint: str, other_path: list[int] | None = None) -> Verdict:
    """A list of replicas ('[6, 7]', '6 and 7', 'replicas 6 and 7'; None, 'none' and [] for none). A bare number is
    refused with the reason: 0 reads both as "no replica" and as "replica 0", and any other number as a count.
    A count said as one ('0 replicas', 'zero replicas': none; '2 replicas': how many, refused with the reason);
    ranges ('6-7', '6 to 7') as the replicas in them."""
    if isinstance(answer, str):
        said = re.fullmatch(r"\s*(\d+|zero|no)\s+replicas?\s*(?:get\s+nothing|are\s+empty)?[\s.]*", answer, re.I)
        if said and said[1].lower() in ("0", "zero", "no") and answer.strip().lower().split()[1] == "replicas":
            answer = []                                 # '0 replicas': none
        elif said and said[1].isdigit():
            return verdict(answer, False, "", "", form="Give which replicas get nothing, as a list (0-based), not "
                           "how many: e.g. [2, 3], or [] for none.")
    if not isinstance(answer, (list, tuple, range, set, frozenset)) and getattr(answer, "ndim", 0) == 0:
        count = read(answer, "int", form=_LIST)         # 2, '2' or np.int64(2): a count, not a list
        if count.refusal is None:
            if count.value == 0:
                return verdict(answer, False, "", "", form="0 reads both as 'no replica' and as 'replica 0': "
                               "answer with a list, [] for none or [0] for replica 0.")
            return verdict(answer, False, "", "", form="Give which replicas get nothing, as a list (0-based), not "
                           "how many: e.g. [2, 3], or [] for none.")
    got = read(answer, "int_list", words=("replica",), none_is_empty=True, ranges=True, form=_LIST)
    if got.refusal is not None:
        return got.refusal
    values = got.value
    if values and right and len(values) > len(right) and [i for i, v in enumerate(values) if v == 0] == right:
        hint = "That is the last step's split itself; which replicas (their positions, from 0) hold 0 samples?"
    elif other_path is not None and sorted(values) == other_path != right:
        hint = ("That is the answer for distribute_datasets_from_function (whole per-replica batches); the question "
                "is about fit, which deals the last step's samples out one replica at a time.")
    elif values and right and sorted(values) == [r + 1 for r in right]:
        hint = f"Counted from 1? Replicas count from 0: the first is replica 0. {hint}"
    return verdict(answer, sorted(values) == right, why, hint)


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


_FIXES = ("drop_remainder", "repeat", "pad", "synchronized")
_FIX_ALIASES = {"sync": "synchronized", "synced": "synchronized", "synchronize": "synchronized",
                "synchronised": "synchronized", "synchronise": "synchronized", "synchronization": "synchronized",
                "syncbatchnorm": "synchronized", "syncbn": "synchronized", "padding": "pad", "padded": "pad",
                "repeated": "repeat", "drop-last": "drop_remainder"}
_FIX_WORDS = ("batch", "batchnorm", "norm", "normalization", "batchnormalization", "bn", "keras", "layers", "layer",
              "the", "use", "true", "with", "setting", "argument", "dataset", "ds")


def _with_fixed_batches(answer: Any) -> Any:
    """'synchronized, with drop_remainder' or 'drop_remainder and synchronized' (the question's fixed-size batches
    named beside the setting) as 'synchronized'; anything else as it is."""
    if not isinstance(answer, str):
        return answer
    said = re.fullmatch(r"\s*(.+?)\s*(?:,\s*(?:and\s+|with\s+|plus\s+)?|\s+(?:and|with|plus)\s+|\s*[+&]\s*)(.+?)\s*",
                        answer, re.I)
    if not said:
        return answer
    parts = [read(part, "choice", choices=_FIXES, aliases=_FIX_ALIASES, words=_FIX_WORDS, form="")
             for part in said.groups()]
    if any(part.refusal is not None for part in parts):
        return answer                    # a part negated ('unsynchronized') or unread: read() says why
    values = sorted(str(part.value) for part in parts)
    if values[1] == "synchronized" and values[0] in ("drop_remainder", "repeat", "pad"):
        return "synchronized"
    return answer


def nb05_identical_copies(answer: Any) -> Verdict:
    """Which fix keeps every replica's moving statistics identical: 'drop_remainder', 'repeat', 'pad' or
    'synchronized'? Read as code too ('synchronized=True', 'BatchNormalization(synchronized=True)') and by its
    other names ('SyncBatchNorm', 'synchronized batchnorm'), also beside the fixed-size batches the question names
    ('synchronized, with drop_remainder'); a setting negated or turned off ('not synchronized',
    'synchronized=False', 'unsynchronized', 'async', 'no sync') is no choice."""
    got = read(_with_fixed_batches(answer), "choice", choices=_FIXES, aliases=_FIX_ALIASES, words=_FIX_WORDS,
               form="Answer 'drop_remainder', 'repeat', 'pad' or 'synchronized'.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value == "synchronized",
                   "Synchronized BatchNormalization computes the statistics over the global batch, "
                   "so every replica writes the same values.",
                   "Look at section 4's table: which row's copies are identical?")


def nb05_pad_samples(answer: Any) -> Verdict:
    """1000 samples padded for a global batch of 96 (section 2's "pad" recipe): how many samples are added?
    ('56 samples' too)"""
    got = read(answer, "int", words=("sample", "example", "padded", "padding", "more", "extra", "added"),
               form="Give a whole number of samples, e.g. 12.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    right = -1000 % 96
    hint = "How many samples does the last batch hold, and how many more does it need to be full?"
    if value >= 96:
        hint = "Pad up to the next multiple of the global batch, not by a whole extra batch."
    if value == 1000 % 96:
        hint = f"{value} samples are what the last batch already has; how many more does it need to be full?"
    elif value == 1000 + right:
        hint = f"{value} is the padded size; how many samples were added to reach it?"
    return verdict(answer, value == right,
                   f"{right}: 1000 = 10 x 96 + 40, and the last batch needs 96 - 40 more samples.", hint)
