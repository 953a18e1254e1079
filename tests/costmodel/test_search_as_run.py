"""search_all's ``as_run``: the plans priced as a framework runs them as the search finds
them (listing.py ``AsRunLog``), ranked so, those it runs no such plan for left out."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pptune.costmodel.listing import Ran
from pptune.costmodel.search import (
    Plan,
    PlanRequest,
    Recompute,
    Schedule,
    Sharding,
    search,
    search_all,
)
from tests.costmodel.test_keys import table

# 4 layers of F 1 s and B 2 s, nothing sent, 8 GPUs, global batch 8, micro-batch 1,
# gpipe and 1f1b alike on even stages: pp 1 (dp 8, m 1; listed as 1f1b): 4 x 3 s = 12 s;
# pp 2 (dp 4, m 2, 2 layers a stage): (m + pp - 1) x 6 s = 18 s; pp 4 (dp 2, m 4):
# 7 x 3 s = 21 s; pp 8 leaves no layer for a stage. Five plans in all
TABLE = table(1.0)
REQ = PlanRequest(gpus=8, global_batch=8, schedules=(Schedule.GPIPE, Schedule.ONE_F_ONE_B),
                  shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,), reserve_bytes=0.0,
                  with_best_pp1=False)


def shown(plans: list[Plan]) -> list[tuple[int, Schedule, float]]:
    return [(p.pp, p.schedule, p.step_time_s) for p in plans]


def ran_as(repriced: dict[tuple[int, Schedule], float | None]):  # type: ignore[no-untyped-def]
    """A framework that runs the plans of (pp, schedule) at another step (None: cannot run
    them as themselves), the others as searched."""
    def as_run(plan: Plan) -> Ran | None:
        step = repriced.get((plan.pp, plan.schedule), plan.step_time_s)
        return None if step is None else Ran(replace(plan, step_time_s=step), TABLE, REQ)
    return as_run


def test_the_searched_list_is_the_hand_derived_one() -> None:
    res = search(TABLE, replace(REQ, top=8))
    assert shown(res.plans) == [(1, Schedule.ONE_F_ONE_B, pytest.approx(12.0)),
                                (2, Schedule.GPIPE, pytest.approx(18.0)),
                                (2, Schedule.ONE_F_ONE_B, pytest.approx(18.0)),
                                (4, Schedule.GPIPE, pytest.approx(21.0)),
                                (4, Schedule.ONE_F_ONE_B, pytest.approx(21.0))]


def test_a_plan_it_cannot_run_leaves_the_list_and_the_next_moves_up() -> None:
    # top 1: the 12 s plan left out, the search goes on to the 18 s gpipe plan, the
    # fastest the framework runs (its bounds hold: a plan runs no faster than priced)
    res = search_all(TABLE, [replace(REQ, top=1)], ran_as({(1, Schedule.ONE_F_ONE_B): None}))
    assert shown(res.plans) == [(2, Schedule.GPIPE, pytest.approx(18.0))]
    assert shown(res.dropped) == [(1, Schedule.ONE_F_ONE_B, pytest.approx(12.0))]
    assert res.repriced == []


def test_a_plan_it_runs_slower_is_ranked_at_its_step_so_run() -> None:
    # pp 2 gpipe at 25 s as run: last, after the 21 s pp 4 plans
    res = search_all(TABLE, [replace(REQ, top=5)], ran_as({(2, Schedule.GPIPE): 25.0}))
    assert shown(res.plans) == [(1, Schedule.ONE_F_ONE_B, pytest.approx(12.0)),
                                (2, Schedule.ONE_F_ONE_B, pytest.approx(18.0)),
                                (4, Schedule.GPIPE, pytest.approx(21.0)),
                                (4, Schedule.ONE_F_ONE_B, pytest.approx(21.0)),
                                (2, Schedule.GPIPE, pytest.approx(25.0))]
    assert shown(res.repriced) == [(2, Schedule.GPIPE, pytest.approx(18.0))]  # as searched
    assert res.best_by_schedule[Schedule.GPIPE].pp == 4


def test_the_best_plan_without_a_pipeline_is_the_one_it_runs() -> None:
    # run at 30 s, the plan without a pipeline ranks after pp 2's 18 s and follows the
    # top 1 as the baseline row, at its step so run
    res = search_all(TABLE, [replace(REQ, top=1, with_best_pp1=True, pipeline_margin=0.0)],
                     ran_as({(1, Schedule.ONE_F_ONE_B): 30.0}))
    assert shown(res.plans) == [(2, Schedule.GPIPE, pytest.approx(18.0)),
                                (1, Schedule.ONE_F_ONE_B, pytest.approx(30.0))]


def test_without_as_run_nothing_is_priced_again() -> None:
    res = search_all(TABLE, [replace(REQ, top=3)])
    assert (res.dropped, res.repriced) == ([], [])
    assert shown(res.plans) == shown(search(TABLE, replace(REQ, top=3)).plans)


def test_a_plan_it_runs_faster_than_priced_is_found_within_the_allowance() -> None:
    # pp 4 gpipe (21 s as searched) runs at 10 s: faster than the 12 s plan without a
    # pipeline. Top 1: without an allowance the search stops at 12 s and never prices it
    # (its bounds assume a plan runs no faster than priced); allowed 11 s faster, a plan
    # bounded above 12 s is priced as run until 12 + 11 = 23 s, and pp 4 gpipe is first
    faster = ran_as({(4, Schedule.GPIPE): 10.0})
    res = search_all(TABLE, [replace(REQ, top=1)], faster)
    assert shown(res.plans) == [(1, Schedule.ONE_F_ONE_B, pytest.approx(12.0))]
    res = search_all(TABLE, [replace(REQ, top=1)], faster, lambda key, spec: 11.0)
    assert shown(res.plans) == [(4, Schedule.GPIPE, pytest.approx(10.0))]
    assert shown(res.repriced) == [(4, Schedule.GPIPE, pytest.approx(21.0))]
