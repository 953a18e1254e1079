"""Memory and traffic of each sharding and recomputation, hand-derived; plan contracts."""

from __future__ import annotations

import itertools

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate
from pptune.costmodel.memory import (
    Recompute,
    p2p_buffer_bytes,
    recomputed_layers,
    with_recompute,
)
from pptune.costmodel.partition import min_bottleneck_split
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Reason, search
from pptune.costmodel.sharding import (
    ShardComm,
    Sharding,
    reshards,
    stage_comm,
    state_bytes_per_param,
    traffic_in_ops,
    working_bytes,
)
from pptune.costmodel.simulate import Link
from pptune.costmodel.table import CostTable, LayerCosts


def test_every_enum_member_is_covered() -> None:
    assert [s.value for s in Sharding] == ["none", "zero1", "zero2", "zero3", "fsdp"]
    assert [r.value for r in Recompute] == ["none", "selective", "full", "modules"]
    for s in Sharding:
        assert state_bytes_per_param(s, 1) in (16, 18)  # one rank keeps everything


@pytest.mark.parametrize(("sharding", "dp", "expected"), [
    (Sharding.NONE, 4, 2 + 4 + 12),  # bf16 weights, fp32 grads, fp32 master + Adam m, v
    (Sharding.ZERO1, 4, 2 + 4 + 12 / 4),  # Megatron-LM distributed optimizer: 6 + 12/dp
    (Sharding.ZERO2, 4, 2 + (2 + 12) / 4),  # ZeRO paper: bf16 grads sharded too
    (Sharding.ZERO3, 4, (2 + 2 + 12) / 4),  # and the weights
    (Sharding.FSDP, 8, (4 + 4 + 8) / 8),  # FSDP2: fp32 sharded weights, grads, Adam m, v
])
def test_state_bytes_per_parameter(sharding: Sharding, dp: int, expected: float) -> None:
    assert state_bytes_per_param(sharding, dp) == expected


def test_fsdp_state_at_bf16_widths() -> None:
    """torchtitan's training.dtype bfloat16: BF16 sharded weights (no FP32 copy),
    gradients and Adam moments, 2 + 2 + 2 x 2 = 8 bytes over dp; a sharded gradient of 2
    bytes alone: 4 + 2 + 8 (torch FSDP2 keeps it at the weights' width, so torchtitan's
    mixed_precision_reduce bfloat16 does not narrow it: tests/frameworks/
    test_torchtitan_widths.py). The unsharded gradient copies take the reduce width."""
    assert state_bytes_per_param(Sharding.FSDP, 8, moment_bytes=2, fsdp_weight_bytes=2,
                                 fsdp_grad_bytes=2) == 8 / 8
    assert state_bytes_per_param(Sharding.FSDP, 8, fsdp_grad_bytes=2) == (4 + 2 + 8) / 8
    # Megatron's gradient buffer width is not FSDP's
    assert state_bytes_per_param(Sharding.FSDP, 8, grad_bytes=2) == (4 + 4 + 8) / 8
    assert working_bytes(Sharding.FSDP, False, 5000, 1000, reduce=2) == 5000 * (2 + 2)
    assert working_bytes(Sharding.FSDP, True, 5000, 1000, reduce=2) == 1000 * (2 + 2 + 2 + 2)
    # the fsdp weight width is FSDP's: ZeRO-1 keeps its fp32 master in the 12 bytes
    assert state_bytes_per_param(Sharding.ZERO1, 4, fsdp_weight_bytes=2) == 2 + 4 + 12 / 4


def test_zero_offload_keeps_the_offloaded_state_in_host_memory() -> None:
    """DeepSpeed ZeRO-Offload: offload_optimizer moves the sharded FP32 master weights and
    Adam moments (12 bytes a parameter over dp) to the host; ZeRO-3's offload_param the
    BF16 weight shard too (+2). ZeRO-2 over 8: 2 + (2 + 12) / 8 -> 2 + 2 / 8; ZeRO-3:
    (2 + 2 + 12) / 8 -> 2 / 8 with both."""
    assert state_bytes_per_param(Sharding.ZERO2, 8, offloaded=12) == 2 + 2 / 8
    assert state_bytes_per_param(Sharding.ZERO3, 8, offloaded=14) == 2 / 8
    assert state_bytes_per_param(Sharding.ZERO1, 4, offloaded=12) == 2 + 4
    assert state_bytes_per_param(Sharding.NONE, 1, offloaded=12) == 2 + 4  # ZeRO-Offload 0
    req = PlanRequest(gpus=8, global_batch=8, offloaded_bytes=12.0)
    assert req.state_per_param(Sharding.ZERO2, 8) == 2 + 2 / 8


def test_working_copies() -> None:
    # ZeRO-3: two gathered bf16 blocks (in use + prefetched) and one bf16 gradient
    assert working_bytes(Sharding.ZERO3, True, 5000, 1000) == 1000 * (2 + 2 + 2)
    # FSDP resharding: two gathered blocks, one bf16 gradient and its fp32 reduce copy
    assert working_bytes(Sharding.FSDP, True, 5000, 1000) == 1000 * (2 + 2 + 2 + 4)
    # FSDP under a pipeline: the stage's bf16 weights and fp32 accumulated grads all step
    assert working_bytes(Sharding.FSDP, False, 5000, 1000) == 5000 * (2 + 4)
    assert working_bytes(Sharding.ZERO1, False, 5000, 1000) == 0.0
    assert reshards(Sharding.FSDP, 1) and not reshards(Sharding.FSDP, 4)  # torchtitan default
    assert reshards(Sharding.FSDP, 4, True) and reshards(Sharding.ZERO3, 4)


def test_megatron_fsdp_keeps_its_queued_gradient_buckets() -> None:
    """Megatron-FSDP with sharded gradients: a backward writes every gradient into an
    unsharded bucket that waits for its reduce-scatter until more than ``queued``
    elements are queued (sharding.py): at most the queue, the bucket just queued and the
    one being filled. A stage of 9000 parameters, its largest layer 1000: a queue of 3000
    keeps 3000 + 2 x 1000 = 5000 elements, one of 1e9 all 9000, one of 0 (the double
    buffer) two layers' 2000; at 2 bytes for ZeRO-2 and ZeRO-3, at the reduce dtype for
    FSDP, beside the two gathered blocks' BF16 weights (none for ZeRO-2)."""
    assert working_bytes(Sharding.ZERO3, True, 9000, 1000, queued=3000) == (
        1000 * (2 + 2) + 2 * 5000)
    assert working_bytes(Sharding.ZERO3, True, 9000, 1000, queued=1e9) == (
        1000 * (2 + 2) + 2 * 9000)
    assert working_bytes(Sharding.ZERO3, True, 9000, 1000, queued=0) == (
        1000 * (2 + 2) + 2 * 2000)
    assert working_bytes(Sharding.ZERO2, False, 9000, 1000, queued=1e9) == 2 * 9000
    assert working_bytes(Sharding.FSDP, True, 9000, 1000, queued=1e9) == (
        1000 * (2 + 2) + 4 * 9000)
    assert working_bytes(Sharding.FSDP, True, 9000, 1000, reduce=2, queued=3000) == (
        1000 * (2 + 2) + 2 * 5000)
    # the splitter's lower bound, linear in the stage: the gathered weights alone
    assert working_bytes(Sharding.ZERO3, True, 9000, 1000, queued=3000, buckets=False) == (
        1000 * (2 + 2))
    # FSDP kept gathered holds every gradient already; the others have no such buckets
    assert working_bytes(Sharding.FSDP, False, 9000, 1000, queued=1e9) == 9000 * (2 + 4)
    assert working_bytes(Sharding.ZERO1, False, 9000, 1000, queued=1e9) == 0.0
    req = PlanRequest(gpus=8, global_batch=8, fsdp_grad_queue_elements=3000.0)
    assert req.working(Sharding.ZERO2, False, 9000, 1000) == 2 * 5000
    assert req.working(Sharding.ZERO2, False, 9000, 1000, buckets=False) == 0.0


def test_collective_times_per_sharding() -> None:
    link = AllReduceLink(0.0, 1e9)
    n, dp = 1e6, 4
    gather = 0.75 * 2e6 / 1e9  # (dp-1)/dp of the bf16 weights
    assert stage_comm(Sharding.NONE, False, n, dp, link) == ShardComm(
        tail_s=pytest.approx(2 * 0.75 * 4e6 / 1e9))  # ring all-reduce of fp32 grads
    assert stage_comm(Sharding.ZERO1, False, n, dp, link).tail_s == pytest.approx(
        0.75 * 4e6 / 1e9 + gather)  # reduce-scatter fp32 grads + all-gather bf16 weights
    z2 = stage_comm(Sharding.ZERO2, False, n, dp, link)
    assert (z2.bwd_s, z2.tail_s) == pytest.approx((0.75 * 2e6 / 1e9, gather))
    z3 = stage_comm(Sharding.ZERO3, True, n, dp, link)
    assert (z3.fwd_s, z3.bwd_s, z3.tail_s) == pytest.approx((gather, 2 * gather, 0.0))
    fs = stage_comm(Sharding.FSDP, True, n, dp, link)
    assert (fs.fwd_s, fs.bwd_s) == pytest.approx((gather, gather + 0.75 * 4e6 / 1e9))
    pp = stage_comm(Sharding.FSDP, False, n, dp, link)
    assert (pp.start_s, pp.tail_s, pp.fwd_s) == pytest.approx((gather, 0.75 * 4e6 / 1e9, 0.0))
    assert stage_comm(Sharding.ZERO3, True, n, 1, link) == ShardComm()
    # what the search's bounds rely on (splitting.split_with_bound): traffic inside
    # the ops exactly where traffic_in_ops says so
    for sharding in Sharding:
        for reshard in (False, True) if sharding is Sharding.FSDP else (
                reshards(sharding, 2),):
            c = stage_comm(sharding, reshard, n, dp, link)
            assert traffic_in_ops(sharding, reshard) == (c.fwd_s + c.bwd_s > 0), sharding


def test_a_gradient_crosses_the_wire_at_most_as_wide_as_it_is_held() -> None:
    """``grad_factor`` is the wire's bytes over FP32's for every sharding; ZeRO-2/3 hold
    16-bit gradients (DeepSpeed's default), so the 0.5 a BF16 gradient width states
    (check-config, DeepSpeed's engine) leaves them at 2 bytes, not 1."""
    link = AllReduceLink(0.0, 1e9)
    n, dp = 1e6, 4
    scatter_2 = 0.75 * 2e6 / 1e9  # (dp-1)/dp of 2 bytes a gradient
    for factor in (1.0, 0.5):
        z2 = stage_comm(Sharding.ZERO2, False, n, dp, link, factor)
        assert z2.bwd_s == pytest.approx(scatter_2)
        z3 = stage_comm(Sharding.ZERO3, True, n, dp, link, factor)
        assert z3.bwd_s == pytest.approx(0.75 * 2e6 / 1e9 + scatter_2)
    # a compression narrower than the held width narrows the wire: 4 x 0.2 = 0.8 bytes
    z2 = stage_comm(Sharding.ZERO2, False, n, dp, link, 0.2)
    assert z2.bwd_s == pytest.approx(0.75 * 0.8e6 / 1e9)
    # FSDP reduces FP32 (torchtitan's float32 reduce dtype): 0.5 is its BF16 reduce
    fs = stage_comm(Sharding.FSDP, True, n, dp, link, 0.5)
    assert fs.bwd_s == pytest.approx(0.75 * 2e6 / 1e9 + 0.75 * 2e6 / 1e9)


def _table(n_blocks: int = 4, param_bytes: float = 2e6, memory: float = 1e12) -> CostTable:
    names = ["embedding", *[f"block{i}" for i in range(n_blocks)], "head"]
    n = len(names)
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.0] * n, [100.0] * n, [5.0] * n)
    return CostTable(names, [param_bytes] * n, 2, {1: costs}, 128, memory,
                     Link(0.0), Link(0.0), AllReduceLink(0.0, 1e9), AllReduceLink(0.0, 1e9))


def test_recomputed_layers_follow_each_framework() -> None:
    names = ["embedding", "block0", "block1", "block2", "block3", "head"]
    assert recomputed_layers(names, Recompute.FULL) == [1, 2, 3, 4]
    # torchtitan selective_ac_option "2": blocks counted from 1, every second one
    assert recomputed_layers(names, Recompute.SELECTIVE, 2) == [2, 4]
    assert recomputed_layers(names, Recompute.SELECTIVE, None) == []  # Megatron core attention
    assert recomputed_layers(names, Recompute.NONE) == []


def test_recompute_keeps_the_input_and_reruns_the_forward() -> None:
    t = with_recompute(_table(), Recompute.SELECTIVE, 2)
    c = t.by_mb[1]
    assert list(c.act_bytes) == [100.0, 100.0, 5.0, 100.0, 5.0, 100.0]  # input = out of layer before
    assert list(c.bwd_s) == [2.0, 2.0, 3.0, 2.0, 3.0, 2.0]  # backward + forward again


def test_p2p_buffers_one_per_boundary_each_side() -> None:
    assert p2p_buffer_bytes([10.0, 20.0, 30.0], [0, 1, 1], 2) == [10.0, 10.0]
    assert p2p_buffer_bytes([10.0, 20.0, 30.0, 40.0], [0, 1, 1, 0], 2) == [40.0, 40.0]


def test_device_memory_by_part() -> None:
    # 6 layers of 1e6 parameters, 1f1b pp=2, m=2: device 0 holds 2 micro-batches
    # of its 3 layers (100 bytes each), device 1 one; one 5-byte buffer per side.
    req = PlanRequest(gpus=2, global_batch=2, reserve_bytes=7.0)
    plan = evaluate(_table(), req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 2, (3, 3)))
    d0, d1 = plan.memory
    assert (d0.state_bytes, d0.working_bytes, d0.activation_bytes, d0.p2p_bytes,
            d0.reserve_bytes) == (3e6 * 18, 0.0, 600.0, 5.0, 7.0)
    assert (d1.activation_bytes, d1.p2p_bytes) == (300.0, 5.0)
    assert plan.peak_memory_bytes == [d0.total_bytes, d1.total_bytes]
    # FSDP under the pipeline over dp=2: 16/2 sharded + 6 unsharded bytes per parameter
    req4 = PlanRequest(gpus=4, global_batch=4, reserve_bytes=0.0)
    fsdp = evaluate(_table(), req4, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 2, (3, 3),
                                             sharding=Sharding.FSDP))
    assert fsdp.memory[0].state_bytes + fsdp.memory[0].working_bytes == 3e6 * (8 + 6)


def test_zbv_reports_two_chunks_and_every_plan_lists_pp_times_v_stages() -> None:
    table = _table(n_blocks=14)
    res = search(table, PlanRequest(gpus=8, global_batch=64, top=80))
    assert {Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV} <= {p.schedule for p in res.plans}
    for plan in res.plans:
        if plan.schedule in (Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV):
            assert plan.virtual_stages == 2
        # dualpipe cuts the model into pp chunks, each held by two ranks (down and up)
        chunks = plan.pp if plan.schedule is Schedule.DUALPIPE else plan.pp * plan.virtual_stages
        assert len(plan.stage_layers) == chunks
        assert plan.pp == 1 or plan.sharding not in (Sharding.ZERO2, Sharding.ZERO3)
    assert res.rejected[Reason.SHARDING_PP.value] > 0


def test_best_pipeline_free_plan_is_always_listed() -> None:
    res = search(_table(n_blocks=14), PlanRequest(gpus=8, global_batch=64, top=1))
    assert any(p.pp == 1 for p in res.plans)


def test_split_is_optimal_for_the_step_with_few_microbatches() -> None:
    """gpt-small on 4 GPUs, 1F1B, m = 4, micro-batch 8: the min-max split is not the fastest."""
    from pptune.costs.profiles import analytic_profile, cost_table

    table = cost_table(analytic_profile("gpt-small", "h100-sxm", [8]))
    req = PlanRequest(gpus=4, global_batch=32, schedules=(Schedule.ONE_F_ONE_B,), pp=(4,),
                      micro_batch_sizes=(8,), shardings=(Sharding.NONE,),
                      recomputes=(Recompute.NONE,), with_best_pp1=False)
    c = table.by_mb[8]
    minmax = min_bottleneck_split([c.fwd_s[i] + c.bwd_s[i] + c.wgrad_s[i] for i in range(8)], 4)
    assert minmax == [2, 2, 2, 2]

    def step(split: tuple[int, ...]) -> float:
        return evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 4, 8, 4, split)).step_time_s

    best = min((tuple(b - a for a, b in itertools.pairwise((0, *cut, 8)))
                for cut in itertools.combinations(range(1, 8), 3)), key=step)
    got = search(table, req).plans[0]
    assert tuple(got.stage_layers) == best != tuple(minmax)
    assert got.step_time_s < step((2, 2, 2, 2))


def test_compute_beside_a_collective_loses_the_sms_it_holds() -> None:
    # F 10 ms beside a 4 ms gather of the next block, 1/8 of the SMs held by NCCL's
    # CTAs: 10 + 4/8 = 10.5 ms, plus the first block's gather (a quarter of the
    # stage's parameters: 1 ms) that nothing hides; B 12 ms beside a 16 ms
    # reduce-scatter: the traffic binds (16 > 12 + 2), 16 + 4 = 20 ms
    from pptune.costmodel.evaluate import with_comm
    from pptune.costmodel.sharding import ShardComm
    from pptune.costmodel.simulate import StageCost

    st = StageCost(fwd_s=10e-3, bwd_s=12e-3, wgrad_s=5e-3)
    comm = ShardComm(fwd_s=4e-3, bwd_s=16e-3)
    (out,) = with_comm([st], [comm], [0.25], sm_share=1 / 8)
    assert out.fwd_s == pytest.approx(10.5e-3 + 1e-3)
    assert out.bwd_s == pytest.approx(16e-3 + 4e-3)
    assert out.wgrad_s == st.wgrad_s
    (free,) = with_comm([st], [comm], [0.25])  # no SM share: the plain max
    assert free.fwd_s == pytest.approx(10e-3 + 1e-3)


def test_presets_price_nccl_ctas_on_their_sms() -> None:
    from pptune.costmodel.presets import GPUS

    # the fabric's CTAs on the GPU's own SMs
    assert GPUS["h100-sxm"].fabric_or_line().sm_share == pytest.approx(16 / 132)
    assert GPUS["a100-80gb"].fabric_or_line().sm_share == pytest.approx(16 / 108)
    assert GPUS["b200"].fabric_or_line().sm_share == pytest.approx(16 / 148)
