"""Exercise checks of notebook 03."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_amount, as_choice, as_int, as_number, percent_slip, unit_slip, verdict


def nb03_less_memory(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, batch 32, Adam: fullest device smaller with 'data' x4 or 'split' x2?"""
    from ..memory import estimate_memory, preset_profile

    profile = preset_profile("Dense stack 24 x 8192 (1.6B parameters)")
    peaks = {s: estimate_memory(profile, batch_size=32, strategy=s, devices=d).peak
             for s, d in (("data", 4), ("split", 2))}
    right = min(peaks, key=lambda s: peaks[s])
    aliases = {"data-parallel": "data", "data-parallelism": "data", "model-parallel": "split",
               "model-parallelism": "split", "device-parallel": "split", "layer-split": "split",
               "split-x2": "split", "2-way-split": "split", "data-x4": "data", "4-way-data": "data"}
    choice = as_choice(answer, ("data", "split")) or aliases.get(as_choice(answer, aliases) or "")
    return verdict(answer, choice == right, f"'{right}': {peaks['data'] / 1e9:.1f} GB for data x4 vs "
                   f"{peaks['split'] / 1e9:.1f} GB for split x2 on the fullest device.",
                   "Which strategy copies the whole model state onto every device?",
                   form=None if choice is not None else "Answer 'data' or 'split'.")


def nb03_bubble(answer: Any) -> Verdict:
    """Idle fraction with 4 pipeline stages and 8 micro-batches."""
    from ..pipeline import bubble_fraction

    right = bubble_fraction(4, 8)
    value = as_number(answer)
    slip = percent_slip(value, right, 0.01)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    return verdict(answer, value is not None and abs(value - right) < 0.01, f"{right:.3f} = (S - 1) / (M + S - 1).",
                   "(stages - 1) / (micro-batches + stages - 1).",
                   form=None if value is not None else "Give a fraction between 0 and 1: a number, or '3/11'.")


def nb03_microbatches(answer: Any) -> Verdict:
    """Fewest micro-batches that bring the bubble of a 4-stage pipeline below 10%."""
    value = as_int(answer, units=("micro-batch", "micro-batches", "microbatch", "microbatches"))
    if value is None:
        return verdict(answer, False, "", "", form="Give a whole number of micro-batches, such as 12.")
    from ..pipeline import bubble_fraction

    from fractions import Fraction

    right = next(m for m in range(1, 1000) if Fraction(4 - 1, m + 4 - 1) < Fraction(1, 10))   # exact, no rounding
    return verdict(answer, value == right,
                   f"{right}: 3 / {right + 3} = {bubble_fraction(4, right):.3f}, while {right - 1} micro-batches "
                   f"leave 3 / {right + 2} = {bubble_fraction(4, right - 1):.3f}, not below 0.1.",
                   "Write the bubble (S - 1) / (M + S - 1) with S = 4, require it below 0.1, and solve for a whole M.")


def nb03_split_state_gb(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, Adam, 3-way split: model state (parameters, gradients, slots) per device, in GB."""
    value = as_amount(answer, "GB")
    if value is None:
        return verdict(answer, False, "", "", form="Give a number of gigabytes (1 GB = 1e9 bytes), such as 3.2, "
                       "or a string with its unit, such as '3.2 GB' or '3.0 GiB'.")
    from ..memory import estimate_memory, preset_profile

    fullest = max(estimate_memory(preset_profile("dense_stack"), batch_size=32, strategy="split",
                                  devices=3).per_device, key=lambda d: d["total"])
    right = (fullest["parameters"] + fullest["gradients"] + fullest["optimizer"]) / 1e9
    slip = unit_slip(value, right, "GB", 0.02)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    return verdict(answer, abs(value - right) <= 0.02 * right,
                   f"about {right:.2f} GB: each device holds the parameters, gradients and Adam slots of its own "
                   "8 layers only, a third of the 25.8 GB.",
                   "A split gives each device the state of its own layers only. How many of the 24 layers does "
                   "each of 3 devices get, and what does the whole stack's state weigh?")
