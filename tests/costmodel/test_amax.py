"""FP8 delayed scaling's amax reductions: bytes, the all-reduce, the plan: hand-derived."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pytest

from pptune.costmodel import amax, presets
from pptune.costmodel.breakdown import AMAX, step_parts
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import explain, stage_layout
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Group
from pptune.costmodel.parts import PartTimes
from pptune.costmodel.search import (
    CostTable,
    LayerCosts,
    PlanRequest,
    PlanSpec,
    Recompute,
    Schedule,
    SearchResult,
    Sharding,
    evaluate,
)
from pptune.costmodel.sim_records import StageCost
from pptune.costmodel.simulate import Link
from pptune.report.plans import why_lines

H = presets.GPUS["h100-sxm"].fabric_or_line().without_nvls()


def test_one_chunks_amaxes_are_a_few_bytes() -> None:
    # per FP8 GEMM Transformer Engine keeps 3 forward amaxes (input, weight, output)
    # and 2 backward (output and input gradients), FP32; a block has 4 FP8 GEMMs
    assert amax.reduction_bytes(2, forward=True) == 2 * 4 * 3 * 4 == 96
    assert amax.reduction_bytes(2, forward=False) == 2 * 4 * 2 * 4 == 64
    assert amax.reduction_bytes(0, forward=True) == 0


def test_the_reduction_is_nccls_pick_for_those_bytes() -> None:
    # 96 bytes over one node's 8 ranks: ring LL, 6.6 + 14 x 0.6 = 15 us, at a quarter of
    # 367.2 GB/s for 2 x 7/8 of the bytes
    t = amax.reduction_s(96, Group(8, 8, 1), H, AllReduceLink(0.0, 1e30),
                         AllReduceLink(0.0, 1e30))
    assert t == pytest.approx(15e-6 + 2 * 7 / 8 * 96 / (367.2e9 / 4))
    # alone: nothing to reduce
    assert amax.reduction_s(96, Group(1, 1, 1), H, AllReduceLink(1.0, 1.0),
                            AllReduceLink(1.0, 1.0)) == 0.0
    # without a fabric: the table's links, latency + 2 (n - 1)/n bytes / busbw
    link = AllReduceLink(10e-6, 100e9)
    assert amax.reduction_s(96, Group(8, 8, 1), None, link, link) == pytest.approx(
        10e-6 + 2 * 7 / 8 * 96 / 100e9)


def _table() -> CostTable:
    n = 4
    c = LayerCosts([1e-3] * n, [2e-3] * n, [0.0] * n, [0.0] * n, [0.0] * n)
    free = AllReduceLink(0.0, 1e30)
    return CostTable([f"block{i}" for i in range(n)], [2e6] * n, 2, {1: c}, 128, 1e15,
                     Link(0.0, 1e30), Link(0.0, 1e30), free, free, fabric=H)


def _spec(precision: Precision) -> PlanSpec:
    return PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, (2, 2), key=CostKey(precision=precision))


def _req(**kw: object) -> PlanRequest:
    # 16 GPUs, pp 2: dp 8, the data-parallel ranks side by side on one node
    return PlanRequest(gpus=16, global_batch=32, shardings=(Sharding.NONE,),
                       recomputes=(Recompute.NONE,), reserve_bytes=0.0,
                       cost_keys=(CostKey(precision=Precision.FP8),), **kw)  # type: ignore[arg-type]


def test_every_fp8_chunk_pass_waits_on_its_reduction() -> None:
    # the stage's tp x cp x dp ranks (8 on one node) reduce 96 bytes after each forward
    # and 64 after each backward of its 2 blocks (Megatron-core's amax group)
    table = _table()
    bf16 = stage_layout(table, _req(), _spec(Precision.BF16))
    fp8 = stage_layout(table, _req(), _spec(Precision.FP8))
    f = 15e-6 + 2 * 7 / 8 * 96 / (367.2e9 / 4)
    b = 15e-6 + 2 * 7 / 8 * 64 / (367.2e9 / 4)
    for s8, s16 in zip(fp8.stages, bf16.stages, strict=True):
        assert s8.fwd_s == pytest.approx(s16.fwd_s + f)
        assert s8.bwd_s == pytest.approx(s16.bwd_s + b)
        assert s8.wgrad_s == s16.wgrad_s
    # a recipe without the global reduction (tensorwise, blockwise) pays none
    off = stage_layout(table, _req(fp8_amax_reduction=False), _spec(Precision.FP8))
    assert [s.fwd_s for s in off.stages] == [s.fwd_s for s in bf16.stages]
    # MXFP8's block scales are local: none either
    mx = stage_layout(table, _req(), _spec(Precision.MXFP8))
    assert [s.bwd_s for s in mx.stages] == [s.bwd_s for s in bf16.stages]


def test_the_plan_is_slower_by_its_reductions() -> None:
    table = _table()
    req = dataclasses.replace(_req(), overlap_grad_reduce=False)
    with_ = evaluate(table, req, _spec(Precision.FP8))
    without = evaluate(table, dataclasses.replace(req, fp8_amax_reduction=False),
                       _spec(Precision.FP8))
    # 1F1B on 2 equal stages, 4 micro-batches: (m + p - 1) forward-backward pairs
    pair = 2 * 15e-6 + 2 * 7 / 8 * (96 + 64) / (367.2e9 / 4)
    assert with_.step_time_s - without.step_time_s == pytest.approx(5 * pair, rel=1e-6)


def test_explain_names_the_reductions_apart_from_data_parallel_traffic() -> None:
    table = _table()
    req = dataclasses.replace(_req(), overlap_grad_reduce=False)
    plan = evaluate(table, req, _spec(Precision.FP8))
    shown = explain(table, req, plan)
    pair = 2 * 15e-6 + 2 * 7 / 8 * (96 + 64) / (367.2e9 / 4)
    assert shown.exposed_amax_s == pytest.approx(5 * pair, rel=1e-6)
    bf16 = explain(table, req, evaluate(table, req, _spec(Precision.BF16)))
    assert bf16.exposed_amax_s == 0.0
    # the gradient all-reduce after the last backward is the same in both
    assert shown.exposed_allreduce_s == pytest.approx(bf16.exposed_allreduce_s)
    zero = PartTimes("gemm", 0.0, 0.0, 0.0)
    parts = step_parts(table, req, plan, [[zero]] * 4)
    assert parts.seconds(AMAX) == pytest.approx(5 * pair, rel=1e-6)
    assert sum(s for _, s in parts.parts) == pytest.approx(plan.step_time_s)


def test_a_longer_stage_keeps_every_other_field() -> None:
    s = StageCost(1.0, 2.0, 3.0, act_bytes=4.0, out_bytes=5.0, fwd_comm_s=6.0, bwd_comm_s=7.0,
                  split_bwd_s=8.0, split_wgrad_s=9.0, comm_sm_share=0.1)
    assert s.longer(0.5, 0.25) == dataclasses.replace(s, fwd_s=1.5, bwd_s=2.25,
                                                      split_bwd_s=8.25)
    plain = StageCost(1.0, 2.0)
    assert plain.longer(1.0, 1.0) == StageCost(2.0, 3.0)
    assert s.fwd_s == 1.0  # the original is untouched


def test_the_winners_explanation_names_them_from_half_a_per_cent() -> None:
    table = _table()
    req = dataclasses.replace(_req(), overlap_grad_reduce=False)
    shown = explain(table, req, evaluate(table, req, _spec(Precision.FP8)))

    def lines(amax_s: float) -> str:
        plan = dataclasses.replace(shown, exposed_amax_s=amax_s)
        return " ".join(why_lines(SearchResult([plan], Counter(), 1, 1, {})))

    step = shown.step_time_s
    assert "FP8 amax all-reduces add" in lines(0.01 * step)
    assert "(1.0%)" in lines(0.01 * step)
    assert "amax" not in lines(0.001 * step)  # below half a per cent: the JSON only
