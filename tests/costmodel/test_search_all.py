"""search_all: several requests of one job listed as one search would list them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import (
    PlanRequest,
    Recompute,
    Schedule,
    Sharding,
    search,
    search_all,
)
from tests.costmodel.test_keys import table

TP1, TP2 = CostKey(tp=1), CostKey(tp=2)
TABLES = {TP1: table(1.0), TP2: table(1 / 3)}
PLAIN = dict(shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,),
             schedules=(Schedule.ONE_F_ONE_B,), reserve_bytes=0.0)


def test_two_requests_list_as_one_search_of_both_keys() -> None:
    # 8 GPUs, global batch 8, micro-batch 1, no pipeline. tp1: dp 8, one micro-batch of
    # 4 layers x 3 s (F + B) = 12 s. tp2: a layer 1 s, dp 4, 2 micro-batches x 4 s = 8 s
    one = PlanRequest(gpus=8, global_batch=8, pp=(1,), cost_keys=(TP1,), top=2,
                      **PLAIN)  # type: ignore[arg-type]
    two = replace(one, cost_keys=(TP2,), tp=2)
    res = search_all(TABLES.__getitem__, [one, two])
    assert [(p.key, p.step_time_s) for p in res.plans] == [
        (TP2, pytest.approx(8.0)), (TP1, pytest.approx(12.0))]
    alone = [search(TABLES.__getitem__, r) for r in (one, two)]
    assert res.candidates == sum(r.candidates for r in alone)
    assert res.simulated == sum(r.simulated for r in alone)
    assert res.best_by_schedule[Schedule.ONE_F_ONE_B].key == TP2


def test_each_request_keeps_its_own_narrowing() -> None:
    # tp1 searched with 1f1b only, tp2 with gpipe only: no tp1 plan runs gpipe, nor a tp2
    # plan 1f1b, and the best of each schedule is its own request's
    base = PlanRequest(gpus=8, global_batch=16, pp=(2,), top=10, with_best_pp1=False,
                       **PLAIN)  # type: ignore[arg-type]
    one = replace(base, cost_keys=(TP1,))
    two = replace(base, cost_keys=(TP2,), tp=2, schedules=(Schedule.GPIPE,))
    res = search_all(TABLES.__getitem__, [one, two])
    assert {(p.key, p.schedule) for p in res.plans} == {
        (TP1, Schedule.ONE_F_ONE_B), (TP2, Schedule.GPIPE)}
    assert res.best_by_schedule[Schedule.GPIPE].key == TP2
    assert res.best_by_schedule[Schedule.ONE_F_ONE_B].key == TP1


def test_split_by_key_the_list_is_the_single_search() -> None:
    # the same request split into one request a key lists the same plans in the same
    # order, with the same rejections (tests/plan/test_framework_search.py: on analytic
    # costs, the margin's reordering included)
    both = PlanRequest(gpus=8, global_batch=32, cost_keys=(TP1, TP2), top=6,
                       schedules=(Schedule.ONE_F_ONE_B, Schedule.GPIPE, Schedule.INTERLEAVED),
                       shardings=(Sharding.NONE, Sharding.ZERO1), recomputes=(Recompute.NONE,),
                       reserve_bytes=0.0)
    single = search(TABLES.__getitem__, both)
    split = search_all(TABLES.__getitem__, [replace(both, cost_keys=(TP1,)),
                                            replace(both, cost_keys=(TP2,), tp=2)])
    assert len({p.pp for p in single.plans}) > 1
    assert [(p.spec, p.step_time_s) for p in split.plans] == [
        (p.spec, p.step_time_s) for p in single.plans]
    assert split.plans[0] == single.plans[0]  # explained alike
    assert split.rejected == single.rejected
    assert split.candidates == single.candidates


def test_no_request_lists_nothing() -> None:
    res = search_all(TABLES.__getitem__, [])
    assert (res.plans, res.candidates, res.simulated, dict(res.rejected)) == ([], 0, 0, {})
