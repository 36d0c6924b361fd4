"""Exercise checks of notebook 01."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_choice, as_int, verdict

_NUMBER = "Give a whole number, e.g. 3."


def nb01_physical_behind(answer: Any) -> Verdict:
    """With CUDA_VISIBLE_DEVICES=3,1 on an 8-GPU server, which physical GPU is TensorFlow's /GPU:1?"""
    from ..visibility import parse_cuda_visible_devices

    right = parse_cuda_visible_devices("3,1", 8).physical_of(1)
    value = as_int(answer)
    return verdict(answer, value == right,
                   f"/GPU:1 is physical GPU {right}: visible devices are renumbered in list order.",
                   "Visible devices are renumbered in the order they are listed.",
                   form=None if value is not None else _NUMBER)


def nb01_count_with_garbage(answer: Any) -> Verdict:
    """How many GPUs does a process see with CUDA_VISIBLE_DEVICES=0,1,x,2 on an 8-GPU server?"""
    from ..visibility import parse_cuda_visible_devices

    right = parse_cuda_visible_devices("0,1,x,2", 8).count
    value = as_int(answer)
    return verdict(answer, value == right, f"{right}: parsing stops at 'x', so GPU 2 is never reached.",
                   "What does the runtime do when it meets an entry that is not a number?",
                   form=None if value is not None else _NUMBER)


def nb01_locking_call(answer: Any) -> Verdict:
    """Which call locks the device configuration: 'a' list_physical_devices(), 'b' list_logical_devices(),
    'c' device_lib.list_local_devices()?"""
    choice = as_choice(answer, "abc")
    return verdict(answer, choice == "b",
                   "list_logical_devices() initialises the runtime; configure devices before it.",
                   "Look at the probe table above.", form=None if choice is not None else "Answer 'a', 'b' or 'c'.")
