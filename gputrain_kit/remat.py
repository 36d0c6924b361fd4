"""Recomputation (rematerialization): keep a layer's output only at checkpoints and recompute the rest in the
backward pass (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016), on the TensorFlow backend."""
from __future__ import annotations

from typing import Any

from ._args import ArgumentTypeError, short

__all__ = ["remat_checkpoints", "rematerialize"]


def remat_checkpoints(n_layers: int) -> list[int]:
    """The layers whose outputs are kept when recomputing in segments of ceil(sqrt(n)) layers (Chen et
    al., "Training Deep Nets with Sublinear Memory Cost", 2016): the last layer of every segment."""
    import math

    size = max(1, math.ceil(math.sqrt(n_layers)))
    return [i for i in range(n_layers) if (i + 1) % size == 0 or i == n_layers - 1]


def _remat_segment_class():
    import keras

    class RematSegment(keras.layers.Layer):
        """Consecutive layers whose activations are recomputed in the backward pass (``keras.remat``,
        which is ``tf.recompute_grad`` on TensorFlow), so that only the segment's input is kept."""

        def __init__(self, layers, **kwargs):
            super().__init__(**kwargs)
            self.inner = list(layers)

        def build(self, input_shape):
            shape = input_shape
            for layer in self.inner:
                if not layer.built:
                    layer.build(shape)
                shape = layer.compute_output_shape(shape)

        def _forward(self, x):
            for layer in self.inner:
                x = layer(x)
            return x

        def call(self, x):
            # Positional arguments only: TensorFlow's custom_gradient refuses keyword arguments in a
            # traced function, which is why keras.RematScope fails on this backend.
            return keras.remat(self._forward)(x)

        def compute_output_shape(self, input_shape):
            for layer in self.inner:
                input_shape = layer.compute_output_shape(input_shape)
            return input_shape

    return RematSegment


def rematerialize(model: Any):
    """A Sequential model rebuilt as segments of ceil(sqrt(layers)) layers, each recomputed in the
    backward pass: the form of recomputation that works on the TensorFlow backend (``keras.RematScope``
    fails there). The layers (and their weights) are the same objects."""
    import keras

    if not isinstance(model, keras.Sequential):
        raise ArgumentTypeError(f"rematerialize: pass a keras.Sequential model (functional models: wrap "
                                f"consecutive layers in keras.remat by hand), got {short(model)}.")
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    ends = remat_checkpoints(len(layers))
    segment, start = _remat_segment_class(), 0
    segments: list[Any] = []
    for end in ends:
        segments.append(segment(layers[start:end + 1], name=f"remat_{len(segments)}"))
        start = end + 1
    return keras.Sequential([keras.Input(model.inputs[0].shape[1:])] + segments, name=f"{model.name}_remat")
