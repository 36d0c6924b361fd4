"""Exercise checks of notebook 04."""
from __future__ import annotations

from typing import Any

from ._common import Verdict, as_bool, as_choice, verdict


def nb04_what_to_save(answer: Any) -> Verdict:
    """Trained through a parallel wrapper: save the 'wrapper' or the 'template'?"""
    choice = as_choice(answer, ("wrapper", "template"))
    return verdict(answer, choice == "template",
                   "The template owns the weights; its file loads into the model you deploy.",
                   "Which file loaded into a fresh template in section 1?",
                   form=None if choice is not None else "Answer 'wrapper' or 'template'.")


def nb04_reshuffle(answer: Any) -> Verdict:
    """reshuffle_each_iteration needed for a bit-identical resume (True/False)."""
    value = as_bool(answer)
    return verdict(answer, value is False, "With one fixed order, the resumed epochs see exactly the same batches.",
                   "What happens to a per-epoch shuffle when the process restarts?",
                   form=None if value is not None else "Answer True or False.")
