"""How many values per trainable parameter an optimizer keeps (its slots), from its name or from the optimizer
itself: its class *and* the options that add slots, as Keras 3 builds them (``keras/src/optimizers``):

- Adam, AdamW: 2 (momentum, velocity), 3 with ``amsgrad=True`` (the largest velocity so far);
- RMSprop: 1 (velocity), +1 with ``momentum`` > 0, +1 with ``centered=True`` (the average gradient);
- SGD: 0, 1 with ``momentum`` > 0;
- any optimizer with ``use_ema=True``: +1 (the moving average of every trainable variable).

``estimate_memory`` counts the slots with this; ``measure_memory`` and ``compiled_memory`` build the same
optimizer, with the same options, in the measuring process.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._args import require_choice

OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "rmsprop": 1, "sgd-momentum": 1, "sgd": 0}

#: Every name's Keras class and arguments, as the measuring process builds it.
_CLASSES = {"adam": ("Adam", {}), "adamw": ("AdamW", {}), "rmsprop": ("RMSprop", {}),
            "sgd-momentum": ("SGD", {"momentum": 0.9}), "sgd": ("SGD", {})}


@dataclass(frozen=True)
class OptimizerSpec:
    """``key``: the OPTIMIZER_SLOTS name of its kind; ``slots``: values kept per trainable parameter;
    ``label``: the name with the options that add slots ("adam, amsgrad"); ``build``: the Keras class name and
    the keyword arguments that rebuild it with those slots."""
    key: str
    slots: int
    label: str
    build: tuple[str, dict[str, Any]]


def _unknown(func: str, what: str) -> ValueError:
    return ValueError(f"{func}: optimizer {what} is not one the estimate knows; pass one of "
                      f"{list(OPTIMIZER_SLOTS)} (by name or as a Keras optimizer), the name whose slots per "
                      "parameter match yours (Adam-like: 2, RMSprop-like: 1).")


def optimizer_spec(func: str, optimizer: Any, model: Any = None) -> OptimizerSpec:
    """The slots of ``optimizer``: a name (any case), a Keras optimizer class (its defaults) or instance (its own
    options), or None for ``model``'s compiled optimizer (Adam where it has none)."""
    if optimizer is None:
        optimizer = getattr(model, "optimizer", None) or "adam"     # compiled: its optimizer; otherwise Adam
    if isinstance(optimizer, str):                                    # 'Adam' as Keras accepts it
        lowered = optimizer.strip().lower().replace("_", "-")
        key = str(require_choice(func, "optimizer", lowered if lowered in OPTIMIZER_SLOTS else optimizer,
                                 OPTIMIZER_SLOTS))
        return OptimizerSpec(key, OPTIMIZER_SLOTS[key], key, _CLASSES[key])
    if isinstance(optimizer, type):                                  # keras.optimizers.Adam, the class itself
        key = optimizer.__name__.lower()
        if key not in OPTIMIZER_SLOTS:
            raise _unknown(func, f"{optimizer.__name__} (a class)")
        return OptimizerSpec(key, OPTIMIZER_SLOTS[key], key, _CLASSES[key])
    inner = getattr(optimizer, "inner_optimizer", optimizer)         # a LossScaleOptimizer holds the real one
    name = type(inner).__name__
    momentum = float(getattr(inner, "momentum", 0) or 0)
    key = ("sgd-momentum" if momentum > 0 else "sgd") if name.lower() == "sgd" else name.lower()
    if key not in OPTIMIZER_SLOTS:
        raise _unknown(func, name)
    options: dict[str, Any] = {}
    extras: list[str] = []
    if key in ("adam", "adamw") and getattr(inner, "amsgrad", False):
        options["amsgrad"], extras = True, ["amsgrad"]
    if key in ("rmsprop", "sgd-momentum") and momentum > 0:
        options["momentum"] = momentum
        if key == "rmsprop":
            extras.append("momentum")
    if key == "rmsprop" and getattr(inner, "centered", False):
        options["centered"] = True
        extras.append("centered")
    if getattr(inner, "use_ema", False):
        options["use_ema"] = True
        extras.append("EMA")
    slots = OPTIMIZER_SLOTS[key] + len(extras)
    return OptimizerSpec(key, slots, ", ".join([key, *extras]), (name, options))
