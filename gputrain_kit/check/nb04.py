"""Exercise checks of notebook 04."""
from __future__ import annotations

import re
from typing import Any

from ._common import Verdict, as_choice, read, verdict

_SAVE_CHOICES = ("wrapper", "template")
_SAVE_WORDS = ("the", "model", "s", "weights", "save")


def _one_of_two(answer: Any) -> Any:
    """'template, not wrapper' (the one chosen, then the other one named as not chosen) and 'not wrapper, template'
    (the other way round) as 'template'; anything else as it is (read() refuses a lone negated choice such as
    'not wrapper')."""
    if not isinstance(answer, str):
        return answer
    chosen_first = re.fullmatch(r"\s*(.+?)\s*[,;]?\s*(?:and\s+|but\s+)?(?:not|never)\s+(.+?)[\s.!]*", answer,
                                re.I)
    other_first = re.fullmatch(r"\s*(?:not|never)\s+(.+?)\s*(?:[,;]\s*(?:but\s+)?|\s+but\s+)(.+?)[\s.!]*", answer,
                               re.I)
    for parts in (chosen_first.groups() if chosen_first else None,
                  other_first.groups()[::-1] if other_first else None):
        if parts:
            chosen, other = (as_choice(part, _SAVE_CHOICES, words=_SAVE_WORDS) for part in parts)
            if chosen and other and chosen != other:
                return chosen
    return answer


def nb04_what_to_save(answer: Any) -> Verdict:
    """Trained through a parallel wrapper: save the 'wrapper' or the 'template'? ('template, not wrapper' and
    'not wrapper, template' too)"""
    got = read(_one_of_two(answer), "choice", choices=_SAVE_CHOICES, words=_SAVE_WORDS,
               form="Answer 'wrapper' or 'template'.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value == "template",
                   "The template owns the weights; its file loads into the model you deploy.",
                   "Which file loaded into a fresh template in section 1?")


def nb04_reshuffle(answer: Any) -> Verdict:
    """reshuffle_each_iteration needed for a bit-identical resume (True/False; written as the argument too:
    'reshuffle_each_iteration=False')."""
    if isinstance(answer, str):
        answer = re.sub(r"^\s*(?:shuffle\s*\(.*?)?reshuffle_each_iteration\s*[=:]\s*(.*?)\)?\s*$", r"\1", answer)
    got = read(answer, "bool", form="Answer True or False.")
    if got.refusal is not None:
        return got.refusal
    return verdict(answer, got.value is False,
                   "With one fixed order, the resumed epochs see exactly the same batches.",
                   "What happens to a per-epoch shuffle when the process restarts?")


def nb04_resumed_epochs(answer: Any) -> Verdict:
    """epochs=10 with BackupAndRestore, crash at the start of epoch 7: which epochs (from 1) does the restart train?
    (a list, in any order; 'epochs 7 to 10', 'epoch 7 to epoch 10' and '7-10' too; one number, a count or a single
    epoch, is refused as a form)"""
    form = "Give the epoch numbers, counted from 1, as a list such as [2, 3]."
    if isinstance(answer, (int, str)) and not isinstance(answer, bool) and \
            re.fullmatch(r"\s*\d+\s*(?:epochs?)?\s*", str(answer), flags=re.I):
        # one number reads as a count ('4': how many) or as one epoch: the question asks which ones
        return verdict(answer, False, "", "", form="One number is a count, or a single epoch: the question asks which "
                                                   "epochs the restart trains. " + form)
    if isinstance(answer, str):      # 'epoch 7 to epoch 10': the word before each number, as in 'epochs 7 to 10'
        answer = re.sub(r"((?:\bto|\bthrough|\buntil|-|–)\s*)epochs?\s+(?=\d)", r"\1", answer, flags=re.I)
    got = read(answer, "int_list", words=("epoch",), ranges=True, form=form)
    if got.refusal is not None:
        return got.refusal
    # the epochs in any order count ([10, 9, 8, 7]); a repeated one does not ([7, 8, 9, 10, 10])
    return verdict(answer, sorted(got.value) == [7, 8, 9, 10],
                   "Epochs 1 to 6 finished and were backed up; the restarted fit trains 7, 8, 9 and 10.",
                   "BackupAndRestore saves at the end of every epoch that finished. Which was the last one, and "
                   "does the restarted fit stop at the same epochs=10?")


def nb04_weight_group(answer: Any) -> Verdict:
    """Sequential: Dense 'encoder', LayerNormalization 'norm', Dense 'bottleneck', Dense 'logits': logits' group?
    ('dense_2' and 'layers/dense_2/vars' too; a dataset inside it, 'layers/dense_2/vars/0', a name the file does not
    use, 'layers/dense_2/vars/kernel', and another case, 'Layers/Dense_2', are refused with their own hint)"""
    got = read(answer, "text", form="Give the group as a string, such as 'layers/dense_1'.")
    if got.refusal is not None:
        return got.refusal
    text = got.value.strip().strip("/")
    # always matches: the group, then what points inside it ('/vars/0', '/vars/kernel', '/kernel')
    parts = re.fullmatch(r"(?:layers/)?(.*?)(?:/vars)?(/[^/]+)?", text.lower())
    group, dataset = parts.groups() if parts else (text, None)
    if group == "dense_2" and text != text.lower():
        return verdict(answer, False, "", f"HDF5's keys are case-sensitive: h5py finds no group named {text!r} in "
                       "the file. Keras writes every group's name in lower case (the class's name in snake_case, "
                       "then the occurrence), as weight_groups() printed them in sections 1 and 2: write it that way.")
    if group == "dense_2" and dataset and dataset[1:].isdigit():
        return verdict(answer, False, "", f"{text!r} is a dataset inside the right group: vars{dataset} holds one of "
                       "the layer's variables (vars/0 its kernel, vars/1 its bias). The question asks for the group "
                       "itself, which holds them both: leave out the part from /vars on.")
    if group == "dense_2" and dataset:
        return verdict(answer, False, "", f"{text!r} points inside the right group, by a name the file does not use: "
                       "Keras numbers a layer's variables under vars (vars/0 its kernel, vars/1 its bias), as "
                       "weight_groups() printed them. The question asks for the group itself, which holds them both: "
                       "leave out the part after the group.")
    return verdict(answer, group == "dense_2",
                   "'layers/dense_2': 'logits' is the third Dense layer; its name and the LayerNormalization "
                   "in between play no part.",
                   "Loading never reads the layer's name. Count only the layers of its class that come before it "
                   "(the first one gets no number).")
