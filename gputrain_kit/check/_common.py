"""What every exercise check shares: the Verdict, and answers read in any equivalent form.

A learner may answer ``0.27``, ``np.float32(0.27)``, ``"0.27"`` or ``"3/11"``; a list as a tuple, a NumPy
array or ``"[6, 7]"``. The readers below accept those forms and return None for anything else, so a check
can say *which form* it wants instead of calling a right value wrong.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Iterable


@dataclass(frozen=True)
class Verdict:
    correct: bool
    message: str

    def __bool__(self) -> bool:
        return self.correct

    def __repr__(self) -> str:
        return self.message


class Slip(str):
    """A ``form`` message for the right amount in another unit (bytes for GB, 27 for 27%): the verdict then
    says "Check the unit", not "Not a form this check reads"."""


def verdict(answer: Any, correct: bool, right: str, hint: str, *, form: str | None = None) -> Verdict:
    """Not answered / correct / wrong form (``form`` says what to give; a ``Slip``: the right amount in another
    unit) / wrong value (``hint``)."""
    if answer is Ellipsis:
        return Verdict(False, "Not answered yet: replace ... with your answer and run the cell again.")
    if correct:
        return Verdict(True, f"Correct. {right}")
    if isinstance(form, Slip):
        return Verdict(False, f"Check the unit: got {_short(answer)}. {form}")
    if form is not None:
        return Verdict(False, f"Not a form this check reads: got {_short(answer)}. {form}")
    return Verdict(False, f"Not yet. {hint}")


def _short(answer: Any, limit: int = 60) -> str:
    text = repr(answer)
    return text if len(text) <= limit else text[:limit - 4] + " ..."


def as_number(answer: Any) -> float | None:
    """A real number from an int, float, NumPy scalar or 0-d array, Fraction, or a string such as
    '0.27', '27%' or '3/11'; None otherwise (booleans are not numbers here)."""
    if isinstance(answer, bool) or answer is Ellipsis:
        return None
    if isinstance(answer, numbers.Real):
        return float(answer)
    if hasattr(answer, "numpy") and getattr(answer, "shape", None) == ():     # a TensorFlow scalar
        return as_number(answer.numpy())
    if hasattr(answer, "shape") and getattr(answer, "shape", None) == () and hasattr(answer, "item"):
        return as_number(answer.item())
    if isinstance(answer, str):
        text = answer.strip().replace("_", "")
        try:
            if text.endswith("%"):
                return float(text[:-1]) / 100
            return float(Fraction(text.replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            return None
    return None


_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}


def as_amount(answer: Any, unit: str) -> float | None:
    """An amount of memory in ``unit`` ("MB" or "GB", decimal): a bare number is taken to be in ``unit``; a
    string may name its own unit ('8.6 GB', '8 GiB', '8.6e9 bytes', '60MB'), converted. None otherwise."""
    import re

    scale = _UNITS[unit.lower()]
    if isinstance(answer, str):
        match = re.fullmatch(r"\s*([-+0-9._eE/]+)\s*([A-Za-z]+)\s*", answer.strip("'\""))
        if match and match.group(2).lower() in _UNITS:
            value = as_number(match.group(1))
            return None if value is None else value * _UNITS[match.group(2).lower()] / scale
    return as_number(answer)


def percent_slip(value: float | None, right: float, tolerance: float) -> str | None:
    """The message for a bare number that is the right fraction written as a percentage (96 for 0.96); None when
    it is not such a slip."""
    if value is None or not 1 < value <= 100 or abs(value / 100 - right) >= tolerance:
        return None
    return Slip(f"{value:g} reads as a percentage: give a fraction between 0 and 1, such as {value / 100:g}, or a "
                f"string with the sign, such as '{value:g}%'.")


def unit_slip(value: float, right: float, unit: str, tolerance: float) -> str | None:
    """The message for a bare number that is the right amount in bytes (or, where the tolerance tells them
    apart, in GiB/MiB) instead of ``unit``; None when it is not such a slip."""
    scale = _UNITS[unit.lower()]
    slips = [("bytes", scale)]
    if unit.lower() == "mb":
        slips.append(("GB", scale / _UNITS["gb"]))     # 0.0295 for 29.5 MB: the right amount in GB
    binary = unit[0].lower() + "ib"
    if tolerance < 0.03:                         # GiB and GB differ by 7%, MiB and MB by 5%
        slips.append((unit[0] + "iB", scale / _UNITS[binary]))
    for name, factor in slips:
        if abs(value - right * factor) <= tolerance * right * factor:
            return Slip((f"{value:g} is the right amount in {name}, but the question asks for {unit} (1 {unit} = "
                         f"{scale:.0e} bytes); say the unit when you use another: '{value:g} {name}'.")
                        .replace("e+0", "e"))
    return None


def as_int(answer: Any, *, units: tuple[str, ...] = ()) -> int | None:
    """A whole number from any form ``as_number`` reads (7, 7.0, np.int64(7), '7'); None otherwise. ``units``: words
    a string may end with ('4 devices' where units=('device', 'devices'))."""
    if isinstance(answer, str) and units:
        words = answer.split()
        if len(words) == 2 and words[1].lower() in units:
            answer = words[0]
    value = as_number(answer)
    return int(value) if value is not None and float(value).is_integer() else None


def as_int_list(answer: Any, *, none_is_empty: bool = False) -> list[int] | None:
    """A list of whole numbers from a list, tuple, set, range, NumPy array or TensorFlow tensor, or a string like
    '[6, 7]' or '6, 7'. ``none_is_empty``: where "no item" is an answer (no replica goes empty), None and 'none'
    read as []."""
    if none_is_empty and (answer is None or (isinstance(answer, str) and answer.strip().lower() in ("none", "no"))):
        return []
    if isinstance(answer, range):
        return list(answer)
    if hasattr(answer, "numpy") and not isinstance(answer, (str, bytes)):   # a TensorFlow tensor
        answer = answer.numpy()
    if isinstance(answer, str):
        text = answer.strip().strip("[]()")
        items: Iterable[Any] = [t for t in text.replace(",", " ").split()] if text else []
    elif hasattr(answer, "tolist") and not isinstance(answer, (str, bytes)):
        items = answer.tolist()
        if not isinstance(items, list):
            return None
    elif isinstance(answer, (list, tuple, set, frozenset)):
        items = sorted(answer) if isinstance(answer, (set, frozenset)) else answer
    else:
        return None
    values = [as_int(item) for item in items]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


def as_choice(answer: Any, choices: Iterable[str]) -> str | None:
    """One of ``choices`` from a string, ignoring case, quotes and how words are joined ('B', ' b ', "'b'",
    'split_gpu' for 'split-gpu'); None otherwise."""
    if not isinstance(answer, str):
        return None
    import re

    def plain(text: str) -> str:                 # 'split_gpu', 'Split GPU' and 'split-gpu' read alike
        return re.sub(r"[\s_-]+", "-", text.strip().strip("'\"").strip().lower())

    for choice in choices:
        if plain(answer) == plain(choice):
            return choice
    return None


def as_bool(answer: Any) -> bool | None:
    """True/False from a bool, NumPy bool, or 'true'/'false'/'yes'/'no'; None otherwise."""
    if isinstance(answer, bool):
        return answer
    if type(answer).__name__ in ("bool_", "bool") and hasattr(answer, "item"):
        return bool(answer.item())
    if isinstance(answer, str):
        text = answer.strip().lower()
        if text in ("true", "yes"):
            return True
        if text in ("false", "no"):
            return False
    return None


def norm_device(name: str) -> str:
    """An answer's device name, compared case-blind: 'GPU:1', '/gpu:1' and '/device:GPU:1' -> 'gpu:1'."""
    from ..placement import normalize_device

    return (normalize_device(name).removeprefix("/device:") or name.strip().lstrip("/")).lower()
