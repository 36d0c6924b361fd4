"""What ``explain`` says about one error: the ``Explanation`` and the readers that take the numbers of a learner's
own error (shapes, replicas, devices, batch splits, layer names, variable paths) from its text, or from a plan the
learner passes, so that an explanation never quotes the course's examples as if they were the learner's."""
from __future__ import annotations

import dataclasses
import numbers
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ._args import ArgumentTypeError, typed

@dataclass(frozen=True)
class Explanation:
    """What happened, why, the fix, and the notebook section that shows it."""
    key: str
    what: str
    why: str
    fix: str
    section: str

    def __str__(self) -> str:
        text = f"{self.what} {self.why} Fix: {self.fix} See {self.section}."
        return textwrap.fill(text, width=100, break_long_words=False, break_on_hyphens=False)

    def _repr_markdown_(self) -> str:
        return f"**{self.what}** {self.why} **Fix:** {self.fix} *See {self.section}.*"


Plan = list[list[int]]
#: Reads an error's text (and the plan passed, if any) into an explanation of that error.
Reader = Callable[[Explanation, str, "Plan | None"], Explanation]


# --------------------------------------------------------------------------- reading an error's numbers

def _dims(text: str) -> list[int]:
    """'0,8,8,1' -> [0, 8, 8, 1]."""
    return [int(v) for v in text.replace(" ", "").split(",") if v]


def _tf(dims: Sequence[int]) -> str:
    """A shape as TensorFlow prints it: [0,8,8,1]."""
    return "[" + ",".join(map(str, dims)) + "]"


def _split(sizes: Sequence[int]) -> str:
    """A per-replica split as the kit prints it: [1, 1, 1, 0]."""
    return "[" + ", ".join(map(str, sizes)) + "]"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _replica(text: str) -> str:
    """'replica 3' from an op name under tf.distribute (replica_3/...), or 'a replica' (replica 0's ops carry no
    prefix, and the kit's one-line summaries drop node names)."""
    found = re.search(r"\breplica_(\d+)/", text)
    return f"replica {found[1]}" if found else "a replica"


def _ceil_split(first: int, short_at: int, short_size: int, replicas: int | None) -> list[int] | None:
    """tf.distribute's split of a batch whose replica 0 got ``first`` samples and whose first smaller replica,
    ``short_at``, got ``short_size``: it fills the replicas in order, ceil(b / replicas) each, so every replica
    before that one got ``first`` and every one after it none. None where the numbers do not fit that rule."""
    if replicas is None or not 0 < short_at < replicas or not 0 <= short_size < first:
        return None
    return [first] * short_at + [short_size] + [0] * (replicas - short_at - 1)


class _OneStep(list):
    """A plan given as one step's split ([1, 1, 1, 0]): it names that step, not the data's size or global batch."""


def _check_plan(plan: Any) -> Plan | None:
    def sizes(step: Any) -> list[int] | None:
        if isinstance(step, (str, bytes)) or not isinstance(step, Sequence) or not step:
            return None
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) and int(v) >= 0 for v in step):
            return [int(v) for v in step]
        return None

    if plan is None:
        return None
    one = sizes(plan)
    if one is not None:                                   # one step's split, e.g. [1, 1, 1, 0]
        return _OneStep([one])
    steps = [sizes(s) for s in plan] if isinstance(plan, Sequence) and not isinstance(plan, (str, bytes)) else []
    if steps and all(s is not None for s in steps) and len({len(s) for s in steps if s}) == 1:
        return [s for s in steps if s is not None]
    raise ArgumentTypeError(f"explain: plan must be the per-replica split of every step, as "
                            f"kit.plan_batches(n_samples, global_batch, replicas) returns it (or one step's split, "
                            f"e.g. [1, 1, 1, 0]), got {typed(plan)}.")


def _plan_empty(plan: Plan | None) -> str:
    """What the plan passed says about empty replica batches (without one: how to pass it)."""
    if plan is None:
        return ("The error does not say how the batch was split: pass `plan=kit.plan_batches(n_samples, "
                "global_batch, replicas)` to have the step and its split named.")
    empty = [i for i, sizes in enumerate(plan) if 0 in sizes]
    if not empty:
        return (f"The plan passed gives every replica samples in all {_plural(len(plan), 'step')}, yet this error "
                "comes from a replica without any: is it the plan of this run (samples, global batch, replicas, "
                "drop_remainder)?")
    sizes = plan[empty[0]]
    who = [str(r) for r, n in enumerate(sizes) if n == 0]
    more = len(empty) - 1
    return (f"In the plan passed, step {empty[0] + 1} of {len(plan)} splits {_plural(sum(sizes), 'sample')} "
            f"{_split(sizes)}: replica{'s' if len(who) > 1 else ''} {', '.join(who)} get{'' if len(who) > 1 else 's'} "
            "none" + (f", and {_plural(more, 'more step')} leave{'s' if more == 1 else ''} a replica empty."
                      if more else "."))


def _with(base: Explanation, *, what: str = "", why: str = "", fix: str = "") -> Explanation:
    """``base`` with sentences about this error added to what, why and fix (never replacing the mechanism)."""
    def joined(general: str, specific: str) -> str:
        return f"{general} {specific}" if specific else general
    return dataclasses.replace(base, what=joined(base.what, what), why=joined(base.why, why),
                               fix=joined(base.fix, fix))


# --------------------------------------------------------------------------- an empty replica batch, oneDNN

_EMPTY_FIX = ("give every step a batch that fills every replica: a global batch that is a multiple of the replica "
              "count, and fixed-size batches where it does not divide the data (`drop_remainder=True` on the "
              "dataset's `batch()`, or `repeat()` with `steps_per_epoch`, or pad the data to a multiple of the "
              "global batch); `kit.check_batch_plan(n_samples, global_batch, replicas)` warns before training.")


def _plan_fix(plan: Plan | None) -> str:
    """The fix for the plan passed, in its numbers (``check_batch_plan``'s, so both say the same): a first step
    that splits unevenly or leaves a replica empty needs another global batch; a later empty step, fixed-size
    batches. "" without a whole plan (one step's split says nothing of the data), or where every step fills every
    replica."""
    if not plan or isinstance(plan, _OneStep):
        return ""
    from .replicas import _few_samples_fix, first_step_verdict

    replicas, samples = len(plan[0]), sum(map(sum, plan))
    if len(plan) == 1:               # all the data in one step: its global batch is that step or larger, unknown
        if len(set(plan[0])) == 1:
            return ""
        return (f"Here: all {samples} samples fill one step, split {plan[0]}: "
                + _few_samples_fix(samples, samples, replicas))
    global_batch = sum(plan[0])      # more than one step: the first is a whole global batch
    refused = first_step_verdict(plan, global_batch, replicas)
    if refused:
        return "Here: " + refused.split(" Fix: ", 1)[1]
    if any(0 in sizes for sizes in plan):
        full = sum(1 for sizes in plan if sum(sizes) == global_batch)
        steps = f"the full steps ({full} of {len(plan)}), each" if full > 1 else f"the full step (1 of {len(plan)}),"
        return f"Here: drop_remainder=True on the global batch of {global_batch} trains only {steps} split {plan[0]}."
    return ""


_ONEDNN_CONV = ("TensorFlow's oneDNN CPU kernels return a Conv2D's output for an empty batch in the shape of its "
                "input (the input's spatial size and channels, not the layer's output size and filters)")


def _read_empty_conv(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    who = _replica(text)
    here = ""
    if found := re.search(r"Unable to broadcast tensor of shape \[([\d,]+)\] to tensor of shape \[(0[\d,]*)\]", text):
        stats, got = _dims(found[1]), _dims(found[2])
        here = (f"Here {who}'s tensor has shape {_tf(got)}: 0 samples, with {_plural(got[-1], 'channel')} where "
                f"BatchNormalization's statistics {_tf(stats)} have {stats[-1]}.")
    elif found := re.search(r"Matrix size-incompatible: In\[0\]: \[(0[\d,]*)\], In\[1\]: \[([\d,]+)\]", text):
        got, kernel = _dims(found[1]), _dims(found[2])
        here = (f"Here the matrix product on {who} got a tensor of shape {_tf(got)} (0 samples of "
                f"{_plural(got[-1], 'feature')}) for a kernel of shape {_tf(kernel)}, which takes {kernel[0]}.")
    elif found := re.search(r"Incompatible shapes: \[([\d,]+)\] vs\. \[([\d,]+)\]", text):
        a, b = _dims(found[1]), _dims(found[2])
        if len(a) == len(b) == 1 and "batch_normalization.py" in text:
            here = (f"Here BatchNormalization's update of its moving statistics on {who} met {a[0]} values (one "
                    f"per channel of the layer) and {b[0]} (one per channel of that replica's tensor).")
        else:
            here = f"Here {who} met tensors of shapes {_tf(a)} and {_tf(b)}, which do not broadcast."
    elif found := re.search(r"got (\d+) and (\d+)", text):
        here = (f"Here BatchNormalization's gradient (RsqrtGrad) on {who} met {found[1]} values against "
                f"{found[2]}: per-channel values for two different channel counts.")
    call = _call_of(text)
    if call in _EVALUATION_FIX:                 # every sample must count: no drop_remainder, another fix
        return dataclasses.replace(_with(base, why=" ".join(filter(None, [here, _plan_empty(plan)]))),
                                   fix=_EVALUATION_FIX[call])
    # BatchNormalization's batch statistics, their gradient and the moving statistics' update run in training only
    training = call in ("fit", "train_on_batch") or bool(re.search(
        r"Unable to broadcast tensor of shape \[1(?:,1)*,\d+\]|RsqrtGrad|batch_normalization\.py", text))
    unsure = "" if training else (
        "If it was `evaluate` or `predict` that failed, which must count every sample, fixed-size batches are no "
        "fix: pad predict's rows to a multiple of the global batch and cut the padding off its output, and evaluate "
        "a copy outside the strategy (saved, then loaded outside `strategy.scope()`).")
    return _with(base, why=" ".join(filter(None, [here, _plan_empty(plan)])),
                 fix=" ".join(filter(None, [_plan_fix(plan), unsure])))


def _call_of(text: str) -> str:
    """evaluate or predict where the error's text or traceback says so ("" otherwise): predict's graph error names
    `predict_step`; evaluate's names nothing, the kit's note from its traceback does."""
    if "predict_step" in text:
        return "predict"
    if "test_step" in text:
        return "evaluate"
    found = re.search(r"\[raised in Keras's (\w+)\]", text)
    call = found[1] if found else ""
    return {"test_on_batch": "evaluate", "predict_on_batch": "predict"}.get(call, call)


_EVALUATION_FIX = {
    "predict": "predict must keep every row, so fixed-size batches (`drop_remainder=True`) are no fix: pad the rows "
               "to a multiple of the global batch and cut the padding off the output (pad = -len(x) % "
               "global_batch; `model.predict(np.concatenate([x, x[:pad]]))[:len(x)]`), or predict with a copy "
               "outside the strategy (saved, then loaded outside `strategy.scope()`).",
    "evaluate": "evaluate must count every sample, so fixed-size batches (`drop_remainder=True`) are no fix: evaluate "
                "a copy outside the strategy (saved, then loaded outside `strategy.scope()`: replica 0's weights and "
                "statistics). Padding the data with rows of sample_weight=0 is no fix either: the loss Keras "
                "reports, and `metrics`, count the padded rows."}


_EMPTY_SHAPES = re.compile(r"to tensor of shape \[0,|RsqrtGrad|Incompatible shapes: \[0,|Matrix size-incompatible: "
                           r"In\[0\]: \[0,")


def _claims_empty_conv(text: str) -> bool:
    """'Incompatible shapes' of two 1-D shapes is the empty conv batch only in BatchNormalization's update of its
    moving statistics: the whole error's traceback names keras's batch_normalization.py."""
    return bool(_EMPTY_SHAPES.search(text)) or "batch_normalization.py" in text


# --------------------------------------------------------------------------- shapes differing between replicas

def _addn_shapes(text: str) -> tuple[int, list[int], int, list[int]] | None:
    found = re.search(r"Input (\d+): \[([\d,]*)\] != input (\d+): \[([\d,]*)\]", text)
    return (int(found[1]), _dims(found[2]), int(found[3]), _dims(found[4])) if found else None


def _only_batch_differs(a: list[int], b: list[int]) -> bool:
    return len(a) == len(b) >= 1 and a[1:] == b[1:] and a[0] != b[0]


def _claims_collective(text: str) -> bool:
    """The collective entry takes an AddN whose shapes differ beyond the batch dimension (per-channel sums)."""
    if "Shape mismatch in the collective instance" in text:
        return True
    shapes = _addn_shapes(text)
    return shapes is not None and not _only_batch_differs(shapes[1], shapes[3])


def _read_collective(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    here = []
    found = re.search(r"Op at device \S*?device:(\w+:\d+) expected shape \[([\d,]*)\] but another member in the "
                      r"group expected shape \[([\d,]*)\]", text)
    shapes = _addn_shapes(text)
    if found:
        mine, other = _dims(found[2]), _dims(found[3])
        here.append(f"Here the replica on {found[1]} sent shape {_tf(mine)} and another replica {_tf(other)}, "
                    "flattened as TensorFlow all-reduces them.")
        if len(mine) == len(other) == 1:
            # Which member reports is a race, so the odd one is the plan's empty replica, wherever it is named. Its
            # device names its replica only on one machine with every device of a kind in order (kit.setup's
            # logical devices); elsewhere (another worker, MirroredStrategy(["GPU:2", "GPU:3"])) no guess is made.
            # The abort stops the run at the first step with an empty replica: only that step's empty ones count.
            first = next((sizes for sizes in plan or [] if 0 in sizes), [])
            empty = {r for r, n in enumerate(first) if n == 0}
            local = re.search(r"/job:localhost/replica:0/task:0/device:CPU:(\d+) expected", text)
            odd = layer = 0
            if empty and local and len(empty) < len(first) and int(local[1]) < len(first):
                reporter = int(local[1])
                odd, layer, who = ((mine[0], other[0], "that replica's") if reporter in empty else
                                   (other[0], mine[0], "the other replica's"))
            here.append(f"If these are synchronized BatchNorm's sums, {who} activations had "
                        f"{_plural(odd, 'channel')} where the layer has {layer}." if odd else
                        "If these are synchronized BatchNorm's sums, one replica's activations had another channel "
                        f"count than the other's ({mine[0]} and {other[0]}).")
    elif shapes and "Shape mismatch in the collective instance" not in text:
        i, a, j, b = shapes
        here.append(f"Here the sum on one device (AddN: ReductionToOneDevice adds the replicas' tensors) got "
                    f"{_tf(a)} and {_tf(b)}")
        if len(a) == len(b) and a[:-1] == b[:-1] and set(a[:-1]) <= {1}:
            here[-1] += f": per-channel shapes [1, ..., C] for {a[-1]} and for {b[-1]} channels."
        else:
            here[-1] += "."
    if plan is not None:
        here.append(_plan_empty(plan))
    explanation = _with(base, why=" ".join(here), fix=_plan_fix(plan))
    if "Shape mismatch in the collective instance" in text:     # an aborted collective poisons the process
        explanation = _with(explanation, fix="Restart the kernel (or process) first: after this abort every later "
                                             "collective in it fails too.")
    return explanation


# Keras 3 all-reduces the gradients inside the optimizer's name scope ("adam_1/CollectiveReduceV2").
_GRADIENT_COLLECTIVE = re.compile(r"node (?:\S+/)?(?:sgd|adam|adamw|rmsprop|adagrad|adadelta|adamax|nadam|ftrl|lion|"
                                  r"lamb|loss_scale_optimizer|optimizer)(?:_\d+)?/Collective\w*", re.I)


def _claims_collision(text: str) -> bool:
    """A collective shape mismatch in the optimizer's gradient all-reduce: one model's replicas send equal shapes,
    so the other member was another strategy's collective under the same key."""
    return "Shape mismatch in the collective instance" in text and bool(_GRADIENT_COLLECTIVE.search(text))


def _read_collision(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    found = re.search(r"collective instance (\d+)\. Op at device \S*?device:(\w+:\d+) expected shape \[([\d,]*)\] "
                      r"but another member in the group expected shape \[([\d,]*)\]", text)
    if not found:
        return base
    mine, other = _dims(found[3]), _dims(found[4])
    return _with(base, why=f"Here instance {found[1]}'s all-reduce had gradients packed as {_tf(mine)} on {found[2]} "
                           f"where its group expected {_tf(other)}: two models' gradient sizes.")


def _read_uneven(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    """The error carries the first batch's split, not where that batch came from: the global batch, or a whole data
    set smaller than the batch (validation data, or evaluate's), which the explanation says when no plan tells."""
    shapes = _addn_shapes(text)
    replicas_found = re.search(r"AddN_N_(\d+)_device", text)
    replicas = int(replicas_found[1]) if replicas_found else (len(plan[0]) if plan else None)
    here, fix = [], ""
    split: list[int] | None = None
    even_plan = plan is not None and len(set(plan[0])) == 1
    kits = re.search(r"Keras 3 fit failed: global batch \d+ over", text)    # train_digits: the global batch, known
    if shapes:
        i, a, j, b = shapes
        split = _ceil_split(a[0], j, b[0], replicas) if i == 0 else None
        here.append(f"Here replica {i}'s first batch had {_plural(a[0], 'sample')} and replica {j}'s {b[0]} "
                    f"(tensors {_tf(a)} and {_tf(b)})" + (
                        f": on {replicas} replicas, filled in order, a first batch of {sum(split)} split "
                        f"{_split(split)}" if split else "") + (
                        ", which is the global batch or, when a data set (often the validation data) is smaller "
                        "than the batch, that whole set." if split and plan is None and not kits else "."))
    if plan is not None:
        if not even_plan:
            here.append(f"In the plan passed, step 1 splits {_plural(sum(plan[0]), 'sample')} {_split(plan[0])}.")
            split = split or plan[0]
        else:
            here.append(f"The plan passed splits step 1 evenly {_split(plan[0])}: so the batch that failed is "
                        "another data set's first batch, such as validation data (or evaluate's) smaller than the "
                        "batch, or the plan is not this run's.")
    if shapes and plan is not None and not even_plan and split and split != plan[0]:
        here.append("The error's first batch is not the plan's step 1: is it the plan of this run, or was it the "
                    "validation data's?")
    planned = _plan_fix(plan) if plan is not None and not even_plan else ""
    if planned:                                          # the plan's numbers: batches the data fill
        fix = planned
    elif split:
        batch, count = sum(split), len(split)
        below = batch - batch % count
        choices = f"{below} or {below + count}" if below else f"{count} or {2 * count}"
        smaller = (f", or a `validation_batch_size` (`batch_size` in `evaluate`) that is a multiple of {count} and at "
                   f"most {batch}" if below else "")
        as_set = f"{below} samples ({below + count} if the data hold that many)" if below else f"{choices} samples"
        plan_it = (" (pass the run's plan, kit.explain(err, plan=kit.plan_batches(n_samples, global_batch, replicas)), "
                   "to have the training data's size taken into account)." if plan is None else ".")
        if even_plan:
            fix = f"Here: validation data (or evaluate's) of {as_set} instead of {batch}{smaller}."
        elif kits:
            fix = f"Here: {choices} instead of {batch} on {count} replicas, if the data hold that many samples{plan_it}"
        else:
            fix = (f"Here: as the global batch, {choices} instead of {batch} on {count} replicas; as a data set "
                   f"smaller than the batch (validation data, say), {as_set}{smaller}{plan_it}")
    return _with(base, why=" ".join(here), fix=fix)


# --------------------------------------------------------------------------- loading weights

def _read_weights(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    here = []
    total = re.search(r"A total of (\d+) objects could not be loaded", text)
    listed = re.search(r"List of objects that could not be loaded:\s*\[(.*?)\]\s*$", text, re.S | re.M)
    names = re.findall(r"<(\w+) name=([^,>]+)", listed[1]) if listed else []
    unused = "those names are the model's, and play no part in the matching"
    if total:
        which = (": " + ", ".join(f"'{n}' ({cls})" for cls, n in names[:6]) + (", ..." if len(names) > 6 else "")
                 + f"; {unused}" if names else "")
        here.append(f"Here {_plural(int(total[1]), 'object')} of the model found nothing usable in the file{which}.")
    if found := re.search(r"Layer '([^']+)' expected (\d+) variables, but received (\d+) variables", text):
        name, expected, received = found[1], int(found[2]), int(found[3])
        at = "nothing" if received == 0 else str(received)
        here.append(f"Layer '{name}' expected {expected} variables and the file holds {at} at its path"
                    + ("." if names else f" ('{name}' is the model's name: it plays no part in the matching)."))
    if found := re.search(r"variable\.shape=(\([\d, ]*\)), Received: value\.shape=(\([\d, ]*\))", text):
        path = re.search(r"<Variable path=([^,]+),", text)
        variable = f"variable {path[1]}" if path else "model's variable"
        here.append(f"The {variable} has shape {found[1]}, the file's value at its place {found[2]}: a layer of "
                    "another size at the same position.")
    return _with(base, why=" ".join(here))


# --------------------------------------------------------------------------- the others' numbers

def _read_per_replica(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    found = re.search(r"`global_batch_size` (\d+) is not divisible by `num_replicas_in_sync` (\d+)", text)
    if not found:
        return base
    batch, count = int(found[1]), int(found[2])
    below = batch - batch % count
    choices = f"{below} or {below + count}" if below else f"{count} or {2 * count}"
    return dataclasses.replace(base, why=base.why + f" Here {batch} over {count} replicas leaves {batch % count}.",
                               fix=f"choose a global batch that is a multiple of `strategy.num_replicas_in_sync`: "
                                   f"{choices} instead of {batch} on {count} replicas.")


def _read_group(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    found = re.search(r"is joining a group with size ?(\d+), but that group has size (\d+)", text)
    if not found:
        return base
    return _with(base, why=f"Here a strategy over {found[1]} devices joined the group that one over {found[2]} "
                           "devices had created.")


def _read_oom(base: Explanation, text: str, plan: Plan | None) -> Explanation:
    found = re.search(r"OOM when allocating tensor with shape\s*\[([\d,]*)\](?: and type (\w+))? on (\S+)", text)
    if not found:
        return base
    device = found[3].rsplit("device:", 1)[-1]
    kind = f" of {found[2]}" if found[2] else ""
    return _with(base, why=f"Here the allocation that failed was a tensor of shape {_tf(_dims(found[1]))}{kind} on "
                           f"{device}.")


