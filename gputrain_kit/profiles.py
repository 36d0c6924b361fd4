"""Profiles: what each layer of a model keeps for a training step, per sample (``LayerStat``), from a built model
(``profile``, one traced call: ``layer_costs``), from a function that builds one without its weights
(``build_abstractly``), from the stored presets (``preset_profile``) or by formula (``dense_stack_profile``).
``memory.estimate_memory`` sizes them for a batch, a precision and a strategy."""
from __future__ import annotations

import json
import weakref
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ._args import ArgumentTypeError, require_int, short, typed

__all__ = ["LayerStat", "profile", "build_abstractly", "input_specs", "preset_profile", "dense_stack_profile",
           "PRESETS"]

PRESETS = {
    "InceptionV3 299x299": "inception_v3",
    "Dense stack 24 x 8192 (1.6B parameters)": "dense_stack",
    "ResNet50 224x224": "resnet50",
    "Dense stack 8 x 8192 + head (notebook 08)": "dense_stack_08",
    "course digits model": "digits",
}


@dataclass(frozen=True)
class LayerStat:
    """One layer's share of a training step, per sample (elements, not bytes; the dtype policy sizes them).

    ``activations``: what the backward pass keeps of this layer at the compute precision (its outputs and what
    its gradient needs inside it: a GELU's intermediates, a dropout mask, attention's query, key, value and
    probabilities); ``float32_activations``: what it keeps in float32 whatever the policy (under a mixed policy
    Keras computes attention's softmax, BatchNormalization and LayerNormalization in float32); ``temporary``: the
    largest transient working set of its forward or backward step (gradients of its output and input, attention's
    scores); ``casts``: trainable values a mixed policy copies to 16 bits every step (kernels of layers that
    compute in 16 bits, kept for the backward pass); ``kind``: the layer class; ``approximate``: the planner only
    approximates this kind of layer (an unknown layer, a recurrent one): measure it."""

    name: str
    params: int            # all variables (trainable and not)
    trainable: int
    activations: int       # kept elements per sample at the compute precision
    float32_activations: int = 0
    temporary: int = 0
    casts: int = 0
    kind: str = ""
    approximate: bool = False
    pinned: int = 0        # kept elements of layers pinned to float32 (dtype="float32" under a mixed policy)
    scores: int = 0        # attention: heads x queries x keys, the tensors flash attention never materializes


def profile(model: Any, *, _caller: str = "profile") -> list[LayerStat]:
    """What each layer of a built Keras model keeps for a training step, per sample (``LayerStat``), read from one
    symbolic call (``layer_costs.trace_profile``: shapes only, nothing computed): functional, Sequential and
    subclassed models alike (a subclassed model must have been called once, so that its input shape is known;
    sublayers that ``model.build(shape)`` left unbuilt are built by the trace, with values, as a first call would)."""
    import keras

    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(
            f"{_caller}: model must be a built Keras model, a function that builds one, or a profile (a list of "
            f"LayerStat, e.g. kit.memory.preset_profile('inception_v3')), got {typed(model)}.")
    if not model.built:
        raise ValueError(f"{_caller}: the model {model.name!r} is not built yet (it has no Input and was never "
                         "called), so its layers' output sizes are unknown. Start it with keras.Input(shape) or "
                         "call it once on a batch.")
    from .layer_costs import trace_profile

    key = lambda: (len(model.weights), keras.config.dtype_policy().name)      # noqa: E731
    cached = _PROFILES.get(model)
    if cached is None or cached[0] != key():        # traced once per model (a widget asks at every change)
        stats = trace_profile(model, input_specs(model, _caller=_caller), LayerStat,
                              initialize=model not in _ABSTRACT)
        cached = (key(), stats)                     # after the trace: it may build sublayers left unbuilt
        _PROFILES[model] = cached
    return list(cached[1])


_PROFILES: "weakref.WeakKeyDictionary[Any, tuple[Any, list[LayerStat]]]" = weakref.WeakKeyDictionary()
#: models built by ``build_abstractly``: their variables stay without values
_ABSTRACT: "weakref.WeakSet[Any]" = weakref.WeakSet()


def build_abstractly(func: str, build: Any, dtype_policy: str = "float32") -> Any:
    """``build()``'s model with no weight allocated (``keras.StatelessScope``: every variable's shape, no value),
    under ``dtype_policy``, so that planning a model of billions of parameters needs no memory for them (its
    variables stay without values: Keras's next symbolic call does not give them any)."""
    import keras

    name = getattr(build, "__name__", "")
    if name == "<lambda>" or not callable(build):
        what = "a lambda" if name == "<lambda>" else typed(build)
        raise ArgumentTypeError(f"{func}: model must be a Keras model, a function defined with def that builds one "
                                f"(def build(): return keras.Sequential(...)), or a profile; got {what}.")
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    try:
        with keras.StatelessScope(initialize_variables=False):      # shapes only: no variable gets a value
            model = build()
    except TypeError as err:
        if "argument" in str(err):
            raise ArgumentTypeError(f"{func}: {name}() must take no arguments and return a Keras model ({err}).") \
                from None
        raise
    finally:
        keras.config.set_dtype_policy(previous)
    if not isinstance(model, keras.Model):
        raise ArgumentTypeError(f"{func}: {name}() must return a Keras model, got {typed(model)}.")
    from .layer_costs import forget_pending

    forget_pending(model.weights)               # else Keras's next symbolic call would give them values
    _ABSTRACT.add(model)
    return model


def input_specs(model: Any, *, _caller: str = "input_specs") -> list[tuple[tuple[int, ...], str]]:
    """(shape without the batch, dtype) of each of ``model``'s inputs: a functional or Sequential model's
    ``inputs``; a subclassed model's first call (Keras records its input shapes when it builds; dtypes are
    not recorded: token ids, int32, when the model's first layer is an Embedding, float32 otherwise)."""
    import keras

    try:
        return [(tuple(int(d) for d in t.shape[1:]), str(t.dtype)) for t in keras.tree.flatten(model.inputs)]
    except (AttributeError, TypeError, ValueError):
        pass
    shapes = getattr(model, "_build_shapes_dict", None) or {}
    if not shapes:
        raise ValueError(f"{_caller}: the model {model.name!r} ({type(model).__name__}) was never called, so its "
                         "input shape is unknown. Call it once on a batch, e.g. model(np.zeros((1, 32))), or give "
                         "it a keras.Input.")
    first = next(iter(shapes.values()))
    firsts = first if isinstance(first, list) and first and isinstance(first[0], (list, tuple)) else [first]
    layers = [layer for layer in model._flatten_layers(include_self=False)]
    dtype = "int32" if layers and isinstance(layers[0], keras.layers.Embedding) else "float32"
    specs = []
    for shape in firsts:
        rest = tuple(shape)[1:]
        if any(d is None for d in rest):
            raise ValueError(f"{_caller}: the model {model.name!r} was built with an unknown dimension in "
                             f"{tuple(shape)}; call it once on a real batch so every dimension is known.")
        specs.append((tuple(int(d) for d in rest), dtype))
    return specs


def preset_profile(name: str) -> list[LayerStat]:
    """A stored profile of a preset model (see PRESETS): no TensorFlow, no model build, no memory.

    The stored numbers were read from ``keras.applications.<Model>(weights=None)``; a test rebuilds
    the models and checks them.
    """
    key = PRESETS.get(name, name)
    if key not in PRESETS.values():
        raise ValueError(f"preset_profile: unknown preset {short(name)}; choose from {list(PRESETS)}.")
    if key == "dense_stack":
        return dense_stack_profile(24, 8192)
    if key == "dense_stack_08":
        return dense_stack_profile(8, 8192, head=16)
    table = json.loads(resources.files("gputrain_kit").joinpath("presets.json").read_text())
    return [LayerStat(*row) for row in table[key]]


def dense_stack_profile(layers: int, width: int, head: int | None = None, *,
                        input_width: int | None = None) -> list[LayerStat]:
    """The profile of ``layers`` Dense(width, relu) layers on ``input_width`` inputs (default: ``width``), and a
    Dense(head) output layer if ``head`` is given, by the rules ``profile`` reads a built model with
    (``layer_costs``), without building anything (so without allocating a byte of the model)."""
    layers = require_int("dense_stack_profile", "layers", layers, minimum=1)
    width = require_int("dense_stack_profile", "width", width, minimum=1)
    inputs = width if input_width is None else require_int("dense_stack_profile", "input_width", input_width,
                                                           minimum=1)
    stats, previous = [], inputs
    for i in range(layers):
        size = previous * width + width
        stats.append(LayerStat(f"dense_{i}", size, size, width, temporary=width + previous, casts=size, kind="Dense"))
        previous = width
    out = width
    if head is not None:
        head = require_int("dense_stack_profile", "head", head, minimum=1)
        size = width * head + head
        stats.append(LayerStat(f"dense_{layers}", size, size, head, temporary=head + width, casts=size, kind="Dense"))
        out = head
    stats.append(LayerStat("loss and batch", 0, 0, 0, kind="loss", pinned=3 * out + inputs))
    return stats


