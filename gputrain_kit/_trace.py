"""Reading TensorFlow's profiler trace (an XSpace) for ``activity.device_activity``: which function node ran on
which device, and the op, input-pipeline and GPU-kernel intervals of the trace (the rules are described in
``activity``'s docstring and pinned to the installed TensorFlow by tests/unit/test_activity.py)."""
from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from .placement import normalize_device

def merge(spans: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of time spans as sorted, disjoint spans."""
    out: list[list[float]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


# Events that move data or mark the graph, not compute on a device.
_NOT_COMPUTE = {"_Send", "_Recv", "_HostSend", "_HostRecv", "NoOp", "Placeholder", "_Arg", "_Retval",
                "Const", "_EagerConst"}


def _default_device(devices: Sequence[str]) -> str:
    gpus = [d for d in devices if ":GPU:" in d]
    return "/device:GPU:0" if gpus else "/device:CPU:0"


def _function_names(plane: Any) -> set[str]:
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    found: set[str] = set()
    for line in plane.lines:
        for event in line.events:
            for stat in event.stats:
                if names.get(stat.metadata_id) in ("eager_op", "func_name"):
                    value = stat.str_value or names.get(stat.ref_value, "")
                    if value.startswith("__inference"):
                        found.add(value)
    return found


# Ops on a resource (a variable) that TensorFlow colocates with the variable when no device is requested.
_RESOURCE_OP = re.compile(r"ReadVariableOp|Assign\w*VariableOp|Resource\w+|VarIsInitializedOp|VarHandleOp|"
                          r"DestroyResourceOp")


def sent_from(plane: Any) -> dict[str, str]:
    """Node path -> the device it ran on, for every node the trace shows sending a tensor to another device: a
    ``_Send`` event's ``from`` stat names the node, its ``key`` starts with the sending device. The only device
    the profiler's host events record; the placement of every other op is inferred (``node_devices``)."""
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    out: dict[str, str] = {}
    for line in plane.lines:
        for event in line.events:
            if not plane.event_metadata[event.metadata_id].name.endswith(":_Send"):
                continue
            stats = {names.get(x.metadata_id): x.str_value or names.get(x.ref_value, "") for x in event.stats}
            device = normalize_device((stats.get("key") or "").split(";", 1)[0])
            if stats.get("from") and device:
                out[stats["from"]] = device
    return out


def node_devices(function_names: Iterable[str], default: str,
                 functions: dict[str, str] | None = None,
                 defaulted: set[str] | None = None) -> dict[str, str | None]:
    """Node path (as the trace names it) -> device, for the given functions of the eager context.

    A node's device is the one it requested, else its caller's, else ``default`` (where the placer
    puts an op that asks for nothing). A variable op that asks for nothing runs where its variable
    lives, which the function does not say; it gets the device requested by another op on the same
    variable, else by an op that uses its result, else ``default`` when nothing in the function asks
    for a device, else None (left out of the timeline). ``functions``, when given, is filled with
    node path -> the traced function it belongs to.

    Limit: a variable op that requests a device other than its variable's runs where the variable
    lives (TensorFlow colocates them) but is shown here where it was requested (``device_activity`` moves it to
    the variable's device when the trace shows a read of that variable sending from there); create each variable on
    the device that uses it (notebook 03) and the two agree. ``defaulted``, when given, is filled with the
    paths of the ops (not variable ops) that got ``default`` because nothing requested a device for them.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    out: dict[str, str | None] = {}

    def source(ref: str) -> str:
        return ref.lstrip("^").split(":", 1)[0]

    def walk(name: str, prefix: str, inherited: str, depth: int, top: str) -> None:
        if depth > 20:
            return
        try:
            fdef = ctx.get_function_def(name)
        except Exception:       # a tf.data function: not in the eager context's library
            return
        asked = {node.name: normalize_device(node.device) or inherited for node in fdef.node_def}
        anything_asked = any(asked.values())
        by_resource: dict[str, str] = {}      # a variable (the input it comes from) -> a device asked for it
        by_consumer: dict[str, str] = {}      # a node -> a device asked by a node that uses its result
        for node in fdef.node_def:
            if not asked[node.name]:
                continue
            for ref in node.input:
                by_consumer.setdefault(source(ref), asked[node.name])
            if _RESOURCE_OP.fullmatch(node.op) and node.input:
                by_resource.setdefault(source(node.input[0]), asked[node.name])
        for node in fdef.node_def:
            device: str | None = asked[node.name]
            if not device and _RESOURCE_OP.fullmatch(node.op):
                device = (by_resource.get(source(node.input[0])) if node.input else None) \
                    or by_consumer.get(node.name) or (None if anything_asked else default)
                out[prefix + node.name] = device
            else:
                out[prefix + node.name] = device or default
                if not device and defaulted is not None:
                    defaulted.add(prefix + node.name)
            if functions is not None:
                functions[prefix + node.name] = top
            for attr in node.attr.values():
                if attr.func.name:
                    walk(attr.func.name, prefix + node.name + "/", asked[node.name], depth + 1, top)

    for name in function_names:
        walk(name, "", "", 0, name)
    return out


def _host_intervals(plane: Any, nodes: dict[str, str | None], t0_ps: int, functions: dict[str, str]):
    intervals, inputs, unattributed = [], [], 0.0
    for line in plane.lines:
        base = line.timestamp_ns * 1000 - t0_ps
        on_data_thread = line.name.startswith("tf_data")
        for event in line.events:
            name = plane.event_metadata[event.metadata_id].name
            start = (base + event.offset_ps) / 1e12
            end = start + event.duration_ps / 1e12
            if on_data_thread:
                # The pipeline's own work: user functions (map, generator, filter) and the workers that
                # fill prefetch / parallel-map buffers. Not the consumer's GetNext, which includes waiting.
                if name.startswith("InstantiatedCapturedFunction::Run") or name.endswith("Produce"):
                    inputs.append((start, end, name))
                continue
            if ":" not in name or "::" in name or " " in name:
                continue
            node, op_type = name.rsplit(":", 1)
            if op_type in _NOT_COMPUTE:
                continue
            if any(k in op_type for k in ("Iterator", "Dataset", "Optional")):
                continue                                  # the step asking the input pipeline for a batch
            device = nodes.get(node)
            if device is None:                            # not in a known function, or a variable op
                unattributed += event.duration_ps / 1e12
                continue
            intervals.append((device, start, end, f"{node}:{op_type}", functions.get(node, "")))
    return intervals, inputs, unattributed


def _stream_kernels(space: Any, t0_ps: int):
    """(GPU plane's device name, stream line's name, the kernel's op, start s, end s) of every kernel on a
    physical GPU's streams, in the trace's time (seconds from ``t0_ps``)."""
    for plane in space.planes:
        if not re.fullmatch(r"/device:GPU:\d+", plane.name):
            continue
        stat_names = {k: v.name for k, v in plane.stat_metadata.items()}
        for line in plane.lines:
            if not line.name.lower().startswith("stream"):
                continue
            base = line.timestamp_ns * 1000 - t0_ps
            for event in line.events:
                start = (base + event.offset_ps) / 1e12
                yield plane.name, line.name, _kernel_op(plane, event, stat_names), start, start + event.duration_ps / 1e12


def _gpu_intervals(space: Any, devices: Sequence[str], t0_ps: int):
    """Whole GPUs: each plane is one device."""
    return [(device, start, end, op, "") for device, _, op, start, end in _stream_kernels(space, t0_ps)
            if device in devices]


def _kernel_op(plane: Any, event: Any, stat_names: dict[int, str]) -> str:
    meta = plane.event_metadata[event.metadata_id]
    op = meta.display_name or meta.name
    for stat in list(event.stats) + list(meta.stats):
        if stat_names.get(stat.metadata_id) == "tf_op":
            op = stat.str_value or stat_names.get(stat.ref_value, op)
    return op


def _logical_gpu_intervals(space: Any, nodes: dict[str, str | None], devices: Sequence[str], t0_ps: int,
                           diagnostics: dict | None = None):
    """Kernels of the physical GPUs' streams, each given to the logical GPU its op ran on.

    Logical GPUs of one physical GPU share its trace plane, so the plane does not say which logical
    device ran a kernel; the kernel's ``tf_op`` names its op ("node:type"), and the node's device
    comes from the traced functions (``nodes``), as on the host path. Kernels whose op is unknown are
    left out and counted. Returns (intervals, unattributed seconds)."""
    stripped: dict[str, set] = {}     # a node path without its first part (the call node) -> its devices
    for node, device in nodes.items():
        if "/" in node:
            stripped.setdefault(node.split("/", 1)[1], set()).add(device)
    intervals: list[Any] = []
    seen: list[Any] = []
    unattributed = 0.0
    for _, line_name, op, start, end in _stream_kernels(space, t0_ps):
        if diagnostics is not None and len(seen) < 40:
            seen.append([line_name, op])
        node = op.rsplit(":", 1)[0]
        device = nodes.get(node)
        if device is None and len(stripped.get(node, ())) == 1:
            device = next(iter(stripped[node]))
        if device in devices:
            intervals.append((device, start, end, op, ""))
        else:
            unattributed += end - start
    if diagnostics is not None:
        diagnostics.update(kernels=seen, nodes=list(nodes)[:40], planes=[p.name for p in space.planes],
                           attributed=len(intervals), unattributed_s=unattributed)
    return intervals, unattributed
