"""Exercise checks of notebook 08."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, read, unit_slip, verdict

FULL_MODEL = "Dense stack 8 x 8192 + head (notebook 08)"
FULL_BATCH = 32768
CARD_GB = 12
#: How close exercise 1's prediction must be. Mixed precision takes only 3% off that configuration's estimate (its
#: 16-bit kernel copies cost about what halving the activations saves), and halving the batch and the loss too (which
#: section 4 keeps float32) lands 1.6% below it: a band of 2% accepted that slip, 1% refuses it.
PEAK_TOLERANCE = 0.01
#: An answer this close to a likely slip's number gets that slip's hint.
SLIP_BAND = 0.04


def twin():
    """Notebook 08's twin: 8 Dense(512) layers and a 16-wide head, 1/16 as wide as the full model."""
    import keras

    return keras.Sequential([keras.Input((512,))] + [keras.layers.Dense(512, activation="relu") for _ in range(8)]
                            + [keras.layers.Dense(16)])


def _tight(gb: float) -> str:
    """The sentence a right answer gets where it fits only without section 10's 15% margin."""
    from ..memory import TIGHT_SHARE

    if gb <= TIGHT_SHARE * CARD_GB:
        return ""
    return (f" By section 10's margin that is tight ({gb:.1f} of {CARD_GB} GB, within 15%): on a real card, add "
            "another lever too.")


def _bf16_emulated() -> bool:
    """Whether a fresh process here runs bfloat16 emulated (the family it gets, read without TensorFlow)."""
    from .. import cpu_kernels

    return not cpu_kernels.bf16_by_onednn(cpu_kernels.expected_family())


def _keyword_form(answer: Any) -> Any:
    """A string answer written as code, 'accumulation_steps=16' or 'n_devices=4', with the underscores between
    words read as spaces, so that the answer reader sees the words; anything else as it is."""
    return re.sub(r"(?<=[A-Za-z])_(?=[A-Za-z])", " ", answer) if isinstance(answer, str) else answer


def _binary_slip(answer: Any, value: float, mb: float, tolerance: float) -> str | None:
    """The message for the right number of megabytes written with a binary unit ('35.9 MiB', read as 37.6 MB);
    None when it is not such a slip."""
    unit = re.search(r"(?<![a-z])([kmgt])(?:ib|[ei]bibytes?)\b", answer, re.IGNORECASE) if isinstance(answer, str) else None
    if unit is None:
        return None
    power = "kmgt".index(unit.group(1).lower()) + 1
    factor = 1024 ** power / 1000 ** power                # a KiB, MiB, GiB or TiB over its decimal unit
    if abs(value - mb * factor) > tolerance * mb * factor:
        return None
    binary, decimal = unit.group(1).upper() + "iB", unit.group(1).upper() + "B"
    return (f"That is {value:.4g} MB: a {binary} is {1024 ** power:,} bytes, a {decimal} "
            f"{1000 ** power:,.0f}. The question asks for MB (1e6 bytes), the unit the estimate counts in: is your "
            f"number a count of {decimal}? Then say so: '{value / factor / 1000 ** (power - 2):g} {decimal}'.")


def nb08_measured_peak(answer: Any, *, tolerance: float = PEAK_TOLERANCE) -> Verdict:
    """The twin (global batch 2048) with three levers at once, SGD, mixed_bfloat16 and 4 accumulation steps (a
    combination no cell prints): predict its peak in MB as the estimate counts it, from the parts of the start's
    estimate and its temporaries (within ``tolerance`` of ``estimate_memory``'s, 1%: any two of the levers are not
    it, leaving out mixed precision lands only 3% above, and halving the batch and the loss too 1.6% below). A
    right answer is then measured in a fresh process (half a minute, said before it starts) and the measurement
    shown beside it: on a CPU that emulates bfloat16 it reads well above the estimate (section 7)."""
    got = read(answer, "amount", unit="MB", form="Give a number of megabytes (1 MB = 1e6 bytes), e.g. 60, or a "
               "string with its unit, e.g. '60 MB'.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..memory import estimate_memory

    levers: dict[str, Any] = {"optimizer": "sgd", "dtype_policy": "mixed_bfloat16", "accumulation_steps": 4}
    model = twin()                                      # built once: every estimate below reads its shapes
    mb = estimate_memory(model, batch_size=2048, **levers).peak / 1e6
    said = f"{value:g} MB"
    if value >= 1e5 and not isinstance(answer, str):    # no twin weighs 100 GB: bytes, as an estimate's .peak is
        said, value = f"{value:g} bytes ({value / 1e6:g} MB)", value / 1e6
    slip = unit_slip(value, mb, "MB", tolerance) or _binary_slip(answer, value, mb, tolerance)
    if slip:
        return verdict(answer, False, "", "", form=slip)
    if abs(value - mb) > tolerance * mb:
        side = "above" if value > mb else "below"       # which way, never the value: try again first
        gradients = estimate_memory(model, batch_size=2048).per_device[0]["gradients"] / 1e6
        two_of_three = [estimate_memory(model, batch_size=2048, **{k: v for k, v in levers.items() if k != left})
                        .peak / 1e6 for left in levers]
        batch_and_loss = 2048 // 4 * (512 + 3 * 16) * 4 / 1e6     # 512 samples' inputs, targets, difference, gradient
        slips = {   # the likeliest slips, named by what was done wrong, never by the sum
            mb - gradients: "Does an accumulator replace the step's gradients? It sits beside them: each step "
                            "computes its gradients, then adds them into the accumulator.",
            mb - batch_and_loss / 2: "Does mixed precision halve the batch and the loss? They stay float32 "
                                     "(section 4): only the activations and the largest layer's working set halve."}
        slips.update({near: "That is about what two of the three levers give, or all three with a part mixed "
                            "precision halves left in float32: which did you leave out?" for near in two_of_three})
        near = min(slips, key=lambda n: abs(value - n))                 # the nearest slip, if it is near enough
        slip_hint = slips[near] if abs(value - near) <= SLIP_BAND * near else ""
        return verdict(answer, False, "", f"Your {said} is more than {tolerance:.0%} {side} the estimate. "
                       + (slip_hint or "Start from the twin's parts and its temporaries (section 1) and ask of each "
                          "lever which part it removes, adds or shrinks, and by how much (section 2's table, "
                          "section 4 for mixed precision)."))
    from ..measure import measure_memory

    print("Right by the estimate: measuring the twin with the three levers in a fresh process (under half a "
          "minute)...", flush=True)
    measured = measure_memory(twin, batch_size=2048, **levers)
    ratio = measured.peak_bytes / 1e6 / mb
    return verdict(answer, True, f"The estimate is {mb:.1f} MB: parameters, accumulators, one step's gradients "
                   f"(each as large as the parameters; SGD keeps no slots), 16-bit activations of 512 samples, and the "
                   f"temporaries: the 16-bit kernel copies, and 512 samples' working set, batch and loss. Measured "
                   f"just now, in a fresh process: {measured.peak_bytes / 1e6:.0f} MB ({ratio:.2f}x the estimate: "
                   f"the update's temporaries{', and the float32 copies of emulated bfloat16' if _bf16_emulated() else ''}).", "")


def nb08_accumulation_to_fit(answer: Any) -> Verdict:
    """The full model, Adam, float32, one device: the fewest accumulation steps (a power of 2) that fit a
    12 GB card."""
    # 'x8', '8 accumulation steps', 'accumulation x8', '×8': the notebook's own forms; and as code,
    # 'accumulation_steps=8', 'gradient_accumulation_steps=8', 'k=8' (section 6's name for it)
    got = read(_keyword_form(answer), "int", words=("accumulation", "gradient", "step", "x", "k"),
               form="Give a whole number of steps, such as 2.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..memory import estimate_memory, preset_profile

    profile = preset_profile(FULL_MODEL)
    right = next(k for k in (2 ** i for i in range(12))
                 if estimate_memory(profile, batch_size=FULL_BATCH, accumulation_steps=k).fits(CARD_GB))
    gb = estimate_memory(profile, batch_size=FULL_BATCH, accumulation_steps=right).peak / 1e9
    hint = ("Model state is fixed (parameters, gradients, Adam's slots) and the accumulators add one more "
            "copy of the parameters; only the activations and the temporaries shrink, by the number of steps.")
    if value > 0 and FULL_BATCH % value:     # estimate_memory refuses it (and its error names a count that splits)
        hint = (f"{value} steps do not split the batch of {FULL_BATCH:,} samples into equal small steps: every "
                f"accumulation step runs the same number of samples, so the count must divide {FULL_BATCH:,} (a "
                "power of 2 here). " + ("Which is the fewest that fits?" if value > right else hint))
    elif value > right and value > 0 and estimate_memory(profile, batch_size=FULL_BATCH,
                                                         accumulation_steps=value).fits(CARD_GB):
        hint = f"{value} steps fit, but so does a smaller power of 2: which is the fewest?"
    return verdict(answer, value == right, f"{right} steps: {gb:.1f} GB. The accumulators add a copy of the "
                   "parameters, so the activations and temporaries must shrink by more than that." + _tight(gb), hint)


def nb08_devices_without_zero(answer: Any) -> Verdict:
    """The full model, Adam, float32, plain data parallelism (no ZeRO): the fewest devices whose 12 GB
    cards each hold their share, among the counts that divide the global batch (Keras 3's fit refuses an
    uneven first step: notebook 02)."""
    got = read(_keyword_form(answer), "int", words=("device", "gpu", "replica", "card", "n", "num"), form="Give a whole number of devices, "
               "such as 2.")
    if got.refusal is not None:
        return got.refusal
    value = got.value
    from ..memory import estimate_memory, preset_profile

    profile = preset_profile(FULL_MODEL)

    def per_device(n: int) -> float:
        import warnings

        from ..batching import EmptyReplicaWarning, UnevenBatchWarning

        with warnings.catch_warnings():        # the check says itself which counts split the batch unevenly
            warnings.simplefilter("ignore", UnevenBatchWarning)
            warnings.simplefilter("ignore", EmptyReplicaWarning)
            return estimate_memory(profile, batch_size=FULL_BATCH, strategy="data", devices=n).peak / 1e9

    peaks = {n: per_device(n) for n in range(1, 9)}
    right = next(n for n in peaks if FULL_BATCH % n == 0 and peaks[n] <= CARD_GB)
    uneven = [n for n in peaks if n < right and peaks[n] <= CARD_GB]          # fit, but refused by fit
    hint = ("Every replica holds parameters, gradients and both Adam slots in full; only the batch, and "
            "so the activations and temporaries, is divided by the number of devices.")
    if value > 0 and FULL_BATCH % value and value in peaks and peaks[value] > CARD_GB:   # neither fits nor splits
        hint += (f" (And {FULL_BATCH:,} does not split evenly over {value} replicas, which Keras 3's fit refuses: "
                 "notebook 02, section 5.)")
    elif value > 0 and FULL_BATCH % value:
        hint = (f"Does {FULL_BATCH:,} split evenly over {value} replicas? Keras 3's fit refuses a first step "
                "whose replicas get different batch sizes (notebook 02, section 5).")
    elif value > right:
        hint = f"{value} devices fit, but so do fewer: which is the fewest that also splits the batch evenly?"
    aside = "".join(f" ({n} devices would hold {peaks[n]:.1f} GB, but {FULL_BATCH:,} does not split evenly over {n})"
                    for n in uneven)
    return verdict(answer, value == right, f"{right} devices: {peaks[right]:.1f} GB each. Every device keeps the "
                   f"whole model state; only the activations and temporaries are divided{aside}." + _tight(peaks[right]), hint)
