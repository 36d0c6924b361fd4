"""Review findings on notebooks 00 and 02's checks: nb02_per_replica reads the question's "on 8 GPUs" ('48 per GPU')
and its words in either order ('48 samples per step per replica'); nb00_last_gpu_name, which asks for TensorFlow's
device name, refuses a GPU named in CUDA's or PyTorch's numbering with a hint, as notebook 01's checks refuse a
TensorFlow name where CUDA's number is asked."""
from __future__ import annotations

import pytest

from gputrain_kit import check


@pytest.mark.parametrize("answer", ["48 per GPU", "48 samples per GPU", "48 on each GPU", "48 per device",
                                    "48 samples per step per replica", "48 per GPU per step",
                                    "48 samples per replica per step"])
def test_nb02_per_replica_reads_per_gpu_and_either_word_order(answer):
    assert check.nb02_per_replica(answer), answer
    wrong = check.nb02_per_replica(answer.replace("48", "384"))
    assert not wrong and repr(wrong).startswith("Not yet."), wrong


@pytest.mark.parametrize("answer", ["48 GPUs", "48 steps", "not 48 per GPU", "48 per GPU or 384"])
def test_nb02_per_replica_still_refuses_what_is_no_such_answer(answer):
    assert not check.nb02_per_replica(answer), answer


@pytest.mark.parametrize("answer, numbering", [("CUDA GPU 3", "CUDA's numbering"), ("cuda 3", "CUDA's numbering"),
                                               ("'CUDA GPU 3'", "CUDA's numbering"), ("cuda:3", "PyTorch's name")])
def test_nb00_last_gpu_name_refuses_other_numberings_with_a_hint(answer, numbering):
    result = check.nb00_last_gpu_name(answer)
    assert not result and repr(result).startswith("Not yet."), result
    assert numbering in repr(result) and "not a TensorFlow device name" in repr(result), result
    assert "GPU:3" not in repr(result)                 # the hint does not give the answer away
    for right in ("/device:GPU:3", "GPU:3", "GPU 3", 3):
        assert check.nb00_last_gpu_name(right), right


def test_the_two_notebooks_checks_refuse_each_other_s_numbering_alike():
    """nb01_physical_behind refuses TensorFlow's name where CUDA's number is asked; nb00 the reverse."""
    assert not check.nb01_physical_behind("/GPU:5") and "TensorFlow device name" in repr(check.nb01_physical_behind("/GPU:5"))
    assert not check.nb00_last_gpu_name("CUDA GPU 3")
