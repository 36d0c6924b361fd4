"""Model families the memory planner is checked on (docs/memory.md, tests/own_models): none of them is a course model
except the Dense stack. Each builder is a zero-argument function, as measure_memory takes it."""


def dense_stack():
    import keras
    inputs = keras.Input((512,))
    x = inputs
    for _ in range(4):
        x = keras.layers.Dense(1024, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="dense_stack")


def cnn_bn():
    import keras
    inputs = keras.Input((32, 32, 3))
    x = inputs
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="cnn_bn")


def gpt_causal():
    import keras
    seq, d, heads, vocab = 256, 128, 4, 1000
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, d)(tokens)
    for _ in range(2):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.MultiHeadAttention(heads, d // heads)(h, h, use_causal_mask=True)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(4 * d, activation="gelu")(h)
        x = keras.layers.Add()([x, keras.layers.Dense(d)(h)])
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(vocab, dtype="float32")(x), name="gpt_causal")


def gpt_dropout():
    import keras
    seq, d, heads, vocab = 256, 128, 4, 1000
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, d)(tokens)
    for _ in range(2):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.MultiHeadAttention(heads, d // heads, dropout=0.1)(h, h)
        h = keras.layers.Dropout(0.1)(h)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(4 * d, activation="gelu")(h)
        h = keras.layers.Dropout(0.1)(keras.layers.Dense(d)(h))
        x = keras.layers.Add()([x, h])
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(vocab, dtype="float32")(x), name="gpt_dropout")


def lstm():
    import keras
    inputs = keras.Input((100, 32))
    x = keras.layers.LSTM(256, return_sequences=True)(inputs)
    x = keras.layers.LSTM(256)(x)
    return keras.Model(inputs, keras.layers.Dense(10)(x), name="lstm")


def vit():
    import keras
    patch, d, heads = 8, 128, 4
    inputs = keras.Input((64, 64, 3))
    x = keras.layers.Conv2D(d, patch, strides=patch)(inputs)
    x = keras.layers.Reshape((64, d))(x)
    for _ in range(2):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.MultiHeadAttention(heads, d // heads)(h, h)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(2 * d, activation="gelu")(h)
        x = keras.layers.Add()([x, keras.layers.Dense(d)(h)])
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    return keras.Model(inputs, keras.layers.Dense(10, dtype="float32")(x), name="vit")


def subclassed():
    import keras

    class Residual(keras.Model):
        def __init__(self):
            super().__init__(name="subclassed")
            self.inp = keras.layers.Dense(512, activation="relu")
            self.blocks = [keras.layers.Dense(512, activation="tanh") for _ in range(3)]
            self.norm = keras.layers.LayerNormalization()
            self.out = keras.layers.Dense(10, dtype="float32")

        def call(self, x):
            x = self.inp(x)
            for block in self.blocks:
                x = x + block(x)
            return self.out(self.norm(x))

    model = Residual()
    model(keras.ops.zeros((1, 256)))
    return model


#: family -> (builder, batch size)
FAMILIES = {"dense_stack": (dense_stack, 256), "cnn_bn": (cnn_bn, 64), "gpt_causal": (gpt_causal, 16),
            "gpt_dropout": (gpt_dropout, 16), "lstm": (lstm, 64), "vit": (vit, 32), "subclassed": (subclassed, 512)}


def gpt_small():
    """The GPT-small of the H200 record (../shared/gpu/2026-11-27-h200-keras-jax-gpt-small.md): 134M parameters."""
    import keras
    seq, d, heads, vocab = 1024, 768, 12, 32000
    tokens = keras.Input((seq,), dtype="int32")
    x = keras.layers.Embedding(vocab, d)(tokens)
    for _ in range(12):
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.MultiHeadAttention(heads, d // heads)(h, h, use_causal_mask=True)
        x = keras.layers.Add()([x, h])
        h = keras.layers.LayerNormalization()(x)
        h = keras.layers.Dense(4 * d, activation="gelu")(h)
        x = keras.layers.Add()([x, keras.layers.Dense(d)(h)])
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(vocab, dtype="float32")(x), name="gpt_small")
