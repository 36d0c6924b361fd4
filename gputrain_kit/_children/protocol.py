"""How a child process sends values back: one JSON object a line, after a marker. A leaf module (no kit
imports), so that any child, the kit's workers included, can report without importing the kit."""
from __future__ import annotations

import json
import os
import sys
from typing import Any

__all__ = ["MARK", "send_back", "report", "parse"]

#: The marker before every line a child reports; any other line of its output is the child's own.
MARK = "__gputrain_kit__"


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):     # numpy scalars and arrays
        return value.tolist()
    if hasattr(value, "numpy"):      # tf EagerTensor
        return value.numpy().tolist()
    raise TypeError(f"reported values must be JSON-able (numbers, strings, lists, dicts); "
                    f"got {type(value).__name__}: convert it, e.g. float(x) or x.tolist().")


def send_back(**values: Any) -> None:
    """Send JSON-able ``values`` (NumPy and TensorFlow values are converted) to the parent process: one write
    per line, so that children writing to one pipe side by side never interleave."""
    line = MARK + json.dumps(values, default=_jsonable) + "\n"
    sys.stdout.flush()
    os.write(1, line.encode())


#: The same function under its first name (the kit's own children use it; a notebook's ``report`` is
#: ``setup()``'s report, so snippets the course shows call ``send_back``).
report = send_back


def parse(line: str) -> dict[str, Any] | None:
    """The values of a reported line, or None for any other line."""
    if not line.startswith(MARK):
        return None
    return json.loads(line[len(MARK):])
