"""Exercise checks of notebook 09 (Keras 3's distribution API on JAX). Arithmetic and regular expressions only:
no JAX needed to check an answer."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, read, verdict

#: The notebook's MLP: (path, shape, bytes per value) of each variable.
NB09_MLP = [("mlp/d1/kernel", (256, 512), 4), ("mlp/d1/bias", (512,), 4), ("mlp/d2/kernel", (512, 512), 4),
            ("mlp/d2/bias", (512,), 4), ("mlp/d3/kernel", (512, 16), 4), ("mlp/d3/bias", (16,), 4)]


def nb09_mesh_ratio(answer: Any) -> Verdict:
    """The MLP on a (4, 2) mesh (batch x model), every kernel's columns split over 'model': how many times less than
    a full copy does each device hold? A little less than 2, as MeshExplorer prints it: 1.99 ('1.99x', '1.99x less',
    '1.99 times less' count), within 0.005 and below 2; the naive 2 (every variable halved) does not count."""
    got = read(answer, "number", words=("x", "times", "less", "fewer", "smaller", "bytes", "memory"),
               form="Give a number, e.g. 3.5, or as the explorer prints it, e.g. '3.50x'.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..sharding import mesh_bytes

    per_device, full, _ = mesh_bytes(NB09_MLP, 2, True)
    right = full / per_device
    hint = ("Only the 'model' axis splits a kernel; the 'batch' axis copies the model. How many devices share "
            "each kernel, and what stays whole?")
    if value == 2:
        hint = ("2 would halve every variable. What stays whole on every device, and what does that do to the "
                "ratio? Give it to two decimals.")
    elif abs(value - per_device / full) <= 0.005:
        hint = ("That is the share of a full copy each device holds; the question asks how many times less than a "
                "full copy that is.")
    return verdict(answer, value < 2 and abs(value - right) <= 0.005 + 1e-9,
                   f"{right:.2f}x: the kernels are halved over a 'model' axis of 2, the biases stay whole on every "
                   "device, so a little less than 2.", hint)


def nb09_key_matches(answer: Any) -> Verdict:
    """Does the LayoutMap key '.*d1/kernel' shard the variable whose path is 'mlp/d1/kernel'? True or False."""
    got = read(answer, "bool", form="Give True or False.")
    if got.refusal is not None:
        return got.refusal
    right = bool(re.fullmatch(".*d1/kernel", "mlp/d1/kernel"))
    return verdict(answer, got.value is right,
                   f"{right}: '.*' matches 'mlp/', so the key matches the whole path (re.fullmatch); "
                   "'(.*/)?d1/kernel' is stricter and matches with or without the model's name.",
                   "Keras matches the whole path with the key: what can '.*' stand for?")


def nb09_largest_batch(answer: Any) -> Verdict:
    """ModelParallel on a 2 x 4 mesh ('batch' axis of 2): the largest global batch of at most 300 a step accepts?
    ('300 samples' and 'a global batch of 300' too, as notebook 05's and 07's batch checks read them.)"""
    got = read(answer, "int", words=("sample", "example", "global", "batch", "of", "a"),
               form="Give a whole number, e.g. 64.")
    if got.refusal is not None:
        return got.refusal
    right = 300 // 2 * 2
    hint = "Along which mesh axis is the batch cut, and how many ways?"
    if got.value == 296:
        hint = ("296 is what DataParallel's 8 devices accept. Along which mesh axis is the batch cut here, and how "
                "many ways?")
    elif got.value > 300:
        hint = "The question asks for a global batch of at most 300."
    return verdict(answer, got.value == right,
                   f"{right}: the batch is cut only along the mesh's 'batch' axis (2 ways); the devices of a 'model' "
                   "row share one slice. DataParallel over 8 devices needed a multiple of 8 (296).",
                   hint)


__all__ = ["NB09_MLP", "nb09_mesh_ratio", "nb09_key_matches", "nb09_largest_batch"]
