"""Keras 3's own sharding (``keras.distribution`` on the JAX backend, notebook 09): what each device holds,
measured from the arrays themselves, what a layout should give, and the silent trap of a ``LayoutMap`` key
that matches no variable.

A ``LayoutMap`` maps regular expressions to layouts. Keras 3.15 matches a key with ``re.fullmatch`` against
the variable's whole path: a Sequential or a subclassed model's paths start with its name (``"mlp/d1/kernel"``),
so ``"d.*/kernel"`` matches nothing; a functional model's do not (``"ff1/kernel"``), and after ``load_model`` the
Sequential's (or the subclassed model's) variable is ``"d1/kernel"`` too. A key that matches nothing is
not an error to Keras: the variables stay replicated on every device, and training runs as before, with no
memory saved. ``check_layout_map`` makes that an error, before training.

Two more silent or cryptic states, each refused here in words: a model built in ``distribution.scope()`` but
used outside it (Keras then has no distribution, ``keras.distribution.distribution()`` is None, and ``fit``
runs without cutting the batch, without a word: ``check_distributed``), and a model whose variables Keras
lost when a step failed: the first step of a ``fit`` (e.g. on a batch the mesh cannot divide), a later one that
fails while it runs (its donated arrays are deleted), any step of an ``evaluate`` or a ``predict``, the last
partial batch included (every later use raises ``TypeError: 'NoneType' object is not callable`` or
``RuntimeError: Array has been deleted``: every helper here says "rebuild it").
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ._args import ArgumentTypeError, short

__all__ = ["LayoutError", "bytes_per_device", "variable_layouts", "check_layout_map", "check_distributed",
           "expected_bytes_per_device", "ShardingReport", "mesh_bytes", "kernels_not_2d", "MESHES_8"]


class LayoutError(ValueError):
    """A LayoutMap key matches none of the model's variables: what it meant to shard stays replicated."""


def _require_model(func: str, model: Any) -> None:
    import keras

    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"{func}: model must be a Keras model, got {short(model)}.")


def _lost(variables: list[Any]) -> list[str]:
    """Paths of the variables whose value a failed step took away. Keras on JAX detaches every value when
    ``fit``, ``evaluate`` or ``predict`` starts its steps (``_purge_model_variables``) and reattaches the last
    step's values when it ends (``jax_state_sync``). ``fit`` does so in a ``finally``, so a failure at its first
    step leaves nothing to reattach; ``evaluate`` and ``predict`` have no ``finally``: a failure at any of their
    steps (a batch the mesh cannot divide, the last partial one included) reattaches nothing. The value is then
    None and, the variable being initialised long ago, so is its initializer, which is what ``TypeError:
    'NoneType' object is not callable`` at every later use means. And ``fit`` gives each step its state to reuse
    for its results (``donate_argnums``): a later step that fails *while it runs* has consumed those arrays, and
    the ``finally`` reattaches deleted ones (``RuntimeError: Array has been deleted``)."""
    def deleted(value: Any) -> bool:
        try:
            return bool(value.is_deleted())
        except AttributeError:                  # not a JAX array
            return False

    return [v.path for v in variables
            if (getattr(v, "_value", 0) is None and getattr(v, "_initializer", 0) is None)
            or deleted(getattr(v, "_value", None))]


def _usable(func: str, model: Any) -> None:
    """Refuse a model whose variables were lost in a failed step (on JAX), saying to rebuild it."""
    import keras

    if keras.backend.backend() != "jax":
        return
    lost = _lost(list(model.weights))
    if lost:
        raise ValueError(
            f"{func}: model {model.name} is unusable after a failed fit, evaluate or predict: its variables are "
            f"gone ({len(lost)} of {len(model.weights)}, e.g. {lost[0]!r}). On JAX, fit loses them when its first "
            "step fails or a later one fails while it runs (its arrays are then deleted); evaluate and predict "
            "when any step fails, the last partial batch included. Every use then raises TypeError: 'NoneType' "
            "object is not callable (or RuntimeError: Array has been deleted). Fix: rebuild it inside "
            "distribution.scope() and load the weights you saved before; give every batch a size that divides "
            "over the mesh.")


def _jax_model(func: str, model: Any) -> list[Any]:
    import keras

    _require_model(func, model)
    if keras.backend.backend() != "jax":
        raise ValueError(f"{func}: this reads JAX arrays; Keras runs the {keras.backend.backend()} backend here. "
                         "Run kit.setup(devices=8, backend='jax') first in a fresh kernel (notebook 09).")
    if not model.weights:
        raise ValueError(f"{func}: the model has no variables yet; build it (call it once, or give it an Input).")
    _usable(func, model)
    return list(model.weights)


def bytes_per_device(model: Any, include_optimizer: bool = False) -> dict[str, int]:
    """Bytes of the model's variables each device holds, read from every array's shards (``addressable_shards``):
    a replicated variable counts in full on every device, a sharded one only its slice. ``include_optimizer``:
    the optimizer's variables too (its slots, once it has been built by ``fit``). It measures where the arrays
    are, so it works outside ``distribution.scope()`` too (``check_distributed`` says whether ``fit`` may run
    here)."""
    from ._args import require_bool

    func = "bytes_per_device"
    _require_model(func, model)
    if require_bool(func, "include_optimizer", include_optimizer):
        optimizer = getattr(model, "optimizer", None)          # an uncompiled model has no such attribute
        if optimizer is None:
            raise ValueError(f"{func}: include_optimizer=True needs a compiled model, got {model.name}, which is "
                             "not compiled (it has no optimizer). Fix: compile it, model.compile(optimizer=..., "
                             "loss=...), and fit it, or leave include_optimizer out.")
        if not getattr(optimizer, "built", bool(optimizer.variables)):    # compile makes 2 scalars, fit the slots
            raise ValueError(f"{func}: include_optimizer=True needs the optimizer's slots, got {model.name}, whose "
                             f"{type(optimizer).__name__} is not built yet (compiled, not fitted: Keras makes the "
                             "slots at the first fit). Fix: fit it first (inside distribution.scope()), or call "
                             "model.optimizer.build(model.trainable_variables) there.")
    variables = _jax_model(func, model)
    if include_optimizer:
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
        _usable(func, model)
        return [v.path for v in model.weights]
    raise ArgumentTypeError(f"{func}: model must be a built Keras model, got {short(model)}.")


def _mesh_of(variable: Any) -> dict[str, int] | None:
    """The axes of the mesh a JAX variable is laid out over ({"batch": 2, "model": 4}), None on one device."""
    sharding = variable.value.sharding
    mesh = getattr(sharding, "mesh", None)
    if mesh is None or len(sharding.device_set) < 2:
        return None
    return {str(name): int(size) for name, size in mesh.shape.items()}


def _mesh_text(mesh: Mapping[str, int] | None) -> str:
    return "one device" if not mesh else f"a mesh {dict(mesh)} of {math.prod(mesh.values())} devices"


def _axes(spec: Any) -> tuple[Any, ...]:
    """A PartitionSpec or a layout's axes as a tuple without its trailing Nones: P(None, 'model') and
    (None, 'model') compare equal, P() and (None,) too."""
    axes = [a[0] if isinstance(a, tuple) and len(a) == 1 else a for a in tuple(spec)]
    while axes and axes[-1] is None:
        axes.pop()
    return tuple(axes)


_PREFIX = "(.*/)?"
"""What a LayoutMap key starts with to match a path with or without the model's name before it."""


def _shown(paths: list[str], limit: int = 8) -> str:
    more = f" and {len(paths) - limit} more" if len(paths) > limit else ""
    return ", ".join(repr(p) for p in paths[:limit]) + more


def _key_advice(key: str, paths: list[str], name: str) -> tuple[str, str]:
    """Why ``key`` matches none of ``paths`` and its fix, in two sentences: the prefix advice only where a
    prefixed key does match a path here (the key lacks ``(.*/)?``, or names the model the paths do not start
    with); else the model's real paths."""
    base = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
    first, _, rest = base.partition("/")
    candidates = [] if key.startswith(_PREFIX) else [(_PREFIX + key, f"start the key with {_PREFIX!r}")]
    if rest and first == name:
        candidates.append((_PREFIX + rest, f"put {_PREFIX!r} in place of {first + '/'!r}"))
    named = [p.startswith(name + "/") for p in paths]
    which, some = (("This model's paths start", "") if all(named) else
                   ("This model's paths do not start", "") if not any(named) else
                   ("Some of this model's paths start", " and some do not"))
    for candidate, how in candidates:
        found = [p for p in paths if re.fullmatch(candidate, p)]
        if found:
            return (f"{which} with its name {name!r}{some}, e.g. {found[0]!r} (a Sequential or a subclassed model "
                    "built fresh has its name first, except for a layer it builds in its __init__; a functional or a "
                    "reloaded one has not).",
                    f"Fix: {how}: {candidate!r} matches {_shown(found, 3)} here, and the same paths under any "
                    "prefix.")
    tried = f"nor with {candidates[0][0]!r}" if candidates else f"it already starts with {_PREFIX!r}"
    every = " ([v.path for v in model.weights] lists them all)" if len(paths) > 8 else ""
    return (f"No path of this model matches it ({tried}): its paths are {_shown(paths)}{every}.",
            "Fix: write the key from those paths (a regular expression re.fullmatch matches against the whole "
            "path), or drop it.")


def check_layout_map(model: Any, layout_map: Any) -> dict[str, list[str]]:
    """Every key of ``layout_map`` and the paths it matches (as Keras matches them: the exact path, else
    ``re.fullmatch``): a variable's path (``d1/kernel``), or a layer's output (``d2/output``: Keras lays out
    what the layer returns, the path a layer's ``path`` plus ``/output``). Raises LayoutError naming each key
    that matches neither, with the model's real paths and the fix, before anything trains. Works on any
    backend: it reads paths, not arrays; on JAX it also refuses a model laid out over a mesh otherwise than the
    map says (built in another distribution's scope: what the map cuts stays whole), and one whose variables
    a failed fit lost. A model on one device passes: its paths can be checked before it is built again inside
    the scope."""
    import keras

    func = "check_layout_map"
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise ArgumentTypeError(f"{func}: layout_map must be a keras.distribution.LayoutMap, got "
                                f"{short(layout_map)}.")
    paths = _paths(func, model)
    outputs = [layer.path + "/output" for layer in model._flatten_layers(include_self=True) if layer.path]
    matched = {key: [p for p in paths + outputs if p == key or re.fullmatch(key, p)] for key in layout_map}
    empty = [key for key, found in matched.items() if not found]
    if empty:
        for_outputs = [key for key in empty if key.endswith("/output")]
        advice = [_key_advice(key, outputs if key in for_outputs else paths, model.name) for key in empty]
        text = " ".join(advice[0]) if len(advice) == 1 else " ".join(f"For {key!r}: {why} {fix}"
                                                                     for key, (why, fix) in zip(empty, advice))
        what, stays = (("variable", "Those variables stay replicated on every device") if not for_outputs else
                       ("layer output", "Those outputs keep the layout Keras gives them") if len(for_outputs) == len(empty)
                       else ("variable or layer output", "What they name stays as Keras lays it out"))
        raise LayoutError(
            f"{func}: {len(empty)} LayoutMap key(s) match no {what} of {model.name}: {empty}. {stays}, and "
            f"Keras says nothing. Keras matches a key with re.fullmatch against the whole path. {text}")
    if keras.backend.backend() == "jax":
        _laid_out_as_mapped(func, model, layout_map, matched)
    return matched


def _laid_out_as_mapped(func: str, model: Any, layout_map: Any, matched: dict[str, list[str]]) -> None:
    """Refuse a model whose variables lie on a mesh, but not as ``layout_map`` lays them out."""
    device_mesh = layout_map.device_mesh
    mapped = dict(zip(device_mesh.axis_names, device_mesh.shape)) if device_mesh is not None else None
    by_path = {v.path: v for v in model.weights}
    for key, found in matched.items():
        want = _axes(layout_map[key].axes)
        for path in found:
            if path not in by_path:
                continue                 # a layer's output: laid out when the layer runs, nothing to read here
            mesh = _mesh_of(by_path[path])
            if mesh is None:
                continue                 # on one device: built outside any scope, a path check only
            have = _axes(by_path[path].value.sharding.spec)
            if have != want or (mapped is not None and mesh != mapped):
                raise LayoutError(
                    f"{func}: model {model.name} is not laid out as layout_map says: {path!r} is {have or 'whole'} "
                    f"on {_mesh_text(mesh)}, the map says {want} on {_mesh_text(mapped)}. It was built in another "
                    "distribution's scope, so what the map cuts stays as it was. Fix: build it inside "
                    "`with distribution.ModelParallel(layout_map=layout_map, batch_dim_name='batch').scope():`.")


def check_distributed(model: Any) -> dict[str, int]:
    """Whether ``fit``, ``evaluate`` or ``predict`` on ``model`` would run distributed here: the axes of the
    active distribution's mesh (e.g. ``{"batch": 2, "model": 4}``), or an error in words. Keras on JAX says
    nothing when a model built in ``distribution.scope()`` is fitted outside it (there
    ``keras.distribution.distribution()`` is None, and the batch is not cut over the mesh): this refuses it,
    and a model built outside the active scope or in another one, and one whose variables a failed fit lost.
    Call it where you call ``fit``: inside the scope."""
    import keras

    func = "check_distributed"
    variables = _jax_model(func, model)
    on_mesh = {v.path: _mesh_of(v) for v in variables}
    meshes = [m for m in on_mesh.values() if m is not None]
    active = keras.distribution.distribution()
    if active is None:
        if meshes:
            raise ValueError(
                f"{func}: model {model.name} is laid out over {_mesh_text(meshes[0])}, but it is used outside "
                "distribution.scope(): no distribution is active here (keras.distribution.distribution() is None), "
                "so fit, evaluate and predict run without it, the batch not cut over the mesh, and Keras says "
                "nothing. Fix: build and fit inside distribution.scope(): call fit inside the same "
                "`with distribution.scope():` the model was built in.")
        raise ValueError(
            f"{func}: model {model.name} holds its variables on one device and no distribution is active here "
            "(keras.distribution.distribution() is None): nothing is distributed. Fix: build and fit inside "
            "distribution.scope(), e.g. `with distribution.DataParallel(devices=distribution.list_devices())"
            ".scope():` around building, compiling and fitting it.")
    device_mesh = active.device_mesh
    want = {str(n): int(s) for n, s in zip(device_mesh.axis_names, device_mesh.shape)}
    alone = [path for path, mesh in on_mesh.items() if mesh is None]
    if alone and math.prod(want.values()) > 1:
        raise ValueError(
            f"{func}: model {model.name} was built outside distribution.scope(): {len(alone)} of its "
            f"{len(variables)} variables are on one device (e.g. {alone[0]!r}), while the active "
            f"{type(active).__name__} spreads the work over {_mesh_text(want)}. Fix: build and fit inside "
            "distribution.scope(): build, compile and fit the model inside this same `with` block.")
    other = next((m for m in meshes if m != want), None)
    if other is not None:
        raise ValueError(
            f"{func}: model {model.name} was built in another distribution's scope: its variables lie on "
            f"{_mesh_text(other)}, the active {type(active).__name__} uses {_mesh_text(want)}. Fix: build and fit "
            "inside distribution.scope(), the same one: the scope the model was built in.")
    return want


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


def expected_bytes_per_device(model: Any, layout_map: Any,
                              mesh_shape: Mapping[str, int] | None = None) -> ShardingReport:
    """The bytes of variables each device should hold under ``layout_map``, on the mesh the LayoutMap was made
    with (``layout_map.device_mesh``, e.g. ``{"batch": 2, "model": 4}``): a variable laid out
    ``(None, "model")`` holds 1/4 of itself on each device, a variable no key matches all of itself. Arithmetic
    on shapes, any backend; compare it with ``bytes_per_device`` (measured). ``mesh_shape``: the axes' sizes,
    needed only for a LayoutMap made without a mesh; given with one, it must be that mesh's."""
    import keras

    func = "expected_bytes_per_device"
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise ArgumentTypeError(f"{func}: layout_map must be a keras.distribution.LayoutMap, got "
                                f"{short(layout_map)}.")
    if mesh_shape is not None and (not isinstance(mesh_shape, Mapping) or not mesh_shape or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in mesh_shape.values())):
        raise ArgumentTypeError(f"{func}: mesh_shape must be a dict of axis name -> size, e.g. "
                                f"{{'batch': 2, 'model': 4}}; got {short(mesh_shape)}. Or leave it out: it is read "
                                "from layout_map.device_mesh.")
    device_mesh = layout_map.device_mesh
    mapped = dict(zip(device_mesh.axis_names, device_mesh.shape)) if device_mesh is not None else None
    if mesh_shape is None:
        if mapped is None:
            raise ValueError(f"{func}: mesh_shape is needed for a LayoutMap made without a DeviceMesh, got "
                             "mesh_shape=None. Fix: pass the mesh's axes, e.g. mesh_shape={'batch': 2, 'model': 4}, "
                             "or make the LayoutMap with its mesh: LayoutMap(DeviceMesh(...)).")
        mesh_shape = mapped
    elif mapped is not None and dict(mesh_shape) != mapped:
        raise ValueError(f"{func}: mesh_shape must be the mesh of layout_map, got {dict(mesh_shape)}, while "
                         f"layout_map.device_mesh is {mapped} (Keras lays the variables out on that mesh). Fix: "
                         "leave mesh_shape out (it is read from the LayoutMap), or make the LayoutMap on a "
                         "DeviceMesh of that shape.")
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
                        raise ValueError(f"{func}: layout_map lays {variable.path} out over the axis {axis!r}, "
                                         f"which the mesh {dict(mesh_shape)} does not have. Fix: name only the "
                                         f"mesh's axes ({', '.join(map(repr, mesh_shape))}) in the layouts.")
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
    """(bytes per device, bytes of a full copy, 2-D kernels whose columns cannot be split) for ``variables``
    (path, shape, bytes per value) when every 2-D kernel's columns are split over a "model" axis of
    ``model_axis`` devices (``shard_kernels``: the layout ``(None, "model")``, notebook 09) and everything else
    stays whole. Only 2-D (Dense) kernels are split: ``(None, "model")`` cuts an array's axis 1, which in a
    convolution's 4-D kernel is its width, not its output channels (``kernels_not_2d`` names those). A 2-D kernel
    whose columns do not divide is named and counted whole: a LayoutMap that names it makes Keras raise
    IndivisibleError when the model is built, so it must be left out of the map, and then it stays whole."""
    if isinstance(model_axis, bool) or not isinstance(model_axis, int) or model_axis < 1:
        raise ArgumentTypeError(f"mesh_bytes: model_axis must be the size of the mesh's 'model' axis, an int >= 1, "
                                f"got {short(model_axis)}. Fix: pass e.g. 4 for a 2 x 4 (batch x model) mesh.")
    per_device = full = 0
    refused: list[str] = []
    for path, shape, itemsize in variables:
        size = math.prod(shape) * itemsize
        full += size
        if shard_kernels and model_axis > 1 and path.endswith("kernel") and len(shape) == 2:
            if shape[-1] % model_axis:
                refused.append(f"{path}: {shape[-1]} columns over {model_axis}")
                per_device += size
            else:
                per_device += size // model_axis
        else:
            per_device += size
    return per_device, full, refused


def kernels_not_2d(variables: list[tuple[str, tuple[int, ...], int]]) -> list[str]:
    """The kernels among ``variables`` (path, shape, bytes per value) that ``mesh_bytes`` leaves whole because
    they are not 2-D (a convolution's, an attention layer's): each as "path: N-D (shape)"."""
    return [f"{path}: {len(shape)}-D {tuple(shape)}" for path, shape, _ in variables
            if path.endswith("kernel") and len(shape) != 2]
