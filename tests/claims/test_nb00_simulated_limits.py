"""Notebook 00, "Simulated devices: what they show and what they cannot": besides speed, simulated devices cannot
show each device's memory (one allocator for all logical CPUs), which op runs a reduce on GPUs (on CPUs every reduce
through ``reduce_to`` takes ReductionToOneDevice) and the GPU-only paths (NCCL; XLA's collective path needs every device to be a GPU).
Each is checked here against TensorFlow itself, and the notebook says so instead of "only NCCL is missing"."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, last_json, run_python

NB00 = ROOT / "notebooks" / "00_start_here.ipynb"

LIMITS = """
    import json, gputrain_kit as kit
    kit.setup(devices=2)
    import tensorflow as tf
    from tensorflow.python.distribute import values as values_lib

    cpu0, cpu1 = kit.device_names(2)
    mem = tf.config.experimental.get_memory_info
    start = {d: mem(d)["current"] for d in (cpu0, cpu1)}
    with tf.device(cpu1):
        block = tf.zeros((1024, 1024))                            # 4 MiB on CPU:1 only
    grown = {d[-5:]: (mem(d)["current"] - start[d]) / 2**20 for d in (cpu0, cpu1)}

    from support import reduce_dispatch_recorder
    OnDevice, Configured, ran = reduce_dispatch_recorder(tf)
    s = tf.distribute.MirroredStrategy([cpu0, cpu1], cross_device_ops=Configured())
    replicas = [OnDevice(d) for d in (cpu0, cpu1)]
    s.extended._reduce_to(tf.distribute.ReduceOp.SUM, values_lib.PerReplica(replicas),
                          values_lib.Mirrored(replicas), tf.distribute.experimental.CommunicationOptions())

    merge = {}
    def probe():                                                   # runs while tracing: no XLA compilation needed
        merge["cpu, in XLA"] = s.extended._use_merge_call()
        cpu_devices = s.extended._devices
        s.extended._devices = tuple(d.replace("CPU", "GPU") for d in cpu_devices)
        merge["gpu, in XLA"] = s.extended._use_merge_call()
        s.extended._devices = cpu_devices
        return tf.constant(0.0)
    tf.function(probe, jit_compile=True).get_concrete_function()
    s.extended._devices = tuple(d.replace("CPU", "GPU") for d in s.extended._devices)
    merge["gpu, no XLA"] = s.extended._use_merge_call()
    print(json.dumps({"grown": grown, "reduce back to both CPU replicas": ran, "merge": merge}))
"""


@pytest.mark.parametrize("family", ["1", "0"], ids=["onednn", "eigen"])
def test_what_simulated_devices_cannot_show_besides_speed(family):
    out = last_json(run_python(LIMITS, env={"TF_ENABLE_ONEDNN_OPTS": family}))
    # one allocator: a tensor on CPU:1 grows CPU:0's statistics by the same 4 MiB (notebook 01, section 5)
    assert sorted(out["grown"]) == ["CPU:0", "CPU:1"], out
    assert all(abs(mib - 4.0) < 0.01 for mib in out["grown"].values()), out
    # on CPUs even a reduce back to exactly the replicas' devices takes ReductionToOneDevice (the CPU rule), so the
    # GPU rule (destinations not exactly the replicas' devices) cannot show there (notebook 02, section 3)
    assert out["reduce back to both CPU replicas"] == ["ReductionToOneDevice"], out
    # the XLA path without merge_call (every reduction through the collective) only when all devices are GPUs
    assert out["merge"] == {"cpu, in XLA": True, "gpu, in XLA": False, "gpu, no XLA": True}, out


def test_notebook_00_lists_what_simulated_devices_cannot_show():
    sources = [" ".join("".join(c["source"]).split()) for c in json.loads(NB00.read_text())["cells"]]
    prose = " ".join(sources)
    assert "only the GPU-specific" not in prose                      # the old "only NCCL is missing"
    limits = next(s for s in sources if s.startswith("What they cannot show is, first, **speed**"))
    for item in ("**each device's memory**: the logical CPUs share one allocator",
                 "(01_cuda_visible_devices.ipynb#memory-statistics)",
                 "**which op runs a reduction**", "through `strategy.extended.reduce_to` (`strategy.reduce`, or "
                 "reading a per-replica variable)", "on CPUs every such reduce does, so that rule cannot show",
                 "`strategy.extended.batch_reduce_to`, behind every all-reduce, has no such rule",
                 "(02_data_parallel.ipynb#cross-device-reductions)",
                 "**GPU-only paths**", "refuses between logical GPUs of one card",
                 "only when all its devices are GPUs"):
        assert item in limits, item
    for notebook, anchor in (("01_cuda_visible_devices", "memory-statistics"),
                             ("02_data_parallel", "cross-device-reductions")):
        text = (ROOT / "notebooks" / f"{notebook}.ipynb").read_text()
        assert f'<a id=\\"{anchor}\\"></a>' in text, (notebook, anchor)
