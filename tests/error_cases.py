"""Every public function's error cases: what a user passes, and what the kit answers.

Run as a script (``python tests/error_cases.py``) it tries every case in this process and prints the
results as JSON; ``--write docs/errors.md`` writes the table. ``tests/unit/test_error_cases.py`` runs it,
checks each answer (raised at the call, the right type, naming the function and the argument, short)
and that ``docs/errors.md`` is what this file produces (``make errors-doc`` rewrites it).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: (function, argument named in the message (or ""), what the user passes, the call)
CASES: list[tuple[str, str, str, str]] = []


def case(function: str, argument: str, given: str, code: str) -> None:
    CASES.append((function, argument, given, code))


# --------------------------------------------------------------------------- no TensorFlow needed
case("plan_batches", "n_samples", "n_samples as a string", "kit.plan_batches('1000', 64, 4)")
case("plan_batches", "n_samples", "an array as n_samples", "kit.plan_batches(np.zeros(1000), 64, 4)")
case("plan_batches", "global_batch", "global_batch=0", "kit.plan_batches(1000, 0, 4)")
case("plan_batches", "via", "an unknown input path", "kit.plan_batches(1000, 64, 4, via='graph')")
case("plan_batches", "global_batch", "a float that means a whole number", "kit.plan_batches(134, 32.0, 4)")
case("plan_batches", "global_batch", "global_batch and n_samples swapped (a warning)", "kit.plan_batches(64, 1030, 4)")
case("plan_batches", "global_batch", "global_batch and replicas swapped (a warning)", "kit.plan_batches(134, 4, 32)")
case("check_batch_plan", "replicas", "replicas=2.5", "kit.check_batch_plan(1000, 64, 2.5)")
case("check_batch_plan", "global_batch", "via='function' with a batch the replicas cannot share",
     "kit.check_batch_plan(100, 3, 4, via='function')")
case("estimate_memory", "batch_size", "batch_size=0", "kit.estimate_memory(dense, batch_size=0)")
case("estimate_memory", "strategy", "an unknown strategy", "kit.estimate_memory(dense, batch_size=8, strategy='model')")
case("estimate_memory", "zero_stage", "ZeRO without data parallelism", "kit.estimate_memory(dense, batch_size=8, zero_stage=2)")
case("estimate_memory", "dtype_policy", "a plain float16 policy", "kit.estimate_memory(dense, batch_size=8, dtype_policy='float16')")
case("estimate_memory", "devices", "a layer split over more devices than layers",
     "kit.estimate_memory(dense, batch_size=8, strategy='split', devices=12)")
case("estimate_memory", "model", "a string instead of a model", "kit.estimate_memory('model', batch_size=8)")
case("estimate_memory", "", "a model that is not built yet", "kit.estimate_memory(unbuilt, batch_size=8)")
case("estimate_memory", "optimizer", "an optimizer the estimate does not know",
     "kit.estimate_memory(dense, batch_size=8, optimizer=keras.optimizers.Lion())")
case("estimate_memory", "devices", "a strategy and another device count",
     "kit.estimate_memory(dense, batch_size=8, strategy=strategy, devices=2)")
case("MemoryEstimate.fits", "capacity_gb", "the card's size as a string",
     "kit.estimate_memory(dense, batch_size=8).fits('12')")
case("memory_verdict", "capacity_gb", "the card's size in bytes (as an estimate's .peak is)",
     "kit.memory_verdict(kit.estimate_memory(dense, batch_size=8), 12e9)")
case("measure_memory", "build", "a lambda", "kit.measure_memory(lambda: dense, batch_size=8)")
case("measure_memory", "accumulation_steps", "a batch not divisible by the steps",
     "kit.measure_memory(job, batch_size=10, accumulation_steps=4)")
case("measure_memory", "remat", "remat=True on a functional model (refused before a process starts)",
     "kit.measure_memory(functional, batch_size=8, remat=True)")
case("measure.measure_levers", "levers", "a list instead of a dict of settings",
     "kit.measure.measure_levers(job, [{}], batch_size=8)")
case("measure.measure_levers", "levers", "a setting measure_memory does not take",
     "kit.measure.measure_levers(job, {'fast': {'learning_rate': 0.1}}, batch_size=8)")
case("measure.start_measuring", "processes", "processes=0", "kit.measure.start_measuring(job, {'Adam': {}}, batch_size=8, "
     "processes=0)")
case("measure.start_measuring_families", "families", "one family as a string instead of a tuple",
     "kit.measure.start_measuring_families(job, {'Adam': {}}, batch_size=8, families='eigen')")
case("measure_memory", "kernels", "an unknown CPU kernel family", "kit.measure_memory(job, batch_size=8, kernels='mkl')")
case("measure.compiled_memory", "build", "a lambda", "kit.measure.compiled_memory(lambda: dense, batch_size=8)")
case("estimate_memory", "bytes_per_value", "a dtype name that is no float", "kit.estimate_memory(dense, batch_size=8, "
     "bytes_per_value='int8')")
case("estimate_memory", "bytes_per_value", "bytes_per_value=0", "kit.estimate_memory(dense, batch_size=8, bytes_per_value=0)")
case("estimate_memory", "dtype_policy", "a pure bfloat16 policy", "kit.estimate_memory(dense, batch_size=8, "
     "dtype_policy='bfloat16')")
case("estimate_memory", "accumulation_steps", "steps that do not divide the batch",
     "kit.estimate_memory(dense, batch_size=32, accumulation_steps=3)")
case("estimate_memory", "devices", "more replicas than samples (a warning)",
     "kit.estimate_memory(dense, batch_size=32, strategy='data', devices=64)")
case("estimate_memory", "remat", "remat=True on a functional model", "kit.estimate_memory(functional(), batch_size=8, "
     "remat=True)")
case("estimate_memory", "model", "a lambda that builds the model", "kit.estimate_memory(lambda: dense, batch_size=8)")
case("estimate_memory", "optimizer", "an optimizer class the estimate does not know",
     "kit.estimate_memory(dense, batch_size=8, optimizer=keras.optimizers.Lion)")
case("memory_verdict", "capacity_gb", "the card's size in MiB (24 * 1024)",
     "kit.memory_verdict(kit.estimate_memory(dense, batch_size=8), 24 * 1024)")
case("widgets.MemoryExplorer", "preset", "a name that is no preset (your model's name)",
     "kit.widgets.MemoryExplorer('my model')")
case("widgets.MemoryExplorer", "preset", "your model, not built yet", "kit.widgets.MemoryExplorer(unbuilt)")
case("widgets.MemoryExplorer", "preset", "a lambda that builds your model", "kit.widgets.MemoryExplorer(lambda: dense)")
case("widgets.MemoryExplorer", "devices", "more devices than the slider has",
     "kit.widgets.MemoryExplorer(dense, devices=12)")
case("widgets.MemoryExplorer", "strategy", "an unknown strategy", "kit.widgets.MemoryExplorer(dense, strategy='model')")
case("widgets.MemoryExplorer", "capacity_gb", "the card's size in bytes",
     "kit.widgets.MemoryExplorer(dense, capacity_gb=40e9)")
case("widgets.MemoryExplorer", "dtype_policy", "a plain float16 policy",
     "kit.widgets.MemoryExplorer(dense, dtype_policy='float16')")
case("widgets.MemoryExplorer", "accumulation_steps", "steps that do not divide the batch",
     "kit.widgets.MemoryExplorer(dense, batch=32, accumulation_steps=3)")
case("widgets.MemoryExplorer", "zero_stage", "ZeRO without data parallelism",
     "kit.widgets.MemoryExplorer(dense, strategy='split', zero_stage=2)")
case("widgets.visibility_explorer", "value", "a number instead of the variable's text",
     "kit.widgets.visibility_explorer(value=5)")
case("batchnorm.start_cases", "kernels", "the same family twice",
     "kit.batchnorm.start_cases(kernels=('eigen', 'eigen'))")
case("batchnorm.run_cases", "kernels", "an unknown CPU kernel family", "kit.batchnorm.run_cases(kernels=('onednn', 'avx2'))")
case("memory.dense_stack_profile", "head", "head=0", "kit.memory.dense_stack_profile(8, 512, head=0)")
case("widgets.MemoryExplorer", "optimizer", "an optimizer the estimate does not know",
     "kit.widgets.MemoryExplorer(optimizer='lamb')")
case("parse_cuda_visible_devices", "value", "a number instead of the variable's text",
     "kit.parse_cuda_visible_devices(3, 4)")
case("scaling_model", "gpus", "gpus=0", "kit.scaling_model(0, compute_time_per_sample=1e-3, gradient_bytes=1e8, "
     "per_gpu_batch=32, bandwidth=1e10)")
case("launch_local_workers", "workers", "workers=0", "kit.launch_local_workers(job, 0)")
case("launch_local_workers", "", "a lambda", "kit.launch_local_workers(lambda: 1, 2)")
case("launch_local_workers", "private_network", "private_network='yes'",
     "kit.launch_local_workers(job, 2, private_network='yes')")
case("launch_local_workers", "timeout", "timeout=-1", "kit.launch_local_workers(job, 2, timeout=-1)")
case("explain", "error", "a number", "kit.explain(42)")
case("device_activity", "devices", "one device name instead of a list", "kit.device_activity('/device:CPU:0')")
case("expect_error", "", "no exception type", "kit.expect_error().__enter__()")
case("batchnorm.run_cases", "", "an unknown model kind", "kit.batchnorm.run_cases([('mlp', 'scale=True', 'drop_remainder')])")
case("batchnorm.run_cases", "data", "your model's build without its data",
     "kit.batchnorm.run_cases(build=functional)")
case("batchnorm.run_cases", "data", "data as a list, not a tuple (x, y)",
     "kit.batchnorm.run_cases(build=functional, data=[np.zeros((99, 4)), np.zeros(99)])")
case("batchnorm.run_cases", "data", "x and y of different lengths",
     "kit.batchnorm.run_cases(build=functional, data=(np.zeros((99, 4)), np.zeros(98)))")
case("batchnorm.run_cases", "loss", "a misspelt loss (it crashed every case as if it were the trap)",
     "kit.batchnorm.run_cases(build=functional, data=(np.zeros((99, 4)), np.zeros(99)), loss='sparse_categorial')")
case("batchnorm.run_cases", "batch_size", "a batch that does not divide over the 4 replicas",
     "kit.batchnorm.run_cases(build=functional, data=(np.zeros((99, 4)), np.zeros(99)), batch_size=30, loss='mse')")
case("batchnorm.start_cases", "data", "too few samples for a last step with an empty replica",
     "kit.batchnorm.start_cases(build=functional, data=(np.zeros((40, 4)), np.zeros(40)), batch_size=64)")
case("batchnorm.run_cases", "cases", "a kit case for your own model",
     "kit.batchnorm.run_cases([('dense', 'no BN', 'drop_remainder')], build=functional, "
     "data=(np.zeros((99, 4)), np.zeros(99)))")
case("batchnorm.run_cases", "data", "a two-input model's inputs with different row counts",
     "kit.batchnorm.run_cases(build=functional, data=({'img': np.zeros((99, 8, 8, 1)), 'vec': np.zeros((98, 5))}, "
     "np.zeros(99)))")
case("batchnorm.start_cases", "data", "a list of inputs holding a plain list",
     "kit.batchnorm.start_cases(build=functional, data=([np.zeros((99, 4)), [1, 2]], np.zeros(99)))")
case("batchnorm.run_cases", "data", "a dict of inputs keyed by position, not by input name",
     "kit.batchnorm.run_cases(build=functional, data=({0: np.zeros((99, 4)), 1: np.zeros((99, 5))}, np.zeros(99)))")
case("widgets.MeshExplorer", "mesh", "a mesh that is not 8 devices", "kit.widgets.MeshExplorer(list(kit.check.NB09_MLP), mesh=(3, 3))")
case("setup", "backend", "an unknown backend", "kit.setup(devices=4, backend='torch')")
# --------------------------------------------------------------------------- models
case("setup", "devices", "a second setup with another device count", "kit.setup(devices=8)")
case("training.distributed_split", "global_batch", "n_samples and global_batch swapped (a warning)",
     "kit.training.distributed_split(strategy, 64, 1030)")
case("training.distributed_split", "n_samples", "n_samples as a string",
     "kit.training.distributed_split(strategy, '1030', 64)")
case("training.distributed_split", "strategy", "the strategy left out", "kit.training.distributed_split(1030, 64, 4)")
case("training.distributed_split", "global_batch", "via='function' with a batch the replicas cannot share",
     "kit.training.distributed_split(strategy, 1030, 62, via='function')")
case("replica_report", "model", "a string as the model", "kit.replica_report('model', strategy)")
case("replica_report", "strategy", "a string as the strategy", "kit.replica_report(mirrored, 'mirrored')")
case("replica_report", "", "a model built outside strategy.scope()", "kit.replica_report(dense, strategy)")
case("replica_report", "strategy", "no strategy, and a model built outside any strategy's scope",
     "kit.replica_report(dense)")
case("ReplicaHealth", "tolerance", "tolerance as a string", "kit.ReplicaHealth(tolerance='0.1')")
case("ReplicaHealth", "tolerance", "a negative tolerance", "kit.ReplicaHealth(tolerance=-1)")
case("ReplicaHealth", "strategy", "a string as the strategy", "kit.ReplicaHealth(strategy='mirrored')")
case("ReplicaHealth", "on_problem", "an unknown on_problem", "kit.ReplicaHealth(on_problem='stop')")
case("save_verified", "", "the arguments swapped", "kit.save_verified(os.path.join(tmp, 'x.keras'), dense)")
case("save_verified", "", "a folder instead of a file", "kit.save_verified(dense, tmp)")
case("save_verified", "", "a .h5 file name", "kit.save_verified(dense, os.path.join(tmp, 'model.h5'))")
case("save_verified", "allow_nonfinite", "allow_nonfinite as a string",
     "kit.save_verified(dense, os.path.join(tmp, 'x.keras'), allow_nonfinite='no')")
case("save_verified", "", "a model holding NaN", "kit.save_verified(poisoned, os.path.join(tmp, 'p.weights.h5'))")
case("save_verified", "", "a model not built yet", "kit.save_verified(unbuilt, os.path.join(tmp, 'u.keras'))")
case("sharding.bytes_per_device", "", "a model on the TensorFlow backend", "kit.sharding.bytes_per_device(dense)")
case("sharding.check_layout_map", "layout_map", "a dict instead of a LayoutMap",
     "kit.sharding.check_layout_map(dense, {'dense/kernel': (None, 'model')})")
case("sharding.bytes_per_device", "include_optimizer", "include_optimizer=True on a model not compiled",
     "kit.sharding.bytes_per_device(dense, include_optimizer=True)")
case("sharding.expected_bytes_per_device", "mesh_shape", "a mesh_shape that is not the LayoutMap's mesh",
     "kit.sharding.expected_bytes_per_device(dense, keras.distribution.LayoutMap(keras.distribution.DeviceMesh("
     "(2, 4), ['batch', 'model'], [f'cpu:{i}' for i in range(8)])), {'batch': 4, 'model': 2})")
case("sharding.check_distributed", "", "a model on the TensorFlow backend", "kit.sharding.check_distributed(dense)")
case("sharding.mesh_bytes", "model_axis", "model_axis=0", "kit.sharding.mesh_bytes([('d/kernel', (8, 4), 4)], 0, True)")
case("measure.measure_training_step", "model", "a model never built", "kit.measure.measure_training_step(keras.Sequential([keras.layers.Dense(2)]), np.zeros((2, 3)), np.zeros((2, 2)))")
case("load_verified", "path", "a number as the path", "kit.load_verified(dense, 123)")
case("load_verified", "path", "a file that does not exist", "kit.load_verified(dense, os.path.join(tmp, 'none.keras'))")
case("load_verified", "", "a .keras file that is not a zip", "kit.load_verified(dense, corrupt_keras)")
case("load_verified", "", "a .weights.h5 file that is not HDF5", "kit.load_verified(dense, corrupt_h5)")
case("load_verified", "", "weights of a wider model", "kit.load_verified(narrow, wide_file)")
case("memory.rematerialize", "model", "a Sequential model without an input shape",
     "kit.memory.rematerialize(unbuilt)")
case("save_verified", "path", "a missing folder",
     "kit.save_verified(dense, os.path.join(tmp, 'no-such-folder', 'm.keras'))")
case("save_verified", "path", "a file where the folder should be",
     "kit.save_verified(dense, os.path.join(wide_file, 'm.keras'))")
case("load_verified", "path", "a missing folder",
     "kit.load_verified(dense, os.path.join(tmp, 'no-such-folder', 'm.keras'))")
case("load_verified", "", "a file with a layer the model lacks", "kit.load_verified(dense, deeper_file)")
case("load_verified", "", "Adam's state into a model compiled with SGD", "kit.load_verified(sgd, adam_file)")
case("load_verified", "", "optimizer state into an uncompiled model (a warning)", "kit.load_verified(fresh, adam_file)")


def functional():
    """A functional model: rematerialize (remat=True) takes Sequential models only."""
    import keras

    inputs = keras.Input((4,))
    return keras.Model(inputs, keras.layers.Dense(2)(keras.layers.Dense(8)(inputs)))


def run() -> list[dict[str, str]]:
    import numpy as np
    import gputrain_kit as kit
    kit.setup(devices=4)
    import keras
    import tensorflow as tf

    tmp = tempfile.mkdtemp(prefix="gputrain-errors-")
    strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
    with strategy.scope():
        mirrored = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    dense = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="dense_net")
    poisoned = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="hidden")], name="poisoned")
    poisoned.layers[0].kernel.assign(np.full((4, 2), np.nan, "float32"))
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    wide = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16, name="hidden")], name="wide")
    narrow = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, name="hidden")], name="narrow")
    wide_file = os.path.join(tmp, "wide.weights.h5")
    wide.save_weights(wide_file)
    deeper = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, name="hidden"),
                               keras.layers.Dense(3, name="extra")], name="deeper")
    deeper_file = os.path.join(tmp, "deeper.weights.h5")
    deeper.save_weights(deeper_file)
    adam = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="adam_net")
    adam.compile("adam", "mse")
    adam.optimizer.build(adam.trainable_variables)
    adam_file = os.path.join(tmp, "adam.weights.h5")
    adam.save_weights(adam_file)
    sgd = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="sgd_net")
    sgd.compile("sgd", "mse")
    fresh = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="fresh")
    corrupt_keras, corrupt_h5 = os.path.join(tmp, "half.keras"), os.path.join(tmp, "half.weights.h5")
    for name in (corrupt_keras, corrupt_h5):
        Path(name).write_text("not a model")

    def job():
        return 1

    scope = dict(kit=kit, keras=keras, np=np, os=os, tmp=tmp, strategy=strategy, mirrored=mirrored, dense=dense,
                 poisoned=poisoned, unbuilt=unbuilt, narrow=narrow, wide_file=wide_file, deeper_file=deeper_file,
                 adam_file=adam_file, sgd=sgd, fresh=fresh,
                 corrupt_keras=corrupt_keras, corrupt_h5=corrupt_h5, job=job, functional=functional)
    results = []
    for function, argument, given, code in CASES:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                eval(code, scope)
                kind, message = "no error", ""
            except Exception as err:
                kind, message = type(err).__name__, str(err)
                mro = [t.__name__ for t in type(err).__mro__]
        message = message.replace(tmp, "<tmp>")
        results.append({"function": function, "argument": argument, "given": given, "code": code, "type": kind,
                        "bases": mro if message else [], "message": message,
                        "warnings": [str(w.message).replace(tmp, "<tmp>") for w in caught]})
    return results


def render(results: list[dict[str, str]]) -> str:
    lines = ["# Errors: what the kit says when a call is wrong",
             "",
             "Generated by `make errors-doc` from `tests/error_cases.py`, whose cases `tests/unit/test_error_cases.py`",
             "runs and checks (each error raised at the call, naming the function and the argument, with",
             "long values shortened); do not edit by hand. TensorFlow's own errors in plain words:",
             "`gputrain_kit.explain(error)` (the table at the end).",
             ""]
    current = None
    for r in results:
        if r["function"] != current:
            current = r["function"]
            lines += ["", f"## `{current}`", "", "| input | call | error |", "|---|---|---|"]
        if r["type"] == "no error" and r["warnings"]:          # accepted, with a warning
            kind, text = "warning", r["warnings"][0]
        else:
            kind, text = r["type"], r["message"]
        message = text.replace("|", "\\|").replace("\n", " ")
        code = r["code"].replace("|", "\\|")
        lines.append(f"| {r['given']} | `{code}` | **{kind}**: {message} |")
    from gputrain_kit import explainer
    lines += ["", "## `explain`: TensorFlow's errors in plain words", "",
              "Each is made for real in `tests/unit/test_explain.py`; the GPU-only ones from NCCL's and TensorFlow's "
              "documented messages and from the real errors of an H100 run (`kit.gpu_record`, docs/gpu.md).", "", "| key | matched on | explanation |", "|---|---|---|"]
    for entry in explainer._ENTRIES:
        patterns = " or ".join(f"`` {p} ``" for p in entry.patterns).replace("|", "\\|")
        text = " ".join(str(entry.explanation).split()).replace("|", "/")     # str() wraps lines
        lines.append(f"| {entry.explanation.key} | {patterns} | {text} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    results = run()
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        Path(sys.argv[2]).write_text(render(results))
        print(f"wrote {sys.argv[2]} ({len(results)} cases)")
    else:
        print(json.dumps(results))
