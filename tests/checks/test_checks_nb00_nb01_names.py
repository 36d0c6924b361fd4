"""Review findings on the exercise checks of notebooks 00 and 01: TensorFlow's device names are not CUDA's or
nvidia-smi's numbers (the confusion the exercises teach), a set cannot give an ordered pair, and a count of no
GPUs can be said in words."""
from __future__ import annotations

import pytest

import gputrain_kit as kit


@pytest.mark.parametrize("answer", ["/GPU:5", "GPU:5", "/device:GPU:5", "gpu:5", " /GPU:5 "])
def test_physical_behind_refuses_tensorflows_name_with_a_hint(answer):
    got = kit.check.nb01_physical_behind(answer)
    assert not got and "TensorFlow device name" in repr(got) and "/GPU:0 and /GPU:1" in repr(got)


@pytest.mark.parametrize("answer", ["CUDA GPU 5", "GPU 5", "5", 5])
def test_physical_behind_still_reads_cudas_number(answer):
    assert kit.check.nb01_physical_behind(answer)


@pytest.mark.parametrize("answer", ["/GPU:7", "GPU:7", "/device:GPU:7"])
def test_smi_behind_refuses_tensorflows_name_with_a_hint(answer):
    got = kit.check.nb01_smi_behind(answer)
    assert not got and "TensorFlow device name" in repr(got) and "/GPU:0" in repr(got)


@pytest.mark.parametrize("answer", ["GPU 7", "nvidia-smi GPU 7", "7", 7])
def test_smi_behind_still_reads_nvidia_smis_number(answer):
    assert kit.check.nb01_smi_behind(answer)


@pytest.mark.parametrize("answer", ["none", "None", "no GPUs", "no GPU", "zero", "Zero.", "0", 0, "0 GPUs"])
def test_count_with_garbage_reads_no_gpus_in_words_as_zero(answer):
    assert kit.check.nb01_count_with_garbage(answer)


@pytest.mark.parametrize("answer", ["one", "3", 2, "two GPUs", None])
def test_count_with_garbage_still_refuses_other_counts(answer):
    assert not kit.check.nb01_count_with_garbage(answer)


@pytest.mark.parametrize("answer", [{8, 1}, {1, 8}, frozenset({1, 8})])
def test_cpu_devices_refuses_a_set_which_has_no_order(answer):
    got = kit.check.nb00_cpu_devices(answer)
    assert not got and "A set has no order" in repr(got)


def test_cpu_devices_reads_the_ordered_pair():
    assert kit.check.nb00_cpu_devices([1, 8]) and kit.check.nb00_cpu_devices((1, 8))
    assert not kit.check.nb00_cpu_devices([8, 1])
