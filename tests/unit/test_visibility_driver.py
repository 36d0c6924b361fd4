"""parse_cuda_visible_devices against a real driver (review 10, issue 44).

[driver] The reviewer's experiment, repeated for DRIVER_RECORD: 1 x NVIDIA H200, driver 580.159.04, 2026-11-28, each
value in a fresh process calling cuInit(0) and cuDeviceGetCount through ctypes. The driver reads the entries in
order and stops at the first out-of-range one before it sees a later repeat ('0,9,0' shows GPU 0), while PyTorch's
parser, which the kit first copied, checks repeats first. A repeat among the entries kept makes cuInit return 101
(CUDA_ERROR_INVALID_DEVICE); no GPU left (an empty value, an out-of-range first entry, a bare 'GPU-') makes it
return 100 (CUDA_ERROR_NO_DEVICE). The GPU count is a parameter: one GPU as measured, eight as the notebook's server.
"""
from __future__ import annotations

import pytest

from gputrain_kit import parse_cuda_visible_devices as parse
from gputrain_kit import visibility
from gputrain_kit.visibility import CUDA_ERRORS, DRIVER_RECORD, driver_comparison, driver_report, example_uuids

OK, NO_DEVICE, INVALID = 0, CUDA_ERRORS["CUDA_ERROR_NO_DEVICE"], CUDA_ERRORS["CUDA_ERROR_INVALID_DEVICE"]

#: value -> {GPU count: (visible CUDA GPUs, what cuInit returns)}. "<p>" is an 8-character prefix of GPU 0's UUID.
TABLE = {
    # the reviewer's four disagreements: the range cut-off comes before the repeat check; a bare GPU- matches nothing
    "0,1,0": {1: ([0], OK), 8: ([], INVALID)},          # on 8 GPUs the repeat is among the entries kept
    "0,2,0": {1: ([0], OK), 8: ([], INVALID)},
    "0,9,0": {1: ([0], OK), 8: ([0], OK)},               # 9 stops parsing on either machine: the repeat is never read
    "GPU-": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    # repeats: cuInit fails, not a silent empty list
    "0,0": {1: ([], INVALID), 8: ([], INVALID)},
    "0, 0": {1: ([], INVALID), 8: ([], INVALID)},
    "<p>,<p>": {1: ([], INVALID), 8: ([], INVALID)},
    "0,0,9": {1: ([], INVALID), 8: ([], INVALID)},      # the repeat comes before the stop
    # no GPU left: CUDA_ERROR_NO_DEVICE
    "": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    "-1": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    "1,0": {1: ([], NO_DEVICE), 8: ([1, 0], OK)},        # out of range first on one GPU only
    "9": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    "GPU-,0": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    # values the kit already read as the driver does
    "0gpu": {1: ([0], OK), 8: ([0], OK)},
    "+0": {1: ([0], OK), 8: ([0], OK)},
    " 0": {1: ([0], OK), 8: ([0], OK)},
    "00": {1: ([0], OK), 8: ([0], OK)},
    "-0": {1: ([0], OK), 8: ([0], OK)},
    "0,-1": {1: ([0], OK), 8: ([0], OK)},
    "-1,0": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    "x,0": {1: ([], NO_DEVICE), 8: ([], NO_DEVICE)},
    "0,x": {1: ([0], OK), 8: ([0], OK)},
    "0,x,0": {1: ([0], OK), 8: ([0], OK)},
    "0,-1,0": {1: ([0], OK), 8: ([0], OK)},
    "<p>,0": {1: ([0], OK), 8: ([0], OK)},              # a UUID list stops at the first non-UUID
    "0,<p>": {1: ([0], OK), 8: ([0], OK)},              # an ordinal list stops at the first non-number
    "<p>,GPU-": {1: ([0], OK), 8: ([0], OK)},           # the bare GPU- stops: no repeat of GPU 0
    "3,1,3": {8: ([], INVALID)},                         # notebook 01's Exercise 2 stays 0
}
CASES = [(value, n, *answer) for value, by_n in TABLE.items() for n, answer in by_n.items()]


@pytest.mark.parametrize("value, n, visible, cuinit", CASES, ids=[f"{c[0]!r}-{c[1]}gpu" for c in CASES])
def test_each_value_as_the_driver_reads_it(value, n, visible, cuinit):
    uuids = example_uuids(n)
    v = parse(value.replace("<p>", uuids[0][:8]), uuids)
    assert list(v.visible) == visible and v.count == len(visible)
    assert v.cuinit == cuinit and v.cuda_error == next((k for k, c in CUDA_ERRORS.items() if c == cuinit), None)
    if "GPU-" not in value and "<p>" not in value:    # ordinals need only the count
        same = parse(value, n)
        assert (list(same.visible), same.cuinit) == (visible, cuinit)


def test_repeats_are_errors_not_silence():
    text = repr(parse("3,1,3", 8))
    assert "listed twice" in text and "CUDA_ERROR_INVALID_DEVICE" in text and "failed call to cuInit" in text
    assert "CUDA_ERROR_NO_DEVICE" in repr(parse("", 8)) and "CUDA_ERROR_NO_DEVICE" in parse("9", 8).to_html()
    assert parse("0,9,0", 8).cuda_error is None and parse(None, 8).cuinit == 0 and parse(None, 0).cuinit == NO_DEVICE
    assert parse(f"MIG-{example_uuids(1)[0]}/1/0", example_uuids(1)).cuinit == 0


@pytest.mark.parametrize("value", ["0,9,0", "3,1,3,x", "0,0,1", "GPU-,0,1", "0,x,0", "1gpu,1,2"])
def test_every_entry_gets_a_reason(value):
    v = parse(value, example_uuids(8))
    assert [e.text for e in v.entries] == value.split(",")
    assert all(e.reason for e in v.entries if e.status == "dropped")


def test_a_bare_gpu_prefix_needs_no_uuids_but_a_real_prefix_does():
    assert parse("GPU-", 8).count == 0 and "empty UUID prefix" in repr(parse("GPU-", 8))
    with pytest.raises(ValueError, match="need the machine's UUIDs"):
        parse("GPU-1234", 8)


def test_the_model_agrees_with_every_recorded_driver_answer():
    rows = driver_comparison()
    assert len(rows) == len(DRIVER_RECORD["results"]) >= 30
    assert [r for r in rows if r.driver != r.model] == []
    recorded = {r.value: r.driver for r in rows}
    assert {v: recorded[v] for v in ("0,1,0", "0,2,0", "0,9,0", "GPU-")} == {
        "0,1,0": (0, 1), "0,2,0": (0, 1), "0,9,0": (0, 1), "GPU-": (NO_DEVICE, 0)}
    assert recorded["0,0"] == recorded["0, 0"] == recorded["<p8>,<p8>"] == (INVALID, 0)
    report = driver_report()
    assert f"agrees with the driver on {len(rows)} of {len(rows)} values" in report and "differs" not in report
    assert "driver 580.159.04" in report and "H200" in report


def test_the_report_names_a_value_the_model_gets_wrong(monkeypatch):
    """The comparison can fail: a driver answer the model does not give is listed."""
    wrong = dict(DRIVER_RECORD, results=DRIVER_RECORD["results"] + (("0,9,0", INVALID, 0),))
    monkeypatch.setattr(visibility, "DRIVER_RECORD", wrong)
    report = visibility.driver_report()
    assert f"on {len(wrong['results']) - 1} of {len(wrong['results'])} values" in report
    assert "differs: '0,9,0': driver (101, 0), model (0, 1)" in report
