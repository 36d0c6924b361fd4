"""memory_verdict's flash-attention lever names where it exists (review of notebook 08, ninth read): Keras's
TensorFlow backend refuses flash attention, so a verdict that ends "Lever: flash attention" must say so."""
from __future__ import annotations

from gputrain_kit.memory import estimate_memory, memory_verdict
from gputrain_kit.profiles import LayerStat


def _attention_model() -> list[LayerStat]:
    """One attention layer of 8 heads over 1,024 tokens (8 x 1024 x 1024 probabilities per sample), and a loss."""
    return [LayerStat("attention", params=4 * 512 * 512, trainable=4 * 512 * 512, activations=8 * 1024 * 1024,
                      temporary=8 * 1024 * 1024, kind="MultiHeadAttention", scores=8 * 1024 * 1024),
            LayerStat("loss", params=0, trainable=0, activations=0, kind="loss")]


def test_the_flash_lever_says_which_backends_have_it():
    estimate = estimate_memory(_attention_model(), batch_size=64)
    verdict = memory_verdict(estimate, 1)                                 # out of memory: the lever is offered
    assert "OUT OF MEMORY" in verdict and "Lever: flash attention" in verdict
    assert verdict.endswith("JAX or PyTorch on a GPU, Keras on TensorFlow has none).")
    assert "Lever" not in memory_verdict(estimate, 1000)                  # fits with room: no lever offered


def test_keras_tensorflow_backend_refuses_flash_attention():
    """The claim the lever's words make, on the installed Keras: its TensorFlow backend raises."""
    import numpy as np
    import pytest
    from keras.src.backend.tensorflow import nn as tf_nn

    q = np.zeros((1, 4, 2, 8), "float16")                                  # batch, tokens, heads, head size
    with pytest.raises(ValueError, match="Flash attention is not supported in tensorflow backend"):
        tf_nn.dot_product_attention(q, q, q, flash_attention=True)
    assert tf_nn.dot_product_attention(q, q, q).shape == q.shape          # without it, the same call runs
