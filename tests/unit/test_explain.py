"""kit.explain on errors the installed TensorFlow/Keras really raise (made here in a child process), and
on the documented GPU-only messages. The conv-net crashes come from test_batchnorm.py, the Keras 3 fit
under MultiWorkerMirroredStrategy from test_multiworker.py: both assert that explain knows them."""
from __future__ import annotations

import pytest

import gputrain_kit as kit
from gputrain_kit import explainer
from conftest import last_json, run_python

CHILD = """
    import json, os, tempfile, numpy as np, gputrain_kit as kit
    kit.setup(devices=4)
    import tensorflow as tf, keras
    errors = {}

    def catch(name, fn):
        try:
            fn()
            errors[name] = None
        except Exception as err:
            found = kit.explain(err)
            errors[name] = {"type": type(err).__name__, "text": str(err)[:3000], "key": found.key if found else None,
                            "explained": str(found) if found else None}

    # Keras 3 fit: a first step split unevenly over the replicas (62 over 4)
    def uneven():
        s = tf.distribute.MirroredStrategy(kit.device_names(4))
        with s.scope():
            m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
            m.compile("sgd", "mse")
        m.fit(np.zeros((62, 8)), np.zeros((62, 2)), batch_size=62, epochs=1, verbose=0)
    catch("uneven first step", uneven)

    ctx = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=4)
    catch("per-replica batch", lambda: ctx.get_per_replica_batch_size(30))
    cpu = tf.config.list_physical_devices("CPU")[0]
    catch("virtual devices after init",
          lambda: tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2))
    catch("visible devices after init", lambda: tf.config.set_visible_devices([], "CPU"))
    catch("memory growth with virtual devices", lambda: tf.config.experimental.set_memory_growth(cpu, True))

    folder = tempfile.mkdtemp()
    i = keras.Input((8,))
    keras.Model(i, keras.layers.Lambda(lambda q: q[:, :4])(i)).save(os.path.join(folder, "lambda.keras"))
    catch("Lambda refused by safe_mode", lambda: keras.models.load_model(os.path.join(folder, "lambda.keras")))

    wide = keras.Sequential([keras.Input((4,)), keras.layers.Dense(16), keras.layers.Dense(2)])
    narrow = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8), keras.layers.Dense(2)])
    wide.save_weights(os.path.join(folder, "wide.weights.h5"))
    catch("weights of another model", lambda: narrow.load_weights(os.path.join(folder, "wide.weights.h5")))
    catch("load_verified on another model", lambda: kit.load_verified(narrow, os.path.join(folder, "wide.weights.h5")))

    # two default strategies over different device counts in one process (last: it breaks collectives)
    def collision():
        for k in (4, 2):
            s = tf.distribute.MirroredStrategy(kit.device_names(k))
            with s.scope():
                m = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
                m.compile("sgd", "mse")
            m.fit(np.zeros((64, 8)), np.zeros((64, 2)), batch_size=16, epochs=1, verbose=0)
    catch("two default strategies", collision)

    try:                                           # explain_errors attaches the explanation as a note
        with kit.explain_errors():
            ctx.get_per_replica_batch_size(30)
    except ValueError as err:
        errors["note"] = getattr(err, "__notes__", [])
    try:                                           # an unknown error passes through untouched
        with kit.explain_errors():
            raise KeyError("something else")
    except KeyError as err:
        errors["unknown notes"] = getattr(err, "__notes__", [])
    print(json.dumps(errors))
"""

EXPECTED = {
    "uneven first step": "uneven-replica-batches",
    "per-replica batch": "per-replica-batch",
    "virtual devices after init": "devices-fixed",
    "visible devices after init": "devices-fixed",
    "memory growth with virtual devices": "devices-fixed",
    "Lambda refused by safe_mode": "lambda-safe-mode",
    "weights of another model": "weights-mismatch",
    "two default strategies": "collective-group-collision",
}


@pytest.fixture(scope="module")
def real_errors():
    return last_json(run_python(CHILD, timeout=300))


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_explain_knows_the_real_error(real_errors, case):
    got = real_errors[case]
    assert got is not None, f"{case}: TensorFlow/Keras no longer raises here"
    assert got["key"] == EXPECTED[case], (case, got["type"], got["text"][:500])
    text = " ".join(got["explained"].split())          # str() wraps at 100 characters
    sentences = [s for s in text.split(". ") if s.strip()]
    assert 2 <= len(sentences) <= 8 and "Fix:" in text and "See notebook" in text


def test_load_verified_names_the_shape_not_keras_internals(real_errors):
    got = real_errors["load_verified on another model"]
    assert got["type"] == "LoadError"
    assert "the shapes differ" in got["text"] and "(4, 8) in the model, (4, 16) in the file" in got["text"]
    assert "__array__" not in got["text"]


def test_explain_errors_adds_a_note_and_leaves_unknown_errors_alone(real_errors):
    assert len(real_errors["note"]) == 1 and real_errors["note"][0].startswith("gputrain_kit.explain: The global batch")
    assert real_errors["unknown notes"] == []


def test_before_python_311_the_explanation_is_chained():
    err = ValueError("The `global_batch_size` 30 is not divisible by `num_replicas_in_sync` 4")
    found = kit.explain(err)
    chained = explainer._attach(err, found, notes=False)
    assert isinstance(chained, kit.ExplainedError) and "ValueError (explained by gputrain_kit)" in str(chained)
    assert not getattr(err, "__notes__", None)


def test_explain_reads_the_cause_of_a_wrapper_and_plain_text():
    try:
        try:
            raise RuntimeError("Collective ops is aborted by: Shape mismatch in the collective instance 100.")
        except RuntimeError as inner:
            raise ValueError("training failed") from inner
    except ValueError as outer:
        assert kit.explain(outer).key == "collective-shape-mismatch"
    unknown = kit.explain("InvalidArgumentError: something nobody knows\n  more detail")
    assert not unknown and unknown.key == "unknown"          # falsy, and it says so instead of printing None
    assert "Not one of the distributed errors the kit knows ('InvalidArgumentError: something nobody knows')" \
        in str(unknown) and "kit.error_summary(err)" in str(unknown)
    with pytest.raises(TypeError, match=r"explain: error must be an exception .* got 42 \(int\)"):
        kit.explain(42)


# The GPU-only messages. The documented texts (NCCL's error strings; TensorFlow's BFC allocator), and the
# real ones an H100 produced in `make gpu-check` (kit.gpu_record, docs/gpu.md).
@pytest.mark.parametrize("text,key", [
    ("InternalError: NCCL: invalid usage (run with NCCL_DEBUG=WARN for details)", "nccl-one-gpu"),
    ("NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1000", "nccl-one-gpu"),
    ("ResourceExhaustedError: OOM when allocating tensor with shape[4096,4096] and type float on "
     "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc", "out-of-memory"),
])
def test_documented_gpu_messages(text, key):
    assert kit.explain(text).key == key


@pytest.mark.parametrize("fact,key", [("nccl_on_logical_gpus", "nccl-one-gpu"), ("oom_tensor", "out-of-memory"),
                                      ("oom_fit", "out-of-memory"), ("growth_after_init", "devices-fixed")])
def test_real_gpu_errors_recorded_on_an_h100(fact, key):
    """The errors a real GPU raised (recorded with their whole text), explained by today's explain()."""
    text = kit.gpu_record.RECORD["facts"][fact]["error"]
    assert kit.explain(text).key == key


def test_every_known_error_has_a_test():
    tested = set(EXPECTED.values()) | {"nccl-one-gpu", "out-of-memory", "collective-shape-mismatch",
                                        "empty-replica-conv", "mwms-keras3-fit",
                                        "non-finite-model",       # test_the_kits_own_refusal_to_save_nan_is_explained
                                        "remat-scope-traced",     # test_nb08_truths.py
                                        "dropout-under-mirrored", "jit-compile-under-mirrored",  # test_known_traps
                                        "collective-instance-collision",  # test_explain_collision, test_nb01_claims
                                        "step-cancelled"}         # test_nb01_claims (a race: met under load)
    assert set(explainer.KNOWN) == tested


def test_the_kits_own_refusal_to_save_nan_is_explained(tmp_path):
    """save_verified's NonFiniteError names the likely cause and the fix (notebook 05)."""
    proc = run_python(f"""
        import json, numpy as np, gputrain_kit as kit
        kit.setup(devices=1)
        import keras
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.layers[0].kernel.assign(np.full((4, 2), np.nan, "float32"))
        try:
            kit.save_verified(model, {str(tmp_path / "m.keras")!r})
        except Exception as err:
            found = kit.explain(err)
            print(json.dumps([type(err).__name__, bool(found), found.key, str(found)]))
    """)
    name, known, key, text = last_json(proc)
    assert name == "NonFiniteError" and known and key == "non-finite-model"
    assert "replica_report" in text and "drop_remainder=True" in text


def test_error_summary_reads_through_keras_layer_wrapper_and_its_bold_codes():
    """Keras wraps a layer's error: 'Exception encountered when calling X.call().' then the error in bold
    (ANSI codes), then the arguments. The summary is the error, without the codes (notebook 08 section 5)."""
    from gputrain_kit.errors import error_summary

    wrapped = ValueError("Exception encountered when calling Sequential.call().\n\n\x1b[1mThe custom_gradient "
                         "decorator currently supports keywords arguments only when eager execution is enabled."
                         "\x1b[0m\n\nArguments received by Sequential.call():\n  • training=True")
    assert error_summary(wrapped) == ("ValueError: The custom_gradient decorator currently supports keywords "
                                      "arguments only when eager execution is enabled.")
    assert error_summary(ValueError("plain message\nmore")) == "ValueError: plain message"


def test_a_cancelled_step_is_explained_as_a_consequence():
    """The whole text a second default MirroredStrategy raised here in one of three loaded runs (the other two raised
    the collision itself): nothing in it names the cause, so the explanation says where to find it."""
    text = ("Graph execution error:\n\nFunction was cancelled before it was started "
            "[Op:__inference_multi_step_on_iterator_6201]")
    found = kit.explain(text)
    assert found.key == "step-cancelled" and "consequence, not the cause" in str(found).replace("\n", " ")
