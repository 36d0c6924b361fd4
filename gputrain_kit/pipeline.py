"""The price of a naive layer split, and the GPipe schedule that hides most of it (pure Python + a timer)."""
from __future__ import annotations

from dataclasses import dataclass

from ._args import require_int

__all__ = ["Slot", "gpipe_schedule", "bubble_fraction"]


@dataclass(frozen=True)
class Slot:
    stage: int        # device index
    microbatch: int
    start: int        # time slot (one slot = one stage on one micro-batch)
    end: int


def gpipe_schedule(stages: int, microbatches: int) -> list[Slot]:
    """Forward pass of GPipe: stage s works on micro-batch m in time slot s + m."""
    stages = require_int("gpipe_schedule", "stages", stages, minimum=1)
    microbatches = require_int("gpipe_schedule", "microbatches", microbatches, minimum=1)
    return [Slot(s, m, s + m, s + m + 1) for s in range(stages) for m in range(microbatches)]


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle share of the devices' time: (S - 1) / (M + S - 1). M = 1 is the naive split."""
    slots = gpipe_schedule(stages, microbatches)
    span = max(s.end for s in slots)
    return 1 - len(slots) / (stages * span)


