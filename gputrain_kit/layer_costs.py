"""What each layer of a model keeps for the backward pass, read from one traced call: the planner's profile.

``trace_profile(model)`` calls the model once on symbolic inputs (``keras``'s ``compute_output_spec``: shapes
only, no batch computed, no weight allocated), records every layer call with its inputs and outputs, and turns
each into a ``memory.LayerStat`` by the rules below, so a functional, a Sequential and a subclassed model are
read the same way. Rules, per sample, for the training step on Keras 3's TensorFlow backend (checked against
``keras/src/layers`` and ``keras/src/backend/tensorflow/nn.py``, and measured: docs/memory.md):

- every tensor a layer receives or returns is kept once (the next layer's gradient needs it); a tensor no layer
  returned (``x + block(x)``, an einsum written in ``call``) is counted where a layer first receives it;
  ``Reshape``/``Flatten`` outputs share their input's buffer (nothing new);
- an activation inside a layer (``Dense(..., activation=...)``) keeps its input too, except ReLU, tanh, sigmoid
  and softmax, whose gradients read the output; GELU keeps four tensors of the output's size (TensorFlow's
  ``gelu`` is ``0.5 * x * (1 + erf(x / sqrt(2)))``, each product's gradient needs both of its inputs);
- ``Dropout`` keeps the scaled input and the mask, both of the input's size and dtype;
- ``BatchNormalization`` and ``LayerNormalization`` compute in float32: under a mixed policy they keep a float32
  copy of their input and of the normalized values;
- ``MultiHeadAttention`` keeps query, key, value, the probabilities (heads x queries x keys), with ``dropout``
  the dropped probabilities and mask, off the fused path the scaled query its scores' einsum reads, the attention
  output and the output. Under a mixed policy the
  probabilities are float32 plus their 16-bit copy only on Keras's fused path (``ops.dot_product_attention``,
  whose softmax runs in float32), taken only without ``dropout``, without ``return_attention_scores`` and with
  one attention axis (``_compute_attention`` in ``keras/src/layers/attention/multi_head_attention.py``); else
  Keras's own ``Softmax`` layer runs under the layer's policy and keeps them in 16 bits. Its scores, their
  float32 copy and the softmax's gradient are a step's temporaries (``flash_attention`` on a GPU backend, fused
  path only, keeps none of the heads x queries x keys tensors: ``MemoryEstimate`` names it as a lever);
- recurrent layers (``LSTM``, ``GRU``, ``SimpleRNN``) keep their gates, cell state and output for every time
  step (LSTM 6 units' worth per step, GRU 5, SimpleRNN 2): approximate, measure them;
- a layer of a kind not named here: its output, plus one copy for internals: approximate, measure it.
"""
from __future__ import annotations

import math
from typing import Any

__all__ = ["trace_profile", "forget_pending", "RULED_KINDS"]

#: activations whose gradient reads only the output (the input can be freed)
_OUTPUT_GRAD = {"linear", "relu", "tanh", "sigmoid", "softmax", "relu6", "exponential"}
#: extra tensors of the output's size kept by other activations
_ACTIVATION_EXTRA = {"gelu": 2, "silu": 2, "swish": 2, "elu": 1, "selu": 1, "softplus": 1, "leaky_relu": 1,
                     "hard_sigmoid": 1, "mish": 3}
_VIEWS = {"Reshape", "Flatten", "InputLayer"}
_SIMPLE = {"Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv2D", "SeparableConv2D",
           "Conv2DTranspose", "Conv1DTranspose", "Conv3DTranspose", "Embedding", "Add", "Subtract", "Multiply",
           "Average", "Maximum", "Minimum", "Concatenate", "MaxPooling1D", "MaxPooling2D", "MaxPooling3D",
           "AveragePooling1D", "AveragePooling2D", "AveragePooling3D", "GlobalAveragePooling1D",
           "GlobalAveragePooling2D", "GlobalAveragePooling3D", "GlobalMaxPooling1D", "GlobalMaxPooling2D",
           "GlobalMaxPooling3D", "ReLU", "Activation", "Softmax", "LeakyReLU", "ELU", "ZeroPadding2D",
           "ZeroPadding1D", "Cropping2D", "UpSampling2D", "Permute", "RepeatVector", "Identity", "Rescaling",
           "Normalization", "CategoryEncoding", "SpatialDropout1D", "SpatialDropout2D", "GaussianNoise",
           "GaussianDropout", "AlphaDropout"}
_RECURRENT = {"LSTM": 6, "GRU": 5, "SimpleRNN": 2}
#: layer kinds read by a rule of their own (their inner layers are not traced separately)
RULED_KINDS = frozenset({"MultiHeadAttention", "GroupQueryAttention", "BatchNormalization", "LayerNormalization",
                         "RMSNormalization", "GroupNormalization", "UnitNormalization", "Dropout",
                         *_RECURRENT, "Bidirectional", *_SIMPLE, *_VIEWS})


def _elements(t: Any) -> int:
    """Elements per sample (the first dimension is the batch)."""
    shape = tuple(t.shape)
    return math.prod(int(d) if d is not None else 1 for d in shape[1:])


def _is_16(dtype: Any) -> bool:
    return "16" in str(dtype)


def _sizes(layer: Any) -> tuple[int, int]:
    params = sum(math.prod(w.shape) for w in layer.weights)
    return int(params), int(sum(math.prod(w.shape) for w in layer.trainable_weights))


def _activation_name(layer: Any) -> str:
    activation = getattr(layer, "activation", None)
    if activation is None:
        return "linear"
    name = getattr(activation, "__name__", None) or type(activation).__name__
    return name.lower()


def _internals(layer: Any, kind: str, inputs: list[Any], outputs: list[Any]) -> tuple[int, int, int, bool]:
    """(kept at the compute precision, kept in float32 under a mixed policy only, temporary, approximate) beyond
    the layer's outputs, elements per sample."""
    out = sum(_elements(t) for t in outputs)
    first = _elements(inputs[0]) if inputs else out
    if kind in _VIEWS:
        return 0, 0, 0, False
    if kind == "Dropout":
        return 2 * first, 0, first, False
    if kind in ("BatchNormalization", "LayerNormalization", "RMSNormalization", "GroupNormalization"):
        # the normalized values; under a mixed policy also a float32 copy of the input (statistics in float32)
        return 0, first, 2 * first, False
    if kind in ("MultiHeadAttention", "GroupQueryAttention"):
        return _attention(layer, inputs, outputs)
    if kind in _RECURRENT or kind == "Bidirectional":
        inner = getattr(layer, "forward_layer", layer)
        units = int(getattr(getattr(inner, "cell", inner), "units", 0) or 0)
        steps = int(inputs[0].shape[1]) if inputs and len(inputs[0].shape) > 2 and inputs[0].shape[1] else 1
        per_step = _RECURRENT.get(type(inner).__name__, 8) * units * (2 if kind == "Bidirectional" else 1)
        # every step's gates and states, and a copy of the input sequence (the loop reads it a step at a time)
        return steps * per_step + first, 0, steps * per_step, True
    if kind in _SIMPLE:
        name = _activation_name(layer)
        if kind in ("Activation", "ReLU", "Softmax", "LeakyReLU", "ELU"):
            name = {"ReLU": "relu", "Softmax": "softmax", "LeakyReLU": "leaky_relu", "ELU": "elu"}.get(kind, name)
            extra = 0 if name in _OUTPUT_GRAD else _ACTIVATION_EXTRA.get(name, 1)
            return extra * out, 0, 2 * out, False
        extra = 0 if name in _OUTPUT_GRAD else _ACTIVATION_EXTRA.get(name, 1)
        return extra * out, 0, out + first, name not in _OUTPUT_GRAD and name not in _ACTIVATION_EXTRA
    return out, 0, 2 * out, True


def _fused(layer: Any, inputs: list[Any], outputs: list[Any]) -> bool:
    """Whether Keras runs this attention layer's fused path (``ops.dot_product_attention``: softmax in float32,
    flash attention possible): no dropout, the scores not returned (one output), one attention axis (the query
    (batch, positions, features): projected to rank 4)."""
    dropout = float(getattr(layer, "dropout", 0.0) or 0.0)
    return dropout == 0 and len(outputs) == 1 and bool(inputs) and len(inputs[0].shape) == 3


def _query_key(inputs: list[Any]) -> tuple[Any, Any]:
    """An attention layer's query and key tensors: (query, value, key), the key the value where none is given."""
    query = inputs[0]
    value = inputs[1] if len(inputs) > 1 else query
    return query, inputs[2] if len(inputs) > 2 and inputs[2] is not None else value


def _heads(layer: Any) -> int:
    return int(getattr(layer, "num_heads", getattr(layer, "num_query_heads", 1)))


def _scores(layer: Any, inputs: list[Any], outputs: list[Any]) -> int:
    """heads x queries x keys per sample, where flash attention applies (Keras's fused path only)."""
    if not _fused(layer, inputs, outputs):
        return 0
    return _heads(layer) * _attended(layer, *_query_key(inputs))[2]


def _attended(layer: Any, query: Any, key: Any) -> tuple[int, int, int, bool]:
    """(query positions, key positions, scores per head, several axes) per sample: Keras attends over
    ``attention_axes`` (default: every axis between the batch and the features), and every other positional axis
    multiplies the scores like a batch; an (H, W, C) image attends over H x W positions."""
    import math

    q_dims, k_dims = [int(d) for d in query.shape[1:-1]], [int(d) for d in key.shape[1:-1]]
    if not q_dims:
        return 1, 1, 1, False
    axes = getattr(layer, "_attention_axes", None)
    rank = len(query.shape)
    chosen = range(1, rank - 1) if axes is None else [a % rank for a in (axes if isinstance(axes, (list, tuple))
                                                                         else (axes,))]
    at = sorted({a - 1 for a in chosen if 0 < a < rank - 1})
    q_at = math.prod(q_dims[a] for a in at)
    k_at = math.prod(k_dims[a] for a in at if a < len(k_dims))
    return math.prod(q_dims), math.prod(k_dims), q_at * k_at * (math.prod(q_dims) // q_at), len(at) > 1


def _attention(layer: Any, inputs: list[Any], outputs: list[Any]) -> tuple[int, int, int, bool]:
    """MultiHeadAttention's internals (see the module's docstring), per sample."""
    q_len, k_len, per_head, several = _attended(layer, *_query_key(inputs))
    heads = _heads(layer)
    key_dim = int(getattr(layer, "key_dim", getattr(layer, "head_dim", 1)) or 1)
    value_dim = int(getattr(layer, "value_dim", None) or key_dim)
    kv_heads = int(getattr(layer, "num_key_value_heads", heads))
    scores = heads * per_head
    qkv = q_len * heads * key_dim + k_len * kv_heads * (key_dim + value_dim)
    attended = q_len * heads * value_dim
    dropout = float(getattr(layer, "dropout", 0.0) or 0.0)
    kept = qkv + attended + (2 * scores if dropout > 0 else 0)
    fused = _fused(layer, inputs, outputs)
    if not fused:       # Keras's einsum path (dropout, scores returned, several axes) scales the query first
        kept += q_len * heads * key_dim                  # the scaled query the scores' einsum reads
    # the fused path's softmax runs in float32 under a mixed policy, then casts back; Keras's Softmax layer (dropout,
    # scores returned, several attention axes) computes under the layer's policy, in 16 bits
    probs32 = scores if fused else 0
    if len(outputs) == 1:
        kept += scores                                   # the probabilities at the compute precision
    # (returned scores are the probabilities: counted as the layer's output)
    # scores, their float32 copy and the masked scores, then the softmax's gradient: transient
    temporary = 2 * scores
    return kept, probs32, temporary, several           # several attention axes: Keras's einsum path, approximate


def _tensors(value: Any) -> list[Any]:
    import keras

    return [t for t in keras.tree.flatten(value) if hasattr(t, "shape") and hasattr(t, "dtype")]


def forget_pending(variables: Any) -> None:
    """Take ``variables`` off Keras's list of variables created without a value: Keras gives every variable on it
    its value when its next symbolic call ends (any later ``keras.Input`` model or subclassed call), which for a
    model built abstractly would allocate all of it."""
    from keras.src.backend.common import global_state

    ids = {id(v) for v in variables}
    pending = global_state.get_global_attribute("uninitialized_variables") or []
    global_state.set_global_attribute("uninitialized_variables", [v for v in pending if id(v) not in ids])


def _initialize_new(model: Any, before: set[int], initialize: bool) -> None:
    """Give a value to each variable the trace created (sublayers that ``model.build(shape)`` left unbuilt), as
    Keras does when its own symbolic call ends, under the model's strategy; a variable left without one breaks the
    next ``fit`` ("'SymbolicTensor' object has no attribute 'handle'"). ``initialize`` False (a model built
    abstractly): they stay without values, and off Keras's list (``forget_pending``)."""
    import contextlib

    new = [v for v in model.weights if id(v) not in before and getattr(v, "_value", 0) is None]
    forget_pending(new)
    if not new or not initialize:
        return
    scope: Any = contextlib.nullcontext()
    strategy = getattr(model, "_distribute_strategy", None)
    if strategy is not None:
        import tensorflow as tf

        if not tf.distribute.has_strategy():
            scope = strategy.scope()
    with scope:
        for variable in new:
            variable._deferred_initialize()


def trace_profile(model: Any, specs: list[tuple[tuple[int, ...], str]], LayerStat: Any, *,
                  initialize: bool = True) -> list[Any]:
    """Per-layer ``LayerStat`` of ``model`` (``profiles.LayerStat``, passed in) from one symbolic call in training
    mode on inputs of ``specs`` (``profiles.input_specs``): see the module's docstring. ``initialize``: give a
    value to every variable the call creates (a sublayer built for the first time), unless the model was built
    without values (``profiles.build_abstractly``): the model then trains as if it had been called once."""
    import keras
    from keras.src import backend as keras_backend

    before = {id(v) for v in model.weights}
    # a model whose variables all hold values (not one built abstractly) keeps them all valued after the trace
    initialize = initialize and all(getattr(v, "_value", 0) is not None for v in model.weights)

    records: list[tuple[Any, int, list[Any], list[Any]]] = []
    depth = [0]
    ruled_depth: list[int] = []
    model_inputs: set[int] = set()
    original = keras.layers.Layer.__call__

    def recording(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth[0] += 1
        inside_ruled = bool(ruled_depth)
        is_ruled = type(self).__name__ in RULED_KINDS and not inside_ruled
        if is_ruled:
            ruled_depth.append(depth[0])
        try:
            result = original(self, *args, **kwargs)
        finally:
            if is_ruled:
                ruled_depth.pop()
            depth[0] -= 1
        if self is model:
            model_inputs.update(id(t) for t in _tensors(args))
        elif not inside_ruled:
            inputs = _tensors(args) + _tensors({k: v for k, v in kwargs.items() if k not in ("mask", "training")})
            records.append((self, depth[0], inputs, _tensors(result)))
        return result

    tensors = [keras.KerasTensor((1, *shape), dtype=dtype) for shape, dtype in specs]
    keras.layers.Layer.__call__ = recording
    try:
        # an outer scope that never initializes: Keras's own tracing scope would give every variable built without
        # a value (memory.build_abstractly) its value on the way out
        with keras.StatelessScope(initialize_variables=False):
            result = keras_backend.compute_output_spec(
                lambda *xs: model(list(xs) if len(xs) > 1 else xs[0], training=True), *tensors)
    finally:
        keras.layers.Layer.__call__ = original
        _initialize_new(model, before, initialize)
    # leaves: ruled layers, and layers that called no other layer (composites are read through their parts)
    parents = {id(layer) for layer, d, _, _ in records}
    called_inside: set[int] = set()
    for index, (layer, d, _, _) in enumerate(records):
        # a record is a parent if a deeper record precedes it directly in call order (children finish first)
        if index and records[index - 1][1] > d:
            called_inside.add(id(layer))
    del parents
    global_mixed = any(_is_16(getattr(layer, "compute_dtype", "float32")) for layer in model._flatten_layers())
    seen: set[int] = set()
    stats = []

    def pinned(t: Any) -> bool:
        """A float32 tensor in a model built under a mixed policy: float32 whatever the policy."""
        return global_mixed and "float" in str(t.dtype) and not _is_16(t.dtype)

    for layer, _d, inputs, outputs in records:
        kind = type(layer).__name__
        if id(layer) in called_inside and kind not in RULED_KINDS:
            continue                                     # a composite: its parts are counted
        kept = fixed = 0
        new = [t for t in inputs if id(t) not in seen and id(t) not in model_inputs]  # raw ops' results
        seen.update(id(t) for t in inputs)
        for t in new + ([] if kind in _VIEWS else outputs):
            if pinned(t):
                fixed += _elements(t)
            else:
                kept += _elements(t)
        seen.update(id(t) for t in outputs)
        extra, extra32, temporary, approximate = _internals(layer, kind, inputs, outputs)
        scores = _scores(layer, inputs, outputs) if kind in ("MultiHeadAttention", "GroupQueryAttention") else 0
        params, trainable = _sizes(layer)
        # a mixed policy copies the trainable kernels of every layer computing in 16 bits (autocast), each step
        follows = not global_mixed or _is_16(getattr(layer, "compute_dtype", "float32"))
        casts = trainable if follows and getattr(layer, "autocast", True) and kind not in (
            "BatchNormalization", "LayerNormalization", "RMSNormalization", "GroupNormalization") else 0
        stats.append(LayerStat(layer.name, params, trainable, int(kept + extra), int(extra32), int(temporary),
                               int(casts), kind, bool(approximate), int(fixed), int(scores)))
    # variables of layers the trace never saw as leaves (a composite's own weights): on the model's account
    counted = sum(s.params for s in stats)
    total = sum(math.prod(w.shape) for w in model.weights)
    if total > counted:
        rest = total - counted
        trainable_rest = max(0, sum(math.prod(w.shape) for w in model.trainable_weights)
                             - sum(s.trainable for s in stats))
        stats.append(LayerStat(f"{model.name} (own variables)", int(rest), int(trainable_rest), 0, kind="variables"))
    # the batch on the device and the loss: its targets, the difference and its gradient, in float32
    out = sum(_elements(t) for t in _tensors(result))
    data = sum(math.prod(shape) for shape, _ in specs)
    stats.append(LayerStat("loss and batch", 0, 0, 0, temporary=0, kind="loss", pinned=3 * out + data))
    return stats
