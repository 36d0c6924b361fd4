"""Every TensorFlow behaviour notebook 01 shows, checked on the installed versions."""
from __future__ import annotations

import pytest

from gputrain_kit import check, counting, processes
from gputrain_kit.visibility import measured_numbering
from conftest import last_json, nvidia_smi_gpus, run_python


#: Section 6 of notebook 01 ("GPU only"): these claims can only be checked on a GPU machine (conftest skips
#: them elsewhere, with the reason).
gpu_only = pytest.mark.gpu


def test_no_strategy_computes_on_device_0_and_mirrored_on_every_device():
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=4)
        import tensorflow as tf, keras
        from gputrain_kit.placement import variable_devices, run_on_replicas, short_device
        (x, y), _ = k.data.digits()
        def build():
            m = keras.Sequential([keras.Input((64,)), keras.layers.Dense(8), keras.layers.Dense(10)])
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            return m
        plain = build()
        plain.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0)
        f = tf.function(lambda t: plain(t, training=False))
        graph = f.get_concrete_function(tf.TensorSpec((None, 64), tf.float32)).graph
        s = tf.distribute.MirroredStrategy(k.device_names())
        with s.scope():
            mirrored = build()
        mirrored.fit(x[:128], y[:128], batch_size=64, epochs=1, verbose=0)
        batch = next(iter(s.experimental_distribute_dataset(tf.data.Dataset.from_tensor_slices(x).batch(64))))
        print(json.dumps({
            "plain_vars": variable_devices(plain), "plain_replicas": plain.distribute_strategy.num_replicas_in_sync,
            "traced": sorted({op.device for op in graph.get_operations()}),
            "eager": short_device(plain(x[:8], training=False).device),
            "mirrored_vars": variable_devices(mirrored, s),
            "per_replica": run_on_replicas(s, lambda t: mirrored(t, training=False), batch)}))
    """)
    out = last_json(proc)
    assert all(d == ["CPU:0"] for d in out["plain_vars"].values())
    assert out["plain_replicas"] == 1 and out["traced"] == [""] and out["eager"] == "CPU:0"
    assert all(d == ["CPU:0", "CPU:1", "CPU:2", "CPU:3"] for d in out["mirrored_vars"].values())
    assert out["per_replica"] == [[f"CPU:{i}", [16, 10]] for i in range(4)]


def test_visibility_and_memory_growth_cannot_change_after_initialisation():
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=2)
        import tensorflow as tf
        errors = {}
        try:
            tf.config.set_visible_devices([], "CPU")
        except RuntimeError as e:
            errors["visible"] = str(e)
        try:
            tf.config.experimental.set_memory_growth(tf.config.list_physical_devices("CPU")[0], True)
        except ValueError as e:
            errors["growth"] = str(e)
        print(json.dumps(errors))
    """)
    out = last_json(proc)
    assert out["visible"] == "Visible devices cannot be modified after being initialized"
    assert out["growth"] == "Cannot set memory growth on device when virtual devices configured"


@pytest.mark.parametrize("fork", ["1", "0"], ids=["forked", "fresh"])
def test_which_calls_lock_the_device_configuration(fork, monkeypatch):
    """The same answers whether each probe runs in a child forked from a process that imported TensorFlow
    (Linux, notebook 01) or in a fresh interpreter."""
    monkeypatch.setenv("GPUTRAIN_FORK", fork)
    probes = {p.call: p for p in counting.probe_locks()}
    assert not probes["tf.config.list_physical_devices()"].locked
    assert not probes["device_lib.list_local_devices()"].locked
    for call in ("tf.config.list_logical_devices()", "a first op: tf.constant(1.0) + 1"):
        assert probes[call].split_error == "Virtual devices cannot be modified after being initialized"
        assert probes[call].visible_error == "Visible devices cannot be modified after being initialized"
    with pytest.raises(ValueError, match="unknown call"):
        counting.probe_locks(["nvidia-smi"])


def test_children_see_their_own_cuda_visible_devices():
    seen = counting.gpus_seen([None, "0", ""])
    assert [v for v, _ in seen] == [None, "0", ""]
    gpus_unset = seen[0][1]
    assert seen[2][1] == 0, "an empty CUDA_VISIBLE_DEVICES hides every GPU"
    assert seen[1][1] == min(gpus_unset, 1)
    late = counting.late_visibility_change("")
    assert late["before"] == late["after"] == gpus_unset, "setting the variable after init changes nothing"


def test_run_child_reports_failures_clearly():
    with pytest.raises(processes.ChildError, match="ZeroDivisionError"):
        processes.run_child("1 / 0")
    with pytest.raises(ValueError, match="environment values are strings"):
        processes.run_child("pass", env={"X": 1})
    assert processes.run_child("report(a=1)", env={"GPUTRAIN_X": None}).values == {"a": 1}


def test_nb01_exercise_checks(capsys):
    assert check.nb01_physical_behind(5) and not check.nb01_physical_behind(3)
    # with 3,1 the right answer was also the naive one (no renumbering): 3,5 tells them apart
    naive = check.nb01_physical_behind(1)
    assert not naive and "numbers the visible GPUs anew" in repr(naive)
    assert not check.nb01_physical_behind(True)
    assert check.nb01_count_with_garbage(0) and not check.nb01_count_with_garbage(2)
    right = check.nb01_locking_call("yes")                       # probed in a fresh process, as section 4 does
    assert right and "probed just now in a fresh process: a Keras model built" in repr(right)
    assert "LOCKS it" in repr(right) and not check.nb01_locking_call(False)
    assert "Not answered" in repr(check.nb01_locking_call(...))
    assert "Give True or False" in repr(check.nb01_locking_call("maybe"))
    # the probe takes 5-10 s: it says so before it starts, once per probe, and not when there is nothing to probe
    said = capsys.readouterr().out.splitlines()
    assert said == ["probing 1 call, each first thing in a process of its own (5 to 10 seconds)..."] * 2, said


def test_building_a_keras_model_locks_the_device_configuration():
    """Notebook 01 exercise 3: building a model (its variables) starts the devices, as a first op does."""
    proc = run_python("""
        import json, tensorflow as tf, keras
        keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
            print(json.dumps("open"))
        except RuntimeError as err:
            print(json.dumps(str(err)))
    """)
    assert "cannot be modified after being initialized" in last_json(proc)


@pytest.mark.parametrize("onednn", ["1", "0"])
def test_simulated_devices_share_one_allocator_with_memory_statistics(onednn):
    """Section 5: get_memory_info works on CPUs (its docstring says it raises there) under both CPU kernel
    families (setup() asks for the BFC allocator), counts a tensor's bytes, keeps the peak until
    reset_memory_stats; every logical CPU reports the same allocator."""
    proc = run_python("""
        import json, gputrain_kit as k
        k.setup(devices=4)
        import tensorflow as tf
        mem = tf.config.experimental.get_memory_info
        names = k.device_names()
        tf.config.experimental.reset_memory_stats(names[0])
        start = mem(names[0])
        with tf.device(names[1]):
            block = tf.zeros((1024, 1024))
        held = [mem(n) for n in names]
        device = block.device
        del block
        freed = mem(names[0])
        tf.config.experimental.reset_memory_stats(names[1])
        reset = mem(names[0])
        print(json.dumps({"start": start, "held": held, "freed": freed, "reset": reset, "device": device,
                          "doc": "only supports GPU and TPU" in tf.config.experimental.get_memory_info.__doc__}))
    """, env={"TF_ENABLE_ONEDNN_OPTS": onednn})
    out = last_json(proc)
    size = 1024 * 1024 * 4
    assert out["doc"] and out["device"].endswith("CPU:1")
    assert out["start"]["peak"] == out["start"]["current"]                          # reset: peak = current
    assert all(h == out["held"][0] for h in out["held"])                            # one allocator for all
    assert out["held"][0]["current"] - out["start"]["current"] == size
    assert size <= out["held"][0]["peak"] - out["start"]["current"] <= size + 1024   # and a scalar or two
    assert out["freed"]["current"] == out["start"]["current"] and out["freed"]["peak"] == out["held"][0]["peak"]
    assert out["reset"]["peak"] == out["reset"]["current"] == out["start"]["current"]   # reset via CPU:1


@gpu_only
def test_gpu_cuda_device_order_pci_bus_id_is_nvidia_smis_order():
    """Section 6.4: with CUDA_DEVICE_ORDER=PCI_BUS_ID, /GPU:i is nvidia-smi's GPU i; unset, the same boards
    appear in some order (fastest first)."""
    by_bus = measured_numbering("PCI_BUS_ID")
    assert [index for _, index, _ in by_bus] == list(range(nvidia_smi_gpus()))
    fastest = measured_numbering(None)
    assert sorted(index for _, index, _ in fastest) == list(range(nvidia_smi_gpus()))


@gpu_only
def test_gpu_default_init_reserves_most_memory_and_growth_does_not():
    """Section 6.2: a first op with default settings holds most of GPU 0's memory; device_lib.list_local_devices()
    (the 2018 warning) and a first op with TF_FORCE_GPU_ALLOW_GROWTH=true far less (an H100: 79,349 vs 529 and
    531 MiB of 81,559)."""
    code = """
        import subprocess, tensorflow as tf
        {call}
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, check=True).stdout
        report(used=[int(line.split(",")[0]) for line in out.strip().splitlines()],
               total=[int(line.split(",")[1]) for line in out.strip().splitlines()])
    """
    op = "tf.constant(1.0) + 1"
    devlib = "from tensorflow.python.client import device_lib; device_lib.list_local_devices()"
    default = processes.run_child(code.format(call=op), env={"TF_FORCE_GPU_ALLOW_GROWTH": None}).values
    listing = processes.run_child(code.format(call=devlib), env={"TF_FORCE_GPU_ALLOW_GROWTH": None}).values
    growth = processes.run_child(code.format(call=op), env={"TF_FORCE_GPU_ALLOW_GROWTH": "true"}).values
    assert default["used"][0] > 0.5 * default["total"][0]
    assert listing["used"][0] < default["used"][0] / 2        # TF 2.21: a CUDA context, not the allocator's share
    assert growth["used"][0] < default["used"][0] / 2


@gpu_only
def test_gpu_kit_setup_turns_memory_growth_on():
    """Section 6.5: kit.setup() on real GPUs (enough of them, no memory_limit_mb) turns memory growth on, and
    TensorFloat-32 off (so GPU results compare with the CPU run; an H100 with it on differed by 4e-4)."""
    values = processes.run_child("""
        import gputrain_kit as kit
        report_ = kit.setup(devices=1)
        import tensorflow as tf
        gpu = tf.config.list_physical_devices("GPU")[0]
        report(mode=report_.mode, growth=tf.config.experimental.get_memory_growth(gpu),
               tf32=tf.config.experimental.tensor_float_32_execution_enabled(),
               noted=any("TensorFloat-32 off" in n for n in report_.notes))
    """).values
    assert values == {"mode": "gpu", "growth": True, "tf32": False, "noted": True}


@gpu_only
def test_gpu_plain_fit_uses_only_the_first_gpus_allocator():
    """Section 6.1: after a fit with no strategy, /GPU:0's peak is far above every other device's."""
    values = processes.run_child("""
        import gputrain_kit as kit
        kit.setup(devices=2)
        import tensorflow as tf
        (x, y), _ = kit.data.digits()
        kit.training.build_digits_model().fit(x, y, batch_size=64, epochs=1, verbose=0)
        report(peaks=[tf.config.experimental.get_memory_info(d)["peak"] for d in kit.device_names()])
    """).values
    first, *others = values["peaks"]
    assert first > 0 and all(other < first / 10 for other in others)


def test_memory_growth_before_logical_gpus_is_accepted_and_dropped():
    """Section 6.5: TensorFlow's own Python logic (tensorflow/python/eager/context.py), run on a fake GPU
    entry so no GPU is needed: growth after logical devices raises; growth before them is accepted,
    get_memory_growth still says True, but the GPU options handed to the runtime carry no growth.
    (Private API: this test pins the behaviour of the installed version.)"""
    proc = run_python("""
        import json
        import tensorflow as tf
        from tensorflow.python.eager import context

        def fresh():
            ctx = context.Context()
            ctx._initialize_physical_devices()
            gpu = context.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
            ctx._physical_devices.append(gpu)
            ctx._visible_device_list.append(gpu)
            ctx._memory_growth_map[gpu] = None
            return ctx, gpu

        two = [tf.config.LogicalDeviceConfiguration(memory_limit=512)] * 2
        out = {}
        ctx, gpu = fresh()
        ctx.set_memory_growth(gpu, True)
        out["growth_only"] = ctx._compute_gpu_options().allow_growth
        ctx.set_logical_device_configuration(gpu, two)
        options = ctx._compute_gpu_options()
        out["both"] = [options.allow_growth, list(options.experimental.virtual_devices[0].memory_limit_mb),
                       ctx.get_memory_growth(gpu)]
        ctx, gpu = fresh()
        ctx.set_logical_device_configuration(gpu, two)
        try:
            ctx.set_memory_growth(gpu, True)
        except ValueError as e:
            out["logical_first"] = str(e)
        print(json.dumps(out))
    """)
    out = last_json(proc)
    assert out["growth_only"] is True
    assert out["both"] == [False, [512.0, 512.0], True]
    assert out["logical_first"] == "Cannot set memory growth on device when virtual devices configured"


def test_memory_growth_is_refused_on_a_cpu_split_or_not():
    """Notebook 01, section 5: ``set_memory_growth`` (tensorflow/python/eager/context.py) checks for a split
    first, then refuses every non-GPU device: a split CPU gets the first message, a CPU that is not split
    (a fresh process, as the notebook starts it with ``run_child``) the second.
    One run, in this process's kernel family: the refusal is Python in context.py, and strict nbval compares the
    notebook's instance of it under both families."""
    split = last_json(run_python("""
        import json, gputrain_kit as k
        k.setup(devices=2)
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        try:
            tf.config.experimental.set_memory_growth(cpu, True); error = None
        except ValueError as e:
            error = str(e)
        print(json.dumps([len(tf.config.get_logical_device_configuration(cpu)), error]))
    """))
    assert split == [2, "Cannot set memory growth on device when virtual devices configured"]
    unsplit = processes.run_child("""
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
split = tf.config.get_logical_device_configuration(cpu)
try:
    tf.config.experimental.set_memory_growth(cpu, True)
    send_back(split=split, error=None)
except ValueError as err:
    send_back(split=split, error=f"{type(err).__name__}: {err}")
""", env={"CUDA_VISIBLE_DEVICES": ""}).values
    assert unsplit == {"split": None, "error": "ValueError: Cannot set memory growth on non-GPU and non-Pluggable devices"}


def _notebook_cell(cell_id: str) -> str:
    import json
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[2] / "notebooks" / "01_cuda_visible_devices.ipynb"
    return next("".join(c["source"]) for c in json.loads(notebook.read_text())["cells"] if c.get("id") == cell_id)


def test_the_growth_before_split_cell_prints_the_line_the_h100_record_shows(capsys):
    """Notebook 01, 6.5: the GPU cell's line and the recorded one (``gpu_record``'s growth_before_split) are the
    same line: the cell run with the recorded values in place of its child process prints the record's line."""
    from types import SimpleNamespace

    from gputrain_kit import gpu_record

    facts = gpu_record.RECORD["facts"]["growth_before_split"]
    used, total = facts["after"][0]
    # the recorded GPU held nothing before the process started: all it holds, the process took
    child = SimpleNamespace(values={"says": facts["says_growth"], "took": used, "used": used, "total": total})
    fake_kit = SimpleNamespace(processes=SimpleNamespace(run_child=lambda code, env=None: child))
    exec(_notebook_cell("1c541d14"), {"GPU": True, "kit": fake_kit})
    printed = capsys.readouterr().out.strip()
    assert printed == gpu_record.lines("growth_before_split")[0]
    assert "On a GPU server it prints one line, of the same form as the H100 record" in " ".join(
        _notebook_cell("51db955c").split())
    # and the cell refuses to call dropped growth that held: the CUDA context alone (529 MiB) is no 1024 MiB split
    child.values.update(took=531, used=531)
    exec(_notebook_cell("1c541d14"), {"GPU": True, "kit": fake_kit})
    assert capsys.readouterr().out.strip().endswith("(two 1024 MiB logical GPUs: the growth held)")


def test_a_second_default_mirrored_strategy_collides_and_is_explained(_tries: int = 3):
    """Notebook 01 builds its own MirroredStrategy (default CollectiveAllReduce). Another model under the same
    strategy trains, and so does one under a ReductionToOneDevice strategy; a second default strategy training a
    model of another size reuses the first one's collective keys and fails, and kit.explain says so (not
    BatchNormalization: the model has none)."""
    # a retry runs TensorFlow's ops on one inter-op thread: the failing all-reduce then reports before the
    # cancellation it causes on the other devices, which under load can reach Python first (below)
    serial = "" if _tries == 3 else "tf.config.threading.set_inter_op_parallelism_threads(1)"
    proc = run_python("""
        import json, gputrain_kit as k
        import tensorflow as tf, keras
        SERIAL
        k.setup(devices=4)
        (x, y), _ = k.data.digits()
        def build(widths):
            m = keras.Sequential([keras.Input((64,))] + [keras.layers.Dense(w) for w in widths])
            m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
            return m
        def fit(strategy, widths):
            with strategy.scope():
                m = build(widths)
            try:
                m.fit(x[:256], y[:256], batch_size=64, epochs=1, verbose=0)
                return "trains"
            except Exception as err:
                return {"error": type(err).__name__, "key": k.explain(err).key, "text": str(k.explain(err))}
        first = tf.distribute.MirroredStrategy(k.device_names())
        out = {"first": fit(first, [64, 10]), "same strategy, other model": fit(first, [32, 16, 10]),
               "ReductionToOneDevice": fit(k.training.strategy_for(4), [32, 16, 10]),
               "second default": fit(tf.distribute.MirroredStrategy(k.device_names()), [32, 16, 10])}
        print(json.dumps(out))
    """.replace("SERIAL", serial))
    out = last_json(proc)
    assert out["first"] == out["same strategy, other model"] == out["ReductionToOneDevice"] == "trains", out
    second = out["second default"]
    assert second != "trains", second
    said = " ".join(second["text"].split())
    if second["error"] == "CancelledError":   # a race under load: another device's cancellation reached Python first
        # ("Function was cancelled before it was started"): explained as the consequence it is, with the way to
        # the cause, and the collision itself is then checked again, on one inter-op thread
        assert second["key"] == "step-cancelled" and "consequence" in said
        assert "restart the kernel" in said and "collective-instance-collision" in said
        assert _tries > 1, "the cancellation won the race three times in a row"
        return test_a_second_default_mirrored_strategy_collides_and_is_explained(_tries - 1)
    assert second["key"] == "collective-instance-collision", second
    assert "BatchNormalization" not in said and "two models' gradient sizes" in said
    assert "ReductionToOneDevice" in said and "restart the kernel" in said


def test_notebook_01_says_where_variable_ops_run_and_prints_it():
    """Notebook 01, section 1: under a tf.device scope, TensorFlow runs the ops that read or update a variable where
    the variable lives (tests/unit/test_activity_scope.py pins this and the kit's inference to TensorFlow's partition
    graphs under both kernel families); the notebook says so where it introduces device_activity, prints the two
    sets of devices in the scoped cell, and the summary keeps the exception."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "notebooks" / "01_cuda_visible_devices.ipynb"
    cells = json.loads(path.read_text())["cells"]
    text = {c.get("id"): " ".join("".join(c["source"]).split()) for c in cells}
    assert "an op that reads or updates a variable runs where the variable lives, whatever the scope says" \
        in text["4a1ede17"]
    assert "as TensorFlow's placer chooses it" not in text["4a1ede17"]
    scoped = next(c for c in cells if c.get("id") == "b7c1a2d4")
    printed = "".join("".join(o.get("text", "")) for o in scoped["outputs"])
    assert "ops that read or update a variable ran on: CPU:0\n" in printed
    assert "every other op of the step ran on: CPU:3\n" in printed
    assert "reading or updating a variable runs where the variable lives" in text["6c45dbba"]
    assert "(about 5 seconds)" not in text["aa5bf539"] and "it prints a line when it starts" in text["aa5bf539"]
