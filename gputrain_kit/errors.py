"""Show an expected error in a notebook without a traceback, and fail loudly if it stops happening.

Notebooks demonstrate TensorFlow/Keras errors live. ``expect_error`` prints the
exception's type and message as ordinary output; if the code no longer raises
(TensorFlow or Keras changed), it raises AssertionError, so `make notebooks`
and the tests tell us which notebook to update.
"""
from __future__ import annotations

import contextlib
import textwrap
from typing import Iterator

__all__ = ["expect_error", "CaughtError"]


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
            text = f"{type(exc).__name__}: {exc}"
            if len(text) > max_chars:
                text = text[:max_chars].rstrip() + " [...]"
            # Wrap each line of the message on its own: multi-line messages keep their layout.
            print("\n".join(textwrap.fill(line, width=100, break_long_words=False, break_on_hyphens=False,
                                           replace_whitespace=False, subsequent_indent=_indent(line))
                             for line in text.splitlines()))
    else:
        names = " or ".join(t.__name__ for t in types)
        raise AssertionError(
            f"expected {names}, but nothing was raised: TensorFlow/Keras may have changed this "
            "behaviour; update the notebook and its test.")
