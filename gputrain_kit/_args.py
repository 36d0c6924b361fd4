"""Argument checks shared by the public functions: clear messages, no TensorFlow."""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable

#: Longest text of a value quoted in an error message.
SHORT = 80


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type. A TypeError, and a ValueError as well, so code written when the
    kit raised ValueError for every bad argument still catches it."""


def short(value: Any, limit: int = SHORT) -> str:
    """``repr(value)``, or a short description when that is long: an array passed where a number was
    expected must not fill the screen."""
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, (str, bytes)) and getattr(value, "ndim", 1) != 0:
        dtype = getattr(value, "dtype", None)
        text = f"{type(value).__name__} of shape {tuple(shape)}" + (f", dtype {dtype}" if dtype is not None else "")
        return text if len(text) <= limit else text[:limit - 4] + " ..."
    try:
        text = repr(value)
    except Exception:  # pragma: no cover - a broken __repr__
        text = f"<{type(value).__name__}>"
    if len(text) <= limit:
        return text
    size = f", {len(value)} items" if isinstance(value, (list, tuple, dict, set)) else ""
    size = f", {len(value)} characters" if isinstance(value, (str, bytes)) else size
    head = text[:limit - 20].rstrip()
    return f"{head} ... ({type(value).__name__}{size})"


def typed(value: Any) -> str:
    """``short(value)`` with its type, e.g. ``'3' (str)``."""
    text = short(value)
    return text if (" of shape " in text or " ... (" in text) else f"{text} ({type(value).__name__})"


def require_int(func: str, name: str, value: Any, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ArgumentTypeError / ValueError saying what was wrong and what to pass."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and float(value).is_integer():
            example = int(float(value))                # 32.0: the whole number meant
        else:
            example = minimum if minimum is not None else 1
        raise ArgumentTypeError(
            f"{func}: {name} must be a whole number, got {typed(value)}. Pass an int, e.g. {name}={example}.")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{func}: {name} must be at least {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"{func}: {name} must be at most {maximum}, got {value}.")
    return value


def require_bool(func: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise ArgumentTypeError(f"{func}: {name} must be True or False, got {short(value)}.")
    return value


def require_number(func: str, name: str, value: Any, *, allow_zero: bool = False) -> float:
    """Return ``value`` as a float if it is a finite real number above 0 (or at least 0 with ``allow_zero``);
    otherwise raise ArgumentTypeError (not a number) or ValueError (NaN, infinite or out of range), naming the
    argument and what was given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{func}: {name} must be a number, got {short(value)}.")
    if not math.isfinite(float(value)):
        raise ValueError(f"{func}: {name} must be a finite {'non-negative' if allow_zero else 'positive'} number, "
                         f"got {short(value)}; pass a number, not NaN or infinity (check what it was computed from).")
    if float(value) < 0 or (float(value) == 0 and not allow_zero):
        raise ValueError(f"{func}: {name} must be a {'non-negative' if allow_zero else 'positive'} number, "
                         f"got {short(value)}.")
    return float(value)


def require_str(func: str, name: str, value: Any) -> str:
    """Return ``value`` if it is a string, or raise ArgumentTypeError naming the argument and what was given."""
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{func}: {name} must be a string, got {short(value)}.")
    return value


def require_choice(func: str, name: str, value: Any, choices: Iterable[Any]) -> Any:
    choices = tuple(choices)
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{func}: {name} must be one of {options}, got {short(value)}.")
    return value


def require_fraction(func: str, name: str, value: Any, *, allow_zero: bool = True) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{func}: {name} must be a number between 0 and 1, got {short(value)}.")
    value = float(value)
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value < 1):
        bound = "0 <=" if allow_zero else "0 <"
        raise ValueError(f"{func}: {name} must satisfy {bound} {name} < 1, got {value}.")
    return value
