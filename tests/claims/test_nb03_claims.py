"""Every behaviour notebook 03 shows, checked on the installed TensorFlow/Keras."""
from __future__ import annotations

from importlib.metadata import version

import pytest

from gputrain_kit import check
from gputrain_kit.pipeline import bubble_fraction, gpipe_schedule
from conftest import last_json, run_python

KERAS = tuple(int(part) for part in version("keras").split(".")[:2])


def test_construction_time_placement_pins_variables_not_computation_and_call_placement_works():
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf, keras
        from gputrain_kit.branches import construction_time_placement, digits_as_sequences, traced_op_devices, PlacedBranches
        from gputrain_kit.placement import variable_devices, short_device
        (x, y), (xv, yv) = kit.data.digits()
        r, c = digits_as_sequences(x); rv, cv = digits_as_sequences(xv)
        spec = tf.TensorSpec((None, 8, 8), tf.float32)
        built = construction_time_placement(kit.device_names(4)[1:])
        p = PlacedBranches(kit.device_names(3)[1:], merge_device=kit.device_names(1)[0])
        p.compile(keras.optimizers.Adam(3e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        h = p.fit([r, c], y, batch_size=64, epochs=5, verbose=0, validation_data=([rv, cv], yv))
        print(json.dumps({"built_vars": variable_devices(built), "built_ops": traced_op_devices(built, spec, spec),
                          "built_eager": short_device(built([rv[:4], cv[:4]]).device),
                          "placed_ops": traced_op_devices(p, spec, spec), "where": p.where([rv[:4], cv[:4]]),
                          "placed_vars": variable_devices(p), "acc": h.history["val_accuracy"][-1]}))
    """)
    out = last_json(proc)
    assert out["built_vars"]["classifier/kernel"] == ["CPU:3"]             # the scopes placed the variables
    assert out["built_vars"]["shared_lstm/lstm_cell/kernel"] == ["CPU:1"]  # (first call of the shared LSTM)
    assert list(out["built_ops"]) == [""]                                  # no traced op is pinned
    assert out["built_eager"] == "CPU:0"
    ops = out["placed_ops"]
    assert ops.get("/device:CPU:1", 0) > 10 and ops.get("/device:CPU:2", 0) > 10 and ops.get("/device:CPU:0", 0) > 0
    assert out["where"] == {"branch 1": "CPU:1", "branch 2": "CPU:2", "merge": "CPU:0"}
    assert out["acc"] > 0.5
    # section 3: the work is placed, the variables are not: built by tracing call(), all on the default device
    assert len(out["placed_vars"]) == 5 and all(d == ["CPU:0"] for d in out["placed_vars"].values())


def test_graph_mode_keeps_the_device_scope_an_op_was_built_in():
    """TF1-style graph: an op built under tf.device requests that device (what multi_gpu_model relied on);
    the Keras 3 re-trace in the test above requests none."""
    import tensorflow as tf
    from gputrain_kit.placement import short_device
    with tf.Graph().as_default(), tf.device("/device:CPU:1"):
        product = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
    assert short_device(product.op.device) == "CPU:1"
    with tf.Graph().as_default():
        unpinned = tf.matmul(tf.ones((2, 2)), tf.ones((2, 2)))
    assert unpinned.op.device == ""


def test_mirrored_strategy_keeps_the_whole_model_state_on_every_device():
    """Notebook 03, section 4: the digits model under a 4-device MirroredStrategy, bytes per device."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=4)
        import tensorflow as tf
        from gputrain_kit.placement import short_device
        strategy = tf.distribute.MirroredStrategy(kit.device_names(4))
        with strategy.scope():
            m = kit.training.build_digits_model()
            m.optimizer.build(m.trainable_variables)
        held = {}
        for v in m.weights + [v for v in m.optimizer.variables if len(v.shape) > 0]:
            for c in strategy.experimental_local_results(v.value):
                held[short_device(c.device)] = held.get(short_device(c.device), 0) + c.numpy().nbytes
        model = kit.training.build_digits_model()
        single = kit.estimate_memory(model, batch_size=64).per_device[0]
        trainable = sum(v.numpy().nbytes for v in model.trainable_weights)
        print(json.dumps({"held": held, "state": single["parameters"] + single["optimizer"],
                          "gradients": single["gradients"], "trainable": trainable,
                          "batch_parts": [single["activations"], single["temporaries"]]}))
    """)
    out = last_json(proc)
    assert out["held"] == {f"CPU:{i}": out["state"] for i in range(4)}
    # section 4's first cell: the estimate's gradients are the trainable variables' bytes; the two parts that grow
    # with the batch, activations and temporaries, are both counted
    assert out["gradients"] == out["trainable"] and min(out["batch_parts"]) > 0



_TWO_STAGES = """
    import json, gputrain_kit as kit
    kit.setup(devices=4)
    import tensorflow as tf, keras
    from gputrain_kit.placement import short_device
    from gputrain_kit.branches import traced_op_devices
    d = kit.device_names(4)
    (x, y), _ = kit.data.digits()

    class TwoStages(keras.Model):
        def __init__(self, devices, **kwargs):
            super().__init__(**kwargs)
            self.stage_devices = list(devices)
            self.stages = [keras.Sequential([keras.layers.Dense(64, activation="relu"),
                                             keras.layers.Dense(64, activation="relu")], name="stage_1"),
                           keras.Sequential([keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)],
                                            name="stage_2")]
        def call(self, x):
            for device, stage in zip(self.stage_devices, self.stages):
                with tf.device(device):
                    x = stage(x)
            return x

    class PlacedStages(TwoStages):
        def build(self, input_shape):
            for device, stage in zip(self.stage_devices, self.stages):
                with tf.device(device):
                    stage.build(input_shape)
                input_shape = stage.compute_output_shape(input_shape)

    class Outer(keras.Model):
        def __init__(self, inner, **kwargs):
            super().__init__(**kwargs)
            self.inner = inner
        def call(self, x):
            return self.inner(x)

    def train(model, build_optimizer=False):
        model.compile(optimizer=keras.optimizers.Adam(3e-3),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if build_optimizer:
            model.optimizer.build(model.trainable_variables)
        model.fit(x, y, batch_size=64, epochs=1, verbose=0)
        return model

    def state_bytes(model):
        held = {}
        for v in model.weights + [s for s in model.optimizer.variables if len(s.shape) > 0]:
            held[short_device(v.value.device)] = held.get(short_device(v.value.device), 0) + v.value.numpy().nbytes
        return dict(sorted(held.items()))

    def stage_of(model):
        stages = model.inner.stages if isinstance(model, Outer) else model.stages
        return {s.name: sorted({short_device(v.value.device) for v in s.weights}) for s in stages}
"""


def test_a_scope_inside_call_places_the_work_not_the_variables_and_an_eager_build_places_both():
    """Notebook 03, section 3: a subclassed model whose call() runs each stage under its device computes there,
    but Keras builds it by tracing call() inside a StatelessScope, so every variable, and every Adam slot that
    fit creates, lands on the default device. A build() that builds each stage under its device, called eagerly,
    places the variables; the optimizer built eagerly before fit puts each slot beside its variable. Nested in a
    subclassed model without build(), the same build() runs inside the outer StatelessScope: the trap again.
    One run, in this process's kernel family: placement is decided in Python (Keras's tracing, TensorFlow's device
    scopes), and strict nbval compares the notebook's instance of it under both families."""
    proc = run_python(_TWO_STAGES + """
    from keras.src.backend.common.stateless_scope import StatelessScope
    out = {}
    dense = keras.layers.Dense(8)
    with StatelessScope():
        with tf.device(d[2]):
            dense.build((None, 4))
        out["created_inside"] = dense.kernel._value is not None
    out["created_on"] = short_device(dense.kernel.value.device)
    trapped = train(TwoStages(d[1:3]))
    out["trap_ops"] = traced_op_devices(trapped, tf.TensorSpec((None, 64), tf.float32))
    out["trap"] = state_bytes(trapped)
    for build_optimizer in (False, True):
        m = PlacedStages(d[1:3]); m.build((None, 64))
        out[f"fixed_{build_optimizer}"] = state_bytes(train(m, build_optimizer=build_optimizer))
        out[f"fixed_stages_{build_optimizer}"] = stage_of(m)
    nested = train(Outer(PlacedStages(d[1:3])))
    out["nested"] = stage_of(nested)
    inner = PlacedStages(d[1:3]); inner.build((None, 64))
    out["nested_built"] = stage_of(train(Outer(inner)))
    # issue 44: what places the variables is a build outside Keras's symbolic trace of call(), not an eager call:
    # a build() of the model's own, first run by fit, places them; a first call on real data, eager, does not
    out["own_build_by_fit"] = stage_of(train(PlacedStages(d[1:3])))
    eager = TwoStages(d[1:3]); eager(x[:2])
    out["eager_first_call"] = stage_of(eager)
    # twelfth read: a scope *around* the first call, or around fit, is where the trace's StatelessScope exits
    with tf.device(d[3]):
        around = TwoStages(d[1:3]); around(x[:2])
    out["around_first_call"] = stage_of(around)
    with tf.device(d[3]):
        around_fit = train(TwoStages(d[1:3]))
    out["around_fit"] = state_bytes(around_fit)
    inp = keras.Input((64,))                                   # section 1's way: built eagerly, on symbolic inputs
    with tf.device(d[1]):
        h = keras.layers.Dense(64)(inp)
    with tf.device(d[2]):
        o = keras.layers.Dense(10)(h)
    out["functional"] = state_bytes(train(keras.Model(inp, o)))
    with tf.device(d[1]):                                      # section 5's stages: Sequential with Input
        seq = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64)])
    out["sequential"] = sorted({short_device(v.value.device) for v in seq.weights})
    print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["created_inside"] is False and out["created_on"] == "CPU:0"           # deferred, then default device
    ops = out["trap_ops"]
    assert ops.get("/device:CPU:1", 0) > 0 and ops.get("/device:CPU:2", 0) > 0        # the work is placed...
    params_1, params_2 = 2 * (64 * 64 + 64) * 4, (64 * 64 + 64 + 64 * 10 + 10) * 4
    assert out["trap"] == {"CPU:0": 3 * (params_1 + params_2)}                        # ...the state is not
    assert out["fixed_stages_False"] == out["fixed_stages_True"] == {"stage_1": ["CPU:1"], "stage_2": ["CPU:2"]}
    # optimizer left to fit: Adam's two slots per variable, two thirds of the bytes, on the default device
    assert out["fixed_False"] == {"CPU:0": 2 * (params_1 + params_2), "CPU:1": params_1, "CPU:2": params_2}
    assert out["fixed_True"] == {"CPU:1": 3 * params_1, "CPU:2": 3 * params_2}        # divided, nothing on CPU:0
    assert out["nested"] == {"stage_1": ["CPU:0"], "stage_2": ["CPU:0"]}
    assert out["nested_built"] == {"stage_1": ["CPU:1"], "stage_2": ["CPU:2"]}
    assert out["own_build_by_fit"] == {"stage_1": ["CPU:1"], "stage_2": ["CPU:2"]}
    assert out["eager_first_call"] == {"stage_1": ["CPU:0"], "stage_2": ["CPU:0"]}
    assert out["around_first_call"] == {"stage_1": ["CPU:3"], "stage_2": ["CPU:3"]}
    assert out["around_fit"] == {"CPU:3": 3 * (params_1 + params_2)}                  # the slots too, one device
    # a functional model's variables follow its scopes, but fit still puts Adam's slots on the default device
    f1, f2 = (64 * 64 + 64) * 4, (64 * 10 + 10) * 4
    assert out["functional"] == {"CPU:0": 2 * (f1 + f2), "CPU:1": f1, "CPU:2": f2}
    assert out["sequential"] == ["CPU:1"]


def test_the_keras_sources_the_notebook_cites_do_what_it_says():
    """Notebook 03, section 3 names where Keras defers variables and colocates slots: those places still do it."""
    import inspect

    from keras.src.backend.common import stateless_scope
    from keras.src.backend.tensorflow import core, optimizer
    from keras.src.layers import layer

    assert "backend.compute_output_spec(" in inspect.getsource(layer.Layer._maybe_build)
    assert "with StatelessScope()" in inspect.getsource(core.compute_output_spec)
    assert "initialize_all_variables()" in inspect.getsource(stateless_scope.StatelessScope.__exit__)
    assert "colocate_vars_with" in inspect.getsource(optimizer.TFOptimizer.add_variable_from_reference)


def test_the_prose_says_which_data_parallelism_and_which_versions():
    """Notebook 03, section 4: 'never divides the model state' is said of MirroredStrategy, with sharded data
    parallelism named as what does divide it (notebook 08 models ZeRO, notebook 09 runs Keras's sharding); the
    thread's diagnosis is given for TensorFlow 2 and, apart, for Keras 2 on TensorFlow 1's graphs; the rule of
    section 3 says variables follow builds outside Keras's symbolic trace of call() (issue 44: not eagerness)."""
    import json
    from pathlib import Path

    prose = _nb03_prose()
    assert "Data parallelism never divides" not in prose
    for quoted in ("Data parallelism as `MirroredStrategy` does it, every replica a full copy, never divides the "
                   "model state", "Sharded data parallelism does divide it",
                   "On TensorFlow 2 with Keras 3, scopes around Inception blocks",
                   "On Keras 2 with TensorFlow 1's graphs, the Keras of 2018, each scope placed its work as well",
                   "A `tf.device` scope places a layer's *variables* where the layer is built outside Keras's "
                   "symbolic trace of `call()`",
                   "only when that build runs outside Keras's symbolic trace of `call()`",
                   "its variables go where that trace's `StatelessScope` exits, the scope around the model's first "
                   "call or `fit` (the default device without one), all of them on that one device",
                   "neither a speed-up nor its absence can be read from them",
                   "A single doubling from 4 to 8 is not checked"):
        assert quoted in prose, quoted
    assert "within 0.1" not in prose
    assert "where the layer is built eagerly" not in prose and "on the spot, *eagerly*" not in prose
    assert "built *eagerly*" not in prose                  # the summary kept the old rule (twelfth read)
    assert "gets the default device whatever" not in prose   # a scope around the first call places them (twelfth)
    assert "Variables go where a layer is built outside Keras's symbolic trace of `call()`" in prose
    # ZeRO shards by stages: only stage 3 (and FSDP's full sharding) keeps 1/n of all three parts
    assert "only stage 3, like PyTorch's FSDP with full sharding, keeps 1/n of all three" in prose
    assert "stage 1 the optimizer slots, stage 2 the gradients as well, stage 3 the parameters as well" in prose
    assert "ZeRO (DeepSpeed) and PyTorch's FSDP keep 1/n" not in prose
    # data parallelism at a fixed global batch divides the activations and the temporaries (the table's rows)
    assert "Only the two parts that grow with the batch shrink, the activations and the step's temporaries" in prose
    assert "Only the activations shrink" not in prose
    # section 4 is there, with the five parts it names, before the code that prints them
    assert "## 4. What `MirroredStrategy` can and cannot fix" in prose
    for part in ("**parameters**", "**gradient**", "**optimizer slots**", "**activations**", "**temporaries**"):
        assert part in prose, part
    # private Keras names are said to be private where they are used
    assert "`StatelessScope` lives in `keras.src`" in prose and "`kernel._value` is the private field" in prose
    nb08 = " ".join("".join(c["source"]) for c in json.loads((Path(__file__).resolve().parents[2] / "notebooks" /
                                                              "08_memory_levers.ipynb").read_text())["cells"])
    assert "ZeRO" in nb08 and "FSDP" in nb08


def _nb03_prose() -> str:
    """Notebook 03's markdown, whitespace collapsed (a quoted number may be broken over two lines)."""
    import json
    from pathlib import Path

    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "03_device_parallel.ipynb").read_text(
        encoding="utf-8"))["cells"]
    text = " ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return " ".join(text.split())


def _fullest(estimate):
    index = max(range(estimate.devices), key=lambda i: estimate.per_device[i]["total"])
    return index, estimate.per_device[index]


def _state(part):
    return part["parameters"] + part["gradients"] + part["optimizer"]


def test_inception_v3_claims_hold_and_the_prose_quotes_the_planners_numbers():
    """Notebook 03, section 4: the Q&A thread's InceptionV3 at a global batch of 96 on 12 GB cards. Every number
    the prose quotes is computed here from the planner, so a planner change that moves one fails this test."""
    from gputrain_kit.memory import estimate_memory, preset_profile

    inception = preset_profile("inception_v3")
    single = estimate_memory(inception, batch_size=96)
    data = estimate_memory(inception, batch_size=96, strategy="data", devices=4)
    times_four = estimate_memory(inception, batch_size=4 * 96, strategy="data", devices=4)
    split = estimate_memory(inception, batch_size=96, strategy="split", devices=4)
    # one card runs out; data parallel at the same global batch fits, batch_size*G does not; a split fits
    assert not single.fits(12) and data.fits(12) and not times_four.fits(12) and split.fits(12)
    assert times_four.per_device == (single.per_device[0],) * 4              # batch_size*G: nothing shrinks
    one, shared = single.per_device[0], data.per_device[0]
    # "almost all of it activations and temporaries": the model state is small
    assert one["activations"] + one["temporaries"] > 0.95 * one["total"] and _state(one) < 0.05 * one["total"]
    # the split's fullest device is #0 (the first layers: large outputs, few weights), fuller than a data-parallel
    # device, more by its temporaries (its layers run on all 96 examples) than by its activations
    index, first = _fullest(split)
    assert index == 0 and round(_state(first) / 1e9, 2) == 0.0
    assert split.peak > data.peak
    assert first["temporaries"] - shared["temporaries"] > first["activations"] - shared["activations"] > 0
    prose = _nb03_prose()
    gb = lambda n: f"{n / 1e9:.2f}"
    for quoted in (f"model state is small, {gb(_state(one))} GB",
                   f"96 (24 per device): {gb(data.peak)} GB, which fits a 12 GB card",
                   f"activations and temporaries, {gb(times_four.peak)} GB, and runs out",
                   "a model state that rounds to 0.00 GB",
                   f"{gb(split.peak)} against {gb(data.peak)} GB",
                   f"{gb(first['temporaries'])} against {gb(shared['temporaries'])} GB",
                   f"{gb(first['activations'])} against {gb(shared['activations'])} GB",
                   f"{gb(single.peak)} GB estimated, almost all of it activations ({gb(one['activations'])} GB) and "
                   f"temporaries ({gb(one['temporaries'])} GB)"):
        assert quoted in prose, quoted


def test_dense_stack_claims_hold_and_the_prose_quotes_the_planners_numbers():
    """Notebook 03, section 4 and exercises 1 and 4: the 1.6-billion-parameter stack keeps its whole model state on
    every data-parallel device at any batch; only a split fits 12 GB cards; 2 ways need less than data x4; 3 ways
    hold a third of the state each and fit with about 3 GB to spare."""
    from gputrain_kit.memory import estimate_memory, preset_profile

    stack = preset_profile("dense_stack")
    whole = _state(estimate_memory(stack, batch_size=32).per_device[0])
    for batch in (32, 128):
        e = estimate_memory(stack, batch_size=batch, strategy="data", devices=4)
        assert not e.fits(12) and all(_state(d) == whole for d in e.per_device)
    assert not estimate_memory(stack, batch_size=32).fits(12)
    assert estimate_memory(stack, batch_size=32, strategy="split", devices=4).fits(12)
    two = estimate_memory(stack, batch_size=32, strategy="split", devices=2)
    assert two.peak < estimate_memory(stack, batch_size=32, strategy="data", devices=4).peak       # exercise 1
    three = estimate_memory(stack, batch_size=32, strategy="split", devices=3)
    assert three.fits(12) and all(f"{_state(d) / 1e9:.2f}" == f"{whole / 3e9:.2f}" for d in three.per_device)
    assert check.nb03_split_state_gb(_state(three.per_device[0]) / 1e9)                              # exercise 4
    prose = _nb03_prose()
    for quoted in (f"keeps its {whole / 1e9:.1f} GB on *every* device", f"About `{whole / 3e9:.2f}` GB",
                   f"a third of the {whole / 1e9:.1f} GB",
                   f"fits a 12 GB card, with about {round(12 - three.peak / 1e9)} GB to spare"):
        assert quoted in prose, quoted

@pytest.mark.xfail(KERAS < (3, 15), strict=True, reason=(
    "Keras before 3.15 cannot construct keras.distribution.DataParallel or ModelParallel on the TensorFlow backend: "
    "their __init__ calls backend distribution_lib.num_processes(), which keras/src/backend/tensorflow/"
    "distribution_lib.py does not define (AttributeError); 3.15 falls back to one process (hasattr check)"))
def test_keras_distribution_on_tensorflow_runs_but_does_not_shard():
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=4)
        import keras
        from gputrain_kit.placement import short_device
        out = {"devices": keras.distribution.list_devices()}
        keras.distribution.set_distribution(keras.distribution.DataParallel())
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]); m.compile("sgd", "mse")
        m.fit(np.ones((8, 4)), np.ones((8, 2)), verbose=0)
        mesh = keras.distribution.DeviceMesh((2,), ["model"], devices=keras.distribution.list_devices()[:2])
        layout = keras.distribution.LayoutMap(mesh); layout[".*kernel"] = (None, "model")
        keras.distribution.set_distribution(keras.distribution.ModelParallel(layout_map=layout))
        m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)]); m.compile("sgd", "mse")
        m.fit(np.ones((8, 64)), np.ones((8, 10)), verbose=0)
        kernel = m.layers[0].kernel
        out["shape"], out["device"] = list(kernel.shape), short_device(kernel.value.device)
        out["asked"] = list(keras.distribution.distribution().get_variable_layout(kernel).axes)
        out["took"] = repr(kernel._layout)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["devices"] == ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert out["shape"] == [64, 10] and out["device"] == "CPU:0"   # whole kernel, one device: not sharded
    # the distribution has a layout for the kernel, but a TensorFlow variable never asks for it
    assert out["asked"] == [None, "model"] and out["took"] == "None"


def test_only_jax_variables_ask_the_distribution_for_a_layout():
    """Notebook 03 section 6: among the installed Keras's backends only JAX's variables call
    ``get_variable_layout`` (``JaxVariable._initialize_layout``); the TensorFlow backend's distribution module
    calls itself a prototype not to use; the notebook says so and no longer calls distribute_value a stub."""
    import ast
    import inspect
    from pathlib import Path

    import keras

    backends = Path(keras.src.backend.__file__).parent
    asking = sorted({path.relative_to(backends).parts[0] for path in backends.rglob("*.py")
                     if not path.name.endswith("_test.py") and "get_variable_layout(" in path.read_text()})
    assert asking == ["jax"]
    jax_core = (backends / "jax" / "core.py").read_text()
    assert "def _initialize_layout(self):" in jax_core and "distribution.get_variable_layout(self)" in jax_core
    doc = " ".join(ast.get_docstring(ast.parse((backends / "tensorflow" / "distribution_lib.py").read_text())).split())
    assert doc.startswith("!!!DO NOT USE!!!") and "just a prototype" in doc
    from keras.src.backend.common import variables
    assert "get_variable_layout" not in inspect.getsource(variables)
    prose = _nb03_prose()
    assert "only JAX's variables ask (`JaxVariable._initialize_layout`" in prose
    assert "stub" not in prose and "distribute_value" not in prose


def test_pipeline_schedule_and_timeline():
    for s in range(1, 6):
        for m in range(1, 40, 7):
            assert abs(bubble_fraction(s, m) - (s - 1) / (m + s - 1)) < 1e-12
    slots = gpipe_schedule(2, 3)
    assert [(x.stage, x.microbatch, x.start) for x in slots] == [(0, 0, 0), (0, 1, 1), (0, 2, 2), (1, 0, 1), (1, 1, 2), (1, 2, 3)]
    proc = run_python("""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=2)
        import keras
        from support import time_stages
        stages = [keras.Sequential([keras.Input((64,)), keras.layers.Dense(64)]) for _ in range(2)]
        print(json.dumps(time_stages(stages, kit.device_names(2), np.ones((32, 64), "float32"))))
    """)
    (d0, s0, e0), (d1, s1, e1) = last_json(proc)
    assert d0.endswith("CPU:0") and d1.endswith("CPU:1") and 0 <= s0 < e0 <= s1 < e1   # one after the other


def test_nb03_exercise_checks():
    assert check.nb03_less_memory("split") and not check.nb03_less_memory("data")
    assert check.nb03_less_memory("the split") and not check.nb03_less_memory("the data")
    assert check.nb03_microbatches("at least 28") and check.nb03_microbatches("M = 28")
    assert not check.nb03_microbatches("at least 27") and not check.nb03_microbatches("M = 29")
    assert check.nb03_bubble(3 / 11) and check.nb03_bubble(0.27) and not check.nb03_bubble(0.5)
    assert "Not answered" in repr(check.nb03_bubble(...))


def test_memory_presets_show_no_source_numbers():
    """The preset the notebook's explorer shows is named after the model, by its display name or its key."""
    from gputrain_kit.memory import PRESETS, preset_profile

    assert "InceptionV3 299x299" in PRESETS and not any("seed" in name.lower() for name in PRESETS)
    assert preset_profile("InceptionV3 299x299") == preset_profile("inception_v3")


def test_branches_source_shown_by_the_notebook_names_no_source_numbers():
    import inspect

    from gputrain_kit.branches import construction_time_placement

    assert "seed" not in inspect.getsource(construction_time_placement).lower()


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_estimate_against_the_allocator_bands_hold_under_both_kernel_families(family):
    """Notebook 03 section 5: SGD's step is estimated right, Adam's is above 1.2x its estimate (one to three
    temporaries the size of the weights, by the order the step frees them), a Dense+ReLU stack at a large batch below 0.8x; plus two models of other
    widths and batches, each in a fresh process of the family."""
    from conftest import last_json, run_python

    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=2)
        import tensorflow as tf, keras
        from gputrain_kit.measure import measure_training_step
        def stack(width, pairs):
            return keras.Sequential([keras.Input((width,))] + [l for _ in range(pairs)
                                    for l in (keras.layers.Dense(width), keras.layers.Activation("relu"))])
        out = {}
        for name, width, build, opt, batch in [("sgd", 2048, lambda: keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)]), "sgd", 8),
                                       ("adam", 2048, lambda: keras.Sequential([keras.Input((2048,)), keras.layers.Dense(2048)]), "adam", 8),
                                       ("adam_wide", 1536, lambda: keras.Sequential([keras.Input((1536,)), keras.layers.Dense(1536)]), "adam", 16),
                                       ("relu", 128, lambda: stack(128, 16), "adam", 8192),
                                       ("relu_wide", 256, lambda: stack(256, 8), "adam", 4096),
                                       ("relu_sgd", 128, lambda: stack(128, 16), "sgd", 8192)]:
            net = build()
            net.compile(keras.optimizers.get(opt), "mse")
            x, y = tf.ones((batch, width)), tf.ones((batch, width))
            out[name] = measure_training_step(net, x, y)["total"] / kit.estimate_memory(net, batch_size=batch, optimizer=opt).peak
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    r = last_json(proc)
    assert 0.8 <= r["sgd"] <= 1.2, r
    assert 1.2 < r["adam"] < 2.0 and 1.2 < r["adam_wide"] < 2.0, r      # 1 to 3 weight-sized temporaries
    assert r["relu"] < 0.8 and r["relu_sgd"] < 0.8, r
    # Fewer, wider pairs: still too high, as the notebook says. 0.68-0.91 measured (0.91 in CI, and up to 0.82
    # here with 8 or 16 threads): the share moves with how many threads run the step, the verdict does not.
    assert r["relu_wide"] < 1.0, r


@pytest.mark.timing      # shares of measured time: run alone, after the parallel tests (`make unit`)
@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_micro_batches_shrink_the_idle_share_on_simulated_devices(family):
    """Notebook 03 section 5, the verdicts it prints: one micro-batch leaves the devices idle half the time, as
    (S-1)/(M+S-1) says, and more micro-batches leave them idle less (the median of five recordings each), with
    stages of two widths and depths; the same work keeps the devices busy longer as 8
    overlapping micro-batches than in one piece (the prose's reason the share can fall below the formula). Not
    tested, because the notebook does not claim it: that the shares track the formula (they land on both sides
    of it, 8 micro-batches from 8% to 29% against 11% in the runs of issue 44) or any speed-up."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=2)
        import keras, tensorflow as tf
        d1, d2 = kit.device_names(2)
        out = {}
        for width, depth in ((512, 4), (768, 3)):
            with tf.device(d1):
                s1 = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, activation="relu")
                                                                 for _ in range(depth)])
            with tf.device(d2):
                s2 = keras.Sequential([keras.Input((width,))] + [keras.layers.Dense(width, activation="relu")
                                                                 for _ in range(depth)])
            batch = tf.ones((1024, width))
            def pipelined(m):
                @tf.function
                def step(x):
                    outs, l1, l2 = [], [], []
                    for chunk in tf.split(x, m):
                        with tf.device(d1), tf.control_dependencies(l1):
                            h = s1(chunk)
                        with tf.device(d2), tf.control_dependencies(l2):
                            o = s2(h)
                        l1, l2 = [h], [o]
                        outs.append(o)
                    return tf.concat(outs, axis=0)
                return step
            shares, busy = [], []
            for m in (1, 2, 4, 8):
                step = pipelined(m)
                step(batch)
                runs = []
                for _ in range(5):
                    with kit.device_activity([d1, d2]) as a:
                        step(batch).numpy()
                    runs.append((a.idle_fraction(), sum(a.busy.values())))
                share, seconds = sorted(runs)[2]
                shares.append(share)
                busy.append(seconds)
            out[f"{width}x{depth}"] = {"shares": shares, "busy": busy}
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    from gputrain_kit.pipeline import bubble_fraction

    for name, got in last_json(proc).items():
        shares, busy = got["shares"], got["busy"]
        assert abs(shares[0] - bubble_fraction(2, 1)) < 0.05, (name, shares)
        # fewer idle with 2, 4 or 8 micro-batches than with 1, and with 8 than with 2; not 4 against 8: with two
        # busy loops on the cores the median of five swapped them in 2 of 10 runs of this test (0.169, 0.182)
        assert max(shares[1:]) < shares[0] and shares[3] < shares[1], (name, shares)
        assert busy[3] > busy[0], (name, busy)


@pytest.mark.parametrize("family", ["onednn", "eigen"])
def test_cpu_convolution_workspaces_are_left_out_of_the_estimate(family):
    """Notebook 03 section 4: under Eigen, convolutions take working buffers of tens of MB that the estimate does
    not count: some 15 MB beyond it for an 8x8 one-channel image through one Conv2D(8) at batch 64, some 30 or 65 MB
    (from run to run of the same script: 31 and 65 MB both seen on one Zen 3 CPU) for a 16x16 RGB image through
    two Conv2D(16) + BatchNormalization at batch 32 (many times their few-MB estimates);
    steps estimated at about 60 MB and more (a 28x28 one-channel Conv2D(32) at batch 128, 32x32 RGB through
    Conv2D(32) and Conv2D(64) at batch 64) measure at most about 1.5x theirs under Eigen (the 28x28 one 0.98x and
    1.30x in two runs on one CPU), and every one of them under oneDNN stays near or below its estimate."""
    proc = run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=1)
        import keras, tensorflow as tf
        from gputrain_kit.measure import measure_training_step
        def cnn(side, channels, filters, batch):
            layers = [keras.Input((side, side, channels))]
            for f in filters:
                layers += [keras.layers.Conv2D(f, 3, padding="same"), keras.layers.BatchNormalization(),
                           keras.layers.ReLU()]
            m = keras.Sequential(layers + [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            x, y = tf.random.uniform((batch, side, side, channels)), tf.zeros((batch,), tf.int32)
            measured = measure_training_step(m, x, y)["total"]
            return measured / 1e6, kit.estimate_memory(m, batch_size=batch, optimizer="adam").peak / 1e6
        print(json.dumps({"tiny": cnn(8, 1, [8], 64), "small": cnn(16, 3, [16, 16], 32),
                          "digits": cnn(28, 1, [32], 128), "cnn": cnn(32, 3, [32, 64], 64)}))
    """, env={"TF_ENABLE_ONEDNN_OPTS": "1" if family == "onednn" else "0"})
    r = {name: (measured, estimated, measured / estimated) for name, (measured, estimated) in last_json(proc).items()}
    assert r["tiny"][1] < 2 and r["small"][1] < 10, r                   # estimated at a few MB
    assert r["digits"][1] > 55 and r["cnn"][1] > 55, r                  # estimated at about 60 MB and more
    if family == "eigen":
        assert r["tiny"][2] > 10 and r["small"][2] > 5, r               # many times the estimate
        assert 8 < r["tiny"][0] - r["tiny"][1] < 30, r                  # "some 15 MB beyond"
        assert 25 < r["small"][0] - r["small"][1] < 90, r               # "some 30 or 65 MB": 31 or 65 seen on one CPU
        assert 0.75 < r["digits"][2] < 1.5 and r["cnn"][2] < 1.5, r     # "at most about 1.5x": 0.98-1.30 seen
    else:
        assert r["tiny"][2] < 1.25 and r["small"][2] < 1.25, r
        assert 0.75 < r["digits"][2] < 1.25 and r["cnn"][2] < 1.25, r
    prose = " ".join(_nb03_prose().split())
    assert "on a CPU, TensorFlow's portable Eigen convolutions, the kernels of `TF_ENABLE_ONEDNN_OPTS=0`, take " \
           "working buffers of tens of MB" in prose
    assert "some 15 MB beyond the estimate for an 8x8 one-channel image through one `Conv2D(8)` at batch 64, some " \
           "30 or 65 MB (it changes from run to run) for a 16x16 RGB image through two `Conv2D(16)` with " \
           "BatchNormalization at batch 32" in prose
    assert "while steps estimated at about 60 MB and more measure at most about 1.5 times theirs under Eigen (the " \
           "buffers vary from run to run), and every step under oneDNN's kernels stays near or below its estimate" \
        in prose
