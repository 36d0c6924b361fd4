"""Exercise checks of notebook 03."""
from __future__ import annotations

import re
from typing import Any

from ._common import Slip, Verdict, percent_slip, read, unit_slip, verdict


def nb03_less_memory(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, batch 32, Adam: fullest device smaller with 'data' x4 or 'split' x2? The
    notebook's own names read too: 'model parallel', 'split x2', '2-way split', 'data parallel on 4 devices'."""
    from ..memory import estimate_memory, preset_profile

    if isinstance(answer, str):
        if re.search(r"\d\s*(?:[GM]i?B|bytes?)\b", answer, flags=re.I):       # 'split, 12.9 GB'
            return verdict(answer, False, "", "", form="Give the strategy only, 'data' or 'split' (with its count "
                           "if you like: 'split x2'); the question asks which, not how much.")
    def reading(text: Any) -> Any:
        return read(text, "choice", choices=("data", "split"),
                    aliases={"model": "split", "device": "split", "layer-split": "split", "layer": "split"},
                    words=("parallel", "parallelism", "way", "x", "2", "4", "on", "devices", "strategy", "the", "a"),
                    form="Answer 'data' or 'split'.")

    got = reading(answer)
    if got.refusal is not None and isinstance(answer, str):
        # 'split (2 devices)': read again with brackets and commas as spaces; a refusal quotes the answer as given
        bare = reading(re.sub(r"[()\[\],]", " ", answer))
        got = bare if bare.refusal is None else got
    if got.refusal is not None:
        return got.refusal
    counts = {int(n) for n in re.findall(r"\d+", answer)} if isinstance(answer, str) else set()
    if counts - {{"data": 4, "split": 2}[got.value]}:            # 'split x4', 'data x2': not what is compared
        return verdict(answer, False, "", "", form="The question compares data parallelism on 4 devices with a "
                       "2-way split: answer 'data' or 'split' (with its count if you like: 'data x4', 'split x2').")
    profile = preset_profile("Dense stack 24 x 8192 (1.6B parameters)")
    peaks = {s: estimate_memory(profile, batch_size=32, strategy=s, devices=d).peak
             for s, d in (("data", 4), ("split", 2))}
    right = min(peaks, key=lambda s: peaks[s])
    return verdict(answer, got.value == right, f"'{right}': {peaks['data'] / 1e9:.1f} GB for data x4 vs "
                   f"{peaks['split'] / 1e9:.1f} GB for split x2 on the fullest device.",
                   "Which strategy copies the whole model state onto every device?")


def nb03_bubble(answer: Any) -> Verdict:
    """Idle fraction with 4 pipeline stages and 8 micro-batches: 3/11, within 0.005 (0.27 and 0.273 count, 0.28
    does not)."""
    from ..pipeline import bubble_fraction

    got = read(answer, "number", words=("idle", "of", "the", "time"),
               form="Give a fraction between 0 and 1: a number, or '3/11'.")
    if got.refusal is not None:
        return got.refusal
    right = bubble_fraction(4, 8)
    slip = percent_slip(got.value, right, 0.005)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    return verdict(answer, abs(got.value - right) <= 0.005, f"{right:.3f} = (S - 1) / (M + S - 1).",
                   "(stages - 1) / (micro-batches + stages - 1).")


_UNIT = r"(?:m|micro-?batch(?:es)?)"
# A lower bound names the fewest whole number it allows: '>= 28', 'M >= 28', '28 or more' read as 28; '> 27',
# 'M > 27', 'more than 27' as 28 (whole micro-batches).
_AT_LEAST = (re.compile(rf"(?:{_UNIT}\s*)?(?:>=|≥|=>)\s*(\d+)(?:\s*{_UNIT})?"),
             re.compile(rf"(\d+)(?:\s*{_UNIT})?\s+or\s+more(?:\s+{_UNIT})?"))
_MORE_THAN = (re.compile(rf"(?:{_UNIT}\s*)?>\s*(\d+)(?:\s*{_UNIT})?"),
              re.compile(rf"(?:more|greater)\s+than\s+(\d+)(?:\s+{_UNIT})?"))


def _lower_bound(answer: Any) -> int | None:
    """The fewest whole number a lower bound written as a string allows; None for any other answer."""
    if not isinstance(answer, str):
        return None
    text = " ".join(answer.strip().strip("'\"").lower().split())
    for pattern in _AT_LEAST:
        if (found := pattern.fullmatch(text)) is not None:
            return int(found.group(1))
    for pattern in _MORE_THAN:
        if (found := pattern.fullmatch(text)) is not None:
            return int(found.group(1)) + 1
    return None


def nb03_microbatches(answer: Any) -> Verdict:
    """Fewest micro-batches that bring the bubble of a 4-stage pipeline below 10%."""
    # 'M = 28' and 'at least 28' read too: the question asks for the fewest, so 'at least' names the same number;
    # so do '>= 28', '28 or more', '> 27' and 'more than 27' (``_lower_bound``)
    bound = _lower_bound(answer)
    got = read(answer if bound is None else bound, "int", words=("micro-batch", "microbatch", "m", "at", "least"),
               form="Give a whole number of micro-batches, such as 12.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..pipeline import bubble_fraction

    from fractions import Fraction

    right = next(m for m in range(1, 1000) if Fraction(4 - 1, m + 4 - 1) < Fraction(1, 10))   # exact, no rounding
    return verdict(answer, value == right,
                   f"{right}: 3 / {right + 3} = {bubble_fraction(4, right):.3f}, while {right - 1} micro-batches "
                   f"leave 3 / {right + 2} = {bubble_fraction(4, right - 1):.3f}, not below 0.1.",
                   "Write the bubble (S - 1) / (M + S - 1) with S = 4, require it below 0.1, and solve for a whole M.")


def nb03_split_state_gb(answer: Any) -> Verdict:
    """Dense stack 24 x 8192, Adam, 3-way split: model state (parameters, gradients, slots) per device, in GB."""
    got = read(answer, "amount", unit="GB", form="Give a number of gigabytes (1 GB = 1e9 bytes), such as 3.2, "
               "or a string with its unit, such as '3.2 GB' or '3.0 GiB'.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..memory import estimate_memory, preset_profile

    fullest = max(estimate_memory(preset_profile("dense_stack"), batch_size=32, strategy="split",
                                  devices=3).per_device, key=lambda d: d["total"])
    right = (fullest["parameters"] + fullest["gradients"] + fullest["optimizer"]) / 1e9
    slip = unit_slip(value, right, "GB", 0.02)
    if not slip and abs(value - right * 1e3) <= 0.02 * right * 1e3:      # the right amount in MB
        slip = Slip(f"{value:g} is the right amount in MB, but the question asks for GB (1 GB = 1e9 bytes, "
                    f"1000 MB); say the unit when you use another: '{value:g} MB'.")
    if slip:
        return verdict(answer, False, "", "", form=slip)
    return verdict(answer, abs(value - right) <= 0.02 * right,
                   f"about {right:.2f} GB: each device holds the parameters, gradients and Adam slots of its own "
                   "8 layers only, a third of the 25.8 GB.",
                   "A split gives each device the state of its own layers only. How many of the 24 layers does "
                   "each of 3 devices get, and what does the whole stack's state weigh?")
