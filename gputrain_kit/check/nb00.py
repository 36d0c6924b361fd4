"""Exercise checks of notebook 00."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_bool, as_choice, as_int, as_int_list, norm_device, verdict


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


def nb00_server_mode(answer: Any) -> Verdict:
    """An 8-GPU server, CUDA_VISIBLE_DEVICES='2,3', setup(devices=6): which mode? 'gpu', 'split-gpu' or 'cpu'."""
    from ..devices import mode_for
    from ..visibility import parse_cuda_visible_devices

    right = mode_for(parse_cuda_visible_devices("2,3", 8).count, 6)[0]
    choice = as_choice(answer, ("gpu", "split-gpu", "cpu"))
    return verdict(answer, choice == right,
                   f"'{right}': the process sees only 2 GPUs, fewer than the 6 devices asked for, so each is split.",
                   "How many GPUs can this process see, and how many devices did it ask for?",
                   form=None if choice is not None else "Answer 'gpu', 'split-gpu' or 'cpu'.")


def nb00_logical_per_gpu(answer: Any) -> Verdict:
    """...and how many logical GPUs does physical GPU 2 carry then?"""
    from ..devices import mode_for

    right = mode_for(2, 6)[1][0]
    value = as_int(answer)
    return verdict(answer, value == right, f"{right}: 6 devices over 2 visible GPUs, {right} on each.",
                   "The devices asked for are shared out over the GPUs the process can see.",
                   form=None if value is not None else "Give a whole number, e.g. 2.")


def nb00_last_gpu_name(answer: Any) -> Verdict:
    """A server with 8 GPUs runs setup(devices=4): the name of the last device it uses (``device_names()``'s last)."""
    from ..devices import mode_for

    if isinstance(answer, str):                         # 'GPU 3' as said aloud, and '3' as the exercises allow
        import re

        said = re.fullmatch(r"\s*(?:gpu\s+)?(\d+)\s*", answer.strip("'\""), re.I)
        answer = f"GPU:{said.group(1)}" if said else answer
    elif as_int(answer) is not None:
        answer = f"GPU:{as_int(answer)}"                # the number alone: read as that GPU's name
    if not isinstance(answer, str):
        return verdict(answer, False, "", "", form="Give the device name as a string, e.g. '/device:CPU:0'.")
    mode, per_device = mode_for(8, 4)
    right = f"/device:GPU:{len(per_device) - 1}" if mode == "gpu" else "?"
    return verdict(answer, norm_device(answer) == norm_device(right),
                   f"{right}: with enough GPUs, setup() uses real GPUs, numbered from 0.",
                   "Which mode does a machine with 8 GPUs get for 4 devices, and how are devices numbered?")


def nb00_cpu_devices(answer: Any) -> Verdict:
    """A 16-core laptop without a GPU runs setup(devices=8): [physical CPU devices, logical CPU devices]?"""
    from ..devices import mode_for

    right = [len(mode_for(0, 8)[1]), sum(mode_for(0, 8)[1])]
    values = as_int_list(answer)
    return verdict(answer, values == right,
                   f"{right}: one CPU device whatever the core count, split into 8 logical devices.",
                   "Does setup() add physical devices, or split the ones there are? Do cores count as devices?",
                   form=None if values is not None and len(values) == 2 else
                   "Give a list of two numbers: [physical, logical].")
