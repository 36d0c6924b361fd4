"""XLA's own buffer analysis of one training step (``measure.compiled_memory``): the user's model built without its
weights under Keras's JAX backend, its ``train_step`` compiled for arguments given as shapes only, and the compiled
program's ``memory_analysis()`` read: no step runs, no weight is allocated.

``build_source`` is the user's own ``build`` function (its source; ``keras`` and ``np`` are given to it).
"""
from __future__ import annotations

from typing import Any


def prepare() -> None:
    """Keras on JAX imported (``KERAS_BACKEND=jax`` is in this process's environment), nothing compiled."""
    import keras  # noqa: F401
    import numpy  # noqa: F401


def run(config: dict[str, Any], build_source: str, build_name: str) -> dict[str, Any]:
    import jax
    import keras
    import numpy as np

    from gputrain_kit.profiles import input_specs

    keras.config.set_dtype_policy(config["dtype_policy"])
    namespace = {"keras": keras, "np": np, "__name__": "__gputrain_build__"}
    exec(compile(build_source, "<build>", "exec"), namespace)     # the user's build(), by its source
    with keras.StatelessScope(initialize_variables=False):       # shapes only: no variable gets a value
        model = namespace[build_name]()
    if not isinstance(model, keras.Model):
        raise TypeError("compiled_memory: build() must return a Keras model, got " + type(model).__name__)
    name, options = config["optimizer"]
    model.compile(optimizer=getattr(keras.optimizers, name)(**options), loss="mse")
    with keras.StatelessScope(initialize_variables=False):
        model.optimizer.build(model.trainable_variables)
    batch = config["batch_size"]
    xs = [jax.ShapeDtypeStruct((batch, *shape), dtype) for shape, dtype in input_specs(model, _caller="compiled_memory")]
    spec = model.compute_output_spec([keras.KerasTensor(x.shape, x.dtype) for x in xs] if len(xs) > 1
                                     else keras.KerasTensor(xs[0].shape, xs[0].dtype))
    y = jax.ShapeDtypeStruct(tuple(keras.tree.flatten(spec)[0].shape), "float32")

    def shapes(variables: Any) -> list[Any]:
        return [jax.ShapeDtypeStruct(tuple(v.shape), v.dtype) for v in variables]

    state = (shapes(model.trainable_variables), shapes(model.non_trainable_variables),
             shapes(model.optimizer.variables), shapes(model.metrics_variables))
    analysis = jax.jit(model.train_step).lower(state, (xs[0] if len(xs) == 1 else xs, y)).compile().memory_analysis()
    if analysis is None:
        raise RuntimeError("compiled_memory: this JAX backend gives no memory analysis of a compiled program")
    return {"arguments": int(analysis.argument_size_in_bytes), "outputs": int(analysis.output_size_in_bytes),
            "temporaries": int(analysis.temp_size_in_bytes), "aliased": int(analysis.alias_size_in_bytes),
            "platform": jax.devices()[0].platform}
