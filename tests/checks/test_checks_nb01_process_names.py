"""Review of notebook 01's checks: PyTorch's 'cuda:N' names a device of the process (counted from 0 like TensorFlow's
/GPU:N), not a CUDA GPU of the machine; an answer given in CUDA's numbering where nvidia-smi's is asked gets its
hint, not "Not a form this check reads"."""
from __future__ import annotations

import pytest

import gputrain_kit as kit


@pytest.mark.parametrize("answer", ["cuda:5", "cuda:1", "CUDA:5", " 'cuda:0' ", "cuda : 5"])
def test_physical_behind_refuses_pytorchs_process_local_name_with_a_hint(answer):
    got = kit.check.nb01_physical_behind(answer)
    assert not got and repr(got).startswith("Not yet.") and "PyTorch's name" in repr(got), got
    assert "cuda:0 and cuda:1" in repr(got)
    assert "That is CUDA GPU 1" not in repr(got)        # cuda:1 is CUDA GPU 5 there: never called GPU 1


@pytest.mark.parametrize("answer", ["CUDA GPU 5", "cuda gpu 5", "GPU 5", 5, "5"])
def test_physical_behind_still_reads_cudas_number_in_words(answer):
    assert kit.check.nb01_physical_behind(answer)


@pytest.mark.parametrize("answer", ["CUDA GPU 3", "cuda 3", "CUDA device 3", "CUDA GPU 7", "'CUDA GPU 3'"])
def test_smi_behind_answers_cudas_numbering_with_its_hint(answer):
    got = kit.check.nb01_smi_behind(answer)
    assert not got and repr(got).startswith("Not yet."), got
    assert "CUDA's numbering" in repr(got) and "nvidia-smi" in repr(got)
    assert "nvidia-smi GPU 7" not in repr(got)          # the hint does not give the answer away


@pytest.mark.parametrize("answer", ["cuda:7", "cuda:3"])
def test_smi_behind_refuses_pytorchs_name_with_a_hint(answer):
    got = kit.check.nb01_smi_behind(answer)
    assert not got and "PyTorch's device name" in repr(got) and "cuda:0" in repr(got), got


@pytest.mark.parametrize("answer", ["GPU 7", "nvidia-smi GPU 7", 7, "7"])
def test_smi_behind_still_reads_nvidia_smis_number(answer):
    assert kit.check.nb01_smi_behind(answer)


def test_count_with_garbage_says_a_repeat_makes_cuda_fail_not_silence():
    """Review 10: a GPU listed twice makes cuInit fail (CUDA_ERROR_INVALID_DEVICE); the answer stays 0."""
    got = kit.check.nb01_count_with_garbage(0)
    assert got and "CUDA_ERROR_INVALID_DEVICE" in repr(got) and "failed call to cuInit" in repr(got)
    assert "without an error" not in repr(got)
