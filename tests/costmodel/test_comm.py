from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel.comm import (
    AllReduceLink,
    DpReduction,
    all_gather_s,
    allreduce_s,
    buckets,
    compression_factor,
    dp_exposed_s,
    megatron_bucket_params,
    overlapped_tail_s,
    prefetch_stall_s,
    reduce_scatter_s,
    torch_ddp_bucket_params,
)


def test_ring_allreduce_uses_bus_bandwidth_definition() -> None:
    # nccl-tests: busbw = algbw * 2(n-1)/n, so time = 2(n-1)/n * bytes / busbw
    link = AllReduceLink(latency_s=1e-5, busbw_bytes_per_s=100e9)
    assert allreduce_s(1e9, 8, link) == pytest.approx(1e-5 + 2 * 7 / 8 * 1e9 / 100e9)
    assert allreduce_s(1e9, 1, link) == 0.0


@pytest.mark.parametrize(
    "spec,factor",
    [(None, 1.0), ("none", 1.0), ("fp16", 0.5), ("bf16", 0.5), ("topk:0.01", 0.01 * 8 / 4)],
)
def test_compression_factor(spec: str | None, factor: float) -> None:
    assert compression_factor(spec) == pytest.approx(factor)


@pytest.mark.parametrize("spec", ["topk:0", "topk:x", "zip", "topk:2"])
def test_bad_compression_names_the_value(spec: str) -> None:
    with pytest.raises(ValueError, match="grad-compression"):
        compression_factor(spec)


def test_reduce_scatter_moves_half_an_allreduce() -> None:
    link = AllReduceLink(latency_s=1e-5, busbw_bytes_per_s=100e9)
    assert reduce_scatter_s(1e9, 8, link) == pytest.approx(1e-5 + 7 / 8 * 1e9 / 100e9)
    assert all_gather_s(1e9, 1, link) == 0.0


def test_megatron_default_bucket_and_split() -> None:
    assert megatron_bucket_params(8) == 40_000_000
    assert megatron_bucket_params(64) == 64_000_000
    assert buckets(100, 40) == [40.0, 40.0, 20.0]
    assert buckets(80, 40) == [40.0, 40.0]


def test_bucket_tail_behind_a_long_window_is_the_last_bucket() -> None:
    # buckets ready at 1, 2, 3 s of a 3 s backward, 1 s each: the last ends at 4
    assert overlapped_tail_s([1.0, 1.0, 1.0], [1, 1, 1], 3.0) == pytest.approx(1.0)
    # a short window: ready at 0.1, 0.2, 0.3, serial from 0.1: ends at 3.1
    assert overlapped_tail_s([1.0, 1.0, 1.0], [1, 1, 1], 0.3) == pytest.approx(2.8)


def test_parameter_prefetch_stalls_for_the_first_bucket_only_when_compute_is_long() -> None:
    # bucket 0 needed at 0 (arrives at 1), bucket 1 needed at 2 (arrives at 2)
    assert prefetch_stall_s([1.0, 1.0], [1, 1], 4.0) == pytest.approx(1.0)
    assert prefetch_stall_s([1.0, 1.0], [1, 1], 0.0) == pytest.approx(2.0)


def test_dp_reduction_exposed_parts() -> None:
    link = AllReduceLink(latency_s=0.0, busbw_bytes_per_s=1e9)
    # 80M parameters, 2 buckets of 40M at 4 bytes, dp=2: 160 ms an all-reduce each
    red = DpReduction(80e6, 2, link)
    assert dp_exposed_s(red, 10.0, 1.0) == pytest.approx(0.16)  # only the last bucket
    assert dp_exposed_s(dataclasses.replace(red, overlap=False), 10.0, 1.0) == (
        pytest.approx(allreduce_s(320e6, 2, link)))
    # distributed optimizer: reduce-scatter (80 ms a bucket) then the bf16
    # parameter all-gather (40 ms a bucket) ahead of a 1 s forward
    sharded = dataclasses.replace(red, sharded=True)
    assert dp_exposed_s(sharded, 10.0, 1.0) == pytest.approx(0.08 + 0.04)
    assert dp_exposed_s(dataclasses.replace(red, dp=1), 10.0, 1.0) == 0.0


def test_pytorch_ddp_buckets_of_25_mib_expose_a_smaller_tail() -> None:
    link = AllReduceLink(latency_s=0.0, busbw_bytes_per_s=1e9)
    # fp16 gradients: a 25 MiB bucket holds 25 * 2**20 / 2 = 13,107,200 parameters;
    # the last of the 80M is 80e6 - 6 * 13,107,200 = 1,356,800 parameters, whose
    # all-reduce over dp=2 moves 2 * 1/2 * 2 bytes each: 2.7136 ms
    assert torch_ddp_bucket_params(2) == 13_107_200
    red = DpReduction(80e6, 2, link, grad_bytes=2, bucket_params=torch_ddp_bucket_params(2))
    assert dp_exposed_s(red, 10.0, 1.0) == pytest.approx(2.7136e-3)


def test_plan_exposes_only_the_bucket_tail_of_its_gradient_reduction() -> None:
    from pptune.costmodel.schedules import Schedule
    from pptune.costmodel.search import CostTable, LayerCosts, PlanRequest, PlanSpec, evaluate
    from pptune.costmodel.simulate import Link

    # two layers of 60M bf16 parameters, 1 s forward, 2 s backward each: one
    # stage of 120M parameters = 3 buckets of 40M, 4 bytes a gradient, dp=2
    link = AllReduceLink(0.0, 1e9)  # 160 ms a bucket
    by = {1: LayerCosts([1.0, 1.0], [2.0, 2.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0])}
    table = CostTable(["a", "b"], [120e6, 120e6], 2, by, 128, 1e15, Link(), Link(), link, link)
    req = PlanRequest(gpus=2, global_batch=4, reserve_bytes=0)
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 1, 1, 2, (2,))
    plan = evaluate(table, req, spec)
    # 2 micro-batches of 2 s + 4 s; the last bucket is ready when the 4 s backward ends
    assert plan.step_time_s == pytest.approx(12.0 + 0.16)
    no_overlap = evaluate(table, dataclasses.replace(req, overlap_grad_reduce=False), spec)
    assert no_overlap.step_time_s == pytest.approx(12.0 + allreduce_s(480e6, 2, link))
