"""Notebook 05's BatchNorm trap: its small models, defined once (``bn_model``), and the trap as a matrix, not one
behaviour: model kind x BN setting x batching -> outcome.

"no BN" rows separate what BatchNormalization does from what the model's other layers do: with oneDNN CPU kernels
(x86) a Conv2D's forward pass returns an empty batch in its input's whole shape (spatial size and channels: 1
channel, not the layer's 8 filters), so the next layer fails on an empty replica batch, BatchNormalization or not
(traced, as in fit, evaluate and predict, the Conv2D itself never fails; called eagerly, with input channels that
do not broadcast to the filters, its own bias add fails first).

Each case trains a small model for two epochs under ``MirroredStrategy`` over 4 devices on 1030 samples,
global batch 64: without ``drop_remainder`` the last step is split [2, 2, 2, 0] and replica 3 gets nothing.
The outcome is one of

- ``"silent NaN"``: training ends with a finite loss, but some replica's copy of a variable is NaN: only copies
  that neither a saved file (replica 0's) nor a training step (the trainable ones) reads, so nothing shows it
  outside inference under the strategy;
- ``"NaN weights"``: training ends with a finite loss, but NaN reached replica 0's copy (which a saved file keeps)
  or a trainable variable (which the next step computes with): the empty step was the last one trained
  (``epochs=1``, or your own model), so no loss has read the NaN yet; it is not silent;
- ``"loud NaN"``: the loss becomes NaN (``TerminateOnNaN`` stops training);
- ``"crash"``: ``fit`` raises (the error text a user sees is kept);
- ``"healthy"``: every copy finite (``spread`` says how far the replicas' copies drifted apart).

A crashed collective can poison the whole process (every later ``fit`` fails), so cases run in child
processes, and a case after a crash always gets a fresh one.

The outcome depends on TensorFlow's CPU kernels (``cpu_kernels``): with oneDNN's kernels on x86 an empty replica
batch crashes the conv net's ``fit``, with the portable Eigen kernels the same case trains into NaN or stays healthy,
and on a GPU (the H100 record) nothing crashes. ``kernels=("onednn", "eigen")`` runs every case under both
families, each in processes of its own (the family is fixed when TensorFlow is imported), so any machine shows
both.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ._args import require_choice, require_int, short
from .cpu_kernels import FAMILIES, FAMILY_NAMES, family_env
from .processes import BackgroundRun
from .bn_own_model import (AS_BUILT, DEVICES, _refuse_uncompiled, _users_data_file, _users_model,  # noqa: F401
                           _UsersModel, load_users_data)

__all__ = ["MODELS", "BN_SETTINGS", "BATCHINGS", "DEFAULT_CASES", "AS_BUILT", "CaseResult", "Matrix", "bn_model", "run_cases",
           "start_cases", "PendingCases"]

MODELS = ("dense", "conv")
BN_SETTINGS = ("no BN", "scale=False", "scale=True", "synchronized")


def bn_model(kind: str, bn: str, *, classes: int = 4, features: int = 16) -> Any:
    """``kind`` "dense": Dense(32) -> [BatchNormalization] -> ReLU -> Dense(classes), on ``features`` inputs;
    "conv": Conv2D(8, 3) -> [BatchNormalization] -> ReLU -> global average -> Dense(classes), on 8x8x1 images.
    ``bn``: one of BN_SETTINGS ("no BN" leaves the layer out). Uncompiled; build it in a strategy's scope."""
    import keras

    require_choice("bn_model", "kind", kind, MODELS)
    require_choice("bn_model", "bn", bn, BN_SETTINGS)
    options = dict(scale=(bn != "scale=False"), synchronized=(bn == "synchronized"), name="bn")
    norm = [] if bn == "no BN" else [keras.layers.BatchNormalization(**options)]
    if kind == "dense":
        layers = [keras.Input((features,)), keras.layers.Dense(32, name="hidden"), *norm,
                  keras.layers.ReLU(), keras.layers.Dense(classes, name="logits")]
    else:
        layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, padding="same", name="conv"), *norm,
                  keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(),
                  keras.layers.Dense(classes, name="logits")]
    return keras.Sequential(layers, name=f"{kind}_net")


BATCHINGS = ("last step empty", "drop_remainder")
OUTCOMES = ("silent NaN", "NaN weights", "loud NaN", "crash", "healthy")
#: The cases notebook 05 shows, each under both CPU kernel families: the Dense trap (scale=False: silent; the
#: default scale=True: loud), the conv net with the empty last step without BN, with the default BN and
#: synchronized (where the kernel families disagree), and the fix that holds under every family, fixed-size
#: batches, with synchronized BN (its copies stay identical). Notebook 02 shows a Dense model without BN training
#: through an empty step, notebook 05's sections 3 and 4 drift and the fixes on the Dense model. OTHER_CASES has
#: the rest of the 14 (tests/claims/test_batchnorm.py runs all of them under both families).
DEFAULT_CASES = [
    ("dense", "scale=False", "last step empty"), ("dense", "scale=True", "last step empty"),
    ("conv", "no BN", "last step empty"), ("conv", "scale=True", "last step empty"),
    ("conv", "synchronized", "last step empty"), ("conv", "synchronized", "drop_remainder"),
]
#: Every other combination except the two without BN with drop_remainder (no empty step and no BatchNorm:
#: nothing the matrix looks at), which the tests run too: 8, and 14 cases in all.
OTHER_CASES = [(m, bn, b) for m in MODELS for bn in BN_SETTINGS for b in BATCHINGS
               if (m, bn, b) not in DEFAULT_CASES and not (bn == "no BN" and b == "drop_remainder")]


@dataclass(frozen=True)
class CaseResult:
    model: str
    bn: str
    batching: str
    outcome: str
    detail: str                  # the error a user sees, or what is non-finite
    losses: tuple[float, ...]    # per finished epoch (empty after a crash)
    nan_copies: int              # replica copies of variables with NaN/inf
    spread: float                # largest difference of a finite copy from replica 0's
    nan_rows: int                # rows of predict under the strategy with NaN (of ``rows``)
    later_fit: str               # after a crash: "works" or the error a second fit raises
    kernels: str = ""            # the CPU kernel family the case ran with: "onednn" or "eigen"
    rows: int = 1030             # the samples trained on (the kit's cases: 1030)
    diverged: tuple[str, ...] = ()   # trainable variables whose replicas' copies differ (a crash mid-step)

    @property
    def case(self) -> tuple[str, str, str]:
        return (self.model, self.bn, self.batching)


@dataclass(frozen=True)
class Matrix:
    results: tuple[CaseResult, ...]
    note: str = ""                 # printed above the table (your own model: how your data was cut)

    @property
    def families(self) -> tuple[str, ...]:
        """The CPU kernel families the cases ran with, in the order asked for."""
        return tuple(dict.fromkeys(r.kernels for r in self.results))

    @property
    def cases(self) -> tuple[tuple[str, str, str], ...]:
        return tuple(dict.fromkeys(r.case for r in self.results))

    def outcome(self, model: str, bn: str, batching: str, kernels: str | None = None) -> CaseResult:
        """One case's result; ``kernels`` picks the family when the matrix ran more than one."""
        if kernels is None and len(self.families) > 1:
            raise ValueError(f"Matrix.outcome: the cases ran under {len(self.families)} CPU kernel families; "
                             f"name one: kernels={self.families[0]!r} or {self.families[1]!r}.")
        for r in self.results:
            if r.case == (model, bn, batching) and (kernels is None or r.kernels == kernels):
                return r
        raise KeyError(f"Matrix.outcome: no case ({short(model)}, {short(bn)}, {short(batching)})"
                       + (f" under {short(kernels)}" if kernels else "") + " was run.")

    @property
    def _model_width(self) -> int:
        return max([6] + [len(r.model) for r in self.results])

    def side_by_side(self, **recorded: dict[tuple[str, str, str], str]) -> str:
        """Each case's outcome under every family, in columns. ``recorded``: more columns, column name ->
        {case: outcome} (e.g. the H100 record's: ``H100_recorded=kit.gpu_record.bn_outcomes()``)."""
        columns = [(FAMILY_NAMES.get(f, f or "this process"), {r.case: r.outcome for r in self.results
                                                                if r.kernels == f}) for f in self.families]
        columns += [(name.replace("_", " "), outcomes) for name, outcomes in recorded.items()]
        widths = [max(len(name), 11) for name, _ in columns]
        mw = self._model_width
        head = f"{'model':<{mw}} {'BatchNorm':<13} {'batches':<16} " + " ".join(
            f"{name:<{w}}" for (name, _), w in zip(columns, widths))
        lines = [head.rstrip(), "-" * len(head.rstrip())]
        for case in self.cases:
            cells = " ".join(f"{outcomes.get(case, '-'):<{w}}" for (_, outcomes), w in zip(columns, widths))
            lines.append(f"{case[0]:<{mw}} {case[1]:<13} {case[2]:<16} {cells}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        import textwrap

        multi, mw = len(self.families) > 1, self._model_width
        head = (f"{'model':<{mw}} {'BatchNorm':<13} {'batches':<16} " + (f"{'kernels':<17}" if multi else "")
                + "outcome (and under it: what you see)")
        lines = textwrap.wrap(self.note, 100, break_on_hyphens=False) + [head, "-" * len(head)]
        for r in self.results:       # what you see on lines of its own: a notebook never wraps it mid-word
            family = f"{FAMILY_NAMES.get(r.kernels, r.kernels):<17}" if multi else ""
            lines.append(f"{r.model:<{mw}} {r.bn:<13} {r.batching:<16} {family}{r.outcome}")
            lines += textwrap.wrap(r.detail, 96, initial_indent="    ", subsequent_indent="    ",
                                   break_on_hyphens=False, break_long_words=False)
        return "\n".join(lines)


def _classify(raw: dict[str, Any], kernels: str = "") -> CaseResult:
    import math

    kind, bn, batching = raw["case"]
    losses, rows = tuple(raw["losses"]), int(raw.get("rows", 1030))
    diverged = tuple(raw.get("diverged", ()))
    if raw["error"]:
        outcome, detail = "crash", raw["error"]
        if raw["nan_copies"]:
            replicas = ", ".join(map(str, raw["poisoned_replicas"]))
            detail += f" | left NaN in {', '.join(raw['poisoned'])} on replica {replicas}"
        if raw["later_fit"] != "works":
            detail += " | a later fit in the same process fails too"
    elif any(not math.isfinite(v) for v in losses):
        epoch = next(i for i, v in enumerate(losses, 1) if not math.isfinite(v))
        outcome = "loud NaN"
        detail = (f"loss NaN in epoch {epoch}, TerminateOnNaN stops; NaN in {', '.join(raw['poisoned'])} "
                  f"({raw['nan_copies']} copies), {raw['nan_rows']} of {rows} rows NaN")
    elif raw["nan_copies"]:
        replicas = ", ".join(map(str, raw["poisoned_replicas"]))
        detail = (f"loss finite; NaN in {', '.join(raw['poisoned'])} on replica {replicas}, "
                  f"{raw['nan_rows']} of {rows} rows NaN")
        outcome, seen = "silent NaN", raw.get("seen", {})
        if seen.get("replica_0") or seen.get("trainable"):    # a saved file or the next step reads the NaN
            outcome = "NaN weights"
            detail += " | the empty step was the last one trained" + "".join(
                [f"; replica 0's copy of {', '.join(seen['replica_0'])} is NaN: a saved file keeps it"
                 if seen.get("replica_0") else "",
                 f"; trainable {', '.join(seen['trainable'])} NaN: the next step computes with it"
                 if seen.get("trainable") else ""])
    else:
        outcome = "healthy"
        detail = f"all copies finite; replicas drift apart by {raw['spread']:.2f}" if raw["spread"] > 1e-6 \
            else "all copies finite and identical"
    if diverged:
        detail += " | " + _divergence(diverged)
    return CaseResult(kind, bn, batching, outcome, detail, losses, raw["nan_copies"], float(raw["spread"]),
                      raw["nan_rows"], raw["later_fit"], kernels, rows, diverged)


def _divergence(paths: tuple[str, ...]) -> str:
    """What a case's detail says when trainable copies differ between replicas (``ReplicaReport.diverged``)."""
    listed = ", ".join(paths[:4]) + (f" and {len(paths) - 4} more" if len(paths) > 4 else "")
    return (f"the replicas' copies of trainable {listed} now differ (a step stopped half way updated some "
            "replicas, not others): rebuild the model or reload its weights before using it")


#: The BatchNorm column of a learner's model: the model as their build() makes it.
def _check(func: str, cases: Iterable[Any] | None, epochs: Any, processes: Any, kernels: Any = None,
           users: _UsersModel | None = None) -> tuple[list[tuple[str, str, str]], int, int, tuple[str, ...] | None]:
    if kernels is not None:
        if isinstance(kernels, str):
            kernels = (kernels,)
        try:
            kernels = tuple(kernels)
        except TypeError:
            raise ValueError(f"{func}: kernels must be None (this process's CPU kernels), 'onednn', 'eigen' or "
                             f"both, e.g. kernels=('onednn', 'eigen'); got {short(kernels)}.") from None
        if not kernels or len(set(kernels)) != len(kernels):
            raise ValueError(f"{func}: kernels must name each family once, e.g. kernels=('onednn', 'eigen'); got "
                             f"{short(kernels)}.")
        for family in kernels:
            require_choice(func, "kernels", family, FAMILIES)
    checked: list[tuple[str, str, str]] = []
    if users is not None:                  # a learner's model: the cases are batchings
        for batching in (BATCHINGS if cases is None else cases):
            checked.append((users.name, AS_BUILT, require_choice(func, "cases", batching, BATCHINGS)))
    else:
        for case in (DEFAULT_CASES if cases is None else cases):
            if isinstance(case, str) or len(tuple(case)) != 3:
                raise ValueError(f"{func}: each case is (model, bn, batching), got {short(case)}.")
            model, bn, batching = case
            checked.append((require_choice(func, "model", model, MODELS),
                            require_choice(func, "bn", bn, BN_SETTINGS),
                            require_choice(func, "batching", batching, BATCHINGS)))
    epochs = require_int(func, "epochs", epochs, minimum=1)
    if epochs < 2 and any(case[2] == "last step empty" for case in checked):
        import warnings

        warnings.warn(f"{func}: epochs=1 ends with the empty step, so no loss reads the NaN it writes: a case that "
                      "would turn loud at the next step reads 'NaN weights' (finite loss, NaN in replica 0's or "
                      "trainable copies) instead. Fix: epochs=2 (the default) to see the next step.", UserWarning,
                      stacklevel=3)
    return checked, epochs, require_int(func, "processes", processes, minimum=1), kernels


def run_cases(cases: Iterable[Any] | None = None, *, epochs: int = 2, processes: int = 2,
              timeout: float = 900, on_result: Callable[[CaseResult, int, int], None] | None = None,
              kernels: str | Iterable[str] | None = None, build: Callable[[], Any] | None = None,
              data: tuple[Any, Any] | None = None, batch_size: int = 64, loss: str | None = None,
              _users: _UsersModel | None = None, _at_once: Callable[[], int] | None = None) -> Matrix:
    """Run BatchNorm cases, each a (model, bn, batching) from MODELS x BN_SETTINGS x BATCHINGS (default:
    DEFAULT_CASES), in up to ``processes`` child processes at a time (``_children/bn_case.py``; on Linux forked
    from one process per family that imported TensorFlow). ``on_result(result, done, total)`` is called as each
    case finishes (for a progress bar). ``kernels``: the CPU kernel families to run every case under
    (``"onednn"``, ``"eigen"`` or both; None: the family this process's environment gives). Results come back
    in the order of ``cases``, family by family.

    **Your own model**: ``build`` (a zero-argument function defined with ``def``, as for ``measure_memory``)
    returns your model, compiled or not (an uncompiled one is compiled with Adam and ``loss``), and
    ``data=(x, y)`` is your data: NumPy arrays, and for a model with several inputs x a dict of arrays by input
    name (``{"img": images, "vec": features}``) or a list of arrays in the inputs' order, every input with as
    many rows as y; batching and the cut below apply to every input alike. Each case builds it in
    ``MirroredStrategy.scope()`` over 4 devices and trains it for ``epochs`` epochs at a global ``batch_size``
    in a process of its own; ``cases`` are then batchings from BATCHINGS (default both): ``"last step empty"``
    trains on your data cut to whole batches plus 3 samples (the last step split [1, 1, 1, 0]),
    ``"drop_remainder"`` on the same samples without that step. The BatchNorm column reads ``"as built"``.

    After every case (a crashed ``fit`` included) every replica's copy of every variable is compared: trainable
    copies that differ (a crashed step updated some replicas and not others) are listed in the result's
    ``diverged`` and said in its detail, since such a model must be rebuilt or reloaded (``replica_report``
    says the same)."""
    import os
    import re

    from ._children import Job, run_jobs

    func = "run_cases"
    if _users is None and (build is not None or data is not None):
        if build is None or data is None:
            raise ValueError(f"{func}: your own model needs both build= (a function returning it) and "
                             f"data=(x, y); got {'build' if build is not None else 'data'} only.")
        _users = _users_model(func, build, data, batch_size, loss)
    cases, epochs, processes, kernels = _check(func, cases, epochs, processes, kernels, _users)
    families = kernels or ("",)
    extra: dict[str, Any] = {}
    if _users is not None:
        extra = {"build_source": _users.source, "data_path": _users_data_file(_users),
                 "batch_size": _users.batch_size, "loss": _users.loss}
    jobs = [Job(f"{family}|{'|'.join(case)}",
                {"kind": case[0], "bn": case[1], "batching": case[2], "epochs": epochs, **extra},
                family_env(family, "run_cases") if family else {})
            for family in families for case in cases]
    total = len(jobs)
    results: dict[str, CaseResult] = {}

    def classify(outcome: Any) -> CaseResult:
        family, kind, bn, batching = outcome.id.split("|")
        if outcome.ok:
            ran = (outcome.values or {}).get("kernels", family)
            if family and ran != family:     # a result is labelled with the family that ran it, or refused
                raise ValueError(_family_refusal(func, family, ran))
            return _classify(outcome.values, family)
        if outcome.died and not outcome.timed_out:      # the case's process crashed: that is its outcome
            return _classify({"case": [kind, bn, batching], "losses": [], "later_fit": "not tried", "poisoned": [],
                              "poisoned_replicas": [], "nan_copies": 0, "spread": 0.0, "nan_rows": 0,
                              "error": outcome.error, "rows": _users.rows if _users else 1030}, family)
        where = f"run_cases: case ({kind}, {bn}, {batching}){' (' + family + ')' if family else ''}"
        if outcome.timed_out:            # a busy machine, not a bug: say so, and what to change
            raise RuntimeError(f"{where} did not finish within {timeout:g} s; a case takes seconds on an idle machine, "
                               "so this one is probably busy. Run it again when the machine is quieter, or give it "
                               "more time: run_cases(timeout=...) or start_cases(timeout=...).")
        refusal = re.search(r"^(ValueError|TypeError): (run_cases: .*)\Z", (outcome.error or "").strip(), re.M | re.S)
        if refusal:                      # the case's own check of your build() or data: its message, no traceback
            raise (ValueError if refusal[1] == "ValueError" else TypeError)(refusal[2])
        raise RuntimeError(f"{where} did not report: {outcome.error}")

    def done(outcome: Any, count: int, _total: int) -> None:
        try:
            results[outcome.id] = classify(outcome)
        except (RuntimeError, ValueError, TypeError):
            return                       # raised below, after every case ran
        if on_result is not None:
            on_result(results[outcome.id], count, total)

    try:
        outcomes = run_jobs("bn_case", jobs, processes=_at_once or processes, timeout=timeout, on_result=done,
                            func=func)
    finally:
        if extra:
            os.unlink(extra["data_path"])
    matrix = Matrix(tuple(results.get(job_id) or classify(outcome) for job_id, outcome in outcomes.items()),
                    _users.note(kernels) if _users is not None else "")
    if _users is not None:
        _refuse_a_model_that_never_trains(func, matrix)
    return matrix


def _family_refusal(func: str, asked: str, ran: str) -> str:
    """What run_cases says when a case's process ran another CPU kernel family than ``kernels`` asked for."""
    return (f"{func}: kernels asked for {FAMILY_NAMES[asked]} ({asked!r}), but the case's process ran "
            f"{FAMILY_NAMES.get(ran, ran)} kernels: this TensorFlow build has no {FAMILY_NAMES[asked]} kernels "
            "(TF_ENABLE_ONEDNN_OPTS=1 turns oneDNN on only in a build that includes it), so "
            f"its results cannot be labelled {asked!r}. Fix: kernels=None (this process's family) or "
            f"kernels={ran!r}.")


def _refuse_a_model_that_never_trains(func: str, matrix: Matrix) -> None:
    """Your own model crashing also without the empty step (drop_remainder) is your model's error, not the
    trap's: said as such instead of a matrix that reads as if the trap crashed it."""
    controls = [r for r in matrix.results if r.batching == "drop_remainder"]
    if controls and all(r.outcome == "crash" for r in matrix.results):
        error = controls[0].detail.strip().splitlines()[-1] if controls[0].detail.strip() else "(no message)"
        raise ValueError(f"{func}: your model did not train in any case, also with drop_remainder (no empty step), "
                         f"so this is not the empty-replica trap: {error[:300]}. Check that build(), data and loss "
                         "go together: model.fit(x, y) on one device should train first.")


class PendingCases(BackgroundRun):
    """Cases running in the background (``start_cases``): ``.result()`` waits for the Matrix,
    ``.progress_bar()`` is a widget that follows the cases as they finish."""

    unit = "case"
    units = "cases"
    bar_label = "cases run"

    def __init__(self, cases: list[tuple[str, str, str]], epochs: int, processes: int, timeout: float,
                 kernels: tuple[str, ...] | None = None, users: _UsersModel | None = None, waiting: int = 0):
        batchings = [case[2] for case in cases] if users is not None else cases
        self.processes = processes     # cases at a time while the notebook works
        self._waiting = waiting        # ... and once it waits for them in result() (0: no change)
        super().__init__(lambda advance: run_cases(batchings, epochs=epochs, processes=processes, timeout=timeout,
                                                   kernels=kernels, _users=users, _at_once=lambda: self.processes,
                                                   on_result=lambda result, done, total: advance(done)),
                         len(cases) * len(kernels or ("",)))

    def result(self, timeout: float | None = None) -> Matrix:
        """Wait for every case (at most ``timeout`` seconds) and return the Matrix. With the default
        ``processes``, the cases still to run take every core from here: the notebook only waits now."""
        if self._waiting > self.processes:
            self.processes = self._waiting
        return super().result(timeout)


def start_cases(cases: Iterable[Any] | None = None, *, epochs: int = 2, processes: int | None = None,
                timeout: float = 900, kernels: str | Iterable[str] | None = None,
                build: Callable[[], Any] | None = None, data: tuple[Any, Any] | None = None, batch_size: int = 64,
                loss: str | None = None) -> PendingCases:
    """Like ``run_cases`` (your own model too: ``build=``, ``data=``), but in the background: returns at once
    (arguments checked first), so a notebook can go on while the child processes train. ``processes=None``
    (the default) runs as many cases at a time as there are cores less one (2 on a 2-core machine:
    ``processes.background_processes``): the notebook's kernel keeps a core while the cases run; once the
    notebook waits for them (``result()``), they take every core. A number: that many, throughout."""
    from .processes import background_processes

    func = "start_cases"
    users = None
    if build is not None or data is not None:
        if build is None or data is None:
            raise ValueError(f"{func}: your own model needs both build= (a function returning it) and "
                             f"data=(x, y); got {'build' if build is not None else 'data'} only.")
        users = _users_model(func, build, data, batch_size, loss)
    cases, epochs, at_once, kernels = _check(func, cases, epochs, 1 if processes is None else processes,
                                             kernels, users)
    waiting = 0
    if processes is None:
        total = len(cases) * len(kernels or ("",))
        at_once, waiting = background_processes(total), background_processes(total, waiting=True)
    return PendingCases(cases, epochs, at_once, timeout, kernels, users, waiting)
