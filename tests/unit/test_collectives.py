"""gputrain_kit.collectives: reading the collectives of a compiled XLA program (kind, bytes, group size, whether
it moves an argument of the program), on HLO text in the spellings XLA uses (three ways to write replica
groups, combined ops, asynchronous start/done pairs), and refusing what is not a compiled program."""
from __future__ import annotations

import pytest

from gputrain_kit._args import ArgumentTypeError
from gputrain_kit.collectives import KINDS, Collective, Collectives, read_collectives

HLO = """HloModule jit_step, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add = f32[] add(%x, %y)
}

ENTRY %main (param: f32[32,512], param.1: f32[128,256]) -> f32[256,512] {
  %param = f32[32,512]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}
  %param.1 = f32[128,256]{1,0} parameter(1)
  %all-gather = f32[256,512]{1,0} all-gather(%param), channel_id=1, replica_groups=mesh['axis_0'=8,'axis_1'=1] {'axis_0'}, dimensions={0}, use_global_device_ids=true, metadata={op_name="jit(step)/jvp(d1)/dot_general"}
  %fusion = f32[128,512]{1,0} fusion(%param.1), kind=kLoop, calls=%fused
  %all-gather.1 = f32[128,512]{0,1} all-gather(%fusion), channel_id=2, replica_groups=[2,4]<=[8], dimensions={1}, use_global_device_ids=true, metadata={op_name="jit(step)/jvp(d2)/dot_general"}
  %all-reduce = (f32[128,256]{1,0}, f32[128]{0}) all-reduce(%fusion, %fusion), channel_id=3, replica_groups={{0,4},{1,5},{2,6},{3,7}}, use_global_device_ids=true, to_apply=%add
  %reduce-scatter = f32[64,512]{1,0} reduce-scatter(%fusion), channel_id=4, replica_groups={}, dimensions={0}, to_apply=%add
  %all-to-all = (f32[1,32,64]{2,1,0}, f32[1,32,64]{2,1,0}) all-to-all(%fusion, %fusion), channel_id=5, replica_groups={{0,1}}
  %all-gather-start = (f32[32,512]{1,0}, f32[256,512]{1,0}) all-gather-start(%param), channel_id=6, replica_groups=[1,8]<=[8], dimensions={0}
  %all-gather-done = f32[256,512]{1,0} all-gather-done(%all-gather-start)
  %all-reduce-start = bf16[64]{0} all-reduce-start(%fusion), channel_id=7, replica_groups=[4,2]<=[8], to_apply=%add
  %all-reduce-done = bf16[64]{0} all-reduce-done(%all-reduce-start)
  ROOT %copy = f32[256,512]{1,0} copy(%all-gather)
}
"""


def test_each_collective_is_read_with_its_bytes_group_and_operand():
    found = read_collectives(HLO)
    assert isinstance(found, Collectives) and all(isinstance(c, Collective) for c in found)
    assert [c.kind for c in found] == ["all-gather", "all-gather", "all-reduce", "reduce-scatter", "all-to-all",
                                       "all-gather", "all-reduce"]
    gather, activation, reduce, scatter, to_all, started, started_reduce = found
    assert (gather.nbytes, gather.group, gather.of_input, gather.arrays) == (256 * 512 * 4, 8, True, ((256, 512),))
    assert gather.op_name == "jit(step)/jvp(d1)/dot_general"
    assert (activation.nbytes, activation.group, activation.of_input) == (128 * 512 * 4, 4, False)
    assert (reduce.nbytes, reduce.group, reduce.arrays) == ((128 * 256 + 128) * 4, 2, ((128, 256), (128,)))
    assert (scatter.group, scatter.array_bytes) == (8, 64 * 512 * 4 * 8)    # empty groups: every device
    assert (to_all.nbytes, to_all.group, to_all.array_bytes) == (2 * 32 * 64 * 4, 2, 2 * 2 * 32 * 64 * 4)
    assert (started.nbytes, started.group, started.of_input) == (256 * 512 * 4, 8, True)   # the result, not the operand
    assert (started_reduce.nbytes, started_reduce.group) == (64 * 2, 2)                  # bf16: 2 bytes


def test_the_scaling_book_factors_and_the_totals():
    found = read_collectives(HLO)
    assert KINDS["all-reduce"] == 2 and KINDS["all-gather"] == KINDS["reduce-scatter"] == 1 and KINDS["all-to-all"] == 0.25
    reduce = found[2]
    assert reduce.cost_bytes == 2 * reduce.array_bytes
    assert found[4].cost_bytes == found[4].array_bytes / 4
    kinds = found.by_kind()
    assert kinds["all-gather"]["count"] == 3 and kinds["all-reduce"]["count"] == 2
    assert kinds["all-gather"]["bytes"] == 2 * 256 * 512 * 4 + 128 * 512 * 4
    assert found.cost_bytes == sum(row["cost"] for row in kinds.values())
    text = repr(found)
    assert "all-gather" in text and "total" in text and f"{kinds['all-gather']['bytes']:,}" in text
    assert "none" in repr(read_collectives("HloModule empty\n\nENTRY %m () -> f32[] {\n}\n"))


def test_a_compiled_object_is_read_through_its_as_text():
    class Compiled:
        def as_text(self):
            return HLO
    assert len(read_collectives(Compiled())) == 7


@pytest.mark.parametrize("given, error, words", [
    (42, ArgumentTypeError, ["read_collectives", "compiled must be", "got"]),
    ("module @jit_f { func.func public @main", ValueError, ["HloModule", "compile()", "StableHLO"]),
])
def test_what_is_not_a_compiled_program_is_refused_in_words(given, error, words):
    with pytest.raises(error) as caught:
        read_collectives(given)
    assert all(w in str(caught.value) for w in words), str(caught.value)
