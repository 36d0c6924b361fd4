"""The small models of notebook 05's BatchNorm trap, defined once: the matrix's child processes
(``_children/bn_case.py``) and the tests build them from here."""
from __future__ import annotations

from typing import Any

from ._args import require_choice

__all__ = ["MODELS", "BN_SETTINGS", "bn_model"]

MODELS = ("dense", "conv")
BN_SETTINGS = ("no BN", "scale=False", "scale=True", "synchronized")


def bn_model(kind: str, bn: str, *, classes: int = 4, features: int = 16) -> Any:
    """``kind`` "dense": Dense(32) -> [BatchNormalization] -> ReLU -> Dense(classes), on ``features`` inputs;
    "conv": Conv2D(8, 3) -> [BatchNormalization] -> ReLU -> global average -> Dense(classes), on 8x8x1 images.
    ``bn``: one of BN_SETTINGS ("no BN" leaves the layer out). Uncompiled; build it in a strategy's scope."""
    import keras

    require_choice("bn_model", "kind", kind, MODELS)
    require_choice("bn_model", "bn", bn, BN_SETTINGS)
    options = dict(scale=(bn != "scale=False"), synchronized=(bn == "synchronized"), name="bn")
    norm = [] if bn == "no BN" else [keras.layers.BatchNormalization(**options)]
    if kind == "dense":
        layers = [keras.Input((features,)), keras.layers.Dense(32, name="hidden"), *norm,
                  keras.layers.ReLU(), keras.layers.Dense(classes, name="logits")]
    else:
        layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, padding="same", name="conv"), *norm,
                  keras.layers.ReLU(), keras.layers.GlobalAveragePooling2D(),
                  keras.layers.Dense(classes, name="logits")]
    return keras.Sequential(layers, name=f"{kind}_net")
