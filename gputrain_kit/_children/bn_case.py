"""One BatchNorm case of notebook 05's matrix, in a process of its own (``batchnorm.run_cases`` sends it).

``prepare()`` imports TensorFlow and makes the data (before any fork); ``run(kind, bn, batching, epochs)``
starts a runtime with 4 simulated devices, trains the case's model under ``MirroredStrategy`` and reports
what a user would see: the losses, the error ``fit`` raised, which replica copies hold NaN.
"""
from __future__ import annotations

from typing import Any

from gputrain_kit.batchnorm import DEVICES

N, BATCH, CLASSES = 1030, 64, 4
_data: dict[str, Any] = {}
_strategy: Any = None


def prepare() -> None:
    """TensorFlow imported, never started; the kit's data made once, shared by every forked case."""
    import numpy as np
    import tensorflow  # noqa: F401  (imported here, once, before the forks)

    import gputrain_kit  # noqa: F401

    rng = np.random.default_rng(0)
    y = rng.integers(0, CLASSES, N)
    _data.update(y=y, dense=(rng.normal(size=(N, 16)) + y[:, None]).astype("float32"),
                 conv=(rng.normal(size=(N, 8, 8, 1)) + y[:, None, None, None]).astype("float32"))


def _start_runtime() -> Any:
    global _strategy
    if _strategy is None:
        import tensorflow as tf

        import gputrain_kit as kit

        # One inter-op thread: ops run in one order, so a crash reports the same failing op every run; one
        # intra-op thread: small models, where more threads only fight the notebook's kernel for the cores.
        tf.config.threading.set_inter_op_parallelism_threads(1)
        tf.config.threading.set_intra_op_parallelism_threads(1)
        kit.setup(devices=DEVICES)
        _strategy = tf.distribute.MirroredStrategy(kit.device_names(DEVICES))
    return _strategy


def _users_model(build_source: str, build_name: str, loss: str) -> Any:
    """The learner's model: build() from its source, compiled with Adam and ``loss`` unless it compiled itself."""
    import keras
    import numpy as np
    import tensorflow as tf

    namespace = {"keras": keras, "tf": tf, "np": np, "__name__": "__gputrain_build__"}
    exec(compile(build_source, "<build>", "exec"), namespace)   # the user's build(), by its source
    model = namespace[build_name]()
    if not isinstance(model, keras.Model):
        raise TypeError("run_cases: build() must return a Keras model, got " + type(model).__name__)
    if not model.compiled:
        if not loss:
            raise ValueError(f"run_cases: {build_name}() returned an uncompiled model and no loss was given: "
                             "compile it inside build(), or pass loss=..., e.g. loss='mse'.")
        model.compile(optimizer="adam", loss=loss)
    return model


def run(kind: str, bn: str, batching: str, epochs: int, build_source: str = "", data_path: str = "",
        batch_size: int = BATCH, loss: str = "") -> dict[str, Any]:
    """Train the case and describe what happened (``batchnorm._classify`` turns it into an outcome). With
    ``build_source`` the model is the learner's (``kind`` names its build function) on the data saved at
    ``data_path``."""
    import keras
    import numpy as np
    import tensorflow as tf

    from gputrain_kit.batchnorm import bn_model, load_users_data
    from gputrain_kit.errors import error_summary
    from gputrain_kit.replicas import replica_report

    if not _data:
        prepare()
    strategy = _start_runtime()
    keras.utils.set_random_seed(0)
    if build_source:        # x: one array, a dict by input name or a tuple (one array per input)
        x, y = load_users_data(data_path)
    else:
        x, y = _data[kind], _data["y"]
    rows = len(y)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size,
                                                          drop_remainder=(batching == "drop_remainder"))
    with strategy.scope():
        if build_source:
            model = _users_model(build_source, kind, loss)
        else:
            model = bn_model(kind, bn, classes=CLASSES)
            model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    from tensorflow.python.util import _pywrap_util_port

    # the family this process really runs (TF_ENABLE_ONEDNN_OPTS=1 gives oneDNN only in a build that has it)
    ran = "onednn" if _pywrap_util_port.IsMklEnabled() else "eigen"
    out: dict[str, Any] = {"case": [kind, bn, batching], "losses": [], "error": None, "later_fit": "",
                           "rows": rows, "kernels": ran}
    try:
        history = model.fit(ds, epochs=epochs, verbose=0, callbacks=[keras.callbacks.TerminateOnNaN()])
        out["losses"] = [float(v) for v in history.history["loss"]]
    except Exception as err:
        out["error"] = error_summary(err)
    report = replica_report(model, strategy)   # every replica's copy of every variable of the model
    out["poisoned"] = sorted({path.split("/")[-1] for path, _ in report.poisoned})
    out["poisoned_replicas"] = sorted({i for _, i in report.poisoned})
    out["nan_copies"] = len(report.poisoned)
    trainable = {r.path for r in report.rows if r.trainable}    # NaN a saved file (replica 0's) or a step reads
    out["seen"] = {"replica_0": sorted({path.split("/")[-1] for path, i in report.poisoned if i == 0}),
                   "trainable": sorted({path.split("/")[-1] for path, _ in report.poisoned if path in trainable})}
    out["spread"] = report.spread
    # trainable copies that differ: a step that crashed half way updated some replicas and not others
    out["diverged"] = report.diverged
    out["nan_rows"] = 0   # every copy finite: predictions are finite too
    if report.poisoned:
        predicted = model.predict(x, batch_size=batch_size, verbose=0)
        outputs = list(predicted.values()) if isinstance(predicted, dict) else \
            list(predicted) if isinstance(predicted, (list, tuple)) else [predicted]
        nan = np.zeros(rows, bool)
        for output in outputs:
            nan |= np.isnan(np.asarray(output, dtype="float32").reshape(rows, -1)).any(axis=1)
        out["nan_rows"] = int(nan.sum())
    if out["error"]:
        try:   # one full step with the same, already traced train function
            model.fit(ds.take(1), epochs=1, verbose=0)
            out["later_fit"] = "works"
        except Exception as err:
            out["later_fit"] = error_summary(err)
    return out
