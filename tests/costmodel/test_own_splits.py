"""A request that names the only splits its framework builds (PlanRequest.stage_splits,
own_splits.py): the search places every pipeline on those splits alone, never on one of
its own nor a refined one, and its first plan is the fastest an oracle finds by
simulating every plan the request allows on every one of those splits."""

from __future__ import annotations

import random

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import (
    RANK_ORDERS,
    CostTable,
    LayerCosts,
    PlanRequest,
    PlanSpec,
    Recompute,
    Schedule,
    Sharding,
    divisors,
    evaluate,
    search,
)
from pptune.costmodel.simulate import Link

# per pipeline depth, the splits a framework builds (the layers per stage of a 6-layer
# model); the 0-layer one is a rule's split of fewer layers than stages, never searched
OWN = {2: ((3, 3), (2, 4), (0, 6)), 3: ((2, 2, 2), (1, 3, 2)), 6: ((1,) * 6,)}
PLAIN = dict(shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
             schedules=(Schedule.ONE_F_ONE_B,))


def own(table: CostTable, key: CostKey, chunks: int) -> tuple[tuple[int, ...], ...]:
    del table, key
    return OWN.get(chunks, ())


def skewed_table(seed: int) -> CostTable:
    """Six layers, the first far the slowest (an embedding-heavy model): the min-max
    split the search would choose and refine puts it alone on a stage."""
    rng = random.Random(seed)
    base = [rng.uniform(4.0, 6.0), *(rng.uniform(0.5, 1.5) for _ in range(5))]
    by = {b: LayerCosts([x * b for x in base], [2 * x * b for x in base],
                        [0.5 * x * b for x in base], [1e6 * b] * 6, [1e5 * b] * 6)
          for b in (1, 2)}
    return CostTable([f"l{i}" for i in range(6)], [1e6] * 6, 2, by, 128, 1e12,
                     Link(1e-3, 1e9), Link(5e-3, 1e8), AllReduceLink(1e-3, 1e9),
                     AllReduceLink(1e-3, 1e8))


def oracle(table: CostTable, req: PlanRequest) -> float:
    """The fastest simulated 1F1B step over every depth, micro-batch size and rank order,
    each pipeline on each of its own splits (pp 1: all the layers on one stage)."""
    best = float("inf")
    for p in divisors(req.gpus):
        dp = req.gpus // p
        for b in sorted(table.by_mb):
            m = req.global_batch // (b * dp)
            if req.global_batch % (b * dp) or m < p:
                continue
            splits = [s for s in OWN.get(p, ()) if min(s) > 0] if p > 1 else [(6,)]
            for split in splits:
                for order in RANK_ORDERS:
                    spec = PlanSpec(Schedule.ONE_F_ONE_B, p, b, m, split, rank_order=order)
                    best = min(best, evaluate(table, req, spec).step_time_s)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_pipelines_are_searched_on_the_frameworks_splits_alone(seed: int) -> None:
    table = skewed_table(seed)
    req = PlanRequest(gpus=6, global_batch=12, reserve_bytes=0, top=50, stage_splits=own,
                      with_best_pp1=False, **PLAIN)
    found = search(table, req)
    piped = [p for p in found.plans if p.pp > 1]
    assert piped
    assert all(tuple(p.stage_layers) in OWN[p.pp] and min(p.stage_layers) > 0 for p in piped)
    assert found.plans[0].step_time_s == pytest.approx(oracle(table, req), rel=1e-12)


def test_without_them_the_search_chooses_a_split_of_its_own() -> None:
    """The same job searched on any split: its 2-stage plans put the slow first layer
    alone on a stage (1 + 5 layers), a split the framework above does not build."""
    table = skewed_table(0)
    req = PlanRequest(gpus=6, global_batch=12, reserve_bytes=0, top=50,
                      with_best_pp1=False, pp=(2,), **PLAIN)
    assert {tuple(p.stage_layers) for p in search(table, req).plans} == {(1, 5)}
    ran = search(table, PlanRequest(gpus=6, global_batch=12, reserve_bytes=0, top=50,
                                    with_best_pp1=False, pp=(2,), stage_splits=own, **PLAIN))
    assert {tuple(p.stage_layers) for p in ran.plans} <= {(3, 3), (2, 4)}
