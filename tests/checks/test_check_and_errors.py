"""Exercise checks and expect_error."""
from __future__ import annotations

import pytest

from gputrain_kit import check, devices, expect_error


@pytest.fixture
def fake_setup(monkeypatch):
    report = devices.SetupReport(mode="cpu", devices=("/device:CPU:0", "/device:CPU:1"), physical_gpus=(),
                                 memory_limit_mb=None, seed=0, tensorflow="x", keras="y")
    monkeypatch.setitem(devices._state, "report", report)
    return report


def test_last_device(fake_setup):
    assert not check.nb00_last_device(...) and "Not answered yet" in repr(check.nb00_last_device(...))
    assert not check.nb00_last_device("/device:CPU:0")
    assert check.nb00_last_device("/device:CPU:1") and check.nb00_last_device("cpu:1")
    assert repr(check.nb00_last_device("CPU:1")).startswith("Correct.")


def test_simulated_speedup_and_more_devices():
    assert check.nb00_simulated_speedup(False) and not check.nb00_simulated_speedup(True)
    assert check.nb00_simulated_speedup("False"), "an equivalent form of False is read as False"
    assert check.nb00_more_devices("b") and check.nb00_more_devices(" B ")
    assert not check.nb00_more_devices("a") and "Not yet" in repr(check.nb00_more_devices("a"))


def test_server_checks_read_the_forms_learners_write():
    """'split_gpu' and 'Split GPU' mean 'split-gpu'; a GPU's number alone is read as its name."""
    for answer in ("split-gpu", "split_gpu", "Split GPU", " 'split-GPU' "):
        assert check.nb00_server_mode(answer), answer
    assert not check.nb00_server_mode("gpu") and "Answer 'gpu'" in repr(check.nb00_server_mode("splitgpu"))
    assert check.nb00_last_gpu_name(3) and check.nb00_last_gpu_name("/device:GPU:3")
    assert not check.nb00_last_gpu_name(0) and not check.nb00_last_gpu_name(True)
    # readers answered '3' (a form the exercises' intro allows) and 'GPU 3' and were told "Not yet"
    assert check.nb00_last_gpu_name("3") and check.nb00_last_gpu_name("GPU 3") and not check.nb00_last_gpu_name("7")


def test_expect_error_prints_and_returns(capsys):
    with expect_error(ValueError, match="bad") as caught:
        raise ValueError("bad input")
    assert capsys.readouterr().out.strip() == "ValueError: bad input"
    assert caught.type == "ValueError" and caught.message == "bad input"


def test_expect_error_fails_when_behaviour_changes():
    with pytest.raises(AssertionError, match="nothing was raised"):
        with expect_error(ValueError):
            pass
    with pytest.raises(AssertionError, match="mentioning 'xyz'"):
        with expect_error(ValueError, match="xyz", show=False):
            raise ValueError("other")
    with pytest.raises(KeyError):
        with expect_error(ValueError):
            raise KeyError("not the expected type")


def test_shortened_messages_cut_at_boundaries_and_keep_the_fix():
    from gputrain_kit.errors import shorten_message

    text = ("SetupError: setup(devices=8) cannot run: setup(devices=4) already set up this kernel's devices, "
            "and TensorFlow cannot change devices once they are initialised. Restart the kernel "
            "(Kernel > Restart Kernel) and run setup(devices=8) first.")
    short = shorten_message(text, 150)
    assert len(short) <= 150 and " [...] " in short
    head, tail = short.split(" [...] ")
    assert text.startswith(head) and text.endswith(tail) and "run setup(devices=8) first." in tail
    assert text[len(head)] in " \n" and text[len(text) - len(tail) - 1] in " \n", "cut between words"
    assert shorten_message("short", 150) == "short"


def test_setup_report_wraps_its_notes_between_words():
    from gputrain_kit.devices import SetupReport

    fields = SetupReport.__dataclass_fields__
    values = {name: None for name in fields}
    values.update(mode="cpu", devices=("/device:CPU:0", "/device:CPU:1"), notes=("word " * 40,),
                  physical_gpus=(), tensorflow="2", keras="3", seed=0)
    text = repr(SetupReport(**values))
    assert all(len(line) <= 96 for line in text.splitlines()[2:-1])
    assert all(not line.endswith("wor") for line in text.splitlines())


def test_error_summary_skips_a_blank_line_above_the_node():
    """TensorFlow's missing-kernel error ends with a blank line, then the node: the summary is its first line."""
    from gputrain_kit import error_summary

    class InvalidArgumentError(Exception):
        pass

    text = ("No OpKernel was registered to support Op 'NcclAllReduce' used by {{node sgd/NcclAllReduce}}\n"
            "Registered devices: [CPU]\nRegistered kernels:\n  device='GPU'\n\n\t [[sgd/NcclAllReduce]]")
    assert error_summary(InvalidArgumentError(text), limit=70) == \
        "InvalidArgumentError: No OpKernel was registered to support Op 'NcclAllReduce' used by ..."
