"""The BatchNorm trap is a matrix, not one behaviour: model kind x BN setting x batching -> outcome.

"no BN" rows separate what BatchNormalization does from what the model's other layers do: with oneDNN CPU kernels
a Conv2D's gradient itself fails on an empty replica batch.

Each case trains a small model for two epochs under ``MirroredStrategy`` over 4 devices on 1030 samples,
global batch 64: without ``drop_remainder`` the last step is split [2, 2, 2, 0] and replica 3 gets nothing.
The outcome is one of

- ``"silent NaN"``: training ends with a finite loss, but some replica's copy of a variable is NaN;
- ``"loud NaN"``: the loss becomes NaN (``TerminateOnNaN`` stops training);
- ``"crash"``: ``fit`` raises (the error text a user sees is kept);
- ``"healthy"``: every copy finite (``spread`` says how far the replicas' copies drifted apart).

A crashed collective can poison the whole process (every later ``fit`` fails), so cases run in child
processes, and a case after a crash always gets a fresh one.

The outcome depends on TensorFlow's CPU kernels (``cpu_kernels``): with oneDNN's kernels an empty replica batch
crashes the conv net's ``fit``, with the portable Eigen kernels the same case trains into NaN or stays healthy,
and on a GPU (the H100 record) nothing crashes. ``kernels=("onednn", "eigen")`` runs every case under both
families, each in processes of its own (the family is fixed when TensorFlow is imported), so any machine shows
both.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ._args import require_choice, require_int, short
from .cpu_kernels import FAMILIES, FAMILY_NAMES, family_env
from .processes import BackgroundRun, child_environment, fork_enabled

__all__ = ["MODELS", "BN_SETTINGS", "BATCHINGS", "DEFAULT_CASES", "CaseResult", "Matrix", "run_cases", "start_cases",
           "PendingCases"]

MODELS = ("dense", "conv")
BN_SETTINGS = ("no BN", "scale=False", "scale=True", "synchronized")
BATCHINGS = ("last step empty", "drop_remainder")
OUTCOMES = ("silent NaN", "loud NaN", "crash", "healthy")
#: The cases notebook 05 shows, each under both CPU kernel families: the Dense trap (scale=False: silent; the
#: default scale=True: loud), the conv net with the empty last step without BN, with the default BN and
#: synchronized (where the kernel families disagree), and the fix that holds under every family, fixed-size
#: batches, with synchronized BN (its copies stay identical). Notebook 02 shows a Dense model without BN training
#: through an empty step, notebook 05's sections 3 and 4 drift and the fixes on the Dense model. OTHER_CASES has
#: the rest of the 14 (tests/test_bncases.py runs all of them under both families).
DEFAULT_CASES = [
    ("dense", "scale=False", "last step empty"), ("dense", "scale=True", "last step empty"),
    ("conv", "no BN", "last step empty"), ("conv", "scale=True", "last step empty"),
    ("conv", "synchronized", "last step empty"), ("conv", "synchronized", "drop_remainder"),
]
#: Every other combination, which the tests run too.
OTHER_CASES = [(m, bn, b) for m in MODELS for bn in BN_SETTINGS for b in BATCHINGS
               if (m, bn, b) not in DEFAULT_CASES and not (bn == "no BN" and b == "drop_remainder")]
_MARK = "__bncase__"


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
    nan_rows: int                # rows of predict under the strategy with NaN (of 1030)
    later_fit: str               # after a crash: "works" or the error a second fit raises
    kernels: str = ""            # the CPU kernel family the case ran with: "onednn" or "eigen"

    @property
    def case(self) -> tuple[str, str, str]:
        return (self.model, self.bn, self.batching)


@dataclass(frozen=True)
class Matrix:
    results: tuple[CaseResult, ...]

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

    def side_by_side(self, **recorded: dict[tuple[str, str, str], str]) -> str:
        """Each case's outcome under every family, in columns. ``recorded``: more columns, column name ->
        {case: outcome} (e.g. the H100 record's: ``H100_recorded=kit.gpu_record.bn_outcomes()``)."""
        columns = [(FAMILY_NAMES.get(f, f or "this process"), {r.case: r.outcome for r in self.results
                                                                if r.kernels == f}) for f in self.families]
        columns += [(name.replace("_", " "), outcomes) for name, outcomes in recorded.items()]
        widths = [max(len(name), 11) for name, _ in columns]
        head = f"{'model':<6} {'BatchNorm':<13} {'batches':<16} " + " ".join(
            f"{name:<{w}}" for (name, _), w in zip(columns, widths))
        lines = [head.rstrip(), "-" * len(head.rstrip())]
        for case in self.cases:
            cells = " ".join(f"{outcomes.get(case, '-'):<{w}}" for (_, outcomes), w in zip(columns, widths))
            lines.append(f"{case[0]:<6} {case[1]:<13} {case[2]:<16} {cells}".rstrip())
        return "\n".join(lines)

    def __repr__(self) -> str:
        multi = len(self.families) > 1
        head = (f"{'model':<6} {'BatchNorm':<13} {'batches':<16} " + (f"{'kernels':<17}" if multi else "")
                + f"{'outcome':<11} what you see")
        lines = [head, "-" * len(head)]
        for r in self.results:
            family = f"{FAMILY_NAMES.get(r.kernels, r.kernels):<17}" if multi else ""
            lines.append(f"{r.model:<6} {r.bn:<13} {r.batching:<16} {family}{r.outcome:<11} {r.detail}")
        return "\n".join(lines)


_CHILD = r'''
import json, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf
import gputrain_kit as kit
import keras, numpy as np
from gputrain_kit.errors import error_summary
from gputrain_kit.replicas import replica_report

cases, epochs = json.loads(sys.argv[1]), int(sys.argv[2])
# Linux: TensorFlow is imported once, here, and never started; each case, read from stdin (the parent
# decides how many run at a time, over every kernel family), runs in a child forked from this process, with
# its own runtime, so a crash costs no new import. Elsewhere: the cases of argv in one process until one
# crashes (the parent then starts a fresh one for the rest).
FORK = int(sys.argv[3]) == 1     # the parent's decision (fork_enabled), not read again here
N, BATCH, CLASSES = 1030, 64, 4
rng = np.random.default_rng(0)
y = rng.integers(0, CLASSES, N)
data = {"dense": (rng.normal(size=(N, 16)) + y[:, None]).astype("float32"),
        "conv": (rng.normal(size=(N, 8, 8, 1)) + y[:, None, None, None]).astype("float32")}
strategy = None


def start_runtime():
    global strategy
    # One inter-op thread: ops run in one order, so a crash reports the same failing op every run.
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)   # small models: threads only fight the notebook's kernel
    kit.setup(devices=4)
    strategy = tf.distribute.MirroredStrategy(kit.device_names(4))


def build(kind, bn):
    options = dict(scale=(bn != "scale=False"), synchronized=(bn == "synchronized"), name="bn")
    norm = [] if bn == "no BN" else [keras.layers.BatchNormalization(**options)]
    if kind == "dense":
        layers = [keras.Input((16,)), keras.layers.Dense(32, name="hidden"), *norm,
                  keras.layers.ReLU(), keras.layers.Dense(CLASSES, name="logits")]
    else:
        layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, padding="same", name="conv"), *norm,
                  keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(CLASSES, name="logits")]
    with strategy.scope():
        model = keras.Sequential(layers, name=f"{kind}_net")
        model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def run_case(kind, bn, batching):
    keras.utils.set_random_seed(0)
    x = data[kind]
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH, drop_remainder=(batching == "drop_remainder"))
    model = build(kind, bn)
    out = {"case": [kind, bn, batching], "losses": [], "error": None, "later_fit": ""}
    try:
        history = model.fit(ds, epochs=epochs, verbose=0, callbacks=[keras.callbacks.TerminateOnNaN()])
        out["losses"] = [float(v) for v in history.history["loss"]]
    except Exception as err:
        out["error"] = error_summary(err)
    report = replica_report(model, strategy)
    out["poisoned"] = sorted({f"{path.split('/')[-1]}" for path, _ in report.poisoned})
    out["poisoned_replicas"] = sorted({i for _, i in report.poisoned})
    out["nan_copies"] = len(report.poisoned)
    out["spread"] = report.spread
    out["nan_rows"] = 0   # every copy finite: predictions are finite too
    if report.poisoned:
        out["nan_rows"] = int(np.isnan(model.predict(x, batch_size=BATCH, verbose=0)).any(axis=1).sum())
    if out["error"]:
        try:   # one full step with the same, already traced train function
            model.fit(ds.take(1), epochs=1, verbose=0)
            out["later_fit"] = "works"
        except Exception as err:
            out["later_fit"] = error_summary(err)
    return out


def say(out):   # one write per line: lines from children running side by side never interleave
    sys.stdout.flush()
    os.write(1, ("__bncase__" + json.dumps(out) + "\n").encode())


if FORK:
    import select
    running, reading, buffered = {}, True, b""
    while reading or running:
        if reading and select.select([0], [], [], 0.02 if running else None)[0]:
            chunk = os.read(0, 65536)
            reading = bool(chunk)
            buffered += chunk
            *lines, buffered = buffered.split(b"\n")
            for line in filter(None, lines):   # one case a line: fork it now
                case = json.loads(line)
                sys.stdout.flush()
                pid = os.fork()
                if pid == 0:
                    start_runtime()
                    say(run_case(*case))
                    os._exit(0)
                running[pid] = case
        while running:
            pid, status = os.waitpid(-1, os.WNOHANG if reading else 0)
            if pid == 0:
                break
            case = running.pop(pid)
            if status:   # died before reporting: say so, as a crash of this case
                say({"case": case, "losses": [], "later_fit": "not tried", "poisoned": [], "poisoned_replicas": [],
                     "nan_copies": 0, "spread": 0.0, "nan_rows": 0,
                     "error": f"the process running it died (wait status {status})"})
else:
    start_runtime()
    for case in cases:
        out = run_case(*case)
        print("__bncase__" + json.dumps(out), flush=True)
        if out["error"]:
            break   # a crash may poison this process: the parent starts a fresh one for the rest
'''


def _run_forked(cases: list[tuple], families: tuple[str, ...], epochs: int, processes: int, timeout: float,
                envs: dict[str, dict[str, str]], on_result: Callable | None) -> dict[tuple, CaseResult]:
    """Linux: one process per kernel family imports TensorFlow and forks each case it is sent. ``processes``
    cases run at a time over all families; a freed slot goes to the family with the most cases left, so
    a family whose cases end early (a crash stops training) hands its slot to the other."""
    import collections

    total = len(cases) * len(families)
    waiting = {f: collections.deque(cases) for f in families}
    running = {f: 0 for f in families}
    results: dict[tuple, CaseResult] = {}
    failures: list[str] = []
    lock = threading.Lock()
    errors = {f: tempfile.TemporaryFile("w+") for f in families}
    servers = {f: subprocess.Popen([sys.executable, "-c", _CHILD, "[]", str(epochs), "1"], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=errors[f], text=True, env=envs[f])
               for f in families}

    def feed() -> None:   # with the lock held: fill the free slots, then close the finished families' input
        while sum(running.values()) < processes and any(waiting.values()):
            family = max(families, key=lambda f: len(waiting[f]))
            case = waiting[family].popleft()
            running[family] += 1
            try:
                servers[family].stdin.write(json.dumps(case) + "\n")
                servers[family].stdin.flush()
            except OSError:   # the server is gone: its reader reports the cases it never ran
                pass
        for family, server in servers.items():
            if not waiting[family] and not server.stdin.closed:
                try:
                    server.stdin.close()
                except OSError:
                    pass

    def reader(family: str) -> None:
        server = servers[family]
        for line in server.stdout:
            if not line.startswith(_MARK):
                continue
            result = _classify(json.loads(line[len(_MARK):]), family)
            with lock:
                results[(family, result.case)] = result
                running[family] -= 1
                if on_result is not None:
                    on_result(result, len(results), total)
                feed()
        server.wait()

    timers = [threading.Timer(timeout, server.kill) for server in servers.values()]
    with lock:
        feed()
    threads = [threading.Thread(target=reader, args=(f,)) for f in families]
    for t in timers + threads:
        t.start()
    for t in threads:
        t.join()
    for t in timers:
        t.cancel()
    for family, server in servers.items():
        missing = [c for c in cases if (family, c) not in results]
        if missing:
            errors[family].seek(0)
            tail = "\n".join(errors[family].read().strip().splitlines()[-5:])
            failures.append(f"case {missing[0]}{' (' + family + ')' if family else ''} did not report "
                            f"(exit {server.returncode}):\n{tail}")
        errors[family].close()
    if failures:
        raise RuntimeError("run_cases: " + "\n".join(failures))
    return results


def _classify(raw: dict[str, Any], kernels: str = "") -> CaseResult:
    import math

    kind, bn, batching = raw["case"]
    losses = tuple(raw["losses"])
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
                  f"({raw['nan_copies']} copies), {raw['nan_rows']} of 1030 rows NaN")
    elif raw["nan_copies"]:
        outcome = "silent NaN"
        replicas = ", ".join(map(str, raw["poisoned_replicas"]))
        detail = (f"loss finite; NaN in {', '.join(raw['poisoned'])} on replica {replicas}, "
                  f"{raw['nan_rows']} of 1030 rows NaN")
    else:
        outcome = "healthy"
        detail = f"all copies finite; replicas drift apart by {raw['spread']:.2f}" if raw["spread"] > 1e-6 \
            else "all copies finite and identical"
    return CaseResult(kind, bn, batching, outcome, detail, losses, raw["nan_copies"], float(raw["spread"]),
                      raw["nan_rows"], raw["later_fit"], kernels)


def _check(func: str, cases: Iterable[tuple[str, str, str]] | None, epochs: Any, processes: Any,
           kernels: Any = None):
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
    cases = [tuple(c) for c in (DEFAULT_CASES if cases is None else cases)]
    for case in cases:
        if len(case) != 3:
            raise ValueError(f"{func}: each case is (model, bn, batching), got {short(case)}.")
        require_choice(func, "model", case[0], MODELS)
        require_choice(func, "bn", case[1], BN_SETTINGS)
        require_choice(func, "batching", case[2], BATCHINGS)
    return (cases, require_int(func, "epochs", epochs, minimum=1),
            require_int(func, "processes", processes, minimum=1), kernels)


def run_cases(cases: Iterable[tuple[str, str, str]] | None = None, *, epochs: int = 2, processes: int = 2,
              timeout: float = 300, on_result: Callable[[CaseResult, int, int], None] | None = None,
              kernels: str | Iterable[str] | None = None) -> Matrix:
    """Run BatchNorm cases, each a (model, bn, batching) from MODELS x BN_SETTINGS x BATCHINGS (default:
    DEFAULT_CASES, 8), in up to ``processes`` child processes at a time. ``on_result(result, done, total)`` is called
    as each case finishes (for a progress bar). ``kernels``: the CPU kernel families to run every case under
    (``"onednn"``, ``"eigen"`` or both; None: the family this process's environment gives). Results come back
    in the order of ``cases``, family by family."""
    cases, epochs, processes, kernels = _check("run_cases", cases, epochs, processes, kernels)
    families = kernels or ("",)
    forking = fork_enabled("GPUTRAIN_CASES_FORK")   # GPUTRAIN_CASES_FORK=0 or GPUTRAIN_FORK=0: no fork
    # A family is fixed when TensorFlow is imported: each needs processes of its own.
    if not forking:
        # Likely crashes last: a crash ends its child, and every case after it needs a fresh one.
        order = sorted(cases, key=lambda c: (c[2] == "last step empty", c[0] == "conv", c[1] == "synchronized"))
        per_family = max(1, processes // len(families))
        queues = [(f, order[i::per_family]) for f in families for i in range(per_family)]
    total = len(cases) * len(families)
    base = {"TF_CPP_MIN_LOG_LEVEL": "3"}
    envs = {f: child_environment("run_cases", {**base, **(family_env(f, "run_cases") if f else {})})
            for f in families}
    if forking:
        results = _run_forked(cases, families, epochs, processes, timeout, envs, on_result)
        return Matrix(tuple(results[(f, c)] for f in families for c in cases))
    results: dict[tuple, CaseResult] = {}
    lock = threading.Lock()
    failures: list[str] = []

    def worker(family: str, queue: list[tuple]) -> None:
        env = envs[family]
        while queue:
            with tempfile.TemporaryFile("w+") as errors:
                proc = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(queue), str(epochs), "0"],
                                        stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
                timer = threading.Timer(timeout, proc.kill)
                timer.start()
                done_here = 0
                try:
                    for line in proc.stdout:
                        if not line.startswith(_MARK):
                            continue
                        result = _classify(json.loads(line[len(_MARK):]), family)
                        done_here += 1
                        with lock:
                            results[(family, result.case)] = result
                            if on_result is not None:
                                on_result(result, len(results), total)
                    proc.wait()
                finally:
                    timer.cancel()
                if not done_here:
                    errors.seek(0)
                    tail = "\n".join(errors.read().strip().splitlines()[-5:])
                    failures.append(f"case {queue[0]}{' (' + family + ')' if family else ''} did not report "
                                    f"(exit {proc.returncode}):\n{tail}")
                    return
            queue = queue[done_here:]

    threads = [threading.Thread(target=worker, args=(f, q)) for f, q in queues if q]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError("run_cases: " + "\n".join(failures))
    return Matrix(tuple(results[(f, c)] for f in families for c in cases))


class PendingCases(BackgroundRun):
    """Cases running in the background (``start_cases``): ``.result()`` waits for the Matrix,
    ``.progress_bar()`` is a widget that follows the cases as they finish."""

    unit = "case"
    bar_label = "cases run"

    def __init__(self, cases: list[tuple[str, str, str]], epochs: int, processes: int, timeout: float,
                 kernels: tuple[str, ...] | None = None):
        super().__init__(lambda advance: run_cases(cases, epochs=epochs, processes=processes, timeout=timeout,
                                                   kernels=kernels,
                                                   on_result=lambda result, done, total: advance(done)),
                         len(cases) * len(kernels or ("",)))

    def result(self, timeout: float | None = None) -> Matrix:
        """Wait for every case (at most ``timeout`` seconds) and return the Matrix."""
        return super().result(timeout)


def start_cases(cases: Iterable[tuple[str, str, str]] | None = None, *, epochs: int = 2, processes: int = 2,
                timeout: float = 300, kernels: str | Iterable[str] | None = None) -> PendingCases:
    """Like ``run_cases``, but in the background: returns at once (arguments checked first), so a notebook
    can go on while the child processes train. Two cases at a time by default: on a 2-core machine the
    notebook's own cells run slower meanwhile, but the cases are done sooner (``processes=1`` leaves the
    kernel a core)."""
    cases, epochs, processes, kernels = _check("start_cases", cases, epochs, processes, kernels)
    return PendingCases(cases, epochs, processes, timeout, kernels)
