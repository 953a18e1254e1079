"""Backward split as torch runs it: a stage's B and W ops priced at the split costs.

torch.distributed.pipelining splits a backward into ``stage_backward_input``
(B) and ``stage_backward_weight`` (W), which cost more than one fused backward
(its W runs one autograd pass per parameter group from saved intermediates).
A profile may carry those costs beside the fused ones (``split_bwd_s`` /
``split_wgrad_s``); a schedule's B and W ops take them, its whole backwards
(BW, and the backward half of an overlapped F&B pair) the fused cost.
"""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel.memory import with_groups_recomputed
from pptune.costmodel.schedule_ops import OpKind
from pptune.costmodel.simulate import StageCost, overlapped_pair_s, simulate
from pptune.costmodel.table import LayerCosts, stage_costs
from pptune.costs.profiles import analytic_profile, cost_table

SPLIT = StageCost(fwd_s=1.0, bwd_s=1.5, wgrad_s=0.5, split_bwd_s=2.5, split_wgrad_s=1.5)


def test_one_stage_zero_bubble_runs_split_costs_and_1f1b_the_fused_ones() -> None:
    # one stage, m micro-batches, nothing to wait on: the step is the sum of its ops
    zb = simulate("zb-h1", 1, 3, [SPLIT])
    assert zb.step_time_s == pytest.approx(3 * (1.0 + 2.5 + 1.5))
    plain = simulate("1f1b", 1, 3, [SPLIT])
    assert plain.step_time_s == pytest.approx(3 * (1.0 + 1.5 + 0.5))


def test_without_split_costs_the_split_schedule_uses_the_fused_parts() -> None:
    fused = dataclasses.replace(SPLIT, split_bwd_s=None, split_wgrad_s=None)
    assert simulate("zb-h1", 1, 3, [fused]).step_time_s == pytest.approx(3 * 3.0)


@pytest.mark.parametrize("schedule,p,m", [("zb-h1", 2, 4), ("zbv", 2, 4)])
def test_every_b_and_w_event_lasts_its_split_cost(schedule: str, p: int, m: int) -> None:
    n = p * (2 if schedule == "zbv" else 1)
    r = simulate(schedule, p, m, [SPLIT] * n)
    seen = {OpKind.B: 0, OpKind.W: 0}
    for e in r.events:
        if e.op.kind in seen:
            seen[e.op.kind] += 1
            want = 2.5 if e.op.kind is OpKind.B else 1.5
            assert e.end_s - e.start_s == pytest.approx(want)
    assert seen[OpKind.B] == seen[OpKind.W] == n * m


def test_dualpipev_pairs_and_whole_backwards_take_the_fused_backward() -> None:
    r = simulate("dualpipev", 2, 4, [SPLIT] * 4)
    kinds = {e.op.kind for e in r.events}
    assert OpKind.FB in kinds
    pair = overlapped_pair_s(SPLIT, SPLIT)
    assert pair == pytest.approx(1.0 + 1.5 + 0.5)  # fused backward, no communication
    for e in r.events:
        width = e.end_s - e.start_s
        if e.op.kind is OpKind.FB:
            assert width == pytest.approx(pair)
        elif e.op.kind is OpKind.BW:
            assert width == pytest.approx(2.0)
        elif e.op.kind is OpKind.B:
            assert width == pytest.approx(2.5)


def _table_with_split() -> object:
    table = cost_table(analytic_profile("gpt-small", "h100-sxm", [1]))
    c = table.by_mb[1]
    n = len(c.fwd_s)
    by = {1: dataclasses.replace(c, split_bwd_s=[1.0 + i for i in range(n)],
                                 split_wgrad_s=[0.5 * i for i in range(n)])}
    return dataclasses.replace(table, by_mb=by)


def test_stage_sums_carry_the_split_costs() -> None:
    table = _table_with_split()
    n = len(table.by_mb[1].fwd_s)  # type: ignore[attr-defined]
    first = n // 2
    stages = stage_costs(table, 1, [first, n - first])  # type: ignore[arg-type]
    assert stages[0].split_bwd_s == pytest.approx(sum(1.0 + i for i in range(first)))
    assert stages[1].split_wgrad_s == pytest.approx(sum(0.5 * i for i in range(first, n)))


def test_stage_sums_without_split_costs_leave_them_unset() -> None:
    table = cost_table(analytic_profile("gpt-small", "h100-sxm", [1]))
    n = len(table.by_mb[1].fwd_s)
    stages = stage_costs(table, 1, [n])
    assert stages[0].split_bwd_s is None and stages[0].split_wgrad_s is None


def test_a_recomputed_layer_reruns_its_forward_in_the_split_b_too() -> None:
    table = _table_with_split()
    c: LayerCosts = table.by_mb[1]  # type: ignore[attr-defined]
    redone = with_groups_recomputed(table, [(2,)]).by_mb[1]  # type: ignore[arg-type]
    assert redone.split_bwd_s[2] == pytest.approx(c.split_bwd_s[2] + c.fwd_s[2])
    assert redone.split_bwd_s[1] == pytest.approx(c.split_bwd_s[1])
    assert redone.split_wgrad_s == c.split_wgrad_s


def test_a_profile_with_split_costs_reaches_the_table() -> None:
    prof = analytic_profile("gpt-small", "h100-sxm", [1])
    for i, layer in enumerate(prof.layers):
        cost = layer.per_micro_batch["1"]
        cost.split_bwd_s = cost.bwd_s * 1.25
        cost.split_wgrad_s = cost.wgrad_s * 1.5 + i * 1e-6
    c = cost_table(prof).by_mb[1]
    assert c.split_bwd_s == pytest.approx([x * 1.25 for x in c.bwd_s])
    assert c.split_wgrad_s[3] == pytest.approx(c.wgrad_s[3] * 1.5 + 3e-6)


def test_a_profile_split_only_on_some_layers_falls_back_per_layer() -> None:
    prof = analytic_profile("gpt-small", "h100-sxm", [1])
    cost = prof.layers[1].per_micro_batch["1"]
    cost.split_bwd_s, cost.split_wgrad_s = 9.0, 8.0
    c = cost_table(prof).by_mb[1]
    assert c.split_bwd_s[1] == 9.0 and c.split_wgrad_s[1] == 8.0
    assert c.split_bwd_s[2] == c.bwd_s[2] and c.split_wgrad_s[2] == c.wgrad_s[2]
