"""The optimizer step: HBM bytes per shard parameter, one step's time, in the plan."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.optimizer import AdamStep, step_s
from pptune.costmodel.search import (
    CostTable,
    LayerCosts,
    PlanRequest,
    PlanSpec,
    Recompute,
    Schedule,
    Sharding,
    evaluate,
)
from pptune.costmodel.simulate import Link


def test_one_adam_step_by_hand() -> None:
    # ZeRO-1 over 8: 1e9 of a rank's 8e9 parameters. Per shard parameter: norm reads
    # the FP32 gradient (4), Adam reads p, g, m, v and writes p, m, v (28), the FP32
    # master is copied to the BF16 weight (4 + 2): 38; the 8e9 gradients are zeroed (4)
    step = AdamStep(shard_params=1e9, local_params=8e9)
    assert step.hbm_bytes() == 1e9 * 38 + 8e9 * 4
    assert step_s(step, 3e12) == pytest.approx(70e9 / 3e12)  # 23.3 ms at 3 TB/s


def test_bf16_moments_and_gradients_move_fewer_bytes() -> None:
    # BF16 moments (NeMo optim.dtype bf16): m and v read and written at 2 bytes: 30
    assert AdamStep(1.0, 0.0, moment_bytes=2.0).hbm_bytes() == 30.0
    # BF16 gradient buffer: the norm's read, Adam's read and the zeroing at 2 bytes
    assert AdamStep(1.0, 1.0, grad_bytes=2.0).hbm_bytes() == 34.0 + 2.0
    assert step_s(AdamStep(0.0, 0.0), 1e12) == 0.0


def _table(hbm: float | None) -> CostTable:
    n = 4
    c = LayerCosts([1.0] * n, [2.0] * n, [0.0] * n, [0.0] * n, [0.0] * n)
    free = AllReduceLink(0.0, 1e30)
    # 1e9 parameters a layer (2 bytes each)
    return CostTable([f"l{i}" for i in range(n)], [2e9] * n, 2, {1: c}, 128, 1e15,
                     Link(0.0, 1e30), Link(0.0, 1e30), free, free, hbm_bytes_per_s=hbm)


def test_the_step_ends_with_the_slowest_ranks_optimizer() -> None:
    # pp 2, dp 4, ZeRO-1: each rank holds 2 layers = 2e9 parameters, shards 5e8
    req = PlanRequest(gpus=8, global_batch=8, shardings=(Sharding.ZERO1,),
                      recomputes=(Recompute.NONE,), reserve_bytes=0.0)
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 2, (2, 2), sharding=Sharding.ZERO1)
    without = evaluate(_table(None), req, spec)
    plan = evaluate(_table(1e12), req, spec)
    opt = (5e8 * 38 + 2e9 * 4) / 1e12
    assert plan.optimizer_s == pytest.approx(opt)
    assert plan.step_time_s == pytest.approx(without.step_time_s + opt)
    off = evaluate(_table(1e12), dataclasses.replace(req, optimizer_step=False), spec)
    assert off.step_time_s == without.step_time_s and off.optimizer_s == 0.0
