"""Notebook 09's claims about layouts and the kind of parallelism they give (Keras 3 on JAX, 8 simulated CPU
devices, fresh processes): a mesh axis a layout never names gives copies of the same piece; an uncommitted
array is placed by jit; section 3's layout is tensor parallelism (activations move, weights never) and
`("batch", None)` is FSDP (every kernel gathered whole), with the Scaling Book's cost read from XLA's step;
a reloaded Sequential's layers are built outside the model's name scope."""
from __future__ import annotations

import inspect
import json
from pathlib import Path

from conftest import last_json, run_python
from support import JAX_MODELS

HEAD = '''
import json, math, gputrain_kit as kit
kit.setup(devices=8, backend="jax")
import jax, keras, numpy as np
from keras import distribution

''' + JAX_MODELS + '''

devices = distribution.list_devices()
mesh8 = distribution.DeviceMesh((8,), ["batch"], devices)
mesh24 = distribution.DeviceMesh((2, 4), ["batch", "model"], devices)
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 256)).astype("float32"); y = rng.integers(0, 16, 1024)
loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
'''


def _run(body: str):
    return last_json(run_python(HEAD + body))


def test_an_unnamed_mesh_axis_gives_copies_of_the_same_piece_not_the_whole():
    """(None, 'model') on a 2 x 4 mesh: cpu:0 and cpu:4 hold the same quarter [:, 0:128]; ('batch', None): the 4
    devices of a 'batch' row hold the same half of the rows. No device holds the whole array."""
    out = _run('''
def pieces(axes, shape):
    array = jax.device_put(np.zeros(shape, "float32"), distribution.TensorLayout(axes, mesh24).backend_layout)
    return {s.device.id: [[sl.start, sl.stop] for sl in s.index] for s in array.addressable_shards}, \\
        sorted({s.data.shape for s in array.addressable_shards})
print(json.dumps([pieces((None, "model"), (256, 512)), pieces(("batch", None), (256, 512))]))
''')
    (columns, column_shapes), (rows, row_shapes) = out
    assert columns["0"] == columns["4"] == [[None, None], [0, 128]] and columns["3"] == columns["7"] == [[None, None], [384, 512]]
    assert column_shapes == [[256, 128]] and row_shapes == [[128, 512]]
    assert rows["0"] == rows["1"] == rows["2"] == rows["3"] == [[0, 128], [None, None]] and rows["4"][0] == [128, 256]


def test_an_uncommitted_array_is_made_on_device_0_and_jit_replicates_it():
    out = _run('''
w = jax.numpy.ones((256, 16))
batch = jax.device_put(x[:256], distribution.DataParallel(device_mesh=mesh8).get_data_layout((256, 256)).backend_layout)
grad = jax.jit(jax.grad(lambda w, xb: jax.numpy.mean((xb @ w) ** 2)))
compiled = grad.lower(w, batch).compile()
print(json.dumps([[f"{d.platform}:{d.id}" for d in w.devices()], w.committed,
                  compiled.input_shardings[0][0].is_fully_replicated, compiled.input_shardings[0][1].is_fully_replicated]))
''')
    assert out == [["cpu:0"], False, True, False]


def test_tensor_parallelism_moves_activations_and_fsdp_moves_weights_at_the_scaling_book_cost():
    """Section 4: the same MLP, kernels (None, 'model') on 2 x 4 and ('batch', None) on 8. Bytes per device from
    the shards; the collectives of Keras's own train_step compiled by XLA (Adam, global batch 512 and 1024)."""
    out = _run('''
C = kit.collectives
tp_map = distribution.LayoutMap(mesh24); tp_map["(.*/)?d[0-9]+/kernel"] = (None, "model")
fs_map = distribution.LayoutMap(mesh8); fs_map["(.*/)?d[0-9]+/kernel"] = ("batch", None)
res = {}
rows = {"tp": 1024 // 2, "fsdp": 1024 // 8}          # samples per slice of the batch axis (2 and 8 devices)
for name, layouts in (("tp", tp_map), ("fsdp", fs_map)):
    scheme = distribution.ModelParallel(layout_map=layouts, batch_dim_name="batch")
    with scheme.scope():
        model = mlp(); model.compile(optimizer="adam", loss=loss)
        trained = model.fit(x, y, batch_size=256, epochs=1, verbose=0).history["loss"]
        steps = {b: C.read_collectives(C.train_step_text(model, x[:b], y[:b])) for b in (512, 1024)}
    kernels = sum(math.prod(v.shape) * 4 for v in model.weights if v.path.endswith("kernel"))
    full = sum(math.prod(v.shape) * 4 for v in model.weights)
    step = steps[1024]
    res[name] = dict(
        trains=bool(np.isfinite(trained).all()), held=sorted(set(kit.sharding.bytes_per_device(model).values())),
        kernels=kernels, full=full,
        weight_gathers=[c.array_bytes for c in step if c.kind == "all-gather" and c.of_input],
        activation=[[c.kind, c.group, c.cost_bytes] for c in step      # computed, a row per sample of a slice
                    if not c.of_input and any(len(a) == 2 and a[0] == rows[name] for a in c.arrays)],
        kinds=sorted(step.by_kind()), cost=step.cost_bytes, growth=step.cost_bytes / steps[512].cost_bytes,
        by_kind={k: [v['count'], v['cost']] for k, v in step.by_kind().items()})
print(json.dumps(res))
''')
    tp, fsdp = out["tp"], out["fsdp"]
    assert tp["trains"] and fsdp["trains"]
    assert tp["held"] == [tp["full"] - tp["kernels"] * 3 // 4] and fsdp["held"] == [fsdp["full"] - fsdp["kernels"] * 7 // 8]
    assert tp["weight_gathers"] == []                                      # tensor parallelism never moves a weight
    assert sum(fsdp["weight_gathers"]) == fsdp["kernels"] and len(fsdp["weight_gathers"]) == 3   # FSDP: each, once
    a = 512 * 512 * 4                                                       # one activation: half the batch x 512
    assert sum(cost for _, _, cost in tp["activation"]) == 8 * a and {g for _, g, _ in tp["activation"]} == {4}
    assert fsdp["activation"] == []
    bias = fsdp["full"] - fsdp["kernels"]
    assert abs(fsdp["cost"] / (3 * fsdp["kernels"] + 2 * bias) - 1) < 1e-4     # the Scaling Book's 3V (+2V whole)
    # the totals match for two reasons that cancel (a review found "(the same cost)" said of the all-reduce alone):
    # XLA gathers each kernel once (3, not the book's 6) and all-reduces every gradient (2V) where the book
    # reduce-scatters the kernels' (V)
    (gathers, gather_cost), (reduces, reduce_cost) = fsdp["by_kind"]["all-gather"], fsdp["by_kind"]["all-reduce"]
    assert gathers == 3 and reduces == 1 and "reduce-scatter" not in fsdp["by_kind"]
    saved, spent = 2 * fsdp["kernels"] - gather_cost, reduce_cost - (fsdp["kernels"] + 2 * bias)
    assert saved == fsdp["kernels"] and abs(spent / saved - 1) < 1e-4
    assert abs(reduce_cost / (2 * fsdp["full"]) - 1) < 1e-4
    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "09_keras_distribution.ipynb").read_text())
    code = " ".join("".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "code")
    assert "match only because the two cancel" in code
    assert "(the same cost)" not in code
    assert fsdp["growth"] == 1.0 and 1.8 < tp["growth"] < 2.3               # weights vs activations
    assert set(fsdp["kinds"]) <= {"all-gather", "all-reduce", "reduce-scatter"}
    at_1024 = tp["cost"] / fsdp["cost"]
    at_512 = (tp["cost"] / tp["growth"]) / (fsdp["cost"] / fsdp["growth"])
    assert 1.7 < at_1024 < 2.1 and 0.8 < at_512 < 1.1          # "about twice at 1024; at 512, about the same"


def test_train_step_text_jits_the_step_as_keras_fit_does():
    """The helper mirrors Keras's JAX trainer: train_step jitted with the state's shardings as out_shardings when a
    distribution is active (make_train_function)."""
    from keras.src.backend.jax import trainer

    source = inspect.getsource(trainer.JAXTrainer.make_train_function)
    assert "out_shardings = (None, state_shardings)" in source and "self.train_step" in source
    assert "_get_state_sharding_spec" in source and "distribution_lib.distribution() is not None" in source


def test_a_reloaded_sequential_builds_its_layers_outside_the_model_scope(tmp_path):
    """load_model deserializes each layer with its build_config, which builds it at once (serialization_lib
    deserialize_keras_object), outside the Sequential's name scope: 'd1/kernel', not 'mlp/d1/kernel'."""
    path = str(tmp_path / "mlp.keras")
    out = _run(f'''
model = mlp()
config = keras.saving.serialize_keras_object(model.get_layer("d1"))
alone = keras.saving.deserialize_keras_object(config)
model.save({path!r})
back = keras.models.load_model({path!r})
print(json.dumps(["build_config" in config, alone.built, alone.kernel.path, model.weights[0].path, back.weights[0].path]))
''')
    assert out == [True, True, "d1/kernel", "mlp/d1/kernel", "d1/kernel"]
    from keras.src.saving import serialization_lib

    source = inspect.getsource(serialization_lib.deserialize_keras_object)
    assert "instance.build_from_config(build_config)" in source
