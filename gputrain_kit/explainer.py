"""TensorFlow's distributed errors in plain words: what happened, why, the fix, and where the course shows it.

``explain(error)`` matches an exception (or the text of one) against messages produced by the installed
TensorFlow/Keras in the tests (``tests/unit/test_explain.py`` and ``tests/unit/test_explain_numbers.py`` make each
one for real), and returns an ``Explanation`` whose ``str()`` is a few sentences about *that* error: the shapes,
devices, replica and sample counts, layer names and variable paths it reads from the error's text, or from
``plan=`` (``kit.plan_batches(...)``'s per-replica split of every step) when one is passed. Where the error does
not carry a number the explanation says it in general terms; it never quotes the course's examples as if they
were the learner's. ``with explain_errors(): ...`` re-raises a known error with its explanation attached: a note
on Python 3.11+ (shown under the traceback), a chained ``ExplainedError`` before. An error it does not know gives
a falsy ``Unknown``.

Two GPU-only messages (NCCL on logical GPUs of one physical GPU, out of memory) are matched on the
texts NCCL and TensorFlow document; they are tested on a GPU machine when one is available.
"""
from __future__ import annotations

import contextlib
import re
import sys
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ._args import ArgumentTypeError, typed

__all__ = ["Explanation", "explain", "explain_errors", "ExplainedError", "KNOWN"]

from .explain_readers import (  # noqa: E402  (the explanation and the readers the entries name)
    Explanation,
    _check_plan,
    _read_empty_conv,
    _claims_empty_conv,
    _claims_collective,
    _claims_collision,
    _read_collective,
    _read_collision,
    _read_uneven,
    _read_weights,
    _read_per_replica,
    _read_group,
    _read_oom,
    Reader,
    _EMPTY_FIX,
    _ONEDNN_CONV)



@dataclass(frozen=True)
class _Entry:
    explanation: Explanation              # in general terms (no numbers): docs/errors.md, and errors that carry none
    patterns: tuple[str, ...]
    read: Reader | None = None             # the explanation of one error, with the numbers its text carries
    claims: Callable[[str], bool] | None = None   # a further test of a text the patterns matched



_ENTRIES = (
    _Entry(Explanation(
        "empty-replica-conv",
        "A replica got an empty batch (0 samples), and a Conv2D, or a layer after one, met a tensor of the wrong "
        "shape on it.",
        "Under tf.data's default auto-shard policy (AUTO on in-memory data, or DATA, which Keras sets for NumPy "
        "arrays) tf.distribute gives each replica ceil(b / replicas) of a global batch of b, in replica order; "
        "with AutoShardPolicy.OFF, or AUTO on a pipeline that reads files, it pours a short last batch into the full "
        "batch's even shares, in replica order. "
        "Either way a short last batch can leave the last replicas empty. " + _ONEDNN_CONV + ", and the next operation that "
        "needs the layer's output shape fails (BatchNormalization, its all-reduce, or the Dense layer after pooling; "
        "a Conv2D called eagerly, outside fit, evaluate and predict, fails in its own bias add when the input's "
        "channels do not broadcast to its filters). "
        "Its portable Eigen kernels, and the GPU of the kit's record, give the right shape and train on (into NaN "
        "where a BatchNormalization that is not synchronized averages 0 samples).",
        _EMPTY_FIX, "notebook 05, sections 1 and 5"),
        (r"Unable to broadcast tensor of shape \[1(?:,1)*,\d+\] to tensor of shape \[0,",
         r"RsqrtGrad.*got \d+ and \d+", r"Incompatible shapes: \[0,",
         r"Incompatible shapes: \[\d+\] vs\. \[\d+\]",           # BatchNorm's moving-mean update (its traceback)
         r"Matrix size-incompatible: In\[0\]: \[0,"),      # conv net without BN, oneDNN: the Dense after it
        _read_empty_conv, _claims_empty_conv),
    _Entry(Explanation(
        "collective-instance-collision",
        "A gradient all-reduce met tensors of another shape under its collective key, and TensorFlow aborted it: "
        "a second MirroredStrategy reused the keys of a first one in this process.",
        "Every MirroredStrategy made with default settings (CollectiveAllReduce) numbers its collectives from the "
        "same keys, so a second one over the same devices joins the first one's group and reuses its instance "
        "numbers. TensorFlow keeps each instance's shape from its first use: when the second strategy trains a "
        "model whose gradients pack to another size, its first all-reduce does not match. One model's replicas "
        "send gradients of equal shapes, so a mismatch in the optimizer's all-reduce points to two strategies, "
        "not to the data.",
        "restart the kernel (after this abort every later collective in it fails too), then create one strategy "
        "and build every model in its scope, or give any further strategy "
        "`cross_device_ops=tf.distribute.ReductionToOneDevice()`, which uses no collectives "
        "(`kit.training.strategy_for(k)` makes such strategies).",
        "notebook 01, section 1, and notebook 02, section 3"),
        (r"Shape mismatch in the collective instance",),
        _read_collision, _claims_collision),
    _Entry(Explanation(
        "collective-shape-mismatch",
        "The replicas sent tensors of different shapes into one cross-replica sum (an all-reduce every replica "
        "joins), and TensorFlow aborted it.",
        "In Keras the usual source is BatchNormalization(synchronized=True): it all-reduces per-channel sums of "
        "shape [1, ..., C] (`_compute_moments_sync`, keras/src/backend/tensorflow/nn.py) whatever the batch, so "
        "smaller or uneven replica batches train. Their shapes differ when a replica's batch is empty (0 samples) "
        "and TensorFlow's oneDNN CPU kernels return that replica's Conv2D output in the input's shape (spatial "
        "size and channels) instead of the layer's; its Eigen kernels give the right shape and train on. (A model without "
        "synchronized BatchNormalization meets it when a second default MirroredStrategy in the process reuses "
        "a first one's collective keys: see the collective-instance-collision entry.)",
        _EMPTY_FIX, "notebook 05, section 5"),
        (r"Shape mismatch in the collective instance",
         r"AddN\b.{0,40}must have the same size and shape"),   # ReductionToOneDevice: per-channel sums differ
        _read_collective, _claims_collective),
    _Entry(Explanation(
        "uneven-replica-batches",
        "Keras 3 could not average the replicas' first batches: their sizes differ, and adding their tensors "
        "(AddN) needs equal shapes.",
        "Before it runs, each `fit` and each `evaluate` under a strategy (the validation `fit` runs after each epoch "
        "included) reduces the replicas' first batch of its data to their mean to learn the input shapes "
        "(`_maybe_symbolic_build`, keras/src/backend/tensorflow/trainer.py); tf.distribute gives each replica "
        "ceil(b / replicas) of a batch of b, in order (data in memory; a pipeline that reads files, or auto-sharding "
        "OFF, gets even shares, the first b % replicas one more), and a data set smaller than the batch is its own "
        "first batch. "
        "Only that first batch needs equal shares: an uneven later step runs, and a custom loop (`strategy.run`) "
        "trains on the same batches.",
        "make the first batch of every data set `fit` and `evaluate` see a multiple of the replica count "
        "(`strategy.num_replicas_in_sync`): the global batch, and the size of a training or validation set smaller "
        "than the batch (or pass a `validation_batch_size` that is such a multiple and at most the validation set's "
        "size); fixed-size batches (`drop_remainder=True`) also keep later steps from leaving a replica empty.",
        "notebook 02, section 5"),
        (r"AddN\b.{0,40}must have the same size and shape",),
        _read_uneven),
    _Entry(Explanation(
        "collective-group-collision",
        "Two MirroredStrategy objects with different device counts used the same collective group in one "
        "process.",
        "Both default strategies (CollectiveAllReduce) number their groups from the same key, so the second "
        "strategy's replicas join a group the first one created with another size (tensorflow/tensorflow#61314).",
        "use one strategy per process (restart the kernel to change the device count), or give the second "
        "one `cross_device_ops=tf.distribute.ReductionToOneDevice()`.", "notebook 02, section 3"),
        (r"is joining a group with size ?\d+, but that group has size \d+",),
        _read_group),
    _Entry(Explanation(
        "devices-fixed",
        "TensorFlow's device list was changed after TensorFlow had started using its devices.",
        "The first operation, `list_logical_devices()` or a strategy fixes the devices for the whole process; "
        "virtual (logical) devices, visible devices and memory growth can only be set before that, and "
        "memory growth cannot be combined with virtual devices on the same device.",
        "configure devices first thing, before any other TensorFlow call (`kit.setup(devices=N)` in the "
        "first cell does), and restart the kernel to change them.",
        "notebook 00 ('Devices are fixed once initialised') and notebook 01, section 2"),
        (r"(Virtual|Visible|Physical) devices cannot be modified after being initialized",
         r"Cannot set memory growth on device when virtual devices configured")),
    _Entry(Explanation(
        "mwms-keras3-fit",
        "Keras 3's `fit` does not run under MultiWorkerMirroredStrategy.",
        "On the installed Keras 3 the strategy hands `fit` per-replica values it cannot convert to tensors "
        "(keras-team/keras#20585).",
        "write the training step yourself (`strategy.run` with `tf.nn.compute_average_loss`), or use "
        "tf-keras (`TF_USE_LEGACY_KERAS=1` before TensorFlow is imported).", "notebook 07, section 2"),
        (r"Attempt to convert a value \(PerReplica",)),
    _Entry(Explanation(
        "lambda-safe-mode",
        "Keras refused to load a `.keras` file that contains a `Lambda` layer's Python code.",
        "Loading it would run code stored in the file, so `safe_mode=True` (the default) refuses it.",
        "replace the Lambda with a registered custom layer (its config is stored, not its code); pass "
        "`safe_mode=False` only for a file you made yourself.", "notebook 04, section 3"),
        (r"deserialization of a `Lambda` layer", r"arbitrary code execution")),
    _Entry(Explanation(
        "weights-mismatch",
        "The weights file does not match the model it is loaded into: some of the model's layers found no "
        "values, or values of another shape, at their place in the file.",
        "Keras 3 matches by attribute path, class and position, not by name: a model's layers are stored as "
        "`layers/<class>`, `layers/<class>_1`, ... in order, and each layer's variables by index "
        "(keras/src/saving/saving_lib.py `_walk_saveable`, `_save_container_state`; `Layer.load_own_variables`); "
        "a layer's name is written into the file and never read. A wrapper's file keeps its template's layers "
        "one level deeper (`layers/<template's class>/layers/...`), so the template finds nothing at its own "
        "paths, and layers of other sizes give values of the wrong shape.",
        "load the file into the same kind of model it was saved from (the template, not the wrapper); "
        "`kit.load_verified(model, path)` names every variable not loaded and any shape that differs.",
        "notebook 04, sections 1 and 2"),
        (r"objects could not be loaded", r"expected \d+ variables, but received \d+ variables during loading"),
        _read_weights),
    _Entry(Explanation(
        "per-replica-batch",
        "The global batch cannot be split into equal per-replica batches.",
        "`InputContext.get_per_replica_batch_size` divides the global batch by the number of replicas and "
        "refuses a remainder.",
        "choose a global batch that is a multiple of `strategy.num_replicas_in_sync` (e.g. 64 on 4 replicas).",
        "notebook 07, section 1, and notebook 02, section 5"),
        (r"`global_batch_size` \d+ is not divisible by `num_replicas_in_sync` \d+",),
        _read_per_replica),
    _Entry(Explanation(
        "nccl-one-gpu",
        "NCCL refused to all-reduce between two logical GPUs that are one physical GPU.",
        "NCCL needs one rank per physical GPU; logical GPUs made with `set_logical_device_configuration` "
        "share one card.",
        "with logical GPUs, pass a reduction that does not use NCCL, "
        "`cross_device_ops=tf.distribute.ReductionToOneDevice()` or `HierarchicalCopyAllReduce()`; or use one "
        "logical device per GPU.", "notebook 02, section 3"),
        (r"Duplicate GPU detected", r"ncclInvalidUsage", r"NCCL.{0,40}invalid usage")),
    _Entry(Explanation(
        "non-finite-model",
        "The kit refused to save a model that holds NaN or inf in some replica's copy of a variable.",
        "A file saved now keeps replica 0's copy: it would predict NaN, or, where only other replicas hold NaN, "
        "hide it. With MirroredStrategy the usual cause "
        "is an empty replica batch that wrote NaN into BatchNormalization's moving statistics.",
        "inspect every replica's copies with `kit.replica_report(model, strategy)`, train again with fixed-size "
        "batches (`drop_remainder=True`), or save anyway for a post-mortem with `allow_nonfinite=True`.",
        "notebook 05, sections 1 and 5"),
        (r"save_verified: refusing to save",)),
    _Entry(Explanation(
        "remat-scope-traced",
        "keras.RematScope wrapped a whole layer's call in TensorFlow's custom_gradient, which refuses keyword "
        "arguments inside a traced function, and fit traces its step.",
        "The modes that wrap a whole layer ('full', and 'larger_than' or 'list_of_layers' on the layers they "
        "select) pass the layer's keyword arguments too, such as Dense's and BatchNormalization's `training`; "
        "'activations' wraps only the activation function, called positionally, and trains.",
        "to recompute whole layers in a traced fit, wrap segments of positional-only calls in keras.remat: "
        "`kit.memory.rematerialize(model)` does it for a Sequential model. Or compile(..., run_eagerly=True) "
        "(every mode trains, each step runs op by op in Python: slower). RematScope(mode='activations') trains "
        "too, but recomputes activation functions only (on notebook 08's Dense stack it saves nothing).",
        "notebook 08, section 5"),
        (r"custom_gradient decorator currently supports keywords arguments only when eager",)),
    _Entry(Explanation(
        "dropout-under-mirrored",
        "Keras 3.7 cannot build a layer that draws random numbers (Dropout, random augmentation) under "
        "MirroredStrategy.",
        "The layer's SeedGenerator keeps an integer seed state, and Keras 3.7 creates it with aggregation='mean', "
        "which a distributed variable of integers does not allow (keras#20611).",
        "pip install -U 'keras>=3.8', then restart the kernel; `python -m gputrain_kit doctor` lists the traps "
        "of the installed Keras.",
        "notebook 00, 'Known traps of your Keras version'"),
        (r"creating distributed tf\.Variable with aggregation=MEAN and a non-floating dtype is not supported",)),
    _Entry(Explanation(
        "jit-compile-under-mirrored",
        "compile(jit_compile=True) under MirroredStrategy: XLA compiled the step for one device, and it "
        "tried to read another replica's copy of a variable.",
        "XLA does not reach variables on other devices (TensorFlow's XLA known issues: a tf.Variable on a "
        "different device); Keras 3's default jit_compile='auto' turns XLA off under tf.distribute for this "
        "reason (keras/src/trainers/trainer.py, _resolve_auto_jit_compile; the error as users met it: keras#19005).",
        "leave jit_compile at its default ('auto'), or pass jit_compile=False.",
        "notebook 00, 'Known traps of your Keras version'"),
        (r"Trying to access resource \S*replica_\d+\S* .*located in device .* from device",
         r"tfvariable_on_a_different_device")),
    _Entry(Explanation(
        "step-cancelled",
        "TensorFlow cancelled this step's function on a device before it started, because the step had already "
        "failed elsewhere: this message is a consequence, not the cause.",
        "Under a strategy one step runs a function on every device; when one of them fails, TensorFlow cancels "
        "the others, and which error reaches Python first is a race. Under load the cancellation can win, "
        "as it did in this course's tests for a second default MirroredStrategy in one process (the cause there "
        "is the collective-instance-collision entry's shape mismatch).",
        "restart the kernel (an aborted collective leaves every later one in the process failing) and run the "
        "same code again: the first error usually comes through, and `kit.explain` names its cause.",
        "notebook 01, section 1"),
        (r"Function was cancelled before it was started",)),
    _Entry(Explanation(
        "out-of-memory",
        "A device ran out of memory.",
        "The shape in the message is the allocation that failed; what the device already held counts "
        "too. In training a device holds the model's parameters, "
        "gradients and optimizer slots plus the activations of its batch; under data parallelism every "
        "replica holds all of the model state, and only the batch is divided.",
        "a smaller batch per device, mixed precision, a lighter optimizer, or a model split over devices; "
        "`kit.estimate_memory` estimates each part before you train.",
        "notebook 03, section 4"),
        (r"OOM when allocating tensor", r"ResourceExhaustedError", r"RESOURCE_EXHAUSTED: .*[Oo]ut of memory"),
        _read_oom),
)

#: The keys of every error ``explain`` knows.
KNOWN = tuple(e.explanation.key for e in _ENTRIES)
_COMPILED = tuple((e, tuple(re.compile(p, re.S) for p in e.patterns)) for e in _ENTRIES)


def _text(error: BaseException) -> str:
    parts = [f"{type(error).__name__}: {error}"]
    seen = {id(error)}
    cause = error.__cause__ or error.__context__
    while cause is not None and id(cause) not in seen:      # a wrapper's cause often holds TensorFlow's text
        seen.add(id(cause))
        parts.append(f"{type(cause).__name__}: {cause}")
        cause = cause.__cause__ or cause.__context__
    call = _keras_call(error)
    if call:
        parts.append(f"[raised in Keras's {call}]")         # read by the readers whose fix depends on it
    return "\n".join(parts)


_KERAS_CALLS = ("fit", "evaluate", "predict", "train_on_batch", "test_on_batch", "predict_on_batch")


def _keras_call(error: BaseException) -> str:
    """The Keras model method the error was raised in, or "": an evaluate's graph error carries no step name in its
    text, and Keras filters its own frames out of the traceback, so the call is read from the traceback's Keras
    frames where they remain, else from the last line of code outside Keras and TensorFlow that calls one."""
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    for frame in frames:
        if frame.name in _KERAS_CALLS and _LIBRARY.search("/" + frame.filename.replace("\\", "/")):
            return frame.name
    for frame in reversed(frames):
        if not _LIBRARY.search("/" + frame.filename.replace("\\", "/")):
            found = set(re.findall(r"\.(" + "|".join(_KERAS_CALLS) + r")\(", frame.line or ""))
            return found.pop() if len(found) == 1 else ""        # none, or several on one line: not known
    return ""


_LIBRARY = re.compile(r"/(tf_)?keras/|/tensorflow/|/gputrain_kit/")


class Unknown(Explanation):
    """What ``explain`` says of an error it does not know: falsy, and it says where to look instead."""

    def __bool__(self) -> bool:
        return False

    def _repr_markdown_(self) -> str:
        return f"*{self.what}* {self.why} {self.fix}"

    def __str__(self) -> str:
        return textwrap.fill(f"{self.what} {self.why} {self.fix}", width=100, break_long_words=False,
                             break_on_hyphens=False)


def _unknown(text: str) -> Unknown:
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return Unknown("unknown", f"Not one of the distributed errors the kit knows ({first[:160]!r}).",
                   "Its own message is the place to start: `kit.error_summary(err)` picks the line of a long "
                   "TensorFlow message that says what went wrong.",
                   "The errors the kit knows are listed in docs/errors.md and `kit.explainer.KNOWN`.", "")


def explain(error: BaseException | str, plan: Any = None) -> Explanation:
    """Plain words for a known TensorFlow/Keras distributed error (an exception or its text), about that error: the
    shapes, devices, counts and names its text carries. ``plan``: the per-replica split of every step of the run
    that failed (``kit.plan_batches(n_samples, global_batch, replicas)``), or of one step (``[1, 1, 1, 0]``); the
    errors of empty or uneven replica batches then name the step and its split. An error it does not know gives a
    falsy ``Unknown`` explanation that says so (``if kit.explain(err):`` tells them apart)."""
    if isinstance(error, BaseException):
        text = _text(error)
    elif isinstance(error, str):
        text = error
    else:
        raise ArgumentTypeError(f"explain: error must be an exception (or its message as a str), got "
                                f"{typed(error)}. Use it as: except Exception as err: print(kit.explain(err)).")
    steps = _check_plan(plan)
    for entry, patterns in _COMPILED:
        if any(p.search(text) for p in patterns) and (entry.claims is None or entry.claims(text)):
            return entry.read(entry.explanation, text, steps) if entry.read else entry.explanation
    return _unknown(text)


class ExplainedError(RuntimeError):
    """Python before 3.11: a known error re-raised with its explanation (the original is its __cause__)."""


@contextlib.contextmanager
def explain_errors(plan: Any = None) -> Iterator[None]:
    """Run the block; a known error is re-raised with its plain-words explanation attached (``plan``: as for
    ``explain``)."""
    _check_plan(plan)
    try:
        yield
    except Exception as err:
        found = explain(err, plan)
        if not found:
            raise
        attached = _attach(err, found, notes=sys.version_info >= (3, 11))
        if attached is err:
            raise
        raise attached from err


def _attach(err: Exception, found: Explanation, *, notes: bool) -> Exception:
    """``err`` with the explanation as a note, or (without notes) a new ExplainedError to chain from it."""
    if notes:
        err.add_note(f"gputrain_kit.explain: {found}")
        return err
    return ExplainedError(f"{type(err).__name__} (explained by gputrain_kit): {found}")
