"""Exercise checks of notebook 03."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_choice, as_number, verdict


def nb03_less_memory(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, batch 32, Adam: fullest device smaller with 'data' x4 or 'split' x2?"""
    from ..memory import estimate_memory, preset_profile

    profile = preset_profile("Dense stack 24 x 8192 (1.6B parameters)")
    peaks = {s: estimate_memory(profile, batch_size=32, strategy=s, devices=d).peak
             for s, d in (("data", 4), ("split", 2))}
    right = min(peaks, key=peaks.get)
    choice = as_choice(answer, ("data", "split"))
    return verdict(answer, choice == right, f"'{right}': {peaks['data'] / 1e9:.1f} GB for data x4 vs "
                   f"{peaks['split'] / 1e9:.1f} GB for split x2 on the fullest device.",
                   "Which strategy copies the whole model state onto every device?",
                   form=None if choice is not None else "Answer 'data' or 'split'.")


def nb03_bubble(answer: Any) -> Verdict:
    """Idle fraction with 4 pipeline stages and 8 micro-batches."""
    from ..pipeline import bubble_fraction

    right = bubble_fraction(4, 8)
    value = as_number(answer)
    return verdict(answer, value is not None and abs(value - right) < 0.01, f"{right:.3f} = (S - 1) / (M + S - 1).",
                   "(stages - 1) / (micro-batches + stages - 1).",
                   form=None if value is not None else "Give a fraction between 0 and 1: a number, or '3/11'.")
