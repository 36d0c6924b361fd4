"""The collectives of a compiled program (notebook 09): which all-gathers, reduce-scatters, all-reduces and
all-to-alls XLA put into a jitted function, and how many bytes each carries, read from its compiled HLO text
(``jax.jit(f).lower(*args).compile().as_text()``).

Keras on JAX calls no collective itself: XLA inserts them from the arrays' layouts. What it inserts names the
kind of parallelism a layout gives: tensor parallelism moves activations, FSDP (ZeRO-3) moves weights, data
parallelism all-reduces gradients. ``read_collectives`` reads them; ``train_step_text`` compiles the step that
Keras's ``fit`` runs, for one batch, so its collectives can be read without training.

The cost arithmetic is the Scaling Book's (Austin et al., "How to Scale Your Model", 2025,
jax-ml.github.io/scaling-book, part 3): with V the bytes of the whole array along the group, an all-gather or a
reduce-scatter takes about V / W (W: a device's link bandwidth), an all-reduce 2 V / W (a reduce-scatter then an
all-gather), an all-to-all V / 4W (bidirectional ring). ``cost_bytes`` is V times that factor: the bytes that
set the time.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ._args import ArgumentTypeError, short

__all__ = ["Collective", "Collectives", "read_collectives", "compiled_text", "train_step_text", "train_step_memory",
           "KINDS"]

#: The collective kinds read, and the Scaling Book's time factor for each (times V / W).
KINDS = {"all-gather": 1.0, "reduce-scatter": 1.0, "all-reduce": 2.0, "all-to-all": 0.25,
         "collective-permute": 1.0}

_ITEMSIZE = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4, "f32": 4,
             "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_OP = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?P<shape>\(.*?\)|\S+)\s+"
                 r"(?P<kind>all-gather|reduce-scatter|all-reduce|all-to-all|collective-permute)(?P<start>-start)?\(")
_ARRAY = re.compile(r"\b([a-z]+[0-9]*)\[([0-9,]*)\]")


def _array_bytes(shape: str) -> list[int]:
    """Bytes of each array in an HLO shape text: 'f32[128,512]{1,0}' -> [262144]; a tuple gives one per array."""
    out = []
    for dtype, dims in _ARRAY.findall(shape):
        if dtype.startswith("f8") or dtype.startswith("s4") or dtype.startswith("u4"):
            size = 1
        elif dtype in _ITEMSIZE:
            size = _ITEMSIZE[dtype]
        else:
            continue                                   # a token or an unknown type: no data
        out.append(math.prod(int(d) for d in dims.split(",") if d) * size)
    return out


def _group_size(line: str, devices: int) -> int:
    """Devices per group of a collective, from its replica_groups in any of XLA's three spellings."""
    listed = re.search(r"replica_groups=\{\{([0-9,]*)\}", line)
    if listed:
        return len([d for d in listed.group(1).split(",") if d])
    iota = re.search(r"replica_groups=\[([0-9,]+)\]<=", line)
    if iota:
        return int(iota.group(1).split(",")[-1])
    named = re.search(r"replica_groups=mesh\[([^\]]*)\](?:,\s*device_ids=\S+)?\s*\{([^}]*)\}", line)
    if named:
        sizes = {k.strip("'"): int(v) for k, v in re.findall(r"('[^']+'|\w+)=(\d+)", named.group(1))}
        axes = [a.strip().strip("'") for a in named.group(2).split(",") if a.strip()]
        return math.prod(sizes.get(a, 1) for a in axes)
    pairs = re.search(r"source_target_pairs=\{([^}]*(?:\}[^}]*)*?)\}\}", line)
    if pairs:
        return 2
    return devices


@dataclass(frozen=True)
class Collective:
    """One collective op of a compiled program: its kind, the bytes of its result on each device, the devices in
    each of its groups, and the op of the traced function that caused it (XLA's metadata op_name)."""
    kind: str
    nbytes: int            # bytes of the result on each device (all arrays of a combined op together)
    group: int             # devices per group
    op_name: str
    shape: str
    of_input: bool = False  # it moves an argument of the program as passed in (a weight as stored), nothing computed

    @property
    def arrays(self) -> tuple[tuple[int, ...], ...]:
        """The dimensions of each array of the result on one device: ((512, 512),); a combined op has several."""
        return tuple(tuple(int(d) for d in dims.split(",") if d) for _, dims in _ARRAY.findall(self.shape))

    @property
    def array_bytes(self) -> int:
        """V, the Scaling Book's bytes of the whole array along the group: an all-gather's result, a
        reduce-scatter's input (result x group), an all-reduce's array, an all-to-all's pieces of all devices."""
        if self.kind in ("reduce-scatter", "all-to-all"):
            return self.nbytes * self.group
        return self.nbytes

    @property
    def cost_bytes(self) -> float:
        """V times the Scaling Book's factor (all-reduce 2, all-to-all 1/4): divide by a link's bandwidth for
        the time."""
        return self.array_bytes * KINDS[self.kind]


class Collectives(tuple):
    """The collectives of one compiled program (a tuple of Collective), with totals per kind."""

    def by_kind(self) -> dict[str, dict[str, float]]:
        """{kind: {"count", "bytes" (sum of V), "cost" (sum of cost_bytes)}} for the kinds present."""
        out: dict[str, dict[str, float]] = {}
        for c in self:
            row = out.setdefault(c.kind, {"count": 0, "bytes": 0, "cost": 0.0})
            row["count"] += 1
            row["bytes"] += c.array_bytes
            row["cost"] += c.cost_bytes
        return out

    @property
    def cost_bytes(self) -> float:
        """The Scaling Book's time of all of them, in bytes over one link's bandwidth."""
        return sum(c.cost_bytes for c in self)

    def __repr__(self) -> str:
        if not self:
            return "Collectives: none (every device computes alone)"
        lines = [f"{'kind':<15} {'count':>5} {'bytes (V)':>12} {'cost (V x factor)':>18}"]
        for kind, row in self.by_kind().items():
            lines.append(f"{kind:<15} {int(row['count']):>5} {int(row['bytes']):>12,} {row['cost']:>18,.0f}")
        lines.append(f"{'total':<15} {len(self):>5} {sum(c.array_bytes for c in self):>12,} {self.cost_bytes:>18,.0f}")
        return "\n".join(lines)


def read_collectives(compiled: Any) -> Collectives:
    """The collectives in a compiled program: ``compiled`` is its HLO text
    (``jax.jit(f).lower(*args).compile().as_text()``) or the compiled object itself. Each op as written in the
    program, once (one inside a loop body counts once); an asynchronous pair (``all-gather-start`` /
    ``-done``) counts once."""
    func = "read_collectives"
    text = compiled.as_text() if hasattr(compiled, "as_text") and not isinstance(compiled, str) else compiled
    if not isinstance(text, str):
        raise ArgumentTypeError(f"{func}: compiled must be HLO text or a compiled JAX program "
                                f"(jax.jit(f).lower(*args).compile()), got {short(compiled)}.")
    if "HloModule" not in text[:200]:
        raise ValueError(f"{func}: compiled must be XLA's HLO text, which starts with 'HloModule'; got text "
                         f"starting {text[:40]!r}. Fix: pass jax.jit(f).lower(*args).compile().as_text() (the "
                         "compiled program; lower(...).as_text() alone is StableHLO, before XLA adds collectives).")
    header = re.search(r"num_partitions=(\d+)", text[:2000])
    devices = int(header.group(1)) if header else 1
    entry = text[text.find("\nENTRY"):] if "\nENTRY" in text else ""
    arguments = set(re.findall(r"^\s*%?([\w.\-]+)\s*=[^\n]*?\sparameter\(\d+\)", entry, re.M))
    found = []
    for line in text.splitlines():
        match = _OP.match(line)
        if match is None:
            continue
        inside = line[match.end():].split(")", 1)[0]
        operands = set(re.findall(r"%([\w.\-]+)", inside)) or {w.split()[-1] for w in inside.split(",") if w.strip()}
        sizes = _array_bytes(match.group("shape"))
        if match.group("start") and match.group("kind") in ("all-gather", "collective-permute") and len(sizes) > 1:
            sizes = sizes[len(sizes) // 2:]            # an async start's tuple: (operands..., results...)
        name = re.search(r'op_name="([^"]*)"', line)
        found.append(Collective(match.group("kind"), sum(sizes), _group_size(line, devices),
                                name.group(1) if name else "", match.group("shape"),
                                bool(operands) and operands <= arguments))
    return Collectives(found)


def compiled_text(fn: Any, *args: Any, **kwargs: Any) -> str:
    """XLA's compiled program for ``fn(*args, **kwargs)``, as text: ``jax.jit(fn).lower(...).compile().as_text()``
    (``fn`` may already be jitted). The arrays' layouts decide which collectives it holds."""
    import jax

    if not callable(fn):
        raise ArgumentTypeError(f"compiled_text: fn must be a function, got {short(fn)}.")
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)
    return str(jitted.lower(*args, **kwargs).compile().as_text())


def _compiled_train_step(model: Any, x: Any, y: Any, func: str) -> Any:
    """The compiled training step of ``train_step_text`` and ``train_step_memory``."""
    import jax
    import keras

    from .sharding import check_distributed

    try:
        check_distributed(model)                    # JAX, inside its scope, usable: or an error in words
    except ValueError as err:
        raise ValueError(str(err).replace("check_distributed:", f"{func}:", 1)) from None
    if not getattr(model, "compiled", False) or getattr(model, "optimizer", None) is None:
        raise ValueError(f"{func}: model {model.name} is not compiled, so it has no training step. Fix: "
                         "model.compile(optimizer=..., loss=...) inside the scope first.")
    if not getattr(model.optimizer, "built", False):
        model.optimizer.build(model.trainable_variables)
    distribution = keras.distribution.distribution()
    batch = []
    for name, array in (("x", x), ("y", y)):
        shape = getattr(array, "shape", None)
        if shape is None or not len(shape):
            raise ArgumentTypeError(f"{func}: {name} must be an array with a batch axis, got {short(array)}.")
        batch.append(jax.device_put(array, distribution.get_data_layout(tuple(shape)).backend_layout))
    if not model.metrics_variables and hasattr(model, "_symbolic_build"):
        model._symbolic_build(data_batch=tuple(batch))          # builds the compiled metrics, as fit does
    state = tuple([v.value for v in variables] for variables in (
        model.trainable_variables, model.non_trainable_variables, model.optimizer.variables,
        model.metrics_variables))
    shardings = tuple([a.sharding for a in group] for group in state)
    # donate_argnums=0 as Keras's make_train_function does: the new state reuses the old state's buffers (without it
    # XLA plans scratch space in the output buffers and the temporaries read low)
    step = jax.jit(model.train_step, donate_argnums=0, out_shardings=(None, shardings))
    return step.lower(state, tuple(batch)).compile()


def train_step_text(model: Any, x: Any, y: Any) -> str:
    """The compiled program of the training step that ``model.fit`` runs (Keras's JAX trainer: ``train_step``
    jitted with the state's layouts as ``out_shardings``, as ``make_train_function`` does), for one batch
    ``(x, y)`` laid out as the active distribution lays out batches. Nothing trains: the step is compiled, not run.
    Call it inside the ``distribution.scope()`` the model was built in, on a compiled model (its optimizer is
    built here if ``fit`` has not run yet)."""
    return str(_compiled_train_step(model, x, y, "train_step_text").as_text())


def train_step_memory(model: Any, x: Any, y: Any) -> dict[str, int]:
    """What XLA plans for one device during the training step ``train_step_text`` compiles, in bytes, from the
    compiled program's ``memory_analysis()``: ``arguments`` (the state and the batch slice it receives: what a
    device holds between steps, and its batch), ``temporaries`` (what the step allocates while it runs: gathered
    weights, activations, gradients) and ``step`` (the two together, plus any output that does not reuse an
    argument's buffer: the state is donated, as ``fit`` donates it, so the new state takes the old one's place).
    Same rules as ``train_step_text``."""
    analysis = _compiled_train_step(model, x, y, "train_step_memory").memory_analysis()
    arguments, temporaries = int(analysis.argument_size_in_bytes), int(analysis.temp_size_in_bytes)
    extra = max(0, int(analysis.output_size_in_bytes) - int(analysis.alias_size_in_bytes))
    return {"arguments": arguments, "temporaries": temporaries, "step": arguments + temporaries + extra}
