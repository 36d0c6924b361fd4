"""When each op ran, from TensorFlow's own profiler, and on which device (inferred): a timeline.

``with device_activity() as activity: model.fit(...)`` starts TensorFlow's profiler
(``tf.profiler.experimental.start``) in a temporary folder, stops it when the block ends, reads the
trace it wrote (an XSpace, ``*.xplane.pb``) and deletes the folder. What it reads:

- **Op events.** On the host plane every op that a ``tf.function`` runs (``fit``'s train step is one)
  is an event named ``"<node name>:<op type>"`` with its start and duration. Functions called inside
  a function are inlined, so a node name is a path: ``StatefulPartitionedCall/replica_1/dense/MatMul``.
- **Devices.** The op events carry no device: the kit infers it, from the functions themselves. Each
  function the trace names (``eager_op`` / ``func_name`` stats) is looked up in the eager context
  (``get_function_def``), and every node's requested device is read, walking into the functions it
  calls. A node with no requested device inherits its caller's; at the top it gets the device of the
  ``tf.device`` scope around the ``with`` block, else device 0 (GPU 0 if there is one, else CPU 0),
  which is where TensorFlow's placer puts it. The one device the trace does record is the sender's, on
  each cross-device copy (``_Send``): when the ops that got the default are seen sending from one other
  recorded device (a ``tf.device`` scope inside the block), that device becomes the function's default.
  Ops that read or update a variable (``ReadVariableOp``, ``AssignVariableOp``, ...) are the exception
  to the scope: TensorFlow runs them where the variable lives. The trace records that device for every
  read whose value another device uses; every op on the same variable handle is put there too. (Where no
  read of a variable sends anything, its ops keep the device inferred above.)
  ``tests/unit/test_activity.py`` and ``tests/unit/test_activity_scope.py`` pin these rules to the
  installed TensorFlow by comparing them, op by op, with the partition graphs TensorFlow reports for
  the same function, with and without a scope.
- **Input pipeline.** Work on the ``tf.data`` threads is kept apart as the input row.
- **GPUs.** On a GPU the profiler also writes one plane per physical GPU (``/device:GPU:N``) whose
  stream lines hold the kernels that really ran there; when each logical device is a whole GPU,
  those kernels are the timeline. (This path follows the documented XPlane layout; it has not run on
  a GPU in this project's CI.)

Overhead, measured on the course's 2-core machine (one epoch of 8 steps of the digits model, median
of 5): plain ``fit`` 61 ms without, 78 ms with the recording; under MirroredStrategy on 4 simulated
devices 533 ms and 693 ms. Starting, stopping and reading the trace take 16 ms and 104 ms of that
(``DeviceActivity.overhead_s``); the rest is the profiler recording each op. Record a few steps, not
a whole training run: the trace is held in memory until the block ends.

Simulated devices (the CPU split into logical CPUs) share the same cores: their timeline shows which
device ran which op, and in what order, not GPU speed.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ._args import short
from ._trace import (_RESOURCE_OP, _default_device, _function_names, _gpu_intervals, _host_intervals,
                     _logical_gpu_intervals, merge, node_devices, sent_from)
from .placement import normalize_device

__all__ = ["device_activity", "DeviceActivity", "ProfilerBusyError", "NothingRecordedError", "merge", "overlap_seconds", "op_kind"]



class ProfilerBusyError(RuntimeError):
    """Another TensorFlow profiler session is running: only one can run in a process."""


class NothingRecordedError(RuntimeError):
    """A ``device_activity()`` block recorded no op: the profiler's op events come from ``tf.function``s only."""


#: Why a block can record nothing: what ``computed()`` and ``plot()`` say instead of an empty answer.
NOTHING_RECORDED = ("device_activity recorded no op in its block. It records the ops a tf.function runs (fit's train "
                    "step is one), not ops run eagerly: a model compiled with run_eagerly=True, or tensors computed "
                    "outside any tf.function, leave nothing to show. Fix: compile without run_eagerly (Keras's "
                    "default), or wrap your code in a tf.function, and run it inside the block.")


_OPTIMIZER_SCOPES = ("sgd", "adam", "adamw", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl", "lion",
                     "lamb", "loss_scale_optimizer", "optimizer")


def op_kind(op_name: str) -> str:
    """What an op of a training step does, from its name and type: forward, backward, gradient
    reduction (the all-reduce, or the sum on one device that ReductionToOneDevice does) or update."""
    node, _, op_type = op_name.rpartition(":")
    node = node or op_name
    scopes = [re.sub(r"_\d+$", "", part).lower() for part in node.split("/")]
    in_optimizer = any(s in _OPTIMIZER_SCOPES for s in scopes)
    if (op_type.startswith(("Collective", "Nccl")) or "allreduce" in op_type.lower()
            or (in_optimizer and op_type in ("AddN", "ConcatV2", "SplitV", "Pack", "Unpack"))):
        return "gradient reduction"
    if "gradient_tape" in scopes or op_type.endswith("Grad") or "Grad" in op_type:
        return "backward"
    if in_optimizer or op_type.startswith(("ResourceApply", "Assign")):
        return "update"
    return "forward"


def _length(spans: Iterable[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def overlap_seconds(a: Sequence[tuple[float, float]], b: Sequence[tuple[float, float]]) -> float:
    """Seconds during which both sets of (merged, sorted) spans are busy."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


@dataclass
class DeviceActivity:
    """What each device computed during a ``device_activity()`` block. Filled when the block ends."""

    devices: tuple[str, ...] = ()
    simulated: bool = True
    intervals: list[tuple[str, float, float, str]] = field(default_factory=list)
    input_intervals: list[tuple[float, float, str]] = field(default_factory=list)
    wall_s: float = 0.0          # the block's duration
    overhead_s: float = 0.0      # starting, stopping and reading the profiler
    unattributed_s: float = 0.0  # op time the kit could not place on a device
    source: str = ""             # "host ops", "GPU planes" or "GPU planes, by op name"
    functions: list[str] = field(default_factory=list)   # the traced function of each interval
    _done: bool = False

    def _ready(self, what: str) -> None:
        if not self._done:
            raise RuntimeError(f"device_activity: .{what} is filled when the `with` block ends; read it after "
                               "the block.")

    @property
    def busy(self) -> dict[str, float]:
        """Seconds each device spent computing (overlapping ops on one device counted once)."""
        self._ready("busy")
        return {d: _length(self.spans(d)) for d in self.devices}

    def spans(self, device: str) -> list[tuple[float, float]]:
        """The device's busy time as merged (start_s, end_s) spans."""
        return merge((s, e) for d, s, e, _ in self.intervals if d == device)

    @property
    def input_busy(self) -> float:
        """Seconds the input pipeline (tf.data threads) was working."""
        self._ready("input_busy")
        return _length(merge((s, e) for s, e, _ in self.input_intervals))

    def shares(self) -> dict[str, float]:
        """Each device's share of the compute attributed to all devices (sums to 1)."""
        busy = self.busy
        total = sum(busy.values())
        return {d: (b / total if total else 0.0) for d, b in busy.items()}

    def _require_records(self, what: str) -> None:
        """Raise NothingRecordedError (naming ``what``) when the block recorded no op: an empty answer would
        read as "no device computed"."""
        self._ready(what)
        if not self.intervals:
            raise NothingRecordedError(f"DeviceActivity.{what}: {NOTHING_RECORDED}")

    def computed(self, min_share: float = 0.05) -> list[str]:
        """The devices that did at least ``min_share`` of the attributed compute: a robust fact to print. Raises
        NothingRecordedError when the block recorded no op (eager code only: see ``NOTHING_RECORDED``)."""
        self._require_records("computed()")
        return [d for d, s in self.shares().items() if s >= min_share]

    def window(self, devices: Sequence[str] | None = None) -> tuple[float, float]:
        """From the first op to the last op of ``devices`` (all by default)."""
        self._ready("window")
        devices = list(devices or self.devices)
        times = [(s, e) for d, s, e, _ in self.intervals if d in devices]
        if not times:
            return (0.0, 0.0)
        return (min(s for s, _ in times), max(e for _, e in times))

    def _main_ops(self) -> list[tuple[float, float]] | None:
        """(start, end) of every op of the traced function that computed most (``fit``'s train function);
        None when the ops carry no function."""
        if not self.functions or len(self.functions) != len(self.intervals):
            return None
        time_in: dict[str, float] = {}
        for (_, s, e, _), fn in zip(self.intervals, self.functions):
            time_in[fn] = time_in.get(fn, 0.0) + e - s
        main = max(time_in, key=lambda fn: time_in[fn])
        return [(s, e) for (_, s, e, _), fn in zip(self.intervals, self.functions) if fn == main]

    def main_window(self) -> tuple[float, float]:
        """The span of the traced function that computed most (``fit``'s train function): where the
        steps are, without the set-up before them (iterators, copies of the data)."""
        self._ready("main_window()")
        spans = self._main_ops()
        if spans is None:
            return self.window()
        return (min(s for s, _ in spans), max(e for _, e in spans))

    def steady_window(self) -> tuple[float, float, bool]:
        """The steps as they run once started, so that they fill a plot instead of its last tenth: ``main_window()``
        from the end of its longest pause when that pause is over 40% of it (the first call's wait for tracing,
        the input pipeline's warm-up, the optimizer's first build), then from the end of the first step's
        one-off ops (each over a tenth of the window and 20 times the median op: kernels run for the first time,
        first allocations). A cut never leaves out all of a device's forward or backward ops: on simulated devices
        sharing cores one replica often waits for another within a step, and that wait is part of the step, not
        set-up before it. Nor does it leave out more than the first of the function's steps (counted by the node
        names that ran as often as most did: once a step): a pause late in a run, a busy machine's, is shown, not
        cut with every step before it. The third value says whether anything was left out."""
        lo, hi = self.main_window()
        main_ops = self._main_ops()
        if main_ops is None or hi <= lo:
            return lo, hi, False
        spans_of = {(s, e) for s, e in main_ops}
        computing = [(d, op_kind(op), s) for d, s, e, op in self.intervals
                     if (s, e) in spans_of and op_kind(op) in ("forward", "backward")]
        everyone = {(d, kind) for d, kind, _ in computing}

        starts: dict[str, list[float]] = {}          # each node's start times: one a step for most nodes
        for _, s, e, op in self.intervals:
            if (s, e) in spans_of:
                starts.setdefault(op, []).append(s)
        counts = [len(v) for v in starts.values()]
        steps = max(set(counts), key=lambda n: (counts.count(n), n))
        markers = [v for v in starts.values() if len(v) == steps]

        def may_cut(cut: float) -> bool:
            return ({(d, kind) for d, kind, s in computing if s >= cut} >= everyone
                    and all(sum(s >= cut for s in v) >= steps - 1 for v in markers))   # at most the first step cut

        start = lo
        for _ in range(4):                 # a pause, a one-off op, a pause again: until nothing changes
            before = start
            spans = merge((max(s, start), e) for s, e in main_ops if e > start)
            long = [i for i in range(len(spans) - 1) if spans[i + 1][0] - spans[i][1] > 0.4 * (hi - start)]
            allowed = [i for i in long if may_cut(spans[i + 1][0])]          # at most two pauses are that long
            if allowed:
                start = spans[max(allowed, key=lambda i: spans[i + 1][0] - spans[i][1]) + 1][0]
            ops = sorted(e - s for s, e in main_ops if s >= start)
            if ops:
                median = ops[len(ops) // 2]
                one_off = [e for s, e in main_ops if s >= start and e - s > max(20 * median, 0.1 * (hi - start))]
                if one_off and hi - max(one_off) > 0.3 * (hi - start) and may_cut(max(one_off)):
                    start = max(one_off)
            if start == before:
                break
        return start, hi, start > lo

    def idle_fraction(self, devices: Sequence[str] | None = None) -> float:
        """Share of the devices' time, from the first op to the last, in which they computed nothing:
        what the GPipe bubble formula predicts for a layer split."""
        devices = list(devices or self.devices)
        lo, hi = self.window(devices)
        if hi <= lo:
            return 0.0
        busy = sum(_length(self.spans(d)) for d in devices)
        return 1 - busy / (len(devices) * (hi - lo))

    def overlap(self, a: str, b: str) -> float:
        """Share of the less busy device's compute time during which the other device computed too."""
        sa, sb = self.spans(a), self.spans(b)
        least = min(_length(sa), _length(sb))
        return overlap_seconds(sa, sb) / least if least else 0.0

    def bars(self) -> tuple[list[str], dict[tuple[int, str], list[tuple[float, float]]]]:
        """What a timeline draws: the row labels (each device, then "input (host)" when the input pipeline did
        any work), and the spans of each (row, kind) pair, kind being ``op_kind`` of each op."""
        self._ready("bars()")
        devices = list(self.devices)
        bars: dict[tuple[int, str], list[tuple[float, float]]] = {}
        for device, start, end, op in self.intervals:
            bars.setdefault((devices.index(device), op_kind(op)), []).append((start, end))
        labels = [d.replace("/device:", "") for d in devices]
        if self.input_intervals:
            bars[(len(devices), "input pipeline")] = merge((s, e) for s, e, _ in self.input_intervals)
            labels.append("input (host)")
        return labels, bars

    def plot(self, title: str | None = None, ax: Any = None, whole: bool = False, what: str = "the training steps",
             number_by: str | None = None):
        """A matplotlib Figure: one row per device (and one for the input pipeline), ops as bars. It
        shows the steps (``what`` names them on the axis, e.g. "one forward pass"); ``whole=True`` shows the
        set-up before them too. ``number_by``: a regular expression with one group, searched in the ops' names;
        each device's span of one group value's ops is labelled with it (e.g. ``r"micro_batch_(\\d+)/"``). Raises
        NothingRecordedError when the block recorded no op (an empty chart would say nothing)."""
        self._require_records("plot()")
        from .plots import activity_figure

        return activity_figure(self, title=title, ax=ax, whole=whole, what=what, number_by=number_by)

    def __repr__(self) -> str:
        if not self._done:
            return "DeviceActivity(recording...)"
        if not self.intervals:
            return f"DeviceActivity: {NOTHING_RECORDED}"
        kind = "simulated devices (shared CPU cores)" if self.simulated else "GPUs"
        shares = ", ".join(f"{d.replace('/device:', '')} {s:.0%}" for d, s in self.shares().items())
        return (f"DeviceActivity on {kind}: {len(self.intervals)} ops in {self.wall_s:.2f} s; "
                f"share of compute: {shares}")


def _variable_ops(function_names: Iterable[str]) -> list[list[str]]:
    """The node paths of the variable ops of the given functions (eager context), grouped by the variable each
    acts on: the handle that is its first input, within one function body (a called function's handle is its own
    argument, so its ops form groups of their own)."""
    from tensorflow.python.eager import context

    ctx = context.context()
    groups: dict[tuple[str, str], list[str]] = {}

    def walk(name: str, prefix: str, depth: int) -> None:
        try:
            fdef = ctx.get_function_def(name)
        except Exception:       # a tf.data function: not in the eager context's library
            return
        for node in fdef.node_def:
            if _RESOURCE_OP.fullmatch(node.op) and node.input:
                handle = node.input[0].lstrip("^").split(":", 1)[0]
                groups.setdefault((prefix, handle), []).append(prefix + node.name)
            for attr in node.attr.values():
                if attr.func.name and depth < 20:
                    walk(attr.func.name, prefix + node.name + "/", depth + 1)

    for name in function_names:
        walk(name, "", 0)
    return list(groups.values())


class device_activity:
    """Record when each op ran during the ``with`` block, with TensorFlow's profiler, and on which device (inferred
    as the placer decides it: the op's requested device, else the ``tf.device`` scope of the call, else device 0;
    an op that reads or updates a variable, where the variable lives; the profiler records no device for an op).

    >>> with device_activity() as activity:          # doctest: +SKIP
    ...     model.fit(x, y, batch_size=256, epochs=1, verbose=0)
    >>> activity.busy                                # {'/device:CPU:0': 0.41, '/device:CPU:1': 0.0, ...}

    Keep the block short (a few training steps): the trace is held in memory until it ends. The
    trace folder is temporary and deleted when the block ends.
    """

    def __init__(self, devices: Sequence[str] | None = None) -> None:
        if devices is not None and (isinstance(devices, str) or not all(isinstance(d, str) for d in devices)):
            raise TypeError(f"device_activity: devices must be a list of device names such as "
                            f"kit.device_names(), got {short(devices)}.")
        self._devices = None if devices is None else tuple(normalize_device(d) or d for d in devices)
        self._result = DeviceActivity()
        self._dir: str | None = None
        self._scope: str | None = None

    def __enter__(self) -> DeviceActivity:
        from .devices import current
        from ._tf import import_tf

        tf = import_tf()
        report = current()
        if self._devices is None:
            if report is not None:
                self._devices = tuple(report.devices)
            else:
                self._devices = tuple(normalize_device(d.name) for d in tf.config.list_logical_devices()
                                      if d.device_type in ("CPU", "GPU"))
        from tensorflow.python.eager import context

        self._scope = normalize_device(context.context().device_name or "") or None   # a tf.device scope around us
        self._gpus_whole = report is not None and report.mode == "gpu"   # one logical device per GPU
        self._gpus_logical = report is not None and report.mode == "split-gpu"
        self._result.devices = self._devices
        self._result.simulated = report.simulated if report is not None else not any(
            ":GPU:" in d for d in self._devices)
        self._dir = tempfile.mkdtemp(prefix="gputrain-activity-")
        started = time.perf_counter()
        try:
            tf.profiler.experimental.start(self._dir)
        except tf.errors.AlreadyExistsError:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise ProfilerBusyError(
                "device_activity: another TensorFlow profiler session is running in this process (a "
                "tf.profiler.experimental.start() without stop(), a TensorBoard callback with "
                "profile_batch, or another device_activity block). Only one can run at a time: stop the "
                "other one first (tf.profiler.experimental.stop()), or leave its block.") from None
        except Exception:
            shutil.rmtree(self._dir, ignore_errors=True)
            raise
        self._overhead = time.perf_counter() - started
        self._wall = time.perf_counter()
        return self._result

    def __exit__(self, exc_type, exc, tb) -> None:
        from ._tf import import_tf

        tf = import_tf()
        wall = time.perf_counter() - self._wall
        started = time.perf_counter()
        try:
            tf.profiler.experimental.stop()
            if exc_type is None:
                self._read(tf)
        finally:
            if self._dir is not None:
                shutil.rmtree(self._dir, ignore_errors=True)
        r = self._result
        r.wall_s = wall
        r.overhead_s = self._overhead + time.perf_counter() - started
        r._done = True

    def _nodes(self, plane: Any, devices: Sequence[str], functions: dict[str, str]) -> dict[str, str | None]:
        """Each traced node's device: requested, else the caller's scope, else device 0; a function whose
        defaulted ops the trace shows sending from one other recorded device gets that device as its default."""
        default = self._scope if self._scope is not None and self._scope in devices else _default_device(devices)
        sent = sent_from(plane)
        nodes: dict[str, str | None] = {}
        for name in _function_names(plane):
            defaulted: set[str] = set()
            found = node_devices([name], default, functions, defaulted)
            seen = {sent[n] for n in defaulted if n in sent}
            if len(seen) == 1 and (moved := seen.pop()) != default and moved in devices:
                found = node_devices([name], moved, functions)
            nodes.update(found)
        # A variable op runs where its variable lives, whatever device it asked for or its scope named. The trace
        # records that device for every read whose value another device uses (its _Send): every op on the same
        # variable (the same handle, in the same function) goes there too, its updates included.
        for group in _variable_ops(_function_names(plane)):
            where = {sent[path] for path in group if path in sent}   # one outside ``devices``: left out, counted
            if len(where) == 1:
                device = where.pop()
                nodes.update((path, device) for path in group)
        return nodes

    def _read(self, tf: Any) -> None:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

        files = glob.glob(os.path.join(self._dir or "", "**", "*.xplane.pb"), recursive=True)
        if len(files) != 1:
            raise RuntimeError(f"device_activity: TensorFlow {tf.__version__}'s profiler wrote {len(files)} "
                               "trace files (*.xplane.pb) where the kit expects one: its output layout changed. "
                               "Run tests/unit/test_activity.py to see what differs.")
        space = xplane_pb2.XSpace()
        with open(files[0], "rb") as f:
            space.ParseFromString(f.read())
        host = [p for p in space.planes if p.name == "/host:CPU"]
        if not host:
            raise RuntimeError(f"device_activity: the trace has no '/host:CPU' plane (planes: "
                               f"{[p.name for p in space.planes]}); TensorFlow {tf.__version__}'s profiler "
                               "output changed. Run tests/unit/test_activity.py to see what differs.")
        # The trace's clock is its own (not time.time()): times count from its first host event.
        t0_ps = min((line.timestamp_ns * 1000 + min(e.offset_ps for e in line.events)
                     for line in host[0].lines if line.events), default=0)
        functions: dict[str, str] = {}
        devices = self._devices or ()                # set by __enter__ before any trace is read
        nodes = self._nodes(host[0], devices, functions)
        intervals, inputs, unattributed = _host_intervals(host[0], nodes, t0_ps, functions)
        r = self._result
        r.source = "host ops"
        if self._gpus_whole:
            gpu = _gpu_intervals(space, devices, t0_ps)
            if gpu:
                intervals, r.source = gpu, "GPU planes"
        elif self._gpus_logical:
            # On GPUs the host's op events are launches, not compute: read the kernels themselves.
            diagnostics: dict | None = {} if os.environ.get("GPUTRAIN_ACTIVITY_DUMP") else None
            gpu, missed = _logical_gpu_intervals(space, nodes, devices, t0_ps, diagnostics)
            if diagnostics is not None:
                import json
                with open(os.environ["GPUTRAIN_ACTIVITY_DUMP"], "a") as f:
                    f.write(json.dumps({**diagnostics, "host_attributed": len(intervals)}, default=str) + "\n")
            if gpu:
                intervals, unattributed, r.source = gpu, missed, "GPU planes, by op name"
        kept = sorted((i for i in intervals if i[0] in devices), key=lambda i: i[1])
        r.intervals = [i[:4] for i in kept]
        r.functions = [i[4] for i in kept]
        r.unattributed_s = unattributed + sum(i[2] - i[1] for i in intervals if i[0] not in devices)
        r.input_intervals = sorted(inputs)
