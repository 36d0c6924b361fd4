"""What every exercise check shares: the Verdict, and the one answer reader, ``read``.

``read(answer, kind, form=..., ...)`` returns a ``Reading``: the answer in the form the check compares
(``.value``), or the verdict for one that cannot be judged (``.refusal``): ``...`` (not answered yet); None, ''
or blanks (no answer; None is "none" only where ``none_is_empty`` says so); NaN, an infinity or a number too
large for a float, anywhere in the answer (not a number you can have); a negated choice ('not synchronized',
'synchronized=False', 'unsynchronized', 'async', 'no sync'); any other form (``form`` says which to give). Each
kind reads every equivalent form (quotes and blanks around a string never count), as its reader below says:
"number" (``as_number``: 0.27, '3/11', '27%', '1.99x less'), "int" (``as_int``: 7.0, '300 samples', 'CUDA GPU 5'),
"amount" (``as_amount``: '8.6 GB', '8 GiB'), "int_list" (``as_int_list``: (6, 7), '6 and 7', '7 to 10'), "bool"
(``as_bool``), "choice" (``as_choice``: 'Split GPU', 'BatchNormalization(synchronized=True)'), "device"
(``as_device``: 'GPU 3'), "text" (a non-empty string) and "mapping" (``as_mapping``: a dict, JSON or Python).
A number may stand among the words a check allows (``words``: 'sample' for '300 samples', its plural too),
'about' and 'exactly' everywhere; never 'not' or 'almost', which change what it says.
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Iterable


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
    unit) / wrong value (``hint``). NaN, infinities and blank strings are never correct, whatever a check
    computed from them (``read`` refuses them first, with their own sentence)."""
    if answer is Ellipsis:
        return Verdict(False, "Not answered yet: replace ... with your answer and run the cell again.")
    if correct and not _blank(answer) and not _non_finite(answer):
        return Verdict(True, f"Correct. {right}")
    if isinstance(form, Slip):
        return Verdict(False, f"Check the unit: got {_short(answer)}. {form}")
    if form is not None:
        return Verdict(False, f"Not a form this check reads: got {_short(answer)}. {form}")
    return Verdict(False, f"Not yet. {hint}")


def _short(answer: Any, limit: int = 60) -> str:
    text = repr(answer)
    return text if len(text) <= limit else text[:limit - 4] + " ..."


@dataclass(frozen=True)
class Reading:
    """An answer read once: ``value`` in the form the check compares, or ``refusal``, the verdict to return when
    the answer cannot be judged (not answered, no answer, not a number you can have, a negated choice, another
    form). Test ``refusal is not None`` (a Verdict that refuses is falsy):

        got = read(answer, "int", words=("sample",), form="Give a whole number of samples, e.g. 12.")
        if got.refusal is not None:
            return got.refusal
        return verdict(answer, got.value == right, ...)
    """
    value: Any = None
    refusal: Verdict | None = None


_NEGATED: Any = object()       # what a choice turned off reads as: 'not synchronized', 'synchronized=False', 'async'
_KINDS = ("number", "int", "amount", "int_list", "bool", "choice", "device", "text", "mapping")


def read(answer: Any, kind: str, *, form: str, words: Iterable[str] = (), choices: Iterable[str] = (),
         aliases: dict[str, str] | None = None, unit: str = "GB", none_is_empty: bool = False,
         ranges: bool = False, number_as: str | None = None) -> Reading:
    """Read ``answer`` as ``kind`` (see the module's docstring for the kinds and the forms each reads); ``form``:
    the sentence that says which form to give, e.g. "Give a whole number, e.g. 3."."""
    if kind not in _KINDS:
        raise ValueError(f"read: kind must be one of {_KINDS}, got {kind!r}.")
    if answer is Ellipsis:
        return Reading(refusal=verdict(answer, False, "", ""))
    if answer is None and not none_is_empty or _blank(answer):
        return Reading(refusal=Verdict(False, f"Not a form this check reads: got {_short(answer)}, which is no "
                                              f"answer: write yours in its place. {form}"))
    if _non_finite(answer):
        return Reading(refusal=Verdict(False, f"Not a number you can have: got {_short(answer)}; no answer is NaN "
                                              f"or infinite. {form}"))
    words = tuple(words)
    readers: dict[str, Callable[[], Any]] = {
        "number": lambda: as_number(answer, words=words), "int": lambda: as_int(answer, words=words),
        "amount": lambda: as_amount(answer, unit), "bool": lambda: as_bool(answer),
        "int_list": lambda: as_int_list(answer, none_is_empty=none_is_empty, words=words, ranges=ranges),
        "choice": lambda: _choice(answer, tuple(choices), aliases or {}, words),
        "device": lambda: as_device(answer, number_as=number_as), "mapping": lambda: as_mapping(answer),
        "text": lambda: _unquote(answer) if isinstance(answer, str) else None}
    value = readers[kind]()
    if value is _NEGATED:
        return Reading(refusal=Verdict(False, f"Not a form this check reads: got {_short(answer)}, which turns a "
                                              f"choice off or negates it: name the one you choose. {form}"))
    if value is None:
        return Reading(refusal=verdict(answer, False, "", "", form=form))
    return Reading(value=value)


def _scalar(answer: Any) -> Any:
    """A NumPy or TensorFlow 0-d value as the Python value it holds; anything else as it is."""
    if isinstance(answer, (str, bytes)):
        return str(answer) if isinstance(answer, str) else answer
    if hasattr(answer, "numpy") and getattr(answer, "shape", None) == ():      # a TensorFlow scalar
        answer = answer.numpy()
    if getattr(answer, "shape", None) == () and hasattr(answer, "item"):       # a NumPy scalar or 0-d array
        answer = answer.item()
    return answer


def _unquote(text: str) -> str:
    """A string answer without its blanks and outer quotes or backticks: " '300' " -> '300'."""
    text = text.strip()
    while len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        text = text[1:-1].strip()
    return text


def _blank(answer: Any) -> bool:
    """'' or a string of blanks (or of quotes around nothing)."""
    return isinstance(answer, str) and not _unquote(answer)


_NON_FINITE_WORDS = {"nan", "inf", "infinity", "infinite", "∞"}


def _non_finite(answer: Any) -> bool:
    """NaN or an infinity (or a number too large for a float), as a number, a NumPy or TensorFlow value, a
    string ('nan', '-inf', '1e999', 'inf samples') or anywhere inside a list, tuple or array."""
    answer = _scalar(answer)
    if isinstance(answer, bool):
        return False
    if isinstance(answer, (numbers.Real, Decimal)):
        try:
            return not math.isfinite(float(answer))
        except OverflowError:
            return True
    if isinstance(answer, complex):
        return not (math.isfinite(answer.real) and math.isfinite(answer.imag))
    if isinstance(answer, str):
        text = _unquote(answer).lower()
        if any(word.strip("+-") in _NON_FINITE_WORDS for word in re.findall(r"[+-]?[^\W\d_]+|∞", text)):
            return True
        values = [_number_value(m.group(0)) for m in _NUMBER.finditer(text)]
        return any(value is not None and _float(value) is None for value in values)
    if isinstance(answer, (list, tuple, set, frozenset)):
        return any(_non_finite(item) for item in answer)
    if hasattr(answer, "tolist") and getattr(answer, "shape", None) not in (None, ()):
        try:
            return _non_finite(answer.tolist())
        except (TypeError, ValueError):
            return False
    if hasattr(answer, "numpy") and getattr(answer, "shape", None) not in (None, ()):
        return _non_finite(answer.numpy())
    return False


# One number as written: a sign, digits (grouped by commas in threes, or joined by '_'), a decimal part, an
# exponent, a fraction's denominator, a percent sign.
_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
                     r"(?:\s*/\s*\d[\d_]*)?(?:\s*%)?")
_TOKEN = re.compile(rf"(?P<number>{_NUMBER.pattern})|(?P<word>[^\W\d_]+)|(?P<mark>\S)")
# Words any number may stand among ('about 0.27', 'exactly 300'), and marks ('~300', 'GPU #7', 'GPU:5', a full
# stop). Never 'not', 'no', 'almost', 'under' or 'over': they change what the number says.
_FILLER = {"about", "approximately", "approx", "roughly", "around", "exactly", "circa", "ca"}
_MARKS = set("~≈=#:/.,;!-'’()")


def _number_value(text: str) -> Fraction | None:
    """The exact value of one number as written ('32,768', '3 / 11', '27%', '1e3'); None if it is none."""
    text = text.replace(",", "").replace("_", "").replace(" ", "")
    percent = text.endswith("%")
    try:
        value = Fraction(text.rstrip("%"))
    except (ValueError, ZeroDivisionError):
        return None
    return value / 100 if percent else value


def _allowed(words: Iterable[str]) -> set[str]:
    """The words a check allows around a number, with their plurals ('sample': 'samples'; 'batch': 'batches'),
    split where they have hyphens ('nvidia-smi': 'nvidia', 'smi')."""
    out = set(_FILLER)
    for word in words:
        for part in re.findall(r"[^\W_]+", word.lower()):
            out.update((part, part + "s", part + "es"))
    return out


def _exact(answer: Any, words: Iterable[str] = (), percent: bool = True) -> Fraction | float | None:
    """The number an answer holds: exact (a Fraction) for ints, Fractions and strings, a float for floats; None
    when it holds none, or more than one, or a word the check does not allow (``words``), or (``percent`` False)
    a percentage: '0%' is no count."""
    answer = _scalar(answer)
    if isinstance(answer, bool) or answer is Ellipsis:
        return None
    if isinstance(answer, numbers.Rational):
        return Fraction(int(answer.numerator), int(answer.denominator))
    if isinstance(answer, (numbers.Real, Decimal)):
        return float(answer)
    if not isinstance(answer, str):
        return None
    text = _unquote(answer).lower().replace("×", "x").replace("−", "-")
    text = re.sub(r"\s*\b(?:percent|per cent)\b", "%", text)           # '96 percent', as said aloud
    if not percent and "%" in text:
        return None
    whole = _number_value(text) if _NUMBER.fullmatch(text) else None
    if whole is not None:
        return whole
    found = _numbers_among(text, _allowed(words), _MARKS)
    return _number_value(found[0]) if found is not None and len(found) == 1 else None


def _numbers_among(text: str, allowed: set[str], marks: set[str] | str) -> list[str] | None:
    """The numbers a string holds, as written, where every other word is ``allowed`` and every other sign is
    one of ``marks``; None otherwise ('not 300', '300 GPUs' where GPUs are not allowed)."""
    found, marks = [], set(marks)
    for token in _TOKEN.finditer(text):
        if token.group("number") is not None:
            found.append(token.group("number"))
        elif (token.group("word") or "") not in allowed and (token.group("mark") or "") not in marks:
            return None
    return found


def _float(value: Fraction | float | None) -> float | None:
    try:
        number = None if value is None else float(value)
        return number if number is not None and math.isfinite(number) else None
    except OverflowError:                        # a Fraction too large for a float: '1e999'
        return None


def as_number(answer: Any, *, words: Iterable[str] = ()) -> float | None:
    """A real number from an int, float, NumPy scalar or 0-d array, TensorFlow scalar, Fraction, Decimal, or a
    string such as '0.27', '27%', '3/11' or, among the words ``words`` allows, '1.99x less'; None otherwise
    (booleans, NaN and infinities are not numbers here: ``read`` says why)."""
    return _float(_exact(answer, words))


def as_int(answer: Any, *, words: Iterable[str] = ()) -> int | None:
    """A whole number from any form ``as_number`` reads but a percentage (7, 7.0, np.int64(7), '7', '16/2'); None
    otherwise.
    ``words``: words a string may hold around it ('300 samples' where words=('sample',), 'CUDA GPU 5' where
    words=('cuda', 'gpu'))."""
    value = _exact(answer, words, percent=False)
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    return int(value) if value is not None and value.denominator == 1 else None


_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
          "kib": 2 ** 10, "mib": 2 ** 20, "gib": 2 ** 30, "tib": 2 ** 40}
_UNIT_WORDS = {"kilobyte": "kb", "megabyte": "mb", "gigabyte": "gb", "terabyte": "tb", "kibibyte": "kib",
               "mebibyte": "mib", "gibibyte": "gib", "tebibyte": "tib"}


def as_amount(answer: Any, unit: str) -> float | None:
    """An amount of memory in ``unit`` ("MB" or "GB", decimal): a bare number is taken to be in ``unit``; a
    string may name its own unit ('8.6 GB', '8 GiB', '8.6e9 bytes', '60MB', '29.5 megabytes'), converted. None
    otherwise (a unit that is not one of memory, such as '8.6 GHz', too)."""
    scale = _UNITS[unit.lower()]
    if isinstance(answer, str):
        text = _unquote(answer).lower()
        match = re.fullmatch(r"(.*?\d\.?)\s*([a-z]+)\s*\.?", text)
        if match:
            name = match.group(2)
            name = _UNIT_WORDS.get(name.removesuffix("s"), name)
            if name in _UNITS:
                value = as_number(match.group(1))
                return None if value is None else value * _UNITS[name] / scale
    return as_number(answer)


def as_int_list(answer: Any, *, none_is_empty: bool = False, words: Iterable[str] = (),
                ranges: bool = False) -> list[int] | None:
    """A list of whole numbers from a list, tuple, set, range, NumPy array or TensorFlow tensor, or a string like
    '[6, 7]', '6, 7' or '6 and 7' (among the words ``words`` allows: 'GPUs 5 and 4'). ``none_is_empty``: where "no
    item" is an answer (no replica goes empty), None, 'none' and 'no replica' read as []. ``ranges``: '7 to 10'
    and '7-10' read as [7, 8, 9, 10]."""
    if none_is_empty and (answer is None or isinstance(answer, str) and re.sub(r"\s+", " ", _unquote(answer).lower())
                          in ("none", "no", "none of them", "no replica", "no replicas", "nothing")):
        return []
    if isinstance(answer, range):
        return list(answer)
    if hasattr(answer, "numpy") and not isinstance(answer, (str, bytes)):   # a TensorFlow tensor
        answer = answer.numpy()
    items: Iterable[Any]
    if isinstance(answer, str):
        return _int_list_text(answer, words, ranges)
    if hasattr(answer, "tolist") and not isinstance(answer, (str, bytes)):
        items = answer.tolist()
        if not isinstance(items, list):
            return None
    elif isinstance(answer, (list, tuple, set, frozenset)):
        items = sorted(answer) if isinstance(answer, (set, frozenset)) else answer
    else:
        return None
    values = [as_int(item, words=words) for item in items]
    return None if any(v is None for v in values) else [v for v in values if v is not None]


#: '7 to 10', '7-10', '7..10', '7 through 10'
_RANGE = re.compile(r"(\d+)\s*(?:-|–|\.\.|\bto\b|\bthrough\b)\s*(\d+)")


def _int_list_text(text: str, words: Iterable[str], ranges: bool) -> list[int] | None:
    text = _unquote(text).lower().replace(",", ", ")          # a comma separates items: '5,400' is [5, 400]
    text = re.sub(r"^[\[({]\s*|\s*[\])}]$", "", text)
    if ranges:
        if any(int(m.group(1)) > int(m.group(2)) for m in _RANGE.finditer(text)):
            return None               # '10-7': a range written downwards is not a form this reads (nor 10 and -7)
        text = _RANGE.sub(lambda m: " ".join(str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1)), text)
    found = _numbers_among(text, _allowed(tuple(words) + ("and",)) - _FILLER, ",;:&")
    values = [as_int(number) for number in found or []]
    return None if found is None or None in values else [v for v in values if v is not None]


def as_bool(answer: Any) -> bool | None:
    """True/False from a bool, NumPy bool, or 'true'/'false'/'yes'/'no' (quoted or not); None otherwise."""
    if isinstance(answer, bool):
        return answer
    if type(answer).__name__ in ("bool_", "bool") and hasattr(answer, "item"):
        return bool(answer.item())
    if isinstance(answer, str):
        text = _unquote(answer).lower().rstrip(".!")
        if text in ("true", "yes"):
            return True
        if text in ("false", "no"):
            return False
    return None


# Words that turn a choice off: 'not synchronized', 'no sync', 'synchronized=False', 'without sync', 'sync off'.
_NEGATING = {"not", "no", "non", "never", "without", "don", "doesn", "isn", "false", "off", "disable", "disabled",
             "none", "nope", "neither", "nor"}
_NEGATING_PREFIXES = ("un", "non", "de", "dis", "a", "in", "anti")


def _words_of(text: str) -> list[str]:
    """A string's words, lower case, split where they are joined by anything or by case: 'SyncBatchNorm' ->
    ['sync', 'batch', 'norm']; 'split_gpu' -> ['split', 'gpu']."""
    parts = re.findall(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+", text)
    return [p.lower() for p in parts]


def _code_form(text: str) -> Any:
    """A choice written as code, as the words it names: 'synchronized=True' and
    'keras.layers.BatchNormalization(synchronized=True)' -> 'synchronized'; 'ds.repeat()' -> 'repeat';
    "make_dataset('pad')" -> 'pad'; 'synchronized=False' -> _NEGATED. Anything else as it is."""
    call = re.fullmatch(r"(?:[\w.]+\.)?(\w+)\s*\((.*)\)", text)
    if call:
        name, args = call.group(1), call.group(2).strip()
        if not args:
            return name
        quoted = re.fullmatch(r"[\"'](\w[\w\s-]*)[\"']", args)
        if quoted:
            return quoted.group(1)
        text = args
    keyword = re.fullmatch(r"(\w+)\s*=\s*(\w+)", text)
    if keyword and keyword.group(2).lower() in ("true", "1", "yes", "on"):
        return keyword.group(1)
    if keyword and keyword.group(2).lower() in ("false", "0", "no", "off", "none"):
        return _NEGATED
    return text


def _choice(answer: Any, choices: tuple[str, ...], aliases: dict[str, str],
            words: Iterable[str] = ()) -> Any:
    """One of ``choices`` (or what an ``aliases`` key stands for), _NEGATED, or None: see ``as_choice``."""
    if not isinstance(answer, str):
        return None

    def plain(text: str) -> str:                 # 'split_gpu', 'Split GPU' and 'split-gpu' read alike
        return re.sub(r"[\s_-]+", "-", text.strip().strip("'\"").strip().lower())

    names = {plain(c): c for c in choices}
    names.update({plain(a): target for a, target in aliases.items()})
    text = _unquote(answer)
    if plain(text) in names:
        return names[plain(text)]
    code = _code_form(text)
    if code is _NEGATED:
        return _NEGATED
    said = _words_of(code)
    stems = {word[:4] for name in names for word in name.split("-") if len(word) >= 4}
    for word in said:
        if word in _NEGATING:
            return _NEGATED
        for prefix in _NEGATING_PREFIXES:            # 'unsynchronized', 'async', 'desync', 'non-sync' (joined)
            rest = word[len(prefix):]
            if word.startswith(prefix) and len(rest) >= 4 and rest[:4] in stems and word[:4] not in stems:
                return _NEGATED
    filler = _allowed(words)
    kept = [word for word in said if word not in filler]
    for text in ("-".join(kept), "".join(kept)):
        if text in names:
            return names[text]
    return None


def as_choice(answer: Any, choices: Iterable[str], *, aliases: dict[str, str] | None = None,
              words: Iterable[str] = ()) -> str | None:
    """One of ``choices`` from a string, ignoring case, quotes and how words are joined ('B', ' b ', "'b'",
    'split_gpu' for 'split-gpu'), written as code ('synchronized=True', 'ds.repeat()'), or among the words the
    check allows (``words``); ``aliases``: other names for a choice. None otherwise, and for a negated choice
    ('not synchronized', 'synchronized=False', 'unsynchronized', 'async', 'no sync')."""
    value = _choice(answer, tuple(choices), aliases or {}, words)
    return value if isinstance(value, str) else None


_DEVICE_NAME = re.compile(r"/?(?:job:\w+/replica:\d+/task:\d+/)?(?:device:)?(cpu|gpu)\s*:\s*(\d+)", re.I)
_DEVICE_SAID = re.compile(r"(?:(?:the|logical|physical|simulated|cuda|device)\s+)*(cpu|gpu)\s*[#-]?\s*(\d+)\.?",
                          re.I)


def as_device(answer: Any, *, number_as: str | None = None) -> str | None:
    """A device name as '/device:GPU:3' from '/device:GPU:3', 'GPU:3', '/gpu:3', a full name
    ('/job:localhost/replica:0/task:0/device:GPU:3') or as said aloud ('GPU 3', 'gpu3', 'CUDA GPU 3');
    ``number_as`` ('GPU'): a whole number alone (3, '3') names that device. None otherwise."""
    if number_as is not None and not isinstance(answer, (list, tuple)):
        number = as_int(answer)
        if number is not None and number >= 0:
            return f"/device:{number_as.upper()}:{number}"
    if not isinstance(answer, str):
        return None
    text = _unquote(answer)
    match = _DEVICE_NAME.fullmatch(text) or _DEVICE_SAID.fullmatch(text)
    return f"/device:{match.group(1).upper()}:{int(match.group(2))}" if match else None


def as_mapping(answer: Any) -> dict | None:
    """A dict, or a string holding one as JSON or as Python writes it ("{'task': ...}"); None otherwise."""
    if isinstance(answer, dict):
        return answer
    if not isinstance(answer, str):
        return None
    import ast
    import json

    text = _unquote(answer) if not answer.strip().startswith("{") else answer.strip()
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        return value if isinstance(value, dict) else None
    return None


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


def norm_device(name: str) -> str:
    """An answer's device name, compared case-blind: 'GPU:1', '/gpu:1' and '/device:GPU:1' -> 'gpu:1'."""
    from ..placement import normalize_device

    return (normalize_device(name).removeprefix("/device:") or name.strip().lstrip("/")).lower()
