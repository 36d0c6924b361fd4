"""TensorFlow's two CPU kernel families (oneDNN, Eigen): what the kit reports, and the claims that depend on them.

Every claim runs under both families, each forced with TF_ENABLE_ONEDNN_OPTS in a fresh process, so these tests
check both on any machine, whichever family its CPU runs by default.
"""
from __future__ import annotations

import os
import platform

import pytest

from gputrain_kit import cpu_kernels
from gputrain_kit.batchnorm import Matrix, CaseResult
from conftest import last_json, run_python

FAMILY_ENV = {"onednn": "1", "eigen": "0"}


NO_BFC = {"TF_CPU_ALLOCATOR_USE_BFC": "false"}    # TensorFlow's default CPU allocator, whatever this process set


def test_default_family_follows_tensorflows_rule():
    """TensorFlow 2.21's DefaultOneDnnPolicy() (tensorflow/core/util/port.cc), fed each platform's facts: only the
    Linux x86 branch can run on this machine (the test below); the others follow the source, read by hand."""
    assert cpu_kernels.default_family({"avx2", "fma"}, "Linux", "x86_64")[0] == "eigen"
    for feature in cpu_kernels.ONEDNN_DEFAULT_FEATURES:
        family, why = cpu_kernels.default_family({"avx2", feature}, "Linux", "x86_64")
        assert family == "onednn" and feature in why
    # Windows x86: on whatever the CPU (the code returns true; the comment above it says "Disabled by default")
    for features in ({"avx2"}, {"avx512_vnni"}, set()):
        family, why = cpu_kernels.default_family(features, "Windows", "AMD64")
        assert family == "onednn" and "Windows x86" in why
    assert cpu_kernels.default_family(set(), "Windows", "ARM64")[0] == "eigen"
    # Linux Arm: only the Neoverse V1 (MIDR implementer 0x41, part 0xd40: Graviton3), not N1 (Graviton2) nor V2
    family, why = cpu_kernels.default_family(set(), "Linux", "aarch64", arm=(0x41, 0xD40))
    assert family == "onednn" and "Neoverse V1" in why
    for other in ((0x41, 0xD0C), (0x41, 0xD4F), (0x61, 0xD40), None):
        assert cpu_kernels.default_family({"avx512_vnni"}, "Linux", "aarch64", arm=other)[0] == "eigen"
    # macOS, x86 or Arm, and other Linux CPUs: never by default
    for system, machine in (("Darwin", "arm64"), ("Darwin", "x86_64"), ("Linux", "ppc64le")):
        assert cpu_kernels.default_family({"avx512_vnni"}, system, machine)[0] == "eigen"
    assert "macOS" in cpu_kernels.default_family(set(), "Darwin", "arm64")[1]
    assert cpu_kernels.bf16_by_onednn("onednn", {"avx512f"}) and not cpu_kernels.bf16_by_onednn("onednn", {"avx2"})
    assert not cpu_kernels.bf16_by_onednn("eigen", {"avx512f", "avx512_bf16"})
    with pytest.raises(ValueError, match="kernels"):
        cpu_kernels.family_env("mkl")


def test_arm_cpu_reads_implementer_and_part_from_cpuinfo():
    """What TensorFlow reads from MIDR_EL1, as Linux's /proc/cpuinfo shows it (an AWS Graviton3's lines)."""
    graviton3 = ("processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve svebf16\nCPU implementer\t: 0x41\n"
                 "CPU architecture: 8\nCPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n")
    assert cpu_kernels.arm_cpu(graviton3) == (0x41, 0xD40)
    assert cpu_kernels.arm_cpu("processor\t: 0\nflags\t: fpu avx2\n") is None         # an x86 CPU's file
    assert cpu_kernels.arm_cpu("CPU implementer\t: 0x41\nCPU part\t: n/a\n") is None
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert cpu_kernels.arm_cpu() is None


def test_predicted_default_is_what_tensorflow_runs_here():
    """The rule above against the installed TensorFlow on this CPU, with no TF_ENABLE_ONEDNN_OPTS."""
    if "TF_ENABLE_ONEDNN_OPTS" in os.environ:
        pytest.skip("TF_ENABLE_ONEDNN_OPTS is set for this test run: TensorFlow's own default cannot be seen")
    proc = run_python("""
        import json
        from gputrain_kit import cpu_kernels
        k = cpu_kernels.detect()
        print(json.dumps({"family": k.family, "default": k.default, "reason": k.reason}))
    """)
    out = last_json(proc)
    assert out["family"] == out["default"], out


@pytest.mark.parametrize("family", cpu_kernels.FAMILIES)
def test_allocator_statistics_need_bfc_under_eigen_and_setup_arranges_it(family):
    proc = run_python("""
        import json, os
        import tensorflow as tf
        out = {}
        try:
            tf.config.experimental.get_memory_info("CPU:0"); out["plain"] = "ok"
        except ValueError as err:
            out["plain"] = str(err)
        print(json.dumps(out))
    """, env={"TF_ENABLE_ONEDNN_OPTS": FAMILY_ENV[family]} | NO_BFC)
    plain = last_json(proc)["plain"]
    if family == "eigen":
        assert "not available" in plain or "Cannot" in plain, plain     # Eigen's default allocator: no statistics
    else:
        assert plain == "ok"                                             # oneDNN's allocator keeps them
    proc = run_python("""
        import json, gputrain_kit as kit
        report = kit.setup(devices=2)
        import tensorflow as tf, keras
        before = tf.config.experimental.get_memory_info("CPU:0")["current"]
        with tf.device("CPU:1"):
            block = tf.zeros((1024, 1024))
        grown = tf.config.experimental.get_memory_info("CPU:0")["current"] - before
        print(json.dumps({"grown": grown, "family": report.kernel_family, "line": repr(report),
                          "inventory": repr(kit.inventory())}))
    """, env={"TF_ENABLE_ONEDNN_OPTS": FAMILY_ENV[family]})
    out = last_json(proc)
    assert out["family"] == family
    assert out["grown"] == 4 * 2**20          # one allocator for every logical CPU, under either family
    assert f"CPU kernels: {cpu_kernels.FAMILY_NAMES[family]}, TF_ENABLE_ONEDNN_OPTS={FAMILY_ENV[family]} forces it" \
        in out["line"]
    assert "TF_CPU_ALLOCATOR_USE_BFC=true" in out["line"]
    assert f"CPU kernels           {cpu_kernels.FAMILY_NAMES[family]} (" in out["inventory"]


def test_without_setup_a_started_runtime_gets_an_error_that_names_the_fix():
    proc = run_python("""
        import json, tensorflow as tf, keras
        from gputrain_kit.measure import measure_training_step
        from gputrain_kit.cpu_kernels import AllocatorStatsError
        net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8)]); net.compile("sgd", "mse")
        try:
            measure_training_step(net, tf.ones((4, 8)), tf.ones((4, 8))); print(json.dumps("measured"))
        except AllocatorStatsError as err:
            print(json.dumps(str(err)))
    """, env=NO_BFC | {"TF_ENABLE_ONEDNN_OPTS": "0"})
    said = last_json(proc)
    assert said.startswith("measure_training_step: ") and "TF_CPU_ALLOCATOR_USE_BFC=true" in said
    assert "Restart" in said and "setup(" in said


def write_builds(folder) -> str:
    """A script's build functions in a module file (measure_memory sends their source to its process)."""
    (folder / "builds.py").write_text(
        "def small():\n"
        "    return keras.Sequential([keras.Input((256,)), keras.layers.Dense(512), keras.layers.Dense(512)])\n\n\n"
        "def twin():\n"
        "    return keras.Sequential([keras.Input((512,))] + [keras.layers.Dense(512, activation='relu')\n"
        "                            for _ in range(8)] + [keras.layers.Dense(16)])\n")
    return f"\n        import sys; sys.path.insert(0, {str(folder)!r})"


def test_measure_memory_from_a_plain_script_under_both_families(tmp_path):
    """No setup() and no BFC variable in the caller: the measuring child arranges both."""
    proc = run_python(write_builds(tmp_path) + """
        import json, gputrain_kit as kit
        from builds import small as build
        out = {}
        for family in ("onednn", "eigen"):
            m = kit.measure_memory(build, batch_size=64, kernels=family)
            out[family] = [m.state_bytes, m.peak_bytes, m.kernels]
        m = kit.measure_memory(build, batch_size=64)
        out["inherited"] = m.kernels
        print(json.dumps(out))
    """, env=NO_BFC | {"TF_ENABLE_ONEDNN_OPTS": "0"})
    out = last_json(proc)
    params = (256 * 512 + 512 + 512 * 512 + 512) * 4
    for family in ("onednn", "eigen"):
        state, peak, ran = out[family]
        assert ran == family
        # parameters and Adam's two slots (3x), and a buffer or two of the 512x512 kernel's size (0.67x each) that
        # a step may leave held until the next: 3.67x quiet, 4.31-4.33x in loaded runs even as the least of 8 updates
        assert 2.9 * params <= state <= 4.4 * params
        assert peak > state
    assert out["inherited"] == "eigen"                   # kernels=None: the caller's environment decides


def _result(family: str, case: tuple[str, str, str], outcome: str) -> CaseResult:
    return CaseResult(*case, outcome, "detail", (), 0, 0.0, 0, "", family)


def test_matrix_side_by_side_and_outcome_by_family():
    a, b = ("conv", "no BN", "last step empty"), ("dense", "scale=False", "last step empty")
    m = Matrix((_result("onednn", a, "crash"), _result("onednn", b, "silent NaN"),
                _result("eigen", a, "healthy"), _result("eigen", b, "silent NaN")))
    table = m.side_by_side(H100_recorded={a: "healthy"})
    lines = table.splitlines()
    assert lines[0].split() == ["model", "BatchNorm", "batches", "oneDNN", "Eigen", "(portable)", "H100", "recorded"]
    assert lines[2].split()[-3:] == ["crash", "healthy", "healthy"]
    assert lines[3].split()[-5:] == ["silent", "NaN", "silent", "NaN", "-"]
    assert m.outcome(*a, kernels="eigen").outcome == "healthy"
    with pytest.raises(ValueError, match="name one: kernels='onednn'"):
        m.outcome(*a)


def test_matrix_repr_puts_what_you_see_on_lines_of_its_own():
    """A reader saw notebook 05's matrix wrap mid-word in JupyterLab ("on rep / lica 3"): each case's detail is
    on indented lines of at most 100 characters, under its row, whole words only."""
    detail = ("InvalidArgumentError: Unable to broadcast tensor of shape [1,1,1,8] to tensor of shape [0,8,8,1] "
              "| left NaN in moving_mean, moving_variance on replica 3")
    case = ("conv", "scale=True", "last step empty")
    m = Matrix((CaseResult(*case, "crash", detail, (), 2, 0.0, 0, "works", "onednn"),
                _result("eigen", case, "loud NaN")))
    lines = repr(m).splitlines()
    assert lines[2].split()[-2:] == ["oneDNN", "crash"] and all(len(line) <= 100 for line in lines)
    assert lines[3].startswith("    InvalidArgumentError") and " ".join(l.strip() for l in lines[3:5]) == detail
    assert lines[5].split()[-1] == "NaN" and lines[6] == "    detail"


def test_expected_family_reads_the_forcing_variable_without_tensorflow():
    """What a fresh process will run, as notebook 08's exercise check needs it before measuring in one."""
    from gputrain_kit import cpu_kernels

    assert cpu_kernels.expected_family({"TF_ENABLE_ONEDNN_OPTS": "1"}) == "onednn"
    assert cpu_kernels.expected_family({"TF_ENABLE_ONEDNN_OPTS": " False "}) == "eigen"
    assert cpu_kernels.expected_family({}) == cpu_kernels.default_family()[0]
    assert cpu_kernels.expected_family({"TF_ENABLE_ONEDNN_OPTS": "maybe"}) == cpu_kernels.default_family()[0]
