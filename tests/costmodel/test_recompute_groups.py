"""Recomputation's backward: what a checkpointed group keeps (its input) and what its
backward re-creates at once (every saved tensor of the group, less that input), for
one block a checkpoint (Megatron-LM uniform/block N = 1, torchtitan, DeepSpeed interval
1) and for groups of N blocks (Megatron-LM ``--recompute-method uniform
--recompute-num-layers N``). Hand-derived on a table of 4 blocks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate
from pptune.costmodel.memory import (
    Recompute,
    uniform_groups,
    with_groups_recomputed,
    with_recompute,
)
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.simulate import Link
from pptune.costmodel.split_memory import range_max
from pptune.costmodel.table import CostTable, LayerCosts, stage_costs

NAMES = ["embedding", "block0", "block1", "block2", "block3", "head"]


def _table() -> CostTable:
    """Every layer: F 1 s, B 2 s, 100 saved bytes, 5 output bytes, no parameters."""
    n = len(NAMES)
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.0] * n, [100.0] * n, [5.0] * n)
    return CostTable(NAMES, [0.0] * n, 2, {1: costs}, 128, 1e9,
                     Link(0.0), Link(0.0), AllReduceLink(0.0, 1e9), AllReduceLink(0.0, 1e9))


def test_one_block_a_checkpoint_keeps_its_input_and_reruns_the_rest() -> None:
    c = with_groups_recomputed(_table(), [(1,), (2,), (3,), (4,)]).by_mb[1]
    assert list(c.act_bytes) == [100, 5, 5, 5, 5, 100]
    # its backward re-creates its 100 saved bytes, of which the 5-byte input was kept
    assert list(c.rerun_bytes) == [0, 95, 95, 95, 95, 0]
    assert list(c.bwd_s) == [2, 3, 3, 3, 3, 2]


def test_a_group_of_two_keeps_one_input_and_reruns_both_blocks_at_once() -> None:
    c = with_groups_recomputed(_table(), [(1, 2), (3, 4)]).by_mb[1]
    assert list(c.act_bytes) == [100, 5, 0, 5, 0, 100]
    assert list(c.rerun_bytes) == [0, 195, 0, 195, 0, 0]  # 100 + 100 - 5
    assert list(c.bwd_s) == [2, 3, 3, 3, 3, 2]  # every block's forward once more, as N = 1


def test_uniform_groups_restart_at_every_stage() -> None:
    # megatron-core's uniform method groups the layers of each model chunk from its first
    # (transformer_block.py _checkpointed_forward); the last group may be short
    assert uniform_groups(NAMES, (3, 3), 2) == [(1, 2), (3, 4)]
    assert uniform_groups(NAMES, (4, 2), 2) == [(1, 2), (3,), (4,)]
    assert uniform_groups(NAMES, (4, 2), 8) == [(1, 2, 3), (4,)]
    assert uniform_groups(NAMES, (3, 3), 1) == [(1,), (2,), (3,), (4,)]


def test_a_stage_reruns_its_largest_group() -> None:
    table = with_groups_recomputed(_table(), [(1, 2, 3), (4,)])
    assert [s.rerun_bytes for s in stage_costs(table, 1, [4, 2])] == [295.0, 95.0]
    assert [s.rerun_bytes for s in stage_costs(_table(), 1, [4, 2])] == [0.0, 0.0]


def _activation_bytes(group: int | None) -> list[float]:
    """1F1B, pp 2, m 4, split (3, 3): stage 0 holds 2 micro-batches, stage 1 one."""
    recompute = Recompute.NONE if group is None else Recompute.FULL
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0.0, recompute_group=group or 1)
    plan = evaluate(_table(), req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (3, 3),
                                            recompute=recompute))
    return [m.activation_bytes for m in plan.memory]


def test_memory_holds_the_in_flight_inputs_and_one_group_rerun() -> None:
    # none: 2 x 300 and 1 x 300
    assert _activation_bytes(None) == [600.0, 300.0]
    # one block a checkpoint: stage 0 keeps 100 + 5 + 5 a micro-batch, twice, and reruns
    # one block (95) in a backward; stage 1 keeps 5 + 5 + 100 once, and 95
    assert _activation_bytes(1) == [2 * 110 + 95, 110 + 95]
    # groups of two: one input a stage (100 + 5, 5 + 100), the pair rerun at once (195)
    assert _activation_bytes(2) == [2 * 105 + 195, 105 + 195]


def test_groups_price_the_same_step_as_one_block_a_checkpoint() -> None:
    table = _table()
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (3, 3), recompute=Recompute.FULL)
    one = evaluate(table, PlanRequest(gpus=2, global_batch=4), spec)
    two = evaluate(table, PlanRequest(gpus=2, global_batch=4, recompute_group=2), spec)
    assert two.step_time_s == pytest.approx(one.step_time_s)


def test_groups_apply_to_full_recomputation_only() -> None:
    table = _table()
    assert with_recompute(table, Recompute.NONE, groups=[(1, 2)]) is table
    selective = with_recompute(table, Recompute.SELECTIVE, 2, groups=[(1, 2)])
    assert list(selective.by_mb[1].act_bytes) == list(
        with_recompute(table, Recompute.SELECTIVE, 2).by_mb[1].act_bytes)
    assert replace(PlanRequest(gpus=2, global_batch=4), recompute_group=3).recompute_group == 3


def test_the_range_max_is_the_slices() -> None:
    values = [3.0, 0.0, 7.0, 1.0, 7.0, 2.0, 0.0, 9.0, 4.0]
    top = range_max(values)
    for s in range(len(values) + 1):
        for e in range(len(values) + 1):
            assert top(s, e) == max(values[s:e], default=0.0)
