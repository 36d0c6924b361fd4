"""Large batches at a fixed number of epochs, and the linear scaling rule with warm-up (Goyal et al. 2017).

Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (2017): when the
minibatch is multiplied by k, multiply the learning rate by k (eta -> k*eta), and warm up
gradually: start at eta, the rate that works for the small batch, and raise it by a constant
amount every iteration until it reaches k*eta after 5 epochs. The course warms up over 1 epoch by
default: it trains for 10 epochs on 1,438 images, and 5 epochs would be half of the run (notebook
06 shows what that costs).

Warm-up raises the largest learning rate that trains well (Goyal et al.: it made k*eta usable up to
8k images per batch; Gilmer et al., 2021, "A Loss Curvature Perspective on Training Instability in Deep
Learning": it leads training to regions of lower curvature), but not without limit: on the digits model
the scaled rate 1.6 at batch 1024 makes the loss jump, and where a run ends varies erratically with the
seed and the warm-up's length, from far below the unscaled rate to above it (notebook 06).
"""
from __future__ import annotations

import numbers
from typing import Any, Sequence

from ._args import require_int, require_number, short

__all__ = ["linear_scaled_lr", "warmup_schedule", "LinearWarmup", "batch_sweep", "first_steps"]


def _rate(func: str, name: str, value: Any) -> float:
    """A positive, finite learning rate (``require_number`` refuses NaN and infinity)."""
    return require_number(func, name, value)


def linear_scaled_lr(base_lr: float, base_batch: int, batch: int) -> float:
    """Goyal et al.: multiply the learning rate by k when the batch is multiplied by k."""
    base_batch = require_int("linear_scaled_lr", "base_batch", base_batch, minimum=1)
    batch = require_int("linear_scaled_lr", "batch", batch, minimum=1)
    base_lr = _rate("linear_scaled_lr", "base_lr", base_lr)
    return base_lr * batch / base_batch


_classes: dict[str, type] = {}


def _linear_warmup_class() -> type:
    """The kit's LinearWarmup, made on first use (the kit imports Keras only when it is needed) and registered
    with Keras under ``gputrain_kit>LinearWarmup``, so that a model saved with it loads again."""
    if "LinearWarmup" not in _classes:
        import keras

        @keras.saving.register_keras_serializable(package="gputrain_kit", name="LinearWarmup")
        class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):
            """``start_lr`` at step 0, then the same increase every step, up to ``peak_lr`` at ``warmup_steps``."""

            def __init__(self, start_lr: float, peak_lr: float, warmup_steps: int):
                self.start_lr, self.peak_lr, self.warmup_steps = start_lr, peak_lr, warmup_steps

            def __call__(self, step):
                progress = keras.ops.minimum(1.0, keras.ops.cast(step, "float32") / self.warmup_steps)
                return self.start_lr + (self.peak_lr - self.start_lr) * progress

            def get_config(self):
                return {"start_lr": self.start_lr, "peak_lr": self.peak_lr, "warmup_steps": self.warmup_steps}

        LinearWarmup.__module__ = __name__
        LinearWarmup.__qualname__ = "LinearWarmup"
        _classes["LinearWarmup"] = LinearWarmup
    return _classes["LinearWarmup"]


def __getattr__(name: str) -> Any:
    # ``from gputrain_kit.lrscaling import LinearWarmup`` makes (and registers) the class; do it before
    # ``keras.models.load_model`` in a process that did not build the model.
    if name == "LinearWarmup":
        return _linear_warmup_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def warmup_schedule(start_lr: float, peak_lr: float, warmup_steps: int):
    """A Keras schedule for Goyal et al.'s gradual warm-up: ``start_lr`` (eta, the small-batch rate) at
    step 0, then a constant increase per step up to ``peak_lr`` (k x eta) at step ``warmup_steps``,
    then ``peak_lr``. Keras passes the optimizer's count of finished steps, so the first update uses
    ``start_lr``. The schedule is a ``LinearWarmup`` registered with Keras: a model compiled with it saves
    to ``.keras`` and loads again (in a new process, ``from gputrain_kit.lrscaling import LinearWarmup`` first)."""
    func = "warmup_schedule"
    start_lr = _rate(func, "start_lr", start_lr)
    peak_lr = _rate(func, "peak_lr", peak_lr)
    warmup_steps = require_int(func, "warmup_steps", warmup_steps, minimum=1)
    return _linear_warmup_class()(start_lr, peak_lr, warmup_steps)


def _sgd_digits_model(learning_rate: Any):
    import keras

    from .training import build_digits_model

    model = build_digits_model()
    model.compile(optimizer=keras.optimizers.SGD(learning_rate, momentum=0.9), metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def batch_sweep(batches: Sequence[int], *, epochs: int = 10, base_lr: float = 0.05, base_batch: int = 32,
                scaled: bool = False, warmup_epochs: float = 1.0, seed: int = 0) -> list[tuple[int, float]]:
    """Validation accuracy of the digits model (SGD with momentum) for each global batch at fixed epochs.

    ``scaled=False``: the same learning rate for every batch. ``scaled=True``: the linear scaling rule,
    with Goyal et al.'s warm-up from ``base_lr`` over ``warmup_epochs`` (0: the scaled rate from the
    first step).
    """
    import keras
    import numpy as np

    from . import data

    if isinstance(warmup_epochs, bool) or not isinstance(warmup_epochs, numbers.Real) or warmup_epochs < 0:
        raise ValueError(f"batch_sweep: warmup_epochs must be a number >= 0, got {short(warmup_epochs)}.")
    (x, y), (xv, yv) = data.digits(seed=seed)
    results = []
    for batch in batches:
        keras.utils.set_random_seed(seed)
        steps_per_epoch = -(-len(x) // batch)
        lr: Any = base_lr
        if scaled:
            lr = linear_scaled_lr(base_lr, base_batch, batch)
            if warmup_epochs > 0:
                lr = warmup_schedule(base_lr, lr, max(1, round(warmup_epochs * steps_per_epoch)))
        model = _sgd_digits_model(lr)
        model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0)
        accuracy = float(np.mean(np.argmax(model.predict(xv, verbose=0), -1) == yv))
        results.append((batch, accuracy))
    return results


def first_steps(batch: int, learning_rate: Any, *, steps: int = 12, seed: int = 0) -> list[float]:
    """The digits model's loss on the whole training set before training and after each of its first
    ``steps`` SGD steps (momentum 0.9) at global batch ``batch``; ``learning_rate`` is a number or a
    schedule (e.g. :func:`warmup_schedule`)."""
    import keras
    import numpy as np

    from . import data

    batch = require_int("first_steps", "batch", batch, minimum=1)
    steps = require_int("first_steps", "steps", steps, minimum=1)
    (x, y), _ = data.digits(seed=seed)
    keras.utils.set_random_seed(seed)
    model = _sgd_digits_model(learning_rate)
    rng = np.random.default_rng(seed)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    losses = [float(loss(y, model(x, training=False)))]
    order = rng.permutation(len(x))
    start = 0
    for _ in range(steps):
        if start + batch > len(x):             # a new epoch: a new shuffle, full batches only
            order, start = rng.permutation(len(x)), 0
        idx = order[start:start + batch]
        start += batch
        model.train_on_batch(x[idx], y[idx])
        losses.append(float(loss(y, model(x, training=False))))
    return losses
