"""What CUDA_VISIBLE_DEVICES really does (pure Python, no TensorFlow, no GPU needed).

The CUDA runtime reads the variable once, when the process initialises CUDA, and
parses it more loosely than ``value.split(",")`` suggests. The rules modelled here:

- Unset: every GPU is visible, in the default order.
- A comma-separated list of ordinals, *renumbered* in list order: ``2,0`` makes
  physical GPU 2 the process's GPU 0 (TensorFlow's ``/GPU:0``).
- Each entry is read like C's ``strtoul``: surrounding whitespace and a leading
  ``+`` are accepted, and trailing garbage after the digits is ignored
  (``1gpu`` is 1).
- Parsing stops at the first entry that is not a number, is negative, or is out
  of range; entries before it stay visible (CUDA programming guide: ``0,2,-1,1``
  shows 0 and 2), without an error. With no GPU left (an empty value, ``-1``, an
  out-of-range first entry) ``cuInit`` fails with CUDA_ERROR_NO_DEVICE (100).
- A GPU repeated among the entries kept makes ``cuInit`` fail with
  CUDA_ERROR_INVALID_DEVICE (101): CUDA does not start, so the process has no GPU
  (TensorFlow logs "failed call to cuInit" and runs without GPUs). A repeat after
  the entry that stopped parsing is never read: on 8 GPUs ``0,9,0`` shows GPU 0.
  (PyTorch's parser checks repeats first; a real driver did not, see DRIVER_RECORD.)
- ``GPU-`` UUIDs (as printed by ``nvidia-smi -L``) may be abbreviated to any
  unambiguous prefix; an ambiguous or unknown prefix, or a bare ``GPU-``, stops
  parsing like an invalid ordinal. A list that starts with UUIDs stops at the
  first non-UUID.
- ``MIG-`` entries select a MIG instance; only a single MIG instance can be
  enumerated (CUDA programming guide), later entries are ignored.
- The ordinals are CUDA's numbering of the GPUs, which is not always
  ``nvidia-smi``'s. ``nvidia-smi`` numbers GPUs by PCI bus ID. CUDA does the same
  only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; unset (``FASTEST_FIRST``, the
  default) it enumerates "the fastest first, using a simple heuristic" that NVIDIA
  does not spell out. On a server with GPUs of different models, ``2`` in
  CUDA_VISIBLE_DEVICES (and TensorFlow's ``/GPU:i``) can then be another board than
  ``nvidia-smi``'s GPU 2. The model cannot compute CUDA's fastest-first order: pass
  it (``fastest_first``), or set ``device_order="PCI_BUS_ID"``; otherwise the
  ``nvidia-smi`` index of a visible GPU is reported as unknown (None).
  :func:`measured_numbering` reads the real mapping on a GPU machine.

Sources: CUDA C++ Programming Guide, "CUDA Environment Variables"
(CUDA_VISIBLE_DEVICES); PyTorch's ``torch/cuda/__init__.py``
(``_parse_visible_devices``, ``_transform_uuid_to_ordinals``,
``_device_count_nvml``), which mirrors the runtime's parser to count devices
without initialising CUDA; the same guide's CUDA_DEVICE_ORDER entry. The tests
cite the cases they take from each. Where PyTorch's mirror and the driver differ
(a repeat after an out-of-range entry, a bare ``GPU-``), the model follows the
driver as measured (``DRIVER_RECORD``: one H200, one driver, 2026).

Everything here is pure Python except :func:`measured_numbering`, which starts a
child process with TensorFlow and calls ``nvidia-smi`` (GPU machines only).
"""
from __future__ import annotations

import hashlib
import html
import numbers
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, Sequence

from ._args import ArgumentTypeError, short, typed

__all__ = ["parse_cuda_visible_devices", "Visibility", "Entry", "example_uuids", "DEVICE_ORDERS", "cuda_numbering",
           "example_fastest_first", "normalise_bus_id", "measured_numbering", "CUDA_ERRORS", "DRIVER_RECORD",
           "driver_comparison", "driver_report"]

#: The values of CUDA_DEVICE_ORDER the model knows (None: the variable is unset, i.e. FASTEST_FIRST).
DEVICE_ORDERS = ("FASTEST_FIRST", "PCI_BUS_ID")

#: cuInit's results the model predicts (0, CUDA_SUCCESS, otherwise).
CUDA_ERRORS = {"CUDA_ERROR_NO_DEVICE": 100, "CUDA_ERROR_INVALID_DEVICE": 101}

#: A real driver's answers: 1 x NVIDIA H200, driver 580.159.04, 2026-11-28, each value in a fresh process that called
#: cuInit(0) and then cuDeviceGetCount through ctypes. (value, cuInit's result, GPUs counted: 0 where cuInit failed).
#: "<uuid>" is the GPU's UUID, "<p8>" and "<p5>" its first 8 and 5 characters. One driver, one GPU: the rules for
#: several GPUs (renumbering, a stop before a later valid GPU) are the model's reading of the sources, not measured.
DRIVER_RECORD: dict[str, Any] = {
    "label": "1 x NVIDIA H200, driver 580.159.04, 2026-11-28 (cuInit and cuDeviceGetCount, a fresh process per value)",
    "results": ((None, 0, 1), ("0", 0, 1), ("0,1,0", 0, 1), ("0,2,0", 0, 1), ("0,9,0", 0, 1), ("0,x,0", 0, 1),
                ("0,-1,0", 0, 1), ("0,1", 0, 1), ("0,GPU-", 0, 1), ("0,<p8>", 0, 1), ("<uuid>", 0, 1), ("<p8>", 0, 1),
                ("<p5>", 0, 1), ("<p8>,1", 0, 1), ("<p8>,0,<p8>", 0, 1), ("<p8>,GPU-zz,<p8>", 0, 1),
                ("<p8>,GPU-", 0, 1), ("", 100, 0), ("-1", 100, 0), ("9", 100, 0), ("1,0", 100, 0), ("1gpu", 100, 0),
                ("GPU-", 100, 0), ("GPU-,0", 100, 0), ("GPU-,<p8>", 100, 0), ("GPU-ffff", 100, 0), ("0,0", 101, 0),
                ("0, 0", 101, 0), ("0gpu,0", 101, 0), ("0,0,1", 101, 0), ("0,0,9", 101, 0), ("<p8>,<p8>", 101, 0)),
}


class DriverRow(NamedTuple):
    """One value of DRIVER_RECORD: (cuInit's result, GPUs counted) from the driver and from the model."""

    value: str | None
    driver: tuple[int, int]
    model: tuple[int, int]


@dataclass(frozen=True)
class Entry:
    """One comma-separated entry of the value, and what the runtime made of it."""

    text: str
    status: str                 # "visible" | "dropped"
    physical: int | None        # physical GPU index, when known
    logical: int | None         # the index the process sees (TensorFlow's /GPU:i), when visible
    reason: str


@dataclass(frozen=True)
class Visibility:
    """The result of parsing CUDA_VISIBLE_DEVICES against a machine's GPUs."""

    value: str | None
    n_physical: int
    entries: tuple[Entry, ...]
    visible: tuple[int | None, ...]   # logical index i -> physical GPU index (None: a MIG instance we cannot map)
    summary: str
    device_order: str | None = None   # CUDA_DEVICE_ORDER (None: unset, which means FASTEST_FIRST)
    numbering: tuple[int | None, ...] = ()   # CUDA ordinal k -> nvidia-smi index (None: unknown)
    cuda_error: str | None = None     # how cuInit fails (a key of CUDA_ERRORS); None: CUDA starts

    @property
    def cuinit(self) -> int:
        """What cuInit returns: 0 (CUDA starts), 100 (no GPU left) or 101 (a repeated GPU)."""
        return CUDA_ERRORS[self.cuda_error] if self.cuda_error else 0

    @property
    def smi(self) -> tuple[int | None, ...]:
        """nvidia-smi's index of each visible GPU, /GPU:0 first (None where the model cannot know it)."""
        return tuple(None if p is None or p >= len(self.numbering) else self.numbering[p] for p in self.visible)

    @property
    def count(self) -> int:
        """How many GPUs the process (and TensorFlow) will see."""
        return len(self.visible)

    @property
    def hidden(self) -> list[int]:
        """Physical GPUs the process will not see."""
        return [i for i in range(self.n_physical) if i not in self.visible]

    def physical_of(self, logical: int) -> int | None:
        """Which physical GPU, in CUDA's numbering, becomes ``/GPU:<logical>``."""
        if not 0 <= logical < len(self.visible):
            raise ValueError(f"/GPU:{logical} does not exist: this value makes {len(self.visible)} GPU(s) visible.")
        return self.visible[logical]

    def __repr__(self) -> str:
        lines = [self.summary]
        explicit = self.device_order is not None or any(n is not None for n in self.numbering)
        for i, (phys, smi) in enumerate(zip(self.visible, self.smi)):
            where = "a MIG instance" if phys is None else f"CUDA GPU {phys}"
            if explicit and phys is not None:
                where += " (nvidia-smi's number unknown)" if smi is None else f" = nvidia-smi GPU {smi}"
            lines.append(f"  /GPU:{i} -> {where}")
        if explicit:
            lines.append(f"  {_order_note(self.device_order, self.numbering)}")
        for e in self.entries:
            if e.status == "dropped":
                lines.append(f"  entry {e.text!r} ignored: {e.reason}")
            elif e.reason:
                lines.append(f"  entry {e.text!r}: {e.reason}")
        if self.hidden and self.count:
            lines.append(f"  hidden CUDA GPUs: {', '.join(map(str, self.hidden))}")
        return "\n".join(lines)

    def to_html(self) -> str:
        """A table for the widget: one row per physical GPU, then the ignored entries."""
        esc = html.escape
        rows = []
        for phys in range(self.n_physical):
            smi = self.numbering[phys] if phys < len(self.numbering) else None
            if phys in self.visible:
                logical = self.visible.index(phys)
                cell, style = f"/GPU:{logical}", "background:#e6f4ea"
                why = next((e.reason for e in self.entries if e.physical == phys and e.status == "visible"), "")
            else:
                cell, style = "hidden", "background:#fdecea"
                why = "not listed" if self.count else "no GPU visible (see below)"
            rows.append(f"<tr style='{style}'><td>GPU {phys}</td><td>{'?' if smi is None else f'GPU {smi}'}</td>"
                        f"<td>{cell}</td><td>{esc(why)}</td></tr>")
        for i, listed in enumerate(self.visible):
            if listed is None:
                rows.append(f"<tr style='background:#e6f4ea'><td>MIG instance</td><td>?</td><td>/GPU:{i}</td>"
                            "<td></td></tr>")
        dropped = [f"<li><code>{esc(repr(e.text))}</code>: {esc(e.reason)}</li>"
                   for e in self.entries if e.status == "dropped"]
        return (f"<p><b>{esc(self.summary)}</b></p>"
                "<table><tr><th>CUDA's number</th><th>nvidia-smi's number</th><th>seen as</th>"
                "<th>why</th></tr>" + "".join(rows) + "</table>"
                + f"<p><i>{esc(_order_note(self.device_order, self.numbering))}</i></p>"
                + (f"<p>Ignored entries:</p><ul>{''.join(dropped)}</ul>" if dropped else ""))


def example_uuids(n: int) -> list[str]:
    """Deterministic, nvidia-smi-shaped UUIDs for an imaginary n-GPU server (for teaching)."""
    out = []
    for i in range(n):
        h = hashlib.sha1(f"gputrain-kit-gpu-{i}".encode()).hexdigest()
        out.append(f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}")
    return out


def example_fastest_first(n: int) -> tuple[int, ...]:
    """CUDA's fastest-first order on an imaginary mixed server (for teaching): nvidia-smi's GPUs
    n//2 .. n-1 are a newer, faster model than GPUs 0 .. n//2-1, so CUDA numbers them first.
    (Within one model this example keeps bus order; the real tie-break is CUDA's own.)"""
    return tuple(range(n // 2, n)) + tuple(range(n // 2))


def cuda_numbering(n: int, device_order: str | None = None,
                   fastest_first: Sequence[int] | None = None) -> tuple[int | None, ...]:
    """nvidia-smi's index of each CUDA ordinal 0..n-1 under ``CUDA_DEVICE_ORDER=device_order``.

    ``device_order``: None (unset, which CUDA treats as FASTEST_FIRST), "FASTEST_FIRST" or
    "PCI_BUS_ID". With PCI_BUS_ID, CUDA numbers GPUs by PCI bus like nvidia-smi: ordinal k is
    nvidia-smi GPU k. Fastest first, the order comes from CUDA's heuristic and only the machine
    can tell it: ``fastest_first`` lists nvidia-smi's indices in CUDA's order (as
    :func:`measured_numbering` reads them); without it every entry is None (unknown).
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"cuda_numbering: n must be a GPU count >= 0, got {short(n)}.")
    if device_order is not None and device_order not in DEVICE_ORDERS:
        raise ValueError(f"CUDA_DEVICE_ORDER must be unset (None), 'FASTEST_FIRST' or 'PCI_BUS_ID', "
                         f"got {short(device_order)}.")
    if device_order == "PCI_BUS_ID":
        return tuple(range(n))
    if fastest_first is None:
        return (None,) * n
    if isinstance(fastest_first, str) or not isinstance(fastest_first, Sequence):
        raise ValueError(f"fastest_first must list nvidia-smi's GPU indices in CUDA's order, got {short(fastest_first)}.")
    order = list(fastest_first)
    if (any(isinstance(i, bool) or not isinstance(i, numbers.Integral) for i in order)
            or sorted(order) != list(range(n))):
        raise ValueError(f"fastest_first must contain each nvidia-smi index 0..{n - 1} exactly once, "
                         f"got {short(fastest_first)}.")
    return tuple(int(i) for i in order)


def _order_note(device_order: str | None, numbering: Sequence[int | None]) -> str:
    if device_order == "PCI_BUS_ID":
        return "CUDA_DEVICE_ORDER=PCI_BUS_ID: CUDA numbers GPUs by PCI bus, as nvidia-smi does."
    head = ("CUDA_DEVICE_ORDER unset: CUDA numbers GPUs fastest first" if device_order is None
            else "CUDA_DEVICE_ORDER=FASTEST_FIRST: CUDA numbers GPUs fastest first")
    if numbering and all(n is not None for n in numbering):
        return head + f" (here nvidia-smi's {', '.join(map(str, numbering))}), nvidia-smi by PCI bus."
    return head + ", nvidia-smi by PCI bus: on mixed GPU models the two numbers can differ."


def normalise_bus_id(text: str) -> str:
    """One spelling of a PCI bus ID: nvidia-smi's ``00000000:3B:00.0`` and TensorFlow's
    ``0000:3b:00.0`` both become ``0000:3b:00.0``."""
    if not isinstance(text, str):
        raise ValueError(f"normalise_bus_id: expected a PCI bus ID string, got {short(text)}.")
    parts = text.strip().lower().split(":")
    if len(parts) != 3 or "." not in parts[2]:
        raise ValueError(f"normalise_bus_id: {short(text)} is not a PCI bus ID like '0000:3b:00.0'.")
    try:
        domain, bus = int(parts[0], 16), int(parts[1], 16)
        device, function = (int(x, 16) for x in parts[2].split("."))
    except ValueError:
        raise ValueError(f"normalise_bus_id: {short(text)} is not a PCI bus ID like '0000:3b:00.0'.") from None
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"


def measured_numbering(device_order: str | None = None) -> list[tuple[str, int, str]]:
    """GPU machines only: in a fresh process with ``CUDA_DEVICE_ORDER=device_order`` (None: unset),
    each TensorFlow GPU as ``("/GPU:i", nvidia-smi index, name)``, matched by PCI bus ID.

    The child lists its GPUs with ``device_lib`` (memory growth on, so it holds little) and asks
    ``nvidia-smi`` for every GPU's index and bus; the child's CUDA_VISIBLE_DEVICES is inherited.
    """
    from ._children import Job, run_jobs
    from .processes import ChildError

    if device_order is not None and device_order not in DEVICE_ORDERS:
        raise ValueError(f"measured_numbering: device_order must be None, 'FASTEST_FIRST' or 'PCI_BUS_ID', "
                         f"got {short(device_order)}.")
    outcome = run_jobs("gpu_numbering", [Job("gpus", {}, {"CUDA_DEVICE_ORDER": device_order,
                                                            "TF_FORCE_GPU_ALLOW_GROWTH": "true"})],
                       processes=1, timeout=120, fork=False, func="measured_numbering")["gpus"]
    if not outcome.ok:
        raise ChildError(f"measured_numbering: {outcome.error}")
    values = outcome.values or {}
    by_bus = {normalise_bus_id(bus): (int(index), name) for index, bus, name in values["smi"]}
    return [(f"/GPU:{i}", *by_bus[normalise_bus_id(bus)]) for i, bus in enumerate(values["tf"])]


def _strtoul(text: str) -> tuple[int | None, str]:
    """Read an entry like the runtime: optional sign, then leading digits; the rest ignored."""
    s = text.strip()
    sign, body = ("", s)
    if body[:1] in "+-" and body[:1]:
        sign, body = body[0], body[1:]
    digits = ""
    for ch in body:
        if not ch.isdigit():
            break
        digits += ch
    if not digits:
        return None, ""
    value = int(sign + digits)
    notes = []
    if s != text:
        notes.append("surrounding spaces ignored")
    if sign == "+":
        notes.append("leading '+' accepted")
    if len(digits) < len(body):
        notes.append(f"read as {value}: everything after the digits ({body[len(digits):]!r}) is ignored")
    return value, "; ".join(notes)


def _check_physical(physical: int | Sequence[str],
                    func: str = "parse_cuda_visible_devices") -> tuple[int, list[str] | None]:
    if isinstance(physical, bool):
        raise ValueError(f"{func}: physical must be a GPU count or a list of GPU UUIDs, got a bool.")
    if isinstance(physical, numbers.Integral):
        if physical < 0:
            raise ValueError(f"{func}: physical must be a GPU count >= 0, got {physical}.")
        return int(physical), None
    if isinstance(physical, str) or not isinstance(physical, Sequence):
        raise ValueError(f"{func}: physical must be a GPU count (e.g. 8) or a list of GPU UUIDs as printed by "
                         f"`nvidia-smi -L` (e.g. ['GPU-8932f937-...']), got {short(physical)}.")
    uuids = list(physical)
    bad = [u for u in uuids if not isinstance(u, str) or not u.startswith("GPU-")]
    if bad:
        raise ValueError(f"{func}: physical UUIDs must be strings starting with 'GPU-', got {short(bad[0])}.")
    if len(set(uuids)) != len(uuids):
        raise ValueError(f"{func}: physical UUIDs must be unique: two GPUs cannot share a UUID.")
    return len(uuids), uuids


def parse_cuda_visible_devices(value: str | None, physical: int | Sequence[str], *,
                               device_order: str | None = None,
                               fastest_first: Sequence[int] | None = None) -> Visibility:
    """Which physical GPUs a process sees, in which order, for a CUDA_VISIBLE_DEVICES value.

    ``physical``: the machine's GPU count, or its GPU UUIDs indexed by CUDA ordinal
    (needed to resolve ``GPU-`` entries). Returns a :class:`Visibility` whose
    ``visible[i]`` is the physical GPU behind ``/GPU:i``, with a reason for every
    entry that was ignored.

    "Physical GPU k" is GPU k in **CUDA's** numbering, the one the ordinals in the value
    use. nvidia-smi numbers GPUs by PCI bus; CUDA does too only with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and otherwise numbers the fastest GPU first, so on a
    server with mixed GPU models "2" may not be nvidia-smi's GPU 2. ``device_order`` is
    the CUDA_DEVICE_ORDER value (None: unset); ``fastest_first`` is nvidia-smi's indices in
    CUDA's fastest-first order, when known (see :func:`cuda_numbering`). ``.smi`` then gives
    nvidia-smi's index of every visible GPU (None: unknown).
    """
    if value is not None and not isinstance(value, str):
        raise ArgumentTypeError(f"parse_cuda_visible_devices: value must be the variable's text (a str) or None for "
                                f"unset, got {typed(value)}. "
                         "Environment variables are strings: write '0,1', not [0, 1].")
    n, uuids = _check_physical(physical)
    numbering = cuda_numbering(n, device_order, fastest_first)
    if value is None:
        entries = tuple(Entry(str(i), "visible", i, i, "") for i in range(n))
        result = Visibility(None, n, entries, tuple(range(n)),
                            f"unset: all {n} GPU(s) visible in the default order")
    elif value.startswith("MIG-"):
        result = _parse_mig(value, n, uuids)
    elif value.startswith("GPU-"):
        result = _parse_uuids(value, n, uuids)
    else:
        result = _parse_ordinals(value, n)
    if not result.count and result.cuda_error is None:
        result = replace(result, cuda_error="CUDA_ERROR_NO_DEVICE")
    return replace(result, device_order=device_order, numbering=numbering)


def _finish(value: str, n: int, entries: list[Entry], visible: list[int | None], repeated: int | None = None) -> Visibility:
    shown = f"CUDA_VISIBLE_DEVICES={value!r}"
    if repeated is not None:
        entries = [Entry(e.text, "dropped", e.physical, None, e.reason or f"hidden: CUDA does not start (GPU "
                         f"{repeated} is listed twice)") for e in entries]
        return Visibility(value, n, tuple(entries), (), f"{shown}: no GPU visible (GPU {repeated} is listed twice: "
                          "cuInit fails with CUDA_ERROR_INVALID_DEVICE, so CUDA does not start; TensorFlow logs "
                          "'failed call to cuInit' and runs without GPUs)", cuda_error="CUDA_ERROR_INVALID_DEVICE")
    if not visible:
        return Visibility(value, n, tuple(entries), (), f"{shown}: no GPU visible (cuInit fails with "
                          "CUDA_ERROR_NO_DEVICE; TensorFlow runs without GPUs)", cuda_error="CUDA_ERROR_NO_DEVICE")
    return Visibility(value, n, tuple(entries), tuple(visible), f"{shown}: {len(visible)} of {n} GPU(s) visible")


def _stop(entries: list[Entry], rest: list[str], reason: str, after: str = "after an entry that stopped parsing") -> None:
    entries.append(Entry(rest[0], "dropped", None, None, reason))
    entries.extend(Entry(t, "dropped", None, None, after) for t in rest[1:])


_AFTER_REPEAT = "not read: the repeat before it already makes cuInit fail"


def _parse_ordinals(value: str, n: int) -> Visibility:
    """In list order, like the driver: stop at the first entry that is not a number, is negative or is out of range;
    a GPU repeated among the entries before that stop makes cuInit fail (measured: DRIVER_RECORD)."""
    texts = value.split(",")
    entries: list[Entry] = []
    kept: list[int | None] = []
    for i, text in enumerate(texts):
        number, note = _strtoul(text)
        if number is None:
            why = "empty value: hides every GPU" if value.strip() == "" else "not a number: parsing stops here"
            _stop(entries, texts[i:], why)
            break
        if number < 0:
            _stop(entries, texts[i:], f"negative ({number}): parsing stops here")
            break
        if number >= n:
            _stop(entries, texts[i:], f"out of range (the server has {n} GPU(s)"
                  f"{f': 0-{n - 1}' if n else ''}): parsing stops here")
            break
        if number in kept:
            _stop(entries, texts[i:], f"GPU {number} is repeated", _AFTER_REPEAT)
            return _finish(value, n, entries, [], repeated=number)
        kept.append(number)
        entries.append(Entry(text, "visible", number, len(kept) - 1, note))
    return _finish(value, n, entries, kept)


def _parse_uuids(value: str, n: int, uuids: list[str] | None) -> Visibility:
    texts = value.split(",")
    entries: list[Entry] = []
    visible: list[int | None] = []
    for i, text in enumerate(texts):
        if not text.startswith("GPU-"):
            _stop(entries, texts[i:], "not a GPU- UUID in a UUID list: parsing stops here")
            break
        if text == "GPU-":     # the driver matched no GPU (DRIVER_RECORD), though every UUID starts so
            _stop(entries, texts[i:], "a bare 'GPU-' (an empty UUID prefix) matches no GPU: parsing stops here")
            break
        if uuids is None:
            raise ValueError("GPU- UUID entries need the machine's UUIDs: pass physical=[...] as printed by "
                             "`nvidia-smi -L` (or gputrain_kit.visibility.example_uuids(8) for an imaginary server).")
        matches = [k for k, u in enumerate(uuids) if u.startswith(text)]
        if not matches:
            _stop(entries, texts[i:], "matches no GPU's UUID: parsing stops here")
            break
        if len(matches) > 1:
            _stop(entries, texts[i:], f"ambiguous prefix: matches GPUs {', '.join(map(str, matches))}; "
                                      "parsing stops here")
            break
        phys = matches[0]
        if phys in visible:
            _stop(entries, texts[i:], f"GPU {phys} is repeated", _AFTER_REPEAT)
            return _finish(value, n, entries, [], repeated=phys)
        note = "" if text == uuids[phys] else f"unambiguous prefix of CUDA GPU {phys}'s UUID"
        visible.append(phys)
        entries.append(Entry(text, "visible", phys, len(visible) - 1, note))
    return _finish(value, n, entries, visible)


def _parse_mig(value: str, n: int, uuids: list[str] | None) -> Visibility:
    texts = value.split(",")
    first = texts[0]
    phys = None
    if first.startswith("MIG-GPU-") and uuids is not None:  # older form: MIG-GPU-<uuid>/<gi>/<ci>
        gpu_uuid = first[len("MIG-"):].split("/")[0]
        found = [k for k, u in enumerate(uuids) if u.startswith(gpu_uuid)]
        phys = found[0] if len(found) == 1 else None
    entries = [Entry(first, "visible", phys, 0, "a MIG instance: one slice of a GPU")]
    entries += [Entry(t, "dropped", None, None, "only a single MIG instance can be enumerated")
                for t in texts[1:]]
    return Visibility(value, n, tuple(entries), (phys,), f"CUDA_VISIBLE_DEVICES={value!r}: 1 MIG instance visible")


def driver_comparison() -> list[DriverRow]:
    """Every value of DRIVER_RECORD with the driver's (cuInit's result, GPU count) and the model's, on a one-GPU
    machine whose UUID is ``example_uuids(1)[0]`` (standing for the real GPU's)."""
    uuid = example_uuids(1)[0]
    rows = []
    for value, init, count in DRIVER_RECORD["results"]:
        text = None if value is None else value.replace("<uuid>", uuid).replace("<p8>", uuid[:8]).replace("<p5>", uuid[:5])
        v = parse_cuda_visible_devices(text, [uuid])
        rows.append(DriverRow(value, (init, count), (v.cuinit, v.count)))
    return rows


def driver_report() -> str:
    """The model beside the real driver of DRIVER_RECORD: how many values agree, the values grouped by the driver's
    answer, and any value where the two differ."""
    rows = driver_comparison()
    names = {0: "CUDA starts", **{code: name for name, code in CUDA_ERRORS.items()}}
    lines = [f"Measured on {DRIVER_RECORD['label']};",
             "<uuid> is the GPU's UUID, <p8> and <p5> its first 8 and 5 characters.",
             f"The kit's model agrees with the driver on {sum(r.driver == r.model for r in rows)} of {len(rows)} values:"]
    for answer in sorted({r.driver for r in rows}):
        lines.append(f"  cuInit {answer[0]} ({names.get(answer[0], '?')}), {answer[1]} GPU(s):")
        for value in ("<unset>" if r.value is None else repr(r.value) for r in rows if r.driver == answer):
            if len(lines[-1]) + len(value) >= 110:      # wrap between values, never inside one ('0, 0')
                lines.append("     ")
            lines[-1] += " " + value
    lines += [f"  differs: {r.value!r}: driver {r.driver}, model {r.model}" for r in rows if r.driver != r.model]
    return "\n".join(lines)
