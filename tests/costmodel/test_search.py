"""Planner: exhaustive enumeration agrees, constraints are honoured."""

from __future__ import annotations

import itertools
import random

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    CostTable,
    LayerCosts,
    PlanRequest,
    Reason,
    divisors,
    evaluate,
    search,
    state_bytes_per_param,
)
from pptune.costmodel.simulate import Link


def compositions(n: int, k: int):
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0, *cuts, n)
        yield [b[i + 1] - b[i] for i in range(k)]


def random_table(rng: random.Random, n_layers: int, memory: float = 1e12) -> CostTable:
    base = [rng.uniform(0.5, 3.0) for _ in range(n_layers)]
    by = {}
    for b in (1, 2):
        f = [x * b * rng.uniform(0.9, 1.1) for x in base]
        by[b] = LayerCosts(f, [2 * x for x in f], [0.5 * x for x in f], [1e6 * b] * n_layers,
                           [1e5 * b] * n_layers)
    return CostTable(
        [f"l{i}" for i in range(n_layers)], [1e6] * n_layers, 2, by, 128, memory,
        Link(1e-3, 1e9), Link(5e-3, 1e8), AllReduceLink(1e-3, 1e9), AllReduceLink(1e-3, 1e8),
    )


SCHEDS = (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)


@pytest.mark.parametrize("seed", range(12))
def test_chosen_plan_equals_exhaustive_best(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(4, 7)
    table = random_table(rng, n)
    req = PlanRequest(gpus=4, global_batch=16, schedules=SCHEDS, reserve_bytes=0, top=1)
    got = search(table, req).plans[0]
    best = min(
        evaluate(table, req, s, p, b, 16 // (b * (4 // p)), 1, split).step_time_s
        for p in divisors(4) if p <= n
        for b in (1, 2)
        for s in SCHEDS
        if not (s is Schedule.ONE_F_ONE_B and 16 // (b * (4 // p)) < p)
        for split in compositions(n, p)
    )
    assert got.step_time_s == pytest.approx(best, rel=1e-12)


def test_global_batch_arithmetic_is_exact() -> None:
    table = random_table(random.Random(1), 8)
    res = search(table, PlanRequest(gpus=8, global_batch=24, top=50))
    assert res.plans
    for plan in res.plans:
        assert plan.micro_batch_size * plan.num_microbatches * plan.dp == 24
        assert plan.pp * plan.dp * plan.tp == 8
        assert sum(plan.stage_layers) == 8
    assert res.rejected[Reason.BATCH] > 0  # e.g. b=2 with dp=8 does not divide 24


def test_memory_limit_rejects_and_names_reason() -> None:
    table = random_table(random.Random(2), 6, memory=1e6)
    res = search(table, PlanRequest(gpus=2, global_batch=8, reserve_bytes=0))
    assert res.plans == []
    assert res.rejected[Reason.OOM] > 0


def test_interleaved_requires_multiple_and_1f1b_requires_m_ge_p() -> None:
    table = random_table(random.Random(3), 8)
    res = search(table, PlanRequest(gpus=4, global_batch=2, top=50,
                                    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)))
    assert res.rejected[Reason.M_LT_P] > 0
    assert res.rejected[Reason.INTERLEAVE_MULT] > 0
    for plan in res.plans:
        assert plan.num_microbatches >= plan.pp


def test_sharded_optimizer_bytes() -> None:
    # Megatron-LM distributed optimizer: 18 bytes/param, or 6 + 12/dp sharded
    assert state_bytes_per_param(False, 8) == 18
    assert state_bytes_per_param(True, 8) == 6 + 12 / 8


def test_results_are_sorted_and_ideal_bounds_step() -> None:
    table = random_table(random.Random(4), 8)
    res = search(table, PlanRequest(gpus=8, global_batch=64, top=10))
    times = [p.step_time_s for p in res.plans]
    assert times == sorted(times)
    for p in res.plans:
        assert p.step_time_s >= p.ideal_step_s * (1 - 1e-12)
        assert 0 < p.efficiency <= 1
