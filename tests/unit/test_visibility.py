"""parse_cuda_visible_devices against the rules of the CUDA runtime.

Sources, cited per case:
  [guide] CUDA C++ Programming Guide, "CUDA Environment Variables", CUDA_VISIBLE_DEVICES:
          "2,1" -> device 0 invisible, 2 enumerated before 1; "0,2,-1,1" -> 0 and 2 visible, 1 invisible
          ("if one of the indices is invalid, only the devices whose index precedes the invalid
          index are visible"); UUIDs may be abbreviated to a prefix that identifies one GPU;
          "Only single MIG instance enumeration is supported".
  [torch] pytorch/pytorch torch/cuda/__init__.py, _parse_visible_devices,
          _transform_uuid_to_ordinals and _device_count_nvml, which mirror the runtime to count
          devices without initialising CUDA: entries read "like strtoul" ("`1gpu2,2ampere` is
          equivalent to `1,2`", elem.strip(), a leading sign accepted); "Repeated ordinal results in
          empty set"; "Negative value aborts the sequence"; the list is trimmed at the first ordinal
          >= the device count; an ambiguous or unknown UUID prefix stops parsing; a UUID list stops
          at the first entry without the prefix; duplicate UUIDs give the empty set.
  [driver] a real driver (test_visibility_driver.py, DRIVER_RECORD): where it and [torch] differ, the model
          follows the driver.
  [order] the same guide, CUDA_DEVICE_ORDER: FASTEST_FIRST (the default) "causes CUDA to enumerate
          the available devices in fastest to slowest order, using a simple heuristic"; PCI_BUS_ID
          "orders devices by PCI bus ID in ascending order" (nvidia-smi's order).
"""
from __future__ import annotations

import time

import pytest

from gputrain_kit import parse_cuda_visible_devices as parse
from gputrain_kit.visibility import (cuda_numbering, example_fastest_first, example_uuids, normalise_bus_id,
                                     parse_cuda_visible_devices)
from gputrain_kit.widgets import visibility_explorer

UUIDS = example_uuids(8)

CASES = [
    # value, visible physical GPUs in logical order, source
    (None, list(range(8)), "unset: everything visible"),
    ("2,1", [2, 1], "[guide] renumbering"),
    ("2,0", [2, 0], "[guide] renumbering"),
    ("0,2,-1,1", [0, 2], "[guide] invalid index stops"),
    ("-1", [], "[torch] negative aborts: hides all"),
    ("", [], "[torch] empty -> strtoul finds no number: hides all"),
    ("0,1,x,2", [0, 1], "[torch] not a number stops"),
    ("1,,2", [1], "[torch] empty entry stops"),
    ("1gpu2,2ampere", [1, 2], "[torch] strtoul: trailing garbage ignored"),
    (" 1 , 3", [1, 3], "[torch] elem.strip()"),
    ("+1,2", [1, 2], "[torch] leading sign accepted"),
    ("0,0", [], "[torch] repeated ordinal -> empty set"),
    ("3,1,3", [], "[torch] repeated ordinal -> empty set, even after valid entries"),
    ("0,9,1", [0], "[torch] trimmed at the first out-of-range ordinal"),
    ("8", [], "[torch] out of range on an 8-GPU machine"),
    ("7,6,5,4,3,2,1,0", [7, 6, 5, 4, 3, 2, 1, 0], "[guide] full reversal"),
]


@pytest.mark.parametrize("value, expected, source", CASES, ids=[repr(c[0]) for c in CASES])
def test_ordinal_rules(value, expected, source):
    assert list(parse(value, 8).visible) == expected, source


def test_renumbering_and_reasons():
    v = parse("3,1", 8)
    assert v.physical_of(0) == 3 and v.physical_of(1) == 1 and v.count == 2
    assert v.hidden == [0, 2, 4, 5, 6, 7]
    with pytest.raises(ValueError, match="/GPU:2 does not exist"):
        v.physical_of(2)
    dropped = {e.text: e.reason for e in parse("0,2,-1,1", 8).entries if e.status == "dropped"}
    assert "negative" in dropped["-1"] and "after an entry that stopped parsing" in dropped["1"]
    assert "out of range" in [e.reason for e in parse("0,9", 8).entries if e.text == "9"][0]
    assert "repeats" in repr(parse("0,0", 8)) or "listed twice" in repr(parse("0,0", 8))
    assert "read as 1" in [e.reason for e in parse("1gpu", 8).entries][0]


def test_uuid_rules():
    full = parse(f"{UUIDS[5]},{UUIDS[2]}", UUIDS)
    assert list(full.visible) == [5, 2]                             # [guide] UUIDs, in list order
    short = parse(f"{UUIDS[5][:8]},{UUIDS[2][:10]}", UUIDS)
    assert list(short.visible) == [5, 2]                            # [guide] unambiguous prefixes
    assert list(parse("GPU-", UUIDS).visible) == []                 # [driver] a bare GPU- matches no GPU
    assert list(parse(f"{UUIDS[1]},GPU-", UUIDS).visible) == [1]    # [driver] ...and stops there, not a repeat
    assert list(parse("GPU-a", UUIDS).visible) == []                # [torch] ambiguous prefix (GPU 3, 6) stops
    assert list(parse(f"{UUIDS[1]},GPU-ffffffff", UUIDS).visible) == [1]   # [torch] unknown prefix stops
    assert list(parse(f"{UUIDS[1]},0,{UUIDS[2]}", UUIDS).visible) == [1]   # [torch] non-UUID stops a UUID list
    assert list(parse(f"{UUIDS[1]},{UUIDS[1][:9]}", UUIDS).visible) == []  # [torch] duplicate -> empty set
    assert list(parse(f"0,{UUIDS[1]}", UUIDS).visible) == [0]       # ordinal list: a UUID is not a number


def test_mig_single_instance():
    v = parse(f"MIG-{UUIDS[3]}/1/0,MIG-{UUIDS[4]}/1/0", UUIDS)     # [guide] only one MIG instance
    assert v.count == 1 and v.visible == (3,)
    assert "single MIG instance" in [e.reason for e in v.entries if e.status == "dropped"][0]


@pytest.mark.parametrize("call, fragment", [
    (lambda: parse([0, 1], 8), "Environment variables are strings"),
    (lambda: parse("0", -1), "GPU count >= 0"),
    (lambda: parse("0", "8"), "GPU count"),
    (lambda: parse("0", ["0"]), "starting with 'GPU-'"),
    (lambda: parse("0", [UUIDS[0], UUIDS[0]]), "unique"),
    (lambda: parse("GPU-1234", 8), "need the machine's UUIDs"),
])
def test_bad_arguments(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_html_table_marks_every_physical_gpu():
    html = parse("2,0", 8).to_html()
    assert html.count("<tr style=") == 8 and html.count("/GPU:") == 2 and html.count("hidden") == 6
    assert "Ignored entries" in parse("0,x", 8).to_html()


@pytest.mark.timing      # a wall-clock bound: run alone, after the parallel tests (`make unit`)
def test_widget_updates_headless_and_fast():
    box = visibility_explorer(n_gpus=8, value="2,0")
    assert "2 of 8" in box.table.value
    start = time.perf_counter()
    box.text.value = "3,1,x"
    elapsed = time.perf_counter() - start
    assert "2 of 8" in box.table.value and "not a number" in box.table.value
    assert elapsed < 0.5
    box.unset.value = True
    assert "all 8 GPU(s) visible" in box.table.value and box.text.disabled
    box.unset.value = False
    box.text.value = "GPU-zz"
    assert "no GPU visible" in box.table.value
    with pytest.raises(ValueError, match="n_gpus"):
        visibility_explorer(n_gpus=0)


def test_explorer_uuid_prefixes_follow_the_board_not_the_number():
    """Notebook 01 cells 25-26: the prefixes of nvidia-smi's GPU 5 and 2 are CUDA's GPU 1 and 6 while
    CUDA_DEVICE_ORDER is unset (fastest first) on the mixed server, and CUDA's 5 and 2 with PCI_BUS_ID; the
    order toggle is a radio button (labels never cut off)."""
    import ipywidgets as widgets

    value = UUIDS[5][:8] + "," + UUIDS[2][:8]
    assert value == "GPU-2e1e,GPU-c242"
    assert "/GPU:0 -> CUDA GPU 5" in repr(parse_cuda_visible_devices(value, UUIDS))
    box = visibility_explorer(n_gpus=8, value=value)
    assert isinstance(box.order, widgets.RadioButtons)
    assert "prefix of CUDA GPU 1&#x27;s UUID" in box.table.value and "prefix of CUDA GPU 6&#x27;s UUID" in box.table.value
    box.order.value = "PCI_BUS_ID"
    assert "prefix of CUDA GPU 5&#x27;s UUID" in box.table.value and "prefix of CUDA GPU 2&#x27;s UUID" in box.table.value


def test_cuda_device_order_decides_which_board_an_ordinal_is():
    """[order] The ordinals are CUDA's numbers: nvidia-smi's only with PCI_BUS_ID."""
    assert cuda_numbering(4, "PCI_BUS_ID") == (0, 1, 2, 3)
    assert cuda_numbering(4) == (None,) * 4 == cuda_numbering(4, "FASTEST_FIRST")   # the heuristic: unknown
    assert cuda_numbering(4, None, [2, 3, 0, 1]) == (2, 3, 0, 1)
    assert cuda_numbering(4, "PCI_BUS_ID", [2, 3, 0, 1]) == (0, 1, 2, 3)             # the order given is unused
    fastest = example_fastest_first(8)
    assert sorted(fastest) == list(range(8)) and set(fastest[:4]) == {4, 5, 6, 7}
    mixed = parse("2,0", 8, fastest_first=fastest)
    by_bus = parse("2,0", 8, device_order="PCI_BUS_ID", fastest_first=fastest)
    assert mixed.visible == by_bus.visible == (2, 0)                   # the same CUDA ordinals...
    assert mixed.smi == (fastest[2], fastest[0]) and by_bus.smi == (2, 0)   # ...are other boards
    assert mixed.smi != by_bus.smi
    assert parse("2,0", 8).smi == (None, None)
    assert "nvidia-smi" not in repr(parse("2,0", 8))                   # default repr unchanged
    assert f"nvidia-smi GPU {fastest[2]}" in repr(mixed) and "fastest first" in repr(mixed)
    assert "by PCI bus, as nvidia-smi does" in repr(by_bus)
    assert "number unknown" in repr(parse("2,0", 8, device_order="FASTEST_FIRST"))
    with pytest.raises(ValueError, match="CUDA_DEVICE_ORDER must be"):
        parse("0", 8, device_order="pci_bus_id")
    with pytest.raises(ValueError, match="exactly once"):
        parse("0", 4, fastest_first=[0, 0, 1, 2])
    with pytest.raises(ValueError, match="exactly once"):
        parse("0", 4, fastest_first=[0, 1, 2])
    with pytest.raises(ValueError, match="exactly once"):
        parse("0", 2, fastest_first=[0, "1"])


def test_a_uuid_selects_the_same_board_in_either_order():
    """UUIDs name a board, not a position: the list is indexed by CUDA's numbers, which move."""
    smi_uuids, fastest = example_uuids(8), example_fastest_first(8)
    boards = set()
    for order in (None, "PCI_BUS_ID"):
        cuda_uuids = [smi_uuids[k] for k in cuda_numbering(8, order, fastest)]
        v = parse_cuda_visible_devices(smi_uuids[5][:10], cuda_uuids, device_order=order, fastest_first=fastest)
        boards.add(v.smi)
    assert boards == {(5,)}


def test_bus_ids_from_nvidia_smi_and_tensorflow_match():
    assert normalise_bus_id("00000000:3B:00.0") == normalise_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("00000001:AF:1F.7") != normalise_bus_id("0000:af:1f.7")
    for bad in ("3b:00.0", "0000:zz:00.0", "", 5):
        with pytest.raises(ValueError, match="PCI bus ID"):
            normalise_bus_id(bad)


def test_widget_order_toggle_moves_ordinals_not_uuids():
    box = visibility_explorer(n_gpus=8, value="2,0")
    fastest = example_fastest_first(8)
    assert box.order.value == "FASTEST_FIRST" and "fastest first" in box.table.value
    assert f"<td>GPU 2</td><td>GPU {fastest[2]}</td><td>/GPU:0</td>" in box.table.value
    box.order.value = "PCI_BUS_ID"
    assert "<td>GPU 2</td><td>GPU 2</td><td>/GPU:0</td>" in box.table.value and "by PCI bus" in box.table.value
    box.text.value = example_uuids(8)[5][:10]
    by_bus = box.table.value
    box.order.value = "FASTEST_FIRST"
    row = lambda html: [r for r in html.split("<tr") if "/GPU:0" in r][0]
    assert "<td>GPU 5</td><td>/GPU:0</td>" in row(by_bus) and "<td>GPU 5</td><td>/GPU:0</td>" in row(box.table.value)
