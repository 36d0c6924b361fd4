"""The planner's attention rule (layer_costs._attention; tenth read, issue 44): under a mixed policy the probabilities
are float32 (plus a 16-bit copy) only on Keras's fused path, ``ops.dot_product_attention``, whose softmax runs in
float32. Keras takes that path only without dropout, without ``return_attention_scores`` and with one attention axis;
otherwise its own ``Softmax`` layer runs under the attention layer's policy, in 16 bits. The planner counted float32
probabilities for every layer: 16.8 MB too many on a 2-block transformer with dropout (estimate 191.5 MB, measured
about 171 MB under both kernel families; now 174.8 MB)."""
from __future__ import annotations

import pytest

from conftest import last_json, run_python

# Which path Keras takes, and in which dtype the probabilities come out, on the installed Keras.
KERAS_PATHS = """
import json, numpy as np
import keras
from keras.src.layers.attention import multi_head_attention as mha_module
calls = []
original = mha_module.ops.dot_product_attention
def recording(*args, **kwargs):
    calls.append(1)
    return original(*args, **kwargs)
mha_module.ops.dot_product_attention = recording
keras.config.set_dtype_policy("mixed_bfloat16")
x = np.ones((1, 4, 16), "float32")
image = np.ones((1, 2, 3, 16), "float32")
out = {}
for name, layer, inputs, kwargs in (
        ("plain", keras.layers.MultiHeadAttention(2, 8), (x, x), {}),
        ("dropout", keras.layers.MultiHeadAttention(2, 8, dropout=0.1), (x, x), {"training": True}),
        ("scores", keras.layers.MultiHeadAttention(2, 8), (x, x), {"return_attention_scores": True}),
        ("two axes", keras.layers.MultiHeadAttention(2, 8, attention_axes=(1, 2)), (image, image), {})):
    calls.clear()
    result = layer(*inputs, **kwargs)
    out[name] = {"fused": bool(calls)}
    if name == "scores":
        out[name]["probabilities"] = str(keras.backend.standardize_dtype(result[1].dtype))
# the probabilities the non-fused path keeps: the Softmax layer's output, under the layer's policy
layer = keras.layers.MultiHeadAttention(2, 8, dropout=0.1)
layer(x, x)
out["softmax policy"] = layer._softmax.dtype_policy.name
out["softmax output"] = str(keras.backend.standardize_dtype(layer._softmax(keras.ops.ones((1, 2, 4, 4))).dtype))
print(json.dumps(out))
"""


@pytest.mark.parametrize("backend", ["tensorflow", "jax"])
def test_keras_fuses_attention_only_without_dropout_or_returned_scores_and_else_keeps_16_bit_probabilities(backend):
    env = {"KERAS_BACKEND": "jax", "CUDA_VISIBLE_DEVICES": ""} if backend == "jax" else None
    out = last_json(run_python(KERAS_PATHS, env=env))        # JAX: a fresh interpreter, JAX from the start
    assert out["plain"] == {"fused": True}, out
    assert out["dropout"] == {"fused": False}, out
    assert out["scores"] == {"fused": False, "probabilities": "bfloat16"}, out
    assert out["two axes"] == {"fused": False}, out
    assert out["softmax policy"] == "mixed_bfloat16" and out["softmax output"] == "bfloat16", out


def test_planner_counts_float32_probabilities_only_on_the_fused_path():
    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        def model(**options):
            call = options.pop("call", {})
            ids = keras.Input((128,), dtype="int32")
            h = keras.layers.Embedding(1000, 128)(ids)
            a = keras.layers.MultiHeadAttention(4, 32, name="att", **options)(h, h, **call)
            if isinstance(a, tuple):
                a = a[0]
            return keras.Model(ids, keras.layers.Dense(10)(a))
        out = {}
        for name, options in (("plain", {}), ("causal", {"call": {"use_causal_mask": True}}),
                              ("dropout", {"dropout": 0.1}),
                              ("scores", {"call": {"return_attention_scores": True}})):
            stat = next(s for s in kit.memory.profile(model(**options)) if s.name == "att")
            out[name] = {"float32": stat.float32_activations, "kept": stat.activations, "flash": stat.scores}
        print(json.dumps(out))
    """))
    scores = 4 * 128 * 128                                   # heads x queries x keys per sample
    for fused in ("plain", "causal"):
        assert out[fused]["float32"] == scores and out[fused]["flash"] == scores, out
    assert out["dropout"]["float32"] == 0 and out["dropout"]["flash"] == 0, out
    assert out["scores"]["float32"] == 0 and out["scores"]["flash"] == 0, out
    # dropout keeps the dropped probabilities and their mask, and the scaled query, beside the probabilities
    assert out["dropout"]["kept"] == out["plain"]["kept"] + 2 * scores + 128 * 128, out
    # returned scores are the probabilities themselves, counted once, as the layer's output; that path (Keras's
    # einsum, as with dropout) scales the query before the scores' einsum, which keeps it (eleventh read: it was
    # counted with dropout only)
    assert out["scores"]["kept"] == out["plain"]["kept"] + 128 * 128, out


def _transformer_source(dropout: float) -> str:
    return f"""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        def build():
            ids = keras.Input((128,), dtype="int32")
            h = keras.layers.Embedding(1000, 128)(ids)
            for _ in range(2):
                a = keras.layers.MultiHeadAttention(4, 32, dropout={dropout})(h, h, use_causal_mask=True)
                h = keras.layers.LayerNormalization()(h + a)
                f = keras.layers.Dense(512, activation="gelu")(h)
                f = keras.layers.Dropout(0.1)(keras.layers.Dense(128)(f))
                h = keras.layers.LayerNormalization()(h + f)
            return keras.Model(ids, keras.layers.Dense(1000)(h))
        print(json.dumps({{p: kit.estimate_memory(build, batch_size=32, dtype_policy=p).peak
                          for p in ("float32", "mixed_bfloat16")}}))
    """


def test_a_transformer_with_attention_dropout_plans_16_bit_probabilities():
    with_dropout = last_json(run_python(_transformer_source(0.1)))
    without = last_json(run_python(_transformer_source(0.0)))
    # float32: the probabilities are float32 either way; dropout adds its dropped copy, mask and scaled query
    extra = 2 * 32 * (2 * 4 * 128 * 128 + 128 * 128) * 4
    assert with_dropout["float32"] - without["float32"] == extra, (with_dropout, without)
    # mixed: the fused layers keep float32 probabilities and a 16-bit copy (6 bytes a value); the dropout layers keep
    # 16-bit probabilities (2 bytes) and their dropped copy, mask and scaled query in 16 bits
    fused = 2 * 32 * 4 * 128 * 128 * 6
    unfused = 2 * 32 * (3 * 4 * 128 * 128 + 128 * 128) * 2
    assert with_dropout["mixed_bfloat16"] - without["mixed_bfloat16"] == unfused - fused, (with_dropout, without)
    assert round(with_dropout["mixed_bfloat16"] / 1e6, 1) == 174.8, with_dropout    # was 191.5 (issue 44)


def test_attention_over_several_axes_counts_every_attended_position():
    """Eleventh read (issue 44): MultiHeadAttention over (H, W) of an image (attention_axes=(1, 2), or the default on a
    rank-4 input) attends H x W positions to H x W; the planner counted shape[1] only (8.8 MB estimated for a layer
    measured at 357 MB). Now the scores are heads x (H W)^2 per sample, attention over one of two axes multiplies by
    the other like a batch, and a layer over several axes is marked approximate (Keras's einsum path)."""
    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        def model(**options):
            x = keras.Input((8, 6, 16))
            return keras.Model(x, keras.layers.MultiHeadAttention(2, 8, name="att", **options)(x, x))
        def sequence():
            x = keras.Input((48, 16))
            return keras.Model(x, keras.layers.MultiHeadAttention(2, 8, name="att")(x, x))
        out = {}
        for name, build in (("both axes", lambda: model(attention_axes=(1, 2))), ("default", model),
                            ("rows", lambda: model(attention_axes=(1,))), ("sequence", sequence)):
            stat = next(s for s in kit.memory.profile(build()) if s.name == "att")
            out[name] = {"kept": stat.activations, "approximate": stat.approximate}
        print(json.dumps(out))
    """))
    # query, key, value, the attended values (2 heads x 8) and the layer's output (16 features), at 48 positions
    qkv_out = 48 * 2 * 8 * 3 + 48 * 2 * 8 + 48 * 16
    scaled_query = 48 * 2 * 8            # Keras's einsum path (several axes) scales the query first, and keeps it
    assert out["both axes"] == out["default"], out
    assert out["both axes"]["kept"] == qkv_out + 2 * 48 * 48 + scaled_query, out   # + probabilities: heads x 48 x 48
    assert out["both axes"]["approximate"] and not out["sequence"]["approximate"], out
    assert out["sequence"]["kept"] == qkv_out + 2 * 48 * 48, out           # 48 positions either way; fused
    assert out["rows"]["kept"] == qkv_out + 2 * 6 * 8 * 8 + scaled_query, out   # 8 x 8 per column, 6 columns
