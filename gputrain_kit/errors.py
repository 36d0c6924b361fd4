"""Show an expected error in a notebook without a traceback, and fail loudly if it stops happening.

Notebooks demonstrate TensorFlow/Keras errors live. ``expect_error`` prints the
exception's type and message as ordinary output; if the code no longer raises
(TensorFlow or Keras changed), it raises AssertionError, so `make notebooks`
and the tests tell us which notebook to update.
"""
from __future__ import annotations

import contextlib
import re
import textwrap
from typing import Iterator

__all__ = ["expect_error", "CaughtError", "error_summary", "shorten_message"]


class CaughtError:
    """What expect_error caught: ``.type``, ``.message`` and the exception itself."""

    def __init__(self) -> None:
        self.exception: BaseException | None = None

    @property
    def type(self) -> str:
        return type(self.exception).__name__ if self.exception else ""

    @property
    def message(self) -> str:
        return str(self.exception) if self.exception else ""


def _indent(line: str) -> str:
    return line[:len(line) - len(line.lstrip())]


def shorten_message(text: str, max_chars: int) -> str:
    """``text`` cut to about ``max_chars`` at line or word boundaries, keeping its beginning (what went
    wrong) and its end (where messages usually say what to do), joined by [...]."""
    if len(text) <= max_chars:
        return text

    def head_of(s: str, n: int) -> str:
        cut = s[:n]
        for sep in ("\n", " "):
            if sep in cut and cut.rfind(sep) > n // 2:
                return cut[:cut.rfind(sep)].rstrip()
        return cut.rstrip()

    def tail_of(s: str, n: int) -> str:
        if n <= 0:
            return ""
        cut = s[-n:]
        for sep in (". ", "\n", " "):
            at = cut.find(sep)
            if 0 <= at < len(cut) // 2:
                return cut[at + len(sep):].lstrip()
        return cut.lstrip()

    head = head_of(text, int(max_chars * 0.6))
    tail = tail_of(text[len(head):], max_chars - len(head) - 7)
    return f"{head} [...] {tail}" if tail else f"{head} [...]"


@contextlib.contextmanager
def expect_error(*types: type[BaseException], match: str | None = None,
                 max_chars: int = 600, show: bool = True) -> Iterator[CaughtError]:
    """Run the block, expecting one of ``types``; print ``Type: message`` (shortened).

    ``match``: a substring the message must contain (checked, so a changed
    message is noticed too).
    """
    if not types:
        raise ValueError("expect_error() needs at least one exception type, e.g. expect_error(ValueError).")
    caught = CaughtError()
    try:
        yield caught
    except types as exc:  # type: ignore[misc]
        caught.exception = exc
        if match is not None and match not in str(exc):
            raise AssertionError(
                f"expected {type(exc).__name__} mentioning {match!r}, but the message was: {exc}") from exc
        if show:
            text = shorten_message(f"{type(exc).__name__}: {exc}", max_chars)
            # Wrap each line of the message on its own: multi-line messages keep their layout.
            print("\n".join(textwrap.fill(line, width=100, break_long_words=False, break_on_hyphens=False,
                                           replace_whitespace=False, subsequent_indent=_indent(line))
                             for line in text.splitlines()))
    else:
        names = " or ".join(t.__name__ for t in types)
        raise AssertionError(
            f"expected {names}, but nothing was raised: TensorFlow/Keras may have changed this "
            "behaviour; update the notebook and its test.")


#: A TensorFlow status line, e.g. "  (0) INVALID_ARGUMENT:  Unable to broadcast ...": the message, if any,
#: in group 1.
_STATUS_LINE = re.compile(r"^\s*(?:\(\d+\)\s+)?[A-Z_]{4,}:\s(?:\s*(.*\S))?")


def error_summary(error: BaseException | str, limit: int = 160) -> str:
    """The line of a TensorFlow error that says what went wrong (not 'Graph execution error:'), shortened
    to ``limit`` characters at a word boundary. Of several root errors, the same one is picked every run, and
    parts that vary between runs (collective instance numbers, the device reporting a collective's shape
    mismatch) are left out."""
    name = type(error).__name__ if isinstance(error, BaseException) else ""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))          # Keras's bold and colour codes
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _STATUS_LINE.match(line)
        if m and m.group(1):
            found.append(m.group(1))
        elif (line.strip().startswith("[[") and i and not lines[i - 1].strip().startswith("[[")
              and not _STATUS_LINE.match(lines[i - 1])):
            j = i - 1   # a single error: its message stands just above the node it names
            while j > 0 and ("previous operation" in lines[j] or "Restart your program" in lines[j]):
                j -= 1
            if lines[j].strip():                  # a blank line above: no message to take here
                found.append(lines[j].strip())
    derived = ("previous operation", "Restart your program", "cancelled", "Cancelled")
    useful = [f for f in found if not any(d in f for d in derived)]   # errors that only follow another one
    if len(useful) > 1 and re.search(r"^\s*\(1\)\s", text, re.M):
        useful.sort()   # several root errors arrive in a varying order: pick one the same way every run
    lines_left = [line for line in text.strip().splitlines() if line.strip()]
    first = lines_left[0] if lines_left else ""
    if first.startswith("Exception encountered when calling") and len(lines_left) > 1:
        first = lines_left[1]                 # Keras's wrapper of a layer's error: the error is the next line
    message = (useful or found or [first])[0].strip()
    message = re.sub(r"\s+", " ", message)
    # parts that vary from run to run: the instance number, and which device reports a shape mismatch
    message = re.sub(r"collective instance \d+", "collective instance", message)
    message = re.sub(r"(Shape mismatch in the collective instance\.) Op at device .*",
                     r"\1 (The replicas' shapes differ; which device reports it varies.)", message)
    message = message.replace("/job:localhost/replica:0/task:0/device:", "")
    if len(message) > limit:
        cut = message[:limit].rsplit(" ", 1)[0]
        message = cut + " ..."
    return f"{name}: {message}" if name else message
