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


def _seed_generators(layers) -> list:
    """The SeedGenerators (Keras's source of randomness: Dropout, GaussianNoise, the random augmentation
    layers) of these layers and the layers nested in them."""
    found: list = []
    for layer in layers:
        for sub in layer._flatten_layers(include_self=True):
            for generator in getattr(sub, "_seed_generators", []):
                if all(generator is not known for known in found):
                    found.append(generator)
    return found


def _remat_segment_class():
    import keras

    class RematSegment(keras.layers.Layer):
        """Consecutive layers whose activations are recomputed in the backward pass (``keras.remat``,
        which is ``tf.recompute_grad`` on TensorFlow), so that only the segment's input is kept.

        The recomputation must compute what the forward pass computed. So ``training`` reaches every
        layer (BatchNormalization normalizes with the batch's statistics, Dropout drops), and both passes
        run in a ``keras.StatelessScope`` that starts every SeedGenerator of the segment from the state
        it had before the forward pass: Dropout draws the same mask again (``tf.recompute_grad`` alone
        draws a new one). The forward pass's updates (moving statistics, seed states) are written back
        once; the recomputation's are dropped, so BatchNormalization's moving statistics move once per
        step, not twice. Randomness drawn outside a SeedGenerator (``tf.random`` ops in your own layer)
        is not replayed."""

        def __init__(self, layers, **kwargs):
            super().__init__(**kwargs)
            self.inner = list(layers)

        def build(self, input_shape):
            shape = input_shape
            for layer in self.inner:
                if not layer.built:
                    layer.build(shape)
                shape = layer.compute_output_shape(shape)

        def _forward(self, x, training):
            for layer in self.inner:
                x = layer(x, training=training)
            return x

        def call(self, x, training=None):
            generators = _seed_generators(self.inner)
            start = [(g.state, keras.ops.copy(g.state.value)) for g in generators]
            updated = [v for layer in self.inner for v in layer.non_trainable_variables]
            updated += [g.state for g in generators if all(g.state is not v for v in updated)]
            runs: list[int] = []

            def segment(x):
                # keras.remat calls this once for the forward pass, then again for each recomputation.
                first = not runs
                runs.append(1)
                with keras.StatelessScope(state_mapping=start) as scope:
                    y = self._forward(x, training)
                if first:
                    for variable in updated:
                        value = scope.get_current_value(variable)
                        if value is not None:
                            variable.assign(value)
                return y

            # Positional arguments only: TensorFlow's custom_gradient refuses keyword arguments in a
            # traced function, which is why keras.RematScope fails on this backend.
            return keras.remat(segment)(x)

        def compute_output_shape(self, input_shape):
            for layer in self.inner:
                input_shape = layer.compute_output_shape(input_shape)
            return input_shape

    return RematSegment


def rematerialize(model: Any):
    """A Sequential model rebuilt as segments of ceil(sqrt(layers)) layers, each recomputed in the
    backward pass: the form of recomputation that works on the TensorFlow backend (``keras.RematScope``
    fails there). The layers (and their weights) are the same objects. The gradients are the plain model's
    with ``training=True`` too: BatchNormalization and Dropout recompute what the forward pass computed
    (see ``RematSegment``); randomness drawn outside a Keras SeedGenerator is not replayed."""
    import keras

    if not isinstance(model, keras.Sequential):
        raise ArgumentTypeError(f"rematerialize: pass a keras.Sequential model (functional models: wrap "
                                f"consecutive layers in keras.remat by hand), got {short(model)}.")
    try:
        given = model.inputs[0]
    except (AttributeError, ValueError, IndexError):     # a Sequential without keras.Input, never built or called
        raise ValueError(f"rematerialize: the model {model.name!r} has no input shape yet, so its segments cannot be "
                         "built. Start it with keras.Input(shape), or call model.build((None, ...)) first.") from None
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    ends = remat_checkpoints(len(layers))
    segment, start = _remat_segment_class(), 0
    segments: list[Any] = []
    for end in ends:
        segments.append(segment(layers[start:end + 1], name=f"remat_{len(segments)}"))
        start = end + 1
    # the input's dtype too: an int32 input of token ids (an Embedding first) stays int32, a string input a string
    return keras.Sequential([keras.Input(given.shape[1:], dtype=given.dtype)] + segments, name=f"{model.name}_remat")
