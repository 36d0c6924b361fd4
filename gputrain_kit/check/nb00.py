"""Exercise checks of notebook 00."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, norm_device, read, verdict

_NAME = "Give the device name as a string, e.g. '/device:CPU:0'."


def nb00_last_device(answer: Any) -> Verdict:
    """The name of the last device that setup() created in this kernel."""
    from ..devices import device_names

    got = read(answer, "device", form=_NAME)
    if got.refusal is not None:
        return got.refusal
    last = device_names()[-1]
    return verdict(answer, norm_device(got.value) == norm_device(last),
                   f"setup() made {last}; strategies use these names.",
                   "Look at the 'devices:' line of the setup report, or call device_names().")


def nb00_simulated_speedup(answer: Any) -> Verdict:
    """Would 4 simulated devices train 4x faster than 1? (True/False)"""
    got = read(answer, "bool", form="Answer True or False.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value is False,
                   "Logical CPUs share the same cores: they show how work is split, not speed.",
                   "Where does each logical CPU's arithmetic actually run?")


def nb00_more_devices(answer: Any) -> Verdict:
    """After setup(devices=2), how do you get 4 devices? 'a' call setup(devices=4),
    'b' restart the kernel then setup(devices=4), 'c' set CUDA_VISIBLE_DEVICES."""
    got = read(answer, "choice", choices="abc", words=("option", "answer"), form="Answer 'a', 'b' or 'c'.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value == "b",
                   "Devices are fixed once TensorFlow initialises them: only a new process changes them.",
                   "Try (a) in a cell: what does setup() say?")


def nb00_server_mode(answer: Any) -> Verdict:
    """An 8-GPU server, CUDA_VISIBLE_DEVICES='2,3', setup(devices=6): which mode? 'gpu', 'split-gpu' or 'cpu'."""
    from ..devices import mode_for
    from ..visibility import parse_cuda_visible_devices

    got = read(answer, "choice", choices=("gpu", "split-gpu", "cpu"), words=("mode",),
               form="Answer 'gpu', 'split-gpu' or 'cpu'.")
    if got.refusal is not None:
        return got.refusal
    right = mode_for(parse_cuda_visible_devices("2,3", 8).count, 6)[0]
    return verdict(answer, got.value == right,
                   f"'{right}': the process sees only 2 GPUs, fewer than the 6 devices asked for, so each is split.",
                   "How many GPUs can this process see, and how many devices did it ask for?")


def nb00_logical_per_gpu(answer: Any) -> Verdict:
    """...and how many logical GPUs does physical GPU 2 carry then?"""
    from ..devices import mode_for

    got = read(answer, "int", words=("logical", "gpu", "device", "per", "each"), form="Give a whole number, e.g. 2.")
    if got.refusal is not None:
        return got.refusal
    right = mode_for(2, 6)[1][0]
    return verdict(answer, got.value == right, f"{right}: 6 devices over 2 visible GPUs, {right} on each.",
                   "The devices asked for are shared out over the GPUs the process can see.")


def nb00_last_gpu_name(answer: Any) -> Verdict:
    """A server with 8 GPUs runs setup(devices=4): the name of the last device it uses (``device_names()``'s last).
    'GPU 3' as said aloud, and the number alone (3, '3'), as the exercises' intro allows, name GPU 3. A GPU named in
    CUDA's numbering ('CUDA GPU 3') or PyTorch's ('cuda:3') is refused with a hint, as notebook 01's checks refuse
    a TensorFlow name where CUDA's number is asked: the numberings are told apart there."""
    from ..devices import mode_for
    from .nb01 import _CUDA_NUMBER, _torch_name

    if isinstance(answer, str) and (_CUDA_NUMBER.match(answer) or _torch_name(answer)):
        numbering = "PyTorch's name for a device" if _torch_name(answer) else "a GPU in CUDA's numbering"
        return verdict(answer, False, "", f"{answer.strip()!r} is {numbering} (the numbering notebook 01 tells "
                       "apart from TensorFlow's), not a TensorFlow device name: the question asks for the name "
                       f"TensorFlow gives the device, the one device_names() returns. {_NAME}")
    got = read(answer, "device", number_as="GPU", form=_NAME)
    if got.refusal is not None:
        return got.refusal
    mode, per_device = mode_for(8, 4)
    right = f"/device:GPU:{len(per_device) - 1}" if mode == "gpu" else "?"
    return verdict(answer, norm_device(got.value) == norm_device(right),
                   f"{right}: with enough GPUs, setup() uses real GPUs, numbered from 0.",
                   "Which mode does a machine with 8 GPUs get for 4 devices, and how are devices numbered?")


def nb00_cpu_devices(answer: Any) -> Verdict:
    """A 16-core laptop without a GPU runs setup(devices=8): [physical CPU devices, logical CPU devices]?"""
    from ..devices import mode_for

    form = "Give a list of two numbers: [physical, logical]."
    if isinstance(answer, (set, frozenset)):      # {8, 1} is {1, 8}: a set cannot say which number is which
        return verdict(answer, False, "", "", form="A set has no order, so it cannot say which number is the physical "
                       "count: give a list of two numbers, [physical, logical].")
    got = read(answer, "int_list", form=form)
    if got.refusal is not None:
        return got.refusal
    if len(got.value) != 2:
        return verdict(answer, False, "", "", form=form)
    right = [len(mode_for(0, 8)[1]), sum(mode_for(0, 8)[1])]
    return verdict(answer, got.value == right,
                   f"{right}: one CPU device whatever the core count, split into 8 logical devices.",
                   "Does setup() add physical devices, or split the ones there are? Do cores count as devices?")
