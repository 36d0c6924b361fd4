"""The memory planner on models the notebooks never use (tools/memfam/families.py): a GPT-style block stack (causal;
with dropout), a CNN with BatchNorm, an LSTM, a ViT-style patch model, a subclassed residual model. The estimate
is checked against TensorFlow's allocator (measure_memory, a process per configuration) under both CPU kernel
families, against the H200 record of a GPT-small (h200_gpt_small.json, Keras on JAX), and on misuse."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import last_json, run_python

HERE = Path(__file__).parent
RATIO = 1.5        # docs/memory.md: the planner's promise, either way

MEASURE = """
    import json, sys, warnings
    sys.path.insert(0, "tools/memfam")
    import families, gputrain_kit as kit
    from gputrain_kit.cpu_kernels import bf16_by_onednn
    kit.setup(devices=1)
    out = {}
    for name in NAMES:
        build, batch = families.FAMILIES[name]
        policies = ["float32"] + (["mixed_bfloat16"] if bf16_by_onednn(FAMILY) else [])
        measured = kit.measure.measure_levers(build, {p: {"dtype_policy": p} for p in policies}, batch_size=batch,
                                              processes=1, kernels=FAMILY)
        for p, m in measured.items():
            e = kit.estimate_memory(build, batch_size=batch, dtype_policy=p)
            out[f"{name} {p}"] = [m.peak_bytes, e.peak]
    print(json.dumps(out))
"""


FAMILIES = ("onednn", "eigen")
NAMES = ["gpt_causal", "gpt_dropout", "cnn_bn", "lstm", "vit", "subclassed"]
#: The models each kernel family measures. The conv net with BatchNorm (whose families disagree: `outside`) and the
#: causal GPT (the transformer the planner once put 3-5x low) under both; the others under one each, where docs/memory.md's
#: table has them furthest from the estimate (the LSTM 1.25x under Eigen, 0.94x under oneDNN), so that every kind of
#: model meets the allocator and each family a transformer (each measurement is a process of its own).
BY_FAMILY = {"onednn": ["gpt_causal", "cnn_bn", "vit", "subclassed"],
             "eigen": ["gpt_causal", "cnn_bn", "lstm", "gpt_dropout"]}


@pytest.fixture(scope="module")
def measured() -> dict[str, dict[str, list[int]]]:
    """Per kernel family, "<model> <precision>" -> [allocator peak, estimate], each family in a fresh process."""
    out = {}
    for family in FAMILIES:
        proc = run_python(f"NAMES = {BY_FAMILY[family]!r}; FAMILY = {family!r}\n" + MEASURE.replace("\n    ", "\n"),
                          timeout=1500)
        out[family] = last_json(proc)
    return out


def test_every_model_is_measured_and_the_disagreeing_ones_under_both_families():
    assert set(BY_FAMILY["onednn"]) | set(BY_FAMILY["eigen"]) == set(NAMES)
    assert {"cnn_bn", "gpt_causal"} <= set(BY_FAMILY["onednn"]) & set(BY_FAMILY["eigen"])


def outside(family: str, measured: dict[str, dict[str, list[int]]]) -> dict[str, float]:
    """The rows of ``family`` whose peak is not within RATIO of the estimate, either way, unless the two kernel
    families themselves differ by more than RATIO on that row and the estimate lies between them (a conv net with
    BatchNorm: Eigen unfolds patches for the convolution's gradients and keeps the composed normalization's
    intermediates, oneDNN far less; its peak also moves with how the two cores interleave the ops: docs/memory.md)."""
    other = measured[FAMILIES[1 - FAMILIES.index(family)]]
    off = {}
    for key, (m, e) in measured[family].items():
        if 1 / RATIO <= m / e <= RATIO:
            continue
        if key in other:
            low, high = sorted((m, other[key][0]))
            if high / low > RATIO and low <= e <= high:
                continue
        off[key] = round(m / e, 2)
    return off


@pytest.mark.parametrize("family", FAMILIES)
def test_estimate_within_1_5x_of_the_allocator(family, measured):
    """Float32 on every CPU; mixed_bfloat16 where this CPU's family runs bf16 in oneDNN kernels (elsewhere bf16 is
    emulated in float32 and the CPU's step holds more than a GPU's: docs/memory.md)."""
    assert {key.split()[0] for key in measured[family]} == set(BY_FAMILY[family])
    off = outside(family, measured)
    assert not off, f"measured / estimate outside 1/{RATIO}..{RATIO} under {family}: {off}"


def test_the_families_exception_is_narrow():
    """The exception for rows the families disagree on holds only where they do, and only between them."""
    rows = {"onednn": {"a float32": [44, 66], "b float32": [60, 100], "c float32": [20, 66], "d float32": [70, 66],
                       "e mixed_bfloat16": [43, 66]},
            "eigen": {"a float32": [88, 66], "b float32": [64, 100], "c float32": [40, 66], "d float32": [100, 66]}}
    assert outside("onednn", rows) == {"b float32": 0.6, "c float32": 0.3, "e mixed_bfloat16": 0.65}
    assert outside("eigen", rows) == {"b float32": 0.64, "c float32": 0.61, "d float32": 1.52}


def test_gpt_small_against_the_h200_record():
    """The record's 8 rows within 1.5x; the verdict never says "fits" a 24 GB card where the GPU needed more."""
    record = json.loads((HERE / "h200_gpt_small.json").read_text())
    proc = run_python("""
        import json, sys
        sys.path.insert(0, "tools/memfam")
        import families, gputrain_kit as kit
        kit.setup(devices=1)
        out = {}
        for b in (8, 32):
            for p in ("float32", "mixed_bfloat16"):
                for flash in (False, True):
                    e = kit.estimate_memory(families.gpt_small, batch_size=b, dtype_policy=p,
                                            flash_attention=flash and p != "float32")
                    out[f"batch {b}, {p}, flash {'on' if flash else 'off'}"] = [e.peak, kit.memory_verdict(e, 24)]
        print(json.dumps(out))
    """, timeout=600)
    plans = last_json(proc)
    assert set(plans) == set(record)
    for key, (peak, verdict) in plans.items():
        measured = record[key]["peak"]
        assert 1 / RATIO <= measured / peak <= RATIO, (key, measured / peak)
        if measured > 24e9:
            assert "OUT OF MEMORY" in verdict, (key, verdict)
    assert "flash attention" in plans["batch 32, mixed_bfloat16, flash off"][1]     # the lever is named


def test_a_billion_parameters_are_planned_without_their_weights():
    """A 1.4B-parameter GPT (5.6 GB of float32 weights) is estimated from its build function: the process grows
    by far less than the weights."""
    proc = run_python("""
        import json, resource, keras, gputrain_kit as kit
        kit.setup(devices=1)
        def big():
            seq, d, vocab = 512, 2048, 50000
            t = keras.Input((seq,), dtype="int32")
            x = keras.layers.Embedding(vocab, d)(t)
            for _ in range(24):
                h = keras.layers.MultiHeadAttention(16, d // 16)(x, x, use_causal_mask=True)
                x = keras.layers.Add()([x, h])
                h = keras.layers.Dense(4 * d, activation="gelu")(keras.layers.LayerNormalization()(x))
                x = keras.layers.Add()([x, keras.layers.Dense(d)(h)])
            return keras.Model(t, keras.layers.Dense(vocab)(x))
        kit.estimate_memory(big, batch_size=1)   # warm-up: TensorFlow's own first-use memory
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        e = kit.estimate_memory(big, batch_size=8)
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        params = e.per_device[0]["parameters"]
        print(json.dumps([params, after - before]))
    """, timeout=600)
    params, grew = last_json(proc)
    assert params > 5e9                           # 1.4B float32 parameters counted
    assert grew < 0.2 * params, f"planning grew the process by {grew / 1e9:.2f} GB"


def test_own_models_profile_and_misuse():
    proc = run_python("""
        import json, warnings, sys, keras, numpy as np, gputrain_kit as kit
        sys.path.insert(0, "tools/memfam")
        import families
        kit.setup(devices=1)
        out = {}
        sub = families.subclassed()
        out["subclassed kinds"] = sorted({s.kind for s in kit.memory.profile(sub)})

        class Never(keras.Model):
            def call(self, x):
                return x
        try:
            kit.estimate_memory(Never(), batch_size=8)
        except ValueError as err:
            out["uncalled"] = str(err)
        a, b = keras.Input((6,)), keras.Input((3,))
        two = keras.Model([a, b], keras.layers.Dense(2)(keras.layers.Concatenate()([a, b])))
        out["two inputs"] = kit.estimate_memory(two, batch_size=4).peak > 0
        gpt = families.gpt_causal()
        out["attention approximated?"] = any(s.approximate for s in kit.memory.profile(gpt))
        lstm = families.lstm()
        out["lstm verdict"] = kit.memory_verdict(kit.estimate_memory(lstm, batch_size=64), 12)
        out["adam class"] = kit.estimate_memory(gpt, batch_size=2, optimizer=keras.optimizers.Adam).optimizer
        out["policy object"] = kit.estimate_memory(gpt, batch_size=2,
                                                   dtype_policy=keras.DTypePolicy("mixed_bfloat16")).peak
        out["policy name"] = kit.estimate_memory(gpt, batch_size=2, dtype_policy="mixed_bfloat16").peak
        out["float16 bytes"] = kit.estimate_memory(gpt, batch_size=2, bytes_per_value="float16").per_device[0][
            "parameters"] * 2 == kit.estimate_memory(gpt, batch_size=2).per_device[0]["parameters"]
        errors = {}
        for label, call in {"bytes 0": lambda: kit.estimate_memory(gpt, batch_size=2, bytes_per_value=0),
                            "bytes text": lambda: kit.estimate_memory(gpt, batch_size=2, bytes_per_value="big"),
                            "card in MiB": lambda: kit.memory_verdict(kit.estimate_memory(gpt, batch_size=2),
                                                                      24 * 1024),
                            "accumulation 3 of 32": lambda: kit.estimate_memory(gpt, batch_size=32,
                                                                                accumulation_steps=3),
                            "lambda": lambda: kit.estimate_memory(lambda: gpt, batch_size=2)}.items():
            try:
                call()
                errors[label] = "accepted"
            except (TypeError, ValueError) as err:
                errors[label] = str(err)
        out["errors"] = errors
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kit.estimate_memory(gpt, batch_size=32, strategy="data", devices=64)
        out["empty replicas"] = [str(w.message) for w in caught]
        print(json.dumps(out))
    """, timeout=600)
    out = last_json(proc)
    assert {"Dense", "LayerNormalization"} <= set(out["subclassed kinds"])
    assert "never called" in out["uncalled"] and "call it once" in out["uncalled"].lower()
    assert out["two inputs"] is True
    assert out["attention approximated?"] is False
    assert "measure it" in out["lstm verdict"] and "LSTM" in out["lstm verdict"]
    assert out["adam class"] == "adam"
    assert out["policy object"] == out["policy name"]
    assert out["float16 bytes"] is True
    errors = out["errors"]
    assert "bytes_per_value" in errors["bytes 0"] and "bytes_per_value" in errors["bytes text"]
    assert "MB or MiB" in errors["card in MiB"] and "pass 24" in errors["card in MiB"]
    assert "accumulation_steps" in errors["accumulation 3 of 32"] and "divisible" in errors["accumulation 3 of 32"]
    assert "def" in errors["lambda"]
    assert any("32 replica(s) with no sample" in m for m in out["empty replicas"]), out["empty replicas"]


def test_compiled_memory_is_a_second_opinion_beside_the_formula():
    """XLA's buffer analysis of the compiled step (Keras on JAX, in a child; no step runs, no weight allocated)
    lands near the planner's estimate for a GPT-style stack, and refuses a lambda before any child starts."""
    proc = run_python("""
        import json, sys
        sys.path.insert(0, "tools/memfam")
        import families, gputrain_kit as kit
        compiled = kit.measure.compiled_memory(families.gpt_causal, batch_size=16)
        estimate = kit.estimate_memory(families.gpt_causal, batch_size=16)
        try:
            kit.measure.compiled_memory(lambda: None, batch_size=16)
            refused = ""
        except TypeError as err:
            refused = str(err)
        print(json.dumps([compiled.peak, compiled.temporaries, compiled.arguments, estimate.peak, refused,
                          compiled.platform]))
    """, timeout=600)
    peak, temporaries, arguments, estimate, refused, platform = last_json(proc)
    assert platform == "cpu" and temporaries > arguments          # activations and gradients dominate the step
    assert 1 / 2 < peak / estimate < 2, peak / estimate           # a second opinion, not a copy of the formula
    assert refused.startswith("compiled_memory:") and "def" in refused
