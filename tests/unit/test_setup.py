"""gputrain_kit.setup / device_names / inventory, each in a fresh process (devices are per process)."""
from __future__ import annotations

import pytest

import gputrain_kit
from conftest import last_json, run_python


def test_cpu_split_gives_named_devices_and_a_working_strategy():
    proc = run_python("""
        import json, gputrain_kit as k
        r = k.setup(devices=3)
        import tensorflow as tf
        s = tf.distribute.MirroredStrategy(k.device_names(2))
        print(json.dumps({"mode": r.mode, "devices": list(r.devices), "simulated": r.simulated,
                          "repr": repr(r), "names": k.device_names(), "replicas": s.num_replicas_in_sync,
                          "same": k.setup(devices=3) is r}))
    """)
    out = last_json(proc)
    assert out["mode"] == "cpu" and out["simulated"]
    assert out["devices"] == out["names"] == [f"/device:CPU:{i}" for i in range(3)]
    assert out["replicas"] == 2
    assert out["same"], "a repeated setup() with the same arguments must return the same report"
    assert "3 simulated devices" in out["repr"] and "same CPU cores" in out["repr"]


def test_setup_is_quiet_on_stderr():
    """No C++ start-up chatter reaches file descriptor 2 (it would land in notebook outputs)."""
    proc = run_python("""
        import gputrain_kit as k
        k.setup(devices=2)
        import tensorflow as tf
        print(float(tf.reduce_sum(tf.ones(3))))
    """)
    assert proc.stdout.strip().endswith("3.0")
    assert proc.stderr == ""


def test_different_arguments_after_setup_raise_a_clear_error():
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=2)
        try:
            k.setup(devices=4)
        except k.SetupError as e:
            print(json.dumps({"msg": str(e)}))
    """)
    msg = last_json(proc)["msg"]
    assert "setup(devices=4)" in msg and "Restart the kernel" in msg and "setup(devices=2)" in msg


def test_setup_after_tensorflow_initialised_says_restart():
    proc = run_python("""
        import json, tensorflow as tf, gputrain_kit as k
        tf.constant(1.0) + 1  # the first op initialises the devices
        try:
            k.setup(devices=2)
        except k.SetupError as e:
            print(json.dumps({"msg": str(e), "cause": type(e.__cause__).__name__}))
    """)
    msg = last_json(proc)["msg"]
    assert "must run before TensorFlow initialises its devices" in msg and "Restart the kernel" in msg


def test_kind_gpu_without_gpu_is_a_clear_error():
    proc = run_python("""
        import json, gputrain_kit as k
        try:
            k.setup(devices=2, kind="gpu")
        except k.SetupError as e:
            print(json.dumps({"msg": str(e)}))
    """, env={"CUDA_VISIBLE_DEVICES": ""})
    msg = last_json(proc)["msg"]
    assert "no GPU is visible" in msg and "doctor" in msg and "kind='auto'" in msg


def test_kind_cpu_and_ignored_memory_limit_are_reported():
    proc = run_python("""
        import json, gputrain_kit as k
        r = k.setup(devices=2, kind="cpu", memory_limit_mb=512, seed=3)
        print(json.dumps({"mode": r.mode, "seed": r.seed, "repr": repr(r)}))
    """)
    out = last_json(proc)
    assert out["mode"] == "cpu" and out["seed"] == 3
    assert "memory_limit_mb applies to GPUs only" in out["repr"]


def test_seed_makes_random_numbers_and_training_reproducible():
    code = """
        import json, sys, gputrain_kit as k
        k.setup(devices=2, seed=int(sys.argv[1]) if len(sys.argv) > 1 else {seed})
        import numpy as np, tensorflow as tf, keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile("adam", "mse")
        model.fit(np.random.rand(32, 4), np.random.rand(32, 3), epochs=2, verbose=0, shuffle=True)
        print(json.dumps({{"np": float(np.random.rand()), "tf": float(tf.random.uniform(())),
                          "w": model.get_weights()[0].ravel().tolist()}}))
    """
    a, b, c = (last_json(run_python(code.format(seed=s))) for s in (0, 0, 1))
    assert a == b
    assert a["np"] != c["np"] and a["w"] != c["w"]


@pytest.mark.parametrize("kwargs, fragment", [
    ({"devices": 0}, "devices must be at least 1"),
    ({"devices": "2"}, "devices must be a whole number"),
    ({"devices": True}, "devices must be a whole number"),
    ({"devices": 2, "kind": "tpu"}, "kind must be one of"),
    ({"devices": 2, "memory_limit_mb": 10}, "memory_limit_mb must be at least 64"),
    ({"devices": 2, "seed": -1}, "seed must be at least 0"),
])
def test_bad_arguments_are_rejected_before_touching_tensorflow(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        gputrain_kit.setup(**kwargs)


def test_device_names_needs_setup_and_checks_n():
    if gputrain_kit.current() is None:
        with pytest.raises(gputrain_kit.SetupError, match="setup"):
            gputrain_kit.device_names()
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=2)
        errors = []
        for n in (3, 0, "1"):
            try:
                k.device_names(n)
            except ValueError as e:
                errors.append(str(e))
        print(json.dumps({"one": k.device_names(1), "errors": errors}))
    """)
    out = last_json(proc)
    assert out["one"] == ["/device:CPU:0"]
    assert "setup made only 2 device(s)" in out["errors"][0] and "setup(devices=3)" in out["errors"][0]
    assert len(out["errors"]) == 3


def test_inventory_does_not_initialise_devices():
    proc = run_python("""
        import json, gputrain_kit as k
        inv = k.inventory()
        before = inv.devices_initialised
        r = k.setup(devices=2)          # still possible: inventory() touched no device
        print(json.dumps({"before": before, "devices": list(r.devices), "types": [t for t, _ in inv.physical_devices],
                          "cvd": inv.cuda_visible_devices, "repr": repr(inv)}))
    """, env={"CUDA_VISIBLE_DEVICES": "1,2"})
    out = last_json(proc)
    assert out["before"] is False
    assert out["devices"] == ["/device:CPU:0", "/device:CPU:1"]
    assert "CPU" in out["types"] and out["cvd"] == "1,2"
    assert "CUDA_VISIBLE_DEVICES  '1,2'" in out["repr"]


def test_tensorflow_device_configuration_rules_the_course_relies_on():
    """COURSE.md facts: list_physical_devices leaves the configuration open; list_logical_devices
    (or any op) locks it; a second split then raises TensorFlow's RuntimeError."""
    proc = run_python("""
        import json, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 4)  # still allowed
        n = len(tf.config.list_logical_devices("CPU"))
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
            msg = None
        except RuntimeError as e:
            msg = str(e)
        print(json.dumps({"n": n, "msg": msg}))
    """)
    out = last_json(proc)
    assert out["n"] == 4
    assert out["msg"] == "Virtual devices cannot be modified after being initialized"
