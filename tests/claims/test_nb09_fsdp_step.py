"""Notebook 09, section 4 (review of notebooks 08/09): FSDP divides what a device holds between steps by about 8,
but XLA's compiled step (which holds the full gradients twice on every device) needs only 2.1x less (compiled as fit compiles it, the state donated): the
notebook's table and summary quote that number."""
from __future__ import annotations


def test_fsdp_divides_the_held_state_by_8_but_not_the_compiled_step():
    from conftest import last_json, run_python

    out = last_json(run_python("""
        import json, gputrain_kit as kit
        kit.setup(devices=8, backend="jax")
        import numpy as np, keras
        from keras import distribution
        mesh = distribution.DeviceMesh(shape=(8,), axis_names=["batch"], devices=distribution.list_devices())
        def mlp():
            return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512, activation="relu", name="d1"),
                                     keras.layers.Dense(512, activation="relu", name="d2"),
                                     keras.layers.Dense(16, name="d3")], name="mlp")
        rng = np.random.default_rng(0)
        x, y = rng.normal(size=(1024, 256)).astype("float32"), rng.integers(0, 16, 1024)
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        fsdp_map = distribution.LayoutMap(mesh)
        fsdp_map["(.*/)?d[0-9]+/kernel"] = ("batch", None)
        out = {}
        for name, scheme in (("dp", distribution.DataParallel(device_mesh=mesh)),
                             ("fsdp", distribution.ModelParallel(layout_map=fsdp_map, batch_dim_name="batch"))):
            with scheme.scope():
                model = mlp()
                model.compile(optimizer="adam", loss=loss)
                step = kit.collectives.train_step_memory(model, x, y)       # builds the optimizer, as in the notebook
                out[name] = {"held": kit.sharding.bytes_per_device(model, include_optimizer=True)["cpu:0"], **step,
                             "gradients": sum(int(np.prod(v.shape)) * 4 for v in model.trainable_variables)}
        print(json.dumps(out))
    """, env={"CUDA_VISIBLE_DEVICES": ""}))
    dp, fsdp = out["dp"], out["fsdp"]
    assert 7.5 < dp["held"] / fsdp["held"] < 8.1, out
    assert abs(fsdp["temporaries"] / dp["temporaries"] - 1) < 0.1, out
    for m in (dp, fsdp):    # the full gradients twice (as computed, as all-reduced): the gathered kernels reuse space
        assert abs(m["temporaries"] / (2 * m["gradients"]) - 1) < 0.05, out
    assert 1.2 < dp["step"] / fsdp["step"] < 4, out                   # far from 8x
    # what the notebook quotes, in its table (section 6) and summary: 7.86x less held, the step only 2.1x less
    import json
    from pathlib import Path

    step_ratio = f"{dp['step'] / fsdp['step']:.1f}"
    assert step_ratio == "2.1", out
    cells = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "09_keras_distribution.ipynb").read_text())
    prose = " ".join(" ".join("".join(c["source"]) for c in cells["cells"] if c["cell_type"] == "markdown").split())
    # said with its limits (issue 44, fifth read): this compiler, this batch (a review measured 1.13x at 16384)
    assert f"the CPU compiler's step at batch 1024 only {step_ratio}x less (section 4)" in prose
    assert "the CPU compiler's step at batch 1024, which holds the full gradients twice" in prose
    assert f"needed only {step_ratio} times less" in prose and "far less" not in prose
    assert "holds the full gradients twice" in prose and "outweigh" not in prose
    assert "the larger the model against the batch, the more of the peak" not in prose
    assert dp["step"] >= dp["arguments"] + dp["temporaries"]
    # donated as fit donates it: the new state reuses the old one's buffers, so no output comes on top
    for m in (dp, fsdp):    # only the loss and the metrics' values come on top (bytes), not a second state
        assert 0 <= m["step"] - m["arguments"] - m["temporaries"] < 0.01 * m["step"], out
