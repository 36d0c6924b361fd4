"""Keras 3's own sharding (``keras.distribution`` on the JAX backend, notebook 09): what each device holds,
measured from the arrays themselves, what a layout should give, and the silent trap of a ``LayoutMap`` key
that matches no variable.

A ``LayoutMap`` maps regular expressions to layouts. Keras 3.15 matches a key with ``re.fullmatch`` against
the variable's whole path: a Sequential model's paths start with its name (``"mlp/d1/kernel"``), so
``"d.*/kernel"`` matches nothing; a functional model's do not (``"ff1/kernel"``), and after ``load_model`` the
Sequential's variable is ``"d1/kernel"`` too. A key that matches nothing is
not an error to Keras: the variables stay replicated on every device, and training runs as before, with no
memory saved. ``check_layout_map`` makes that an error, before training.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ._args import ArgumentTypeError, short

__all__ = ["LayoutError", "bytes_per_device", "variable_layouts", "check_layout_map", "expected_bytes_per_device",
           "ShardingReport", "mesh_bytes", "MESHES_8"]


class LayoutError(ValueError):
    """A LayoutMap key matches none of the model's variables: what it meant to shard stays replicated."""


def _jax_model(func: str, model: Any) -> list[Any]:
    import keras

    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"{func}: model must be a Keras model, got {short(model)}.")
    if keras.backend.backend() != "jax":
        raise ValueError(f"{func}: this reads JAX arrays; Keras runs the {keras.backend.backend()} backend here. "
                         "Run kit.setup(devices=8, backend='jax') first in a fresh kernel (notebook 09).")
    if not model.weights:
        raise ValueError(f"{func}: the model has no variables yet; build it (call it once, or give it an Input).")
    return list(model.weights)


def bytes_per_device(model: Any, include_optimizer: bool = False) -> dict[str, int]:
    """Bytes of the model's variables each device holds, read from every array's shards (``addressable_shards``):
    a replicated variable counts in full on every device, a sharded one only its slice. ``include_optimizer``:
    the optimizer's variables too (its slots, once it has been built by ``fit``)."""
    from ._args import require_bool

    variables = _jax_model("bytes_per_device", model)
    if require_bool("bytes_per_device", "include_optimizer", include_optimizer):
        if model.optimizer is None or not model.optimizer.variables:
            raise ValueError("bytes_per_device: include_optimizer=True needs a compiled model whose optimizer has "
                             "been built (after fit, or optimizer.build(model.trainable_variables)).")
        variables += list(model.optimizer.variables)
    held: dict[str, int] = {}
    for variable in variables:
        for shard in variable.value.addressable_shards:
            name = f"{shard.device.platform}:{shard.device.id}"
            held[name] = held.get(name, 0) + int(shard.data.nbytes)
    return dict(sorted(held.items(), key=lambda kv: int(kv[0].split(":")[1])))


def variable_layouts(model: Any) -> dict[str, str]:
    """Each variable's path and how its array is laid out (its PartitionSpec: ``P(None, 'model')`` shards the
    second axis over the mesh's "model" axis; ``P(None, None)`` is a full copy on every device)."""
    out = {}
    for variable in _jax_model("variable_layouts", model):
        spec = getattr(variable.value.sharding, "spec", None)
        out[variable.path] = str(spec) if spec is not None else "replicated"
    return out


def _paths(func: str, model: Any) -> list[str]:
    import keras

    if isinstance(model, keras.Model):
        if not model.weights:
            raise ValueError(f"{func}: the model has no variables yet; build it first.")
        return [v.path for v in model.weights]
    raise ArgumentTypeError(f"{func}: model must be a built Keras model, got {short(model)}.")


def check_layout_map(model: Any, layout_map: Any) -> dict[str, list[str]]:
    """Every key of ``layout_map`` and the variable paths it matches (as Keras matches them: the exact path,
    else ``re.fullmatch``). Raises LayoutError naming each key that matches no variable, with the model's
    real paths and the fix, before anything trains. Works on any backend: it reads paths, not arrays."""
    import keras

    func = "check_layout_map"
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise ArgumentTypeError(f"{func}: layout_map must be a keras.distribution.LayoutMap, got "
                                f"{short(layout_map)}.")
    paths = _paths(func, model)
    matched = {key: [p for p in paths if p == key or re.fullmatch(key, p)] for key in layout_map}
    empty = [key for key, found in matched.items() if not found]
    if empty:
        example = next((p for p in paths if p.endswith("kernel")), paths[0])
        tail = "/".join(example.split("/")[-2:])
        raise LayoutError(
            f"{func}: {len(empty)} LayoutMap key(s) match no variable of {model.name}: {empty}. Those variables "
            f"stay replicated on every device, and Keras says nothing. Keras matches a key with re.fullmatch "
            f"against the whole path, here such as {example!r}: a Sequential model built fresh has its name "
            f"first ({model.name + '/' + tail!r}), a functional or a reloaded one has not ({tail!r}). Fix: start "
            f"the key with '(.*/)?', e.g. '(.*/)?{tail}' matches both.")
    return matched


@dataclass(frozen=True)
class ShardingReport:
    """What a layout gives each device, from the variables' shapes (``expected_bytes_per_device``)."""
    per_device: int             # bytes of variables on each device (the same on every device)
    replicated: int             # bytes every device would hold with no layout at all
    sharded_paths: tuple[str, ...]

    @property
    def ratio(self) -> float:
        """How many times less each device holds than a full copy."""
        return self.replicated / self.per_device

    def __repr__(self) -> str:
        return (f"ShardingReport: {self.per_device / 1e6:.2f} MB per device instead of {self.replicated / 1e6:.2f} MB "
                f"({self.ratio:.2f}x less); {len(self.sharded_paths)} variable(s) sharded")


def expected_bytes_per_device(model: Any, layout_map: Any, mesh_shape: Mapping[str, int]) -> ShardingReport:
    """The bytes of variables each device should hold under ``layout_map`` on a mesh whose axes have the sizes
    ``mesh_shape`` (e.g. ``{"batch": 2, "model": 4}``): a variable laid out ``(None, "model")`` holds 1/4 of
    itself on each device, a variable no key matches all of itself. Arithmetic on shapes, any backend; compare
    it with ``bytes_per_device`` (measured)."""
    import keras

    func = "expected_bytes_per_device"
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise ArgumentTypeError(f"{func}: layout_map must be a keras.distribution.LayoutMap, got "
                                f"{short(layout_map)}.")
    if not isinstance(mesh_shape, Mapping) or not mesh_shape or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in mesh_shape.values()):
        raise ArgumentTypeError(f"{func}: mesh_shape must be a dict of axis name -> size, e.g. "
                                f"{{'batch': 2, 'model': 4}}; got {short(mesh_shape)}.")
    _paths(func, model)
    per_device = replicated = 0
    sharded = []
    for variable in model.weights:
        size = math.prod(variable.shape) * _itemsize(variable.dtype)
        layout = layout_map[variable.path]
        divide = 1
        if layout is not None:
            for axis in layout.axes:
                if axis is not None:
                    if axis not in mesh_shape:
                        raise ValueError(f"{func}: the layout of {variable.path} names the axis {axis!r}, which "
                                         f"mesh_shape {dict(mesh_shape)} does not have.")
                    divide *= mesh_shape[axis]
            if divide > 1:
                sharded.append(variable.path)
        per_device += size // divide
        replicated += size
    return ShardingReport(per_device, replicated, tuple(sharded))


def _itemsize(dtype: Any) -> int:
    import numpy as np

    return int(np.dtype(str(dtype).replace("bfloat16", "float16")).itemsize)


#: Meshes of 8 devices the explorer offers: (batch axis, model axis).
MESHES_8 = ((8, 1), (4, 2), (2, 4), (1, 8))


def mesh_bytes(variables: list[tuple[str, tuple[int, ...], int]], model_axis: int,
               shard_kernels: bool) -> tuple[int, int, list[str]]:
    """(bytes per device, bytes of a full copy, variables that cannot be split) for ``variables`` (path, shape,
    bytes per value) when every 2-D kernel's last axis is split over a "model" axis of ``model_axis`` devices
    (``shard_kernels``) and everything else is replicated. A kernel whose columns do not divide evenly is named
    and left replicated: JAX refuses an uneven split."""
    per_device = full = 0
    refused: list[str] = []
    for path, shape, itemsize in variables:
        size = math.prod(shape) * itemsize
        full += size
        if shard_kernels and model_axis > 1 and path.endswith("kernel") and len(shape) >= 2:
            if shape[-1] % model_axis:
                refused.append(f"{path}: {shape[-1]} columns over {model_axis}")
                per_device += size
            else:
                per_device += size // model_axis
        else:
            per_device += size
    return per_device, full, refused
