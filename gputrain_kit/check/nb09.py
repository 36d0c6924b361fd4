"""Exercise checks of notebook 09 (Keras 3's distribution API on JAX). Arithmetic and regular expressions only:
no JAX needed to check an answer."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, as_bool, as_int, as_number, verdict

#: The notebook's MLP: (path, shape, bytes per value) of each variable.
NB09_MLP = [("mlp/d1/kernel", (256, 512), 4), ("mlp/d1/bias", (512,), 4), ("mlp/d2/kernel", (512, 512), 4),
            ("mlp/d2/bias", (512,), 4), ("mlp/d3/kernel", (512, 16), 4), ("mlp/d3/bias", (16,), 4)]


def nb09_mesh_ratio(answer: Any) -> Verdict:
    """The MLP on a (4, 2) mesh (batch x model), every kernel's columns split over 'model': how many times less than
    a full copy does each device hold? (a number, within 0.02; '1.99x', as MeshExplorer prints it, counts)"""
    if isinstance(answer, str):
        answer = answer.strip().removesuffix("less").strip().removesuffix("times").rstrip("x× ")
    value = as_number(answer)
    if value is None:
        return verdict(answer, False, "", "", form="Give a number, e.g. 3.5.")
    from ..sharding import mesh_bytes

    per_device, full, _ = mesh_bytes(NB09_MLP, 2, True)
    right = full / per_device
    return verdict(answer, abs(value - right) <= 0.02,
                   f"{right:.2f}x: the kernels are halved over a 'model' axis of 2, the biases stay whole on every "
                   "device, so a little less than 2.",
                   "Only the 'model' axis splits a kernel; the 'batch' axis copies the model. How many devices share "
                   "each kernel, and what stays whole?")


def nb09_key_matches(answer: Any) -> Verdict:
    """Does the LayoutMap key '.*d1/kernel' shard the variable whose path is 'mlp/d1/kernel'? True or False."""
    value = as_bool(answer)
    right = bool(re.fullmatch(".*d1/kernel", "mlp/d1/kernel"))
    return verdict(answer, value is right,
                   f"{right}: '.*' matches 'mlp/', so the key matches the whole path (re.fullmatch); "
                   "'(.*/)?d1/kernel' is stricter and matches with or without the model's name.",
                   "Keras matches the whole path with the key: what can '.*' stand for?",
                   form=None if value is not None else "Give True or False.")


def nb09_largest_batch(answer: Any) -> Verdict:
    """ModelParallel on a 2 x 4 mesh ('batch' axis of 2): the largest global batch of at most 300 a step accepts?"""
    value = as_int(answer)
    right = 300 // 2 * 2
    return verdict(answer, value == right,
                   f"{right}: the batch is cut only along the mesh's 'batch' axis (2 ways); the devices of a 'model' "
                   "row share one slice. DataParallel over 8 devices needed a multiple of 8 (296).",
                   "Along which mesh axis is the batch cut, and how many ways?",
                   form=None if value is not None else "Give a whole number, e.g. 64.")


__all__ = ["NB09_MLP", "nb09_mesh_ratio", "nb09_key_matches", "nb09_largest_batch"]
