"""The DualPipes and the all-to-all overlap as plans: splits, memory, reduction, bounds,
candidates, and Megatron-LM's combined 1F1B order; values derived by hand."""

from __future__ import annotations

import pytest

from pptune.costmodel.bounds import lower_bound
from pptune.costmodel.candidates import Reason, a2a_overlaps, candidates
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate, stage_layout
from pptune.costmodel.inflight import peak_inflight_per_stage
from pptune.costmodel.memory import Recompute
from pptune.costmodel.schedules import (
    Schedule,
    ScheduleError,
    format_orders,
    op_orders,
    stage_chunk_map,
)
from pptune.costmodel.search import search
from pptune.costmodel.sharding import Sharding, stage_comm
from pptune.costmodel.simulate import Link, simulate, uniform_stages
from pptune.costmodel.table import CostTable, LayerCosts, stage_costs

AR = AllReduceLink(0.0, 1e9)


def table(n: int = 6, a2a: float = 0.0, param_bytes: float = 2e6) -> CostTable:
    """n layers of F 1, B 2, W 0.5, 100 activation bytes, 5 output bytes; with ``a2a``
    an all-to-all of that many seconds in each layer's forward and backward."""
    names = ["embedding", *[f"block{i}" for i in range(n - 2)], "head"]
    comm = [a2a] * n if a2a else []
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.5] * n, [100.0] * n, [5.0] * n,
                       fwd_a2a_s=comm, bwd_a2a_s=comm)
    return CostTable(names, [param_bytes] * n, 2, {1: costs}, 128, 1e12, Link(0.0), Link(0.0),
                     AR, AR)


# --- Megatron-LM's combined 1F1B order (--overlap-moe-expert-parallel-comm) -----------


def test_combined_order_without_a_pipeline_is_megatrons_phases() -> None:
    # combined_1f1b_schedule_for_no_pipelining: the first forward alone, then each
    # backward with the next forward, the last backward alone
    assert format_orders(op_orders("1f1b", 1, 3, combined=True)) == "dev0: F0 F1&B0 F2&B1 B2"


def test_combined_interleaved_order_by_hand() -> None:
    # pp 2, v 2, m 4: warm-up (p-d-1)*2 + (v-1)*p + 1 = 5 forwards on device 0 and 3
    # on device 1 (one more than interleaved's), then forward k+warm-up paired with
    # backward k, then the remaining backwards (megatron-core 0.16
    # get_pp_rank_microbatches and the steady loop of the interleaved schedule)
    assert format_orders(op_orders("interleaved-1f1b", 2, 4, 2, combined=True)) == (
        "dev0: F0@0 F1@0 F0@2 F1@2 F2@0 F3@0&B0@2 F2@2&B1@2 F3@2&B0@0 B1@0 B2@2 B3@2 B2@0 "
        "B3@0\n"
        "dev1: F0@1 F1@1 F0@3 F1@3&B0@3 F2@1&B1@3 F3@1&B0@1 F2@3&B1@1 F3@3&B2@3 B3@3 B2@1 B3@1"
    )
    # device 1's stages hold one more micro-batch: a pair's forward is alive while its
    # backward runs (stage 3: F0 then F1&B0), and stage 1 gets one more warm-up forward
    assert peak_inflight_per_stage("interleaved-1f1b", 2, 4, 2) == [4, 3, 2, 1]
    assert peak_inflight_per_stage("interleaved-1f1b", 2, 4, 2, combined=True) == [4, 4, 2, 2]
    # 1F1B's min(m, p - s) + 1 once m is past the warm-up (the extra forward)
    assert peak_inflight_per_stage("1f1b", 4, 8, combined=True) == [5, 4, 3, 2]


def test_only_1f1b_and_interleaved_have_a_combined_order() -> None:
    for schedule in ("gpipe", "zb-h1", "zbv", "dualpipev"):
        with pytest.raises(ScheduleError, match="has no combined order"):
            op_orders(schedule, 2, 8, combined=True)


def test_combined_pairs_hide_the_all_to_all() -> None:
    # pp 1, m 4, F 1, whole backward 2, all-to-all a = 0.5 each way. Plain 1F1B: every
    # op waits for its all-to-all, 4 (1.5 + 2.5) = 16. Combined: F0 alone 1.5, three
    # pairs of max(1 + 2, 0.5 + 0.5, 1 + 0.5, 2 + 0.5) = 3, B3 alone 2.5: 13.
    st = uniform_stages(1, 1.0, 2.0, fwd_comm_s=0.5, bwd_comm_s=0.5)
    assert simulate("1f1b", 1, 4, st).step_time_s == 16.0
    assert simulate("1f1b", 1, 4, st, combined=True).step_time_s == 13.0


# --- the all-to-all on the communication stream -------------------------------------


def test_dense_stages_carry_no_communication() -> None:
    assert all(s.fwd_comm_s == 0.0 == s.bwd_comm_s for s in stage_costs(table(), 1, [3, 3]))


@pytest.mark.parametrize(("schedule", "p", "m", "v", "split"), [
    ("gpipe", 2, 4, 1, [3, 3]), ("1f1b", 2, 4, 1, [3, 3]), ("zb-h1", 2, 4, 1, [3, 3]),
    ("interleaved-1f1b", 2, 4, 2, [2, 1, 1, 2]), ("zbv", 2, 4, 2, [2, 1, 1, 2]),
])
def test_plain_ops_pay_the_all_to_all_as_before(schedule: str, p: int, m: int, v: int,
                                                split: list[int]) -> None:
    # a schedule without pairs runs the same step whether the all-to-all is its own
    # stream (now) or folded into the compute (before): plain ops wait for it
    t = table(a2a=0.25)
    streamed = simulate(schedule, p, m, stage_costs(t, 1, split), v=v)
    folded = simulate(schedule, p, m, stage_costs(t, 1, split, a2a_stream=False), v=v)
    assert streamed.step_time_s == folded.step_time_s


def test_dualpipev_pairs_hide_the_all_to_all_only_with_the_overlap() -> None:
    t = table(a2a=0.25)
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0.0)
    spec = PlanSpec(Schedule.DUALPIPEV, 2, 1, 4, (2, 1, 1, 2), a2a_overlap=True)
    hidden = evaluate(t, req, spec)
    shown = evaluate(t, req, PlanSpec(Schedule.DUALPIPEV, 2, 1, 4, (2, 1, 1, 2)))
    stages = stage_costs(t, 1, [2, 1, 1, 2])
    assert hidden.sim.step_time_s == simulate("dualpipev", 2, 4, stages).step_time_s
    folded = stage_costs(t, 1, [2, 1, 1, 2], a2a_stream=False)
    assert shown.sim.step_time_s == simulate("dualpipev", 2, 4, folded).step_time_s
    assert hidden.step_time_s < shown.step_time_s
    # the ideal step is the devices' busy time, the hidden all-to-alls left out: never
    # above the step (it had counted them as work, 100% efficient beside a bubble)
    for plan in (hidden, shown):
        busy = sum(d.busy_s for d in plan.sim.devices)
        assert plan.ideal_step_s == pytest.approx(busy / 2, rel=1e-12)
        assert plan.ideal_step_s <= plan.step_time_s
        assert plan.efficiency == pytest.approx(
            (1 - plan.bubble_rate) * plan.sim.step_time_s / plan.step_time_s, rel=1e-9)


def test_which_plans_search_the_overlap() -> None:
    none, sel, full = Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL
    assert a2a_overlaps(False, Schedule.DUALPIPEV, 4, 8, none) == [False]  # dense: nothing to hide
    assert a2a_overlaps(True, Schedule.DUALPIPEV, 4, 8, none) == [True]
    assert a2a_overlaps(True, Schedule.DUALPIPE, 4, 8, sel) == [False]  # torchtitan: not with AC
    assert a2a_overlaps(True, Schedule.INTERLEAVED, 4, 8, sel) == [False, True]
    assert a2a_overlaps(True, Schedule.INTERLEAVED, 4, 8, full) == [False]  # megatron-core
    assert a2a_overlaps(True, Schedule.ONE_F_ONE_B, 1, 2, none) == [False, True]
    assert a2a_overlaps(True, Schedule.ONE_F_ONE_B, 2, 8, none) == [False]  # needs a VPP
    assert a2a_overlaps(True, Schedule.ZBV, 2, 8, none) == [False]
    # one micro-batch: nothing to pair, the combined order is the plain one (below)
    assert a2a_overlaps(True, Schedule.ONE_F_ONE_B, 1, 1, none) == [False]


def test_combined_order_of_one_micro_batch_is_the_plain_order() -> None:
    assert format_orders(op_orders("1f1b", 1, 1, combined=True)) == "dev0: F0 B0"
    assert op_orders("1f1b", 1, 1, combined=True) == op_orders("1f1b", 1, 1)


# --- dualpipe's chunks: the split, memory and gradient reduction ----------------------


def test_dualpipe_runs_each_chunk_on_two_devices() -> None:
    # pp 2: down stages 0, 1 on devices 0, 1; up stage 2 + c runs chunk c on device 1 - c
    assert stage_chunk_map(Schedule.DUALPIPE, 2) == [0, 1, 0, 1]
    assert stage_chunk_map(Schedule.DUALPIPEV, 2) == [0, 1, 2, 3]
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0.0, shardings=(Sharding.NONE,))
    lay = stage_layout(table(), req, PlanSpec(Schedule.DUALPIPE, 2, 1, 4, (2, 4)))
    assert lay.device_of == [0, 1, 1, 0]
    assert lay.params == [2e6, 4e6, 2e6, 4e6]  # 1e6 parameters a layer
    plan = evaluate(table(), req, PlanSpec(Schedule.DUALPIPE, 2, 1, 4, (2, 4)))
    # each device holds both chunks (DeepSeek's "2x"): 6e6 parameters x 18 bytes
    assert [m.state_bytes for m in plan.memory] == [6e6 * 18, 6e6 * 18]
    one = evaluate(table(), req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (2, 4)))
    assert [m.state_bytes for m in one.memory] == [2e6 * 18, 4e6 * 18]


def test_dualpipe_reduces_each_chunk_over_both_copies() -> None:
    # dp 1: 1F1B reduces nothing; dualpipe's two copies of a chunk sum their gradients,
    # an all-reduce over 2 ranks after the stage's last backward
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0.0, shardings=(Sharding.NONE,))
    one = stage_layout(table(), req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (2, 4)))
    assert [c.tail_s for c in one.comm] == [0.0, 0.0]
    dual = stage_layout(table(), req, PlanSpec(Schedule.DUALPIPE, 2, 1, 4, (2, 4)))
    want = [stage_comm(Sharding.NONE, False, n, 2, AR, 1.0, True, w_b, w_f).tail_s
            for n, w_b, w_f in ((2e6, 5.0, 2.0), (4e6, 10.0, 4.0))]
    assert [c.tail_s for c in dual.comm] == [want[0], want[1], want[0], want[1]]
    assert want[0] > 0


def test_lower_bound_counts_half_the_micro_batches_each_way() -> None:
    # dualpipe pp 2, chunks of 3.5 and 7 (F + B + W) per micro-batch, m 8: each device
    # runs both chunks for 4 micro-batches each, (3.5 + 7) x 4 = 42
    stages = uniform_stages(1, 1.0, 2.0, 0.5) + uniform_stages(1, 2.0, 4.0, 1.0)
    assert lower_bound(Schedule.DUALPIPE, 2, 8, stages + stages) == 42.0
    # dualpipev: both chunks of a device run all 8; device 1 holds stages 1 and 2 and
    # starts after micro-batch 0's F on stage 0 (1.0)
    assert lower_bound(Schedule.DUALPIPEV, 2, 8, stages + stages) == 1.0 + (3.5 + 7.0) * 8
    # 1F1B pays the all-to-all in every op; the DualPipes' bound is their compute
    comm = uniform_stages(2, 1.0, 2.0, 0.5, fwd_comm_s=0.5, bwd_comm_s=0.5)
    # (stage 1 starts after stage 0's first F and B, all-to-alls included: 4.5)
    assert lower_bound(Schedule.ONE_F_ONE_B, 2, 4, comm) == pytest.approx(4.5 + 4 * 4.5)
    assert lower_bound(Schedule.DUALPIPEV, 1, 4, comm) == 4 * 7.0


# --- the search ----------------------------------------------------------------------


def test_candidates_reject_what_the_dualpipes_refuse() -> None:
    # pp 2 and 4 on 4 GPUs, global batch 8, micro-batch 1: m 4 (pp 2) and 8 (pp 4)
    req = PlanRequest(gpus=4, global_batch=8, pp=(2, 4), shardings=(Sharding.NONE,),
                      recomputes=(Recompute.NONE,), rank_orders=(), with_best_pp1=False,
                      schedules=(Schedule.DUALPIPE, Schedule.DUALPIPEV))
    cands, rejected, count = candidates(table(n=10), req)
    # pp 2: m = 8 / 2 = 4 >= 2 pp; pp 4: m = 8 / 1 = 8 >= 2 pp: all four accepted
    assert count == 4 and not rejected
    assert {(c.spec.schedule, c.spec.pp) for c in cands} == {
        (Schedule.DUALPIPE, 2), (Schedule.DUALPIPEV, 2), (Schedule.DUALPIPE, 4),
        (Schedule.DUALPIPEV, 4)}
    few = PlanRequest(**{**req.__dict__, "global_batch": 4})  # m 2 and 4: below 2 pp
    _, rejected, _ = candidates(table(n=10), few)
    assert rejected == {Reason.M_LT_STAGES.value: 4}
    # pp 3, m 4: dualpipe needs an even pp, dualpipev 2 pp = 6 micro-batches
    odd = PlanRequest(**{**req.__dict__, "gpus": 3, "global_batch": 4, "pp": (3,)})
    _, rejected, _ = candidates(table(n=10), odd)
    assert rejected == {Reason.DUALPIPE_EVEN.value: 1, Reason.M_LT_STAGES.value: 1}


def test_search_tries_megatrons_overlap_both_ways_on_moe() -> None:
    req = PlanRequest(gpus=2, global_batch=8, pp=(2,), schedules=(Schedule.INTERLEAVED,),
                      virtual_stages=(2,), shardings=(Sharding.NONE,),
                      recomputes=(Recompute.NONE,), top=10, with_best_pp1=False)
    cands, _, count = candidates(table(a2a=0.25), req)
    assert count == 2 and sorted(c.spec.a2a_overlap for c in cands) == [False, True]
    res = search(table(a2a=0.25), req)
    assert res.plans[0].a2a_overlap is True  # the pairs hide the all-to-all
    # dense: nothing to overlap, one candidate
    assert candidates(table(), req)[2] == 1
    # without a pipeline: both with two micro-batches a step, only off with one
    flat = PlanRequest(**{**req.__dict__, "gpus": 1, "pp": (1,),
                          "schedules": (Schedule.ONE_F_ONE_B,), "virtual_stages": (1,)})
    for batch, overlaps in ((2, [False, True]), (1, [False])):
        few = PlanRequest(**{**flat.__dict__, "global_batch": batch, "micro_batch_sizes": (1,)})
        cands, _, _ = candidates(table(a2a=0.25), few)
        assert sorted(c.spec.a2a_overlap for c in cands) == overlaps


def test_search_splits_dualpipe_into_its_pp_chunks() -> None:
    req = PlanRequest(gpus=4, global_batch=16, pp=(4,), schedules=(Schedule.DUALPIPE,),
                      shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
                      with_best_pp1=False)
    plan = search(table(n=10), req).plans[0]
    assert plan.schedule is Schedule.DUALPIPE and plan.virtual_stages == 2
    assert len(plan.stage_layers) == 4 and sum(plan.stage_layers) == 10
    assert len(plan.sim.devices) == 4


def test_an_overlapped_candidate_is_bounded_by_its_all_to_alls_too() -> None:
    # 6 layers of 3.5 s compute, each with 2.5 s of all-to-all each way (5 s a layer):
    # DualPipe on 2 GPUs, 8 micro-batches. The pairs may hide every all-to-all, yet a
    # device still runs its share of them, 8 x 6 x 5 / 2 = 120 s (sim_records.
    # overlapped_pair_s: a pair lasts at least its halves' communication), above the
    # compute's 8 x 6 x 3.5 / 2 = 84 s
    req = PlanRequest(gpus=2, global_batch=8, pp=(2,), schedules=(Schedule.DUALPIPE,),
                      shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
                      with_best_pp1=False)
    heavy = table(a2a=2.5)
    (cand,), _, _ = candidates(heavy, req)
    assert cand.bound_s == pytest.approx(120.0)
    plan = search(heavy, req).plans[0]
    assert plan.step_time_s >= cand.bound_s
