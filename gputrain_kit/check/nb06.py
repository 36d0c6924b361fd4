"""Exercise checks of notebook 06."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_number, verdict


def nb06_scaled_lr(answer: Any) -> Verdict:
    """Learning rate 0.05 works at batch 32; by the linear scaling rule, what is it at batch 512?"""
    from ..lrscaling import linear_scaled_lr

    right = linear_scaled_lr(0.05, 32, 512)
    value = as_number(answer)
    return verdict(answer, value is not None and abs(value - right) < 1e-9,
                   f"{right:g}: the batch grew 16x, so the learning rate grows 16x (with a warm-up).",
                   "Base learning rate x (new batch / base batch).",
                   form=None if value is not None else "Give a number, e.g. 0.1.")


def nb06_efficiency(answer: Any) -> Verdict:
    """Predicted efficiency of VGG-16 on 8 GPUs over PCIe 3.0, per-GPU batch 64, overlap 0.1 (a fraction)."""
    from ..scaling import predict_curve

    right = predict_curve("VGG-16", "PCIe 3.0 x16 (one server)", 64, 8, 0.1)[-1].efficiency
    value = as_number(answer)
    return verdict(answer, value is not None and abs(value - right) < 0.01,
                   f"{right:.2f}: read it from kit.scaling.predict_curve(...)[-1].efficiency.",
                   "Use the explorer or kit.scaling.predict_curve.",
                   form=None if value is not None else "Give a fraction between 0 and 1 (e.g. 0.85 or '85%').")
