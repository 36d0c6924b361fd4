"""Exercise checks of notebook 06."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, percent_slip, read, verdict

_RATE = ("lr", "learning", "rate", "of", "a")     # 'lr = 3.2', 'a learning rate of 3.2'


def _rate(answer: Any, form: str):
    """``read(answer, "number")`` for a learning rate, refusing a percentage ('320%' is no learning rate 3.2)."""
    if isinstance(answer, str) and re.search(r"%|\bper\s?cent\b", answer, re.IGNORECASE):
        return None, verdict(answer, False, "", "", form=f"A learning rate is a plain number, not a percentage of "
                                                         f"anything. {form}")
    got = read(answer, "number", words=_RATE, form=form)
    return got.value, got.refusal


def nb06_scaled_lr(answer: Any) -> Verdict:
    """Learning rate 0.05 works at batch 32; by the linear scaling rule, what is it at batch 2048?"""
    from ..lrscaling import linear_scaled_lr

    value, refusal = _rate(answer, "Give a number, e.g. 0.1.")
    if refusal is not None:
        return refusal
    right = linear_scaled_lr(0.05, 32, 2048)
    return verdict(answer, abs(value - right) <= 0.005 + 1e-9,   # rounded to 2 decimals: right
                   f"{right:g}: the batch grew 64x, so the learning rate grows 64x (with a warm-up), if the rule "
                   "still held there: at 1024 it no longer did for this model.",
                   "Base learning rate x (new batch / base batch).")


def nb06_efficiency(answer: Any) -> Verdict:
    """Predicted efficiency of VGG-16 on 4 GPUs over PCIe 3.0, per-GPU batch 64, overlap 0.1 (a fraction); the
    notebook shows 8 GPUs (94%)."""
    from ..scaling import predict_curve

    got = read(answer, "number", words=("efficiency",), form="Give a fraction between 0 and 1 (e.g. 0.85 or '85%').")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    right = predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 4, 0.1)[-1].efficiency
    eight = predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 8, 0.1)[-1].efficiency
    slip = percent_slip(value, right, 0.01)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    return verdict(answer, abs(value - right) < 0.01,
                   f"{right:.2f}: kit.scaling.predict_curve(\"VGG-16\", \"PCIe 3.0 x16 (one server)\", 64, 4, 0.1)"
                   f"[-1].efficiency. Higher than 8 GPUs' {eight:.2f}: a ring all-reduce sends 2(N-1)/N of the "
                   "gradients, less with fewer GPUs, so less communication is left exposed.",
                   "Predict the direction first: does a ring all-reduce over fewer GPUs send more or less per GPU? "
                   "Then move the explorer's GPU count, or call kit.scaling.predict_curve.")


def nb06_warmup_step(answer: Any) -> Verdict:
    """LinearWarmup(0.05, 1.6, 4) (start 0.05, peak 1.6, 4 warm-up steps): the learning rate at step 2?"""
    got = read(answer, "number", words=_RATE, form="Give a number, e.g. 0.1 or '33/40'.")
    if got.refusal is not None:
        return got.refusal
    right = 0.05 + (1.6 - 0.05) * 2 / 4
    return verdict(answer, abs(got.value - right) <= 0.005 + 1e-9,   # rounded to 2 decimals: right
                   f"{right:g}: halfway through the warm-up, so halfway from 0.05 to 1.6.",
                   "The rate rises by the same amount every step from start_lr to peak_lr; step 2 of 4 is "
                   "what fraction of the way?")


def nb06_ethernet_efficiency(answer: Any) -> Verdict:
    """VGG-16 on 8 GPUs, per-GPU batch 64, overlap 0.1, over 25 Gbit/s Ethernet instead of PCIe 3.0:
    the predicted efficiency (a fraction, within 0.02; Horovod's published 0.68 is refused with its own hint)?"""
    got = read(answer, "number", words=("efficiency",), form="Give a fraction between 0 and 1 (e.g. 0.85 or '85%').")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..scaling import predict_curve

    right = predict_curve("VGG-16", "25 Gbit/s Ethernet (servers)", 64, 8, 0.1)[-1].efficiency
    slip = percent_slip(value, right, 0.02)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    if abs(value - 0.68) < 0.005 or abs(value - 68) < 0.5:
        return verdict(answer, False, "", "0.68 is Horovod's measured VGG-16 efficiency (128 servers, RoCE; section "
                       "2 sets it beside the model), not this model's prediction for 8 GPUs over 25 Gbit/s Ethernet: "
                       "compute it.")
    return verdict(answer, abs(value - right) < 0.02,
                   f"{right:.2f}: the same gradients over a link about 4x slower than PCIe 3.0 x16; compute "
                   "hides far less of the all-reduce.",
                   "Compare the links' bandwidths: exposed communication grows as the link slows, "
                   "compute per step stays the same.")
