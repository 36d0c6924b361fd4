"""Exercise checks of notebook 01."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, read, verdict

_NUMBER = "Give a whole number, e.g. 3."
# TensorFlow's device names ('/GPU:5', 'GPU:5', '/device:GPU:5'): the numbering these exercises tell apart from CUDA's
_TF_NAME = re.compile(r"^\s*['\"]?\s*(/?(job:\S+/)?device:)?/?gpu\s*:\s*\d+", re.I)
# PyTorch's device names ('cuda:5'): like TensorFlow's, they count the process's visible GPUs from 0
_TORCH_NAME = re.compile(r"^\s*['\"]?\s*cuda\s*:\s*\d+", re.I)
# an answer in CUDA's numbering ('CUDA GPU 3', 'cuda 3'), where a question asks for nvidia-smi's
_CUDA_NUMBER = re.compile(r"^\s*['\"]?\s*cuda(\s+(gpu|device))?\s*#?\s*\d+\s*['\"]?\s*$", re.I)
_NONE = re.compile(r"(none|zero|nothing|no|no gpus?|no devices?|zero gpus?|0 gpus?|none of them|not one)")


def _tf_name(answer: Any) -> bool:
    return isinstance(answer, str) and bool(_TF_NAME.match(answer))


def _torch_name(answer: Any) -> bool:
    return isinstance(answer, str) and bool(_TORCH_NAME.match(answer))


def _none_as_zero(answer: Any) -> Any:
    """'none', 'no GPUs', 'zero' read as 0 (the answer to a count can be no GPU at all)."""
    if isinstance(answer, str) and _NONE.fullmatch(re.sub(r"\s+", " ", answer.strip(" '\".").lower())):
        return 0
    return answer


def nb01_physical_behind(answer: Any) -> Verdict:
    """With CUDA_VISIBLE_DEVICES=3,5 on an 8-GPU server, which CUDA GPU is TensorFlow's /GPU:1? (Not 3,1: there
    the answer, 1, is also what a reader who expects no renumbering says.) 'CUDA GPU 5' and 'GPU 5', as the
    question and the solution say it, read as 5; a TensorFlow device name ('/GPU:5', 'GPU:5') is refused with a hint:
    telling the two numberings apart is the point of the exercise. So is PyTorch's name ('cuda:5'), which counts
    the process's visible GPUs from 0 as TensorFlow's does."""
    from ..visibility import parse_cuda_visible_devices

    if _tf_name(answer):
        return verdict(answer, False, "", f"{answer.strip()!r} is a TensorFlow device name, the numbering this "
                       "question asks you to translate: in that process TensorFlow's devices are /GPU:0 and /GPU:1. "
                       "Give the CUDA GPU's number, e.g. 3 or 'CUDA GPU 3'.")
    if _torch_name(answer):
        return verdict(answer, False, "", f"{answer.strip()!r} is PyTorch's name for a device of the process: like "
                       "TensorFlow's /GPU:i, it counts the visible GPUs from 0, so that process has only cuda:0 and "
                       "cuda:1 (the same two GPUs as /GPU:0 and /GPU:1). Give the CUDA GPU's number, e.g. 3 or "
                       "'CUDA GPU 3'.")
    got = read(answer, "int", words=("cuda", "gpu", "physical", "device"),
               form="Give the CUDA GPU's number, e.g. 3 or 'CUDA GPU 3'.")
    if got.refusal is not None:
        return got.refusal
    right = parse_cuda_visible_devices("3,5", 8).physical_of(1)
    hint = "Visible devices are renumbered in the order they are listed."
    if got.value == 1:
        hint = "That is CUDA GPU 1, which this list does not even show: TensorFlow numbers the visible GPUs anew."
    return verdict(answer, got.value == right,
                   f"/GPU:1 is CUDA GPU {right}: visible devices are renumbered in list order.", hint)


def nb01_count_with_garbage(answer: Any) -> Verdict:
    """How many GPUs does a process see with CUDA_VISIBLE_DEVICES=3,1,3 on an 8-GPU server? ('none', 'no GPUs' and
    'zero' read as 0.)"""
    from ..visibility import parse_cuda_visible_devices

    answer = _none_as_zero(answer)
    got = read(answer, "int", words=("gpu", "device"), form=_NUMBER)
    if got.refusal is not None:
        return got.refusal
    right = parse_cuda_visible_devices("3,1,3", 8).count
    return verdict(answer, got.value == right, f"{right}: GPU 3 is listed twice, so cuInit fails "
                   "(CUDA_ERROR_INVALID_DEVICE) and CUDA does not start: TensorFlow logs 'failed call to cuInit' and "
                   "runs without GPUs.",
                   "What does the runtime do when the same device appears twice in the list?")


def nb01_locking_call(answer: Any) -> Verdict:
    """Does building a small Keras model (an Input and a Dense layer), before any training, lock TensorFlow's
    device configuration? True or False. Once answered, the check probes it in a fresh process (seconds), as
    section 4 probed the four calls."""
    got = read(answer, "bool", form="Give True or False.")
    if got.refusal is not None:
        return got.refusal
    from ..counting import KERAS_MODEL, probe_locks

    probe = probe_locks([KERAS_MODEL])[0]       # says so before it starts: 5 to 10 seconds
    seen = f"probed just now in a fresh process: {probe.row().strip()}"
    return verdict(answer, got.value is probe.locked,
                   f"{probe.locked}, {seen}. Building the model creates its variables, which starts the devices "
                   "as a first op does: call kit.setup() before building anything.",
                   "What does a Dense layer create when it is built, and where does that have to live?")


def nb01_visible_after_drop(answer: Any) -> Verdict:
    """With CUDA_VISIBLE_DEVICES='5,4gpu,9,2' on an 8-GPU server, which CUDA GPUs are visible, in
    TensorFlow's order? (a list; 'CUDA GPUs 5 and 4' too)"""
    got = read(answer, "int_list", words=("cuda", "gpu", "then"), form="Give a list of GPU numbers, e.g. [0, 1].")
    if got.refusal is not None:
        return got.refusal
    from ..visibility import parse_cuda_visible_devices

    right = list(parse_cuda_visible_devices("5,4gpu,9,2", 8).visible)
    return verdict(answer, got.value == right,
                   f"{right}: '4gpu' is read as 4 (like strtoul), '9' is not a GPU of this server, so parsing "
                   "stops there and '2' is dropped without an error.",
                   "Read each entry as the runtime does: a leading number counts, and what happens at the first "
                   "entry that names no GPU of this server?")


def nb01_smi_behind(answer: Any) -> Verdict:
    """On the explorer's imaginary server (nvidia-smi GPUs 4-7 are the faster model), CUDA_DEVICE_ORDER
    unset: which nvidia-smi GPU does CUDA_VISIBLE_DEVICES=3 select? ('GPU 7' and 'nvidia-smi GPU 7' read as 7; a
    TensorFlow device name such as '/GPU:7', PyTorch's 'cuda:7' and a number in CUDA's numbering such as 'CUDA GPU 3'
    are refused with a hint: the question asks for nvidia-smi's number.)"""
    if _tf_name(answer) or _torch_name(answer):
        kind = "a TensorFlow" if _tf_name(answer) else "PyTorch's"
        local = "/GPU:0" if _tf_name(answer) else "cuda:0"
        return verdict(answer, False, "", f"{answer.strip()!r} is {kind} device name: in that process, which "
                       f"sees one GPU, it is called {local}. Give the nvidia-smi GPU's number, e.g. 3 or 'GPU 3'.")
    if isinstance(answer, str) and _CUDA_NUMBER.match(answer):
        return verdict(answer, False, "", f"{answer.strip()!r} is a number in CUDA's numbering, the one "
                       "CUDA_VISIBLE_DEVICES uses: the script asks for CUDA GPU 3. The question is which board that is "
                       "in nvidia-smi's numbering. Without PCI_BUS_ID, CUDA counts the faster model first: which "
                       "nvidia-smi numbers do CUDA's 0, 1, 2, 3 get? Give the nvidia-smi GPU's number, e.g. 3 or "
                       "'GPU 3'.")
    got = read(answer, "int", words=("nvidia-smi", "gpu"), form="Give the nvidia-smi GPU's number, e.g. 3 or 'GPU 3'.")
    if got.refusal is not None:
        return got.refusal
    from ..visibility import example_fastest_first, parse_cuda_visible_devices

    right = parse_cuda_visible_devices("3", 8, device_order=None, fastest_first=example_fastest_first(8)).smi[0]
    return verdict(answer, got.value == right,
                   f"nvidia-smi GPU {right}: fastest first, CUDA's 0-3 are the fast boards, nvidia-smi's 4-7.",
                   "Without PCI_BUS_ID, CUDA counts the faster model first. Which nvidia-smi numbers do "
                   "CUDA's 0, 1, 2, 3 get?")
