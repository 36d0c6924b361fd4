"""Notebook 08, section 7's aside (cells 51-53): what emulated bfloat16 does to the twin's measured peak, measured as
the notebook measures it (both CPU kernel families, each in processes of its own, the largest of 4 steps). Where
oneDNN computes bfloat16 natively the same run asserts the saving (cpu_kernels' rule: exactly where it runs bf16).

Ninth read: the prose said "raised the peak, by 4 to 13%" under a committed +0% and +3%. The words now say "most kept
the peak within 1% or raised it, by up to about 15%, and a few took a little off" (2% and 6% seen; 13.2% the largest
rise seen), and the cell prints "kept" within 1%. This pins them to a run: where bf16 is emulated, no saving beyond
the notebook's 15% tolerance (the estimate says 21%), and no rise beyond about 15% plus the peak's noise."""
from __future__ import annotations

from gputrain_kit import check, cpu_kernels
from gputrain_kit.measure import start_measuring_families

PRECISIONS = {"float32": {}, "mixed_bfloat16": {"dtype_policy": "mixed_bfloat16"}}


def _went(change: float) -> str:
    """Cell 51's words for a change of the peak (its rule, repeated: the notebook's code is pinned to it below)."""
    return "kept the peak, within 1%" if abs(change) < 0.01 else ("raised" if change > 0 else "lowered") + " the peak"


def test_cell_51s_words_follow_the_sign_with_a_1_percent_tolerance():
    assert [_went(c) for c in (0.001, -0.004, 0.03, -0.06)] == [
        "kept the peak, within 1%", "kept the peak, within 1%", "raised the peak", "lowered the peak"]
    assert f"{0.0013:+.1%}" == "+0.1%"                 # one decimal: a +0.1% no longer reads "+0%: raised"


def test_emulated_bfloat16_saves_nothing_near_the_estimate_and_rises_at_most_by_the_records_and_noise():
    pending = start_measuring_families(check.twin, PRECISIONS, batch_size=2048, steps=4)
    result = pending.result(timeout=400)
    emulated = {f: m for f, m in result.items() if not cpu_kernels.bf16_by_onednn(f)}
    assert "eigen" in emulated                              # Eigen emulates bf16 on every CPU
    for family, measured in emulated.items():
        change = measured["mixed_bfloat16"].peak_bytes / measured["float32"].peak_bytes - 1
        assert -0.15 < change < 0.15 + 0.10, (family, change)   # cell 53's tolerance; about 15%, and noise
        print(family, f"{change:+.1%}", _went(change))
    # where oneDNN's bf16 kernels run (AVX-512, or AVX-NE-CONVERT), they take more than 5% off (the same
    # measurement once served test_cpu_kernels too: one run of the four configurations now answers both)
    for family in set(result) - set(emulated):
        saving = 1 - result[family]["mixed_bfloat16"].peak_bytes / result[family]["float32"].peak_bytes
        assert saving > 0.05, f"oneDNN's bf16 kernels take only {saving:.0%} off the peak"
