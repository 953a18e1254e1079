"""The search over cost keys (per-layer splits and precisions), one table each."""

from __future__ import annotations

import pytest

from pptune.costmodel.comm import AllReduceLink, all_to_all_s, group_link
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Group
from pptune.costmodel.search import (
    CostTable,
    LayerCosts,
    PlanRequest,
    Recompute,
    Schedule,
    Sharding,
    search,
)
from pptune.costmodel.simulate import Link


def table(fwd_s: float, n: int = 4) -> CostTable:
    c = LayerCosts([fwd_s] * n, [2 * fwd_s] * n, [0.0] * n, [0.0] * n, [0.0] * n)
    free = AllReduceLink(0.0, 1e30)
    return CostTable([f"l{i}" for i in range(n)], [0.0] * n, 2, {1: c}, 128, 1e12,
                     Link(0.0, 1e30), Link(0.0, 1e30), free, free)


PLAIN = dict(shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
             schedules=(Schedule.ONE_F_ONE_B,), reserve_bytes=0.0)


def test_search_walks_every_key_and_records_the_winners() -> None:
    # 8 GPUs, global batch 8, micro-batch 1. tp1: dp = 8 / pp, m = 8 / dp, a layer
    # 3 s (F + B) -> pp=1: 1 micro-batch x 4 layers x 3 s = 12 s. tp2: each layer
    # 1 s, dp = 4 / pp -> pp=1: m = 2, 2 x 4 x 1 s = 8 s: tp2 wins.
    tables = {CostKey(tp=1): table(1.0), CostKey(tp=2): table(1 / 3)}
    req = PlanRequest(gpus=8, global_batch=8, pp=(1,), cost_keys=tuple(tables), top=2,
                      **PLAIN)  # type: ignore[arg-type]
    res = search(tables.__getitem__, req)
    best, second = res.plans
    assert (best.key, best.tp, best.dp, best.num_microbatches) == (CostKey(tp=2), 2, 4, 2)
    assert best.step_time_s == pytest.approx(8.0)
    assert (second.key, second.dp, second.step_time_s) == (CostKey(tp=1), 8, pytest.approx(12.0))


def test_context_parallel_key_divides_the_world() -> None:
    # cp2 on 8 GPUs: tp x cp = 2, so dp = 4 at pp=1; an FP8 key is its own table
    key = CostKey(cp=2, precision=Precision.FP8)
    req = PlanRequest(gpus=8, global_batch=8, pp=(1,), cost_keys=(key,), top=1,
                      **PLAIN)  # type: ignore[arg-type]
    plan = search({key: table(1.0)}.__getitem__, req).plans[0]
    assert (plan.dp, plan.cp, plan.precision, plan.num_microbatches) == (4, 2, Precision.FP8, 2)
    assert str(plan.key) == "tp1 cp2 fp8"


def test_one_table_answers_only_for_its_key() -> None:
    req = PlanRequest(gpus=2, global_batch=2, cost_keys=(CostKey(), CostKey(tp=2)),
                      **PLAIN)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pass a table source"):
        search(table(1.0), req)


def test_experts_that_do_not_divide_the_stage_are_rejected() -> None:
    key = CostKey(ep=3)
    req = PlanRequest(gpus=4, global_batch=4, cost_keys=(key,), **PLAIN)  # type: ignore[arg-type]
    res = search({key: table(1.0)}.__getitem__, req)
    assert not res.plans
    assert res.rejected["experts_do_not_divide_ranks"] == 3  # pp = 1, 2, 4


def test_group_link_counts_the_nics_of_a_group_per_node() -> None:
    intra, inter = AllReduceLink(10e-6, 360e9), AllReduceLink(20e-6, 48e9)
    assert group_link(Group(8, 8, 1), intra, inter) is intra
    assert group_link(Group(16, 1, 16), intra, inter) == AllReduceLink(20e-6, 48e9)
    assert group_link(Group(16, 4, 4), intra, inter) == AllReduceLink(20e-6, 192e9)
    assert group_link(Group(64, 8, 8), intra, inter).busbw_bytes_per_s == 360e9  # node-bound


def test_all_to_all_splits_near_and_far_shares() -> None:
    nv, nic = Link(5e-6, 400e9), Link(20e-6, 50e9)
    # 8 in one node: 7/8 of 8 MB over NVLink
    assert all_to_all_s(8e6, Group(8, 8, 1), nv, nic) == pytest.approx(5e-6 + 7e6 / 400e9)
    # 64 over 8 nodes: 7/64 near (NVLink), 56/64 far (NIC) at once: the NIC decides
    assert all_to_all_s(64e6, Group(64, 8, 8), nv, nic) == pytest.approx(20e-6 + 56e6 / 50e9)
    assert all_to_all_s(1e6, Group(1, 1, 1), nv, nic) == 0.0


def test_rank_orders_megatron_cannot_lay_out_are_not_searched() -> None:
    # ep 2 with tp 1: the pipeline-inside-dp order needs ep x etp = tp x cp, so only
    # tp-dp-pp is planned (layout.py's rule), without an error
    key = CostKey(ep=2)
    req = PlanRequest(gpus=16, global_batch=16, pp=(2,), cost_keys=(key,), top=3,
                      **PLAIN)  # type: ignore[arg-type]
    res = search({key: table(1.0)}.__getitem__, req)
    assert res.plans and {p.rank_order.value for p in res.plans} == {"tp-dp-pp"}


def test_the_split_balances_layers_with_their_all_to_all() -> None:
    # four equal layers, the last two with 3 s of all-to-all each: two stages split 3 + 1
    c = LayerCosts([1.0] * 4, [1.0] * 4, [0.0] * 4, [0.0] * 4, [0.0] * 4,
                   fwd_a2a_s=[0.0, 0.0, 1.5, 1.5], bwd_a2a_s=[0.0, 0.0, 1.5, 1.5])
    assert c.work_s() == [2.0, 2.0, 5.0, 5.0]
    free = AllReduceLink(0.0, 1e30)
    t = CostTable([f"l{i}" for i in range(4)], [0.0] * 4, 2, {1: c}, 128, 1e12,
                  Link(0.0, 1e30), Link(0.0, 1e30), free, free)
    req = PlanRequest(gpus=2, global_batch=4, pp=(2,), top=1, with_best_pp1=False,
                      **PLAIN)  # type: ignore[arg-type]
    assert search(t, req).plans[0].stage_layers == [3, 1]
