"""Exercise checks of notebook 00."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_bool, as_choice, norm_device, verdict


def nb00_last_device(answer: Any) -> Verdict:
    """The name of the last device that setup() created in this kernel."""
    from ..devices import device_names

    if not isinstance(answer, str):
        return verdict(answer, False, "", "", form="Give the device name as a string, e.g. '/device:CPU:0'.")
    last = device_names()[-1]
    return verdict(answer, norm_device(answer) == norm_device(last), f"setup() made {last}; strategies use these names.",
                   "Look at the 'devices:' line of the setup report, or call device_names().")


def nb00_simulated_speedup(answer: Any) -> Verdict:
    """Would 4 simulated devices train 4x faster than 1? (True/False)"""
    value = as_bool(answer)
    return verdict(answer, value is False,
                   "Logical CPUs share the same cores: they show how work is split, not speed.",
                   "Where does each logical CPU's arithmetic actually run?",
                   form=None if value is not None else "Answer True or False.")


def nb00_more_devices(answer: Any) -> Verdict:
    """After setup(devices=2), how do you get 4 devices? 'a' call setup(devices=4),
    'b' restart the kernel then setup(devices=4), 'c' set CUDA_VISIBLE_DEVICES."""
    choice = as_choice(answer, "abc")
    return verdict(answer, choice == "b",
                   "Devices are fixed once TensorFlow initialises them: only a new process changes them.",
                   "Try (a) in a cell: what does setup() say?",
                   form=None if choice is not None else "Answer 'a', 'b' or 'c'.")
