"""Exercise checks of notebook 02."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, read, verdict

_NUMBER = "Give a whole number, e.g. 32."


def nb02_per_replica(answer: Any) -> Verdict:
    """Global batch 384 on 8 GPUs: how many samples does each replica get per step? ('48 samples', '48 samples
    per replica per step', '48 samples per step per replica' and, the question being about GPUs, '48 per GPU' too;
    '48 GPUs' is no such answer)"""
    from ..batching import split_batch

    if isinstance(answer, str):                  # the question's own words: '48 samples per replica per step'
        answer = re.sub(r"\s+(?:per|each|in\s+(?:one|a|each))\s+step\b", "", answer.strip(), flags=re.IGNORECASE)
        answer = re.sub(r"\s+(?:per|each|on\s+each|for\s+each|on\s+one)\s+(?:gpu|device)\b", " per replica", answer,
                        flags=re.IGNORECASE)
    got = read(answer, "int", words=("sample", "example", "per", "replica", "each"), form=_NUMBER)
    if got.refusal is not None:
        return got.refusal
    right = split_batch(384, 8)[0]
    return verdict(answer, got.value == right, f"{right}: the global batch is split across the replicas.",
                   "Global batch = per-replica batch x replicas.")


def nb02_steps_per_epoch(answer: Any) -> Verdict:
    """1438 training samples, global batch 384, 8 replicas: how many steps in one epoch (no drop_remainder)?"""
    from ..batching import plan_batches

    got = read(answer, "int", words=("step", "per", "epoch", "in", "one", "an"), form=_NUMBER)   # '4 steps per epoch'
    if got.refusal is not None:
        return got.refusal
    right = len(plan_batches(1438, 384, 8))
    return verdict(answer, got.value == right, f"{right}: three full steps and a partial one. Steps depend on the "
                   "global batch, not on the replica count.", "Divide, then round which way?")


def nb02_last_step(answer: Any) -> Verdict:
    """...and how is that last step split over the 8 replicas? (a list of 8 numbers)"""
    from ..batching import plan_batches

    form = "Give a list of 8 numbers, e.g. [1, 2, 3, 4, 5, 6, 7, 8]."
    got = read(answer, "int_list", form=form)
    if got.refusal is not None:
        return got.refusal
    if len(got.value) != 8:
        return verdict(answer, False, "", "", form=form)
    right = plan_batches(1438, 384, 8)[-1]
    return verdict(answer, got.value == right, f"{right}: ceil(286 / 8) = 36 per replica, filled in order.",
                   "How many samples are left after the full steps? The replicas are filled in order, each up to "
                   "the same share.")


def nb02_last_step_three(answer: Any) -> Verdict:
    """32 samples per replica on 3 replicas, 1438 training samples: how is the last step of an epoch split
    over the replicas? (a list of 3 numbers)"""
    form = "Give a list of 3 numbers, e.g. [1, 2, 3]."
    got = read(answer, "int_list", form=form)
    if got.refusal is not None:
        return got.refusal
    if len(got.value) != 3:
        return verdict(answer, False, "", "", form=form)
    from ..batching import plan_batches

    right = plan_batches(1438, 32 * 3, 3)[-1]
    return verdict(answer, got.value == right,
                   f"{right}: the global batch is 96, 14 full steps leave 94 samples, ceil(94 / 3) = 32 "
                   "per replica, filled in order.",
                   "First the global batch, then how many samples the full steps leave; each replica then takes "
                   "ceil(left / replicas) in turn.")


def nb02_sample_weight(answer: Any) -> Verdict:
    """A last step of 10 samples split [3, 3, 3, 1] over 4 replicas: with what weight does the sample on
    replica 3 count in the update? (a number or a fraction such as '1/7')"""
    got = read(answer, "number", form="Give a number or a fraction, e.g. 0.2 or '1/5'.")
    if got.refusal is not None:
        return got.refusal
    right = 1 / (4 * 1)
    return verdict(answer, abs(got.value - right) < 1e-6,
                   "1/4 = 1/(4 replicas x 1 sample): 2.5 times the 1/10 it would count on one device.",
                   "Each replica averages over its own samples, and the replicas' gradients are summed after each "
                   "loss is divided by the replica count: what does that leave for a replica holding one sample?")
