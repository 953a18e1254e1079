"""Planner: exhaustive enumeration agrees, constraints are honoured.

The oracle (``exhaustive_best``) simulates every plan the request allows,
every contiguous split of the layers included, and in both rank orders; the
planner's first plan must be exactly as fast. It covers every schedule
(gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipe, dualpipev; dualpipe's
split is over its pp chunks, each run by two ranks), one node and several
(``gpus_per_node < gpus``) with a slow inter-node link so that placement
matters.
"""

from __future__ import annotations

import itertools
import random

import pytest

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.schedules import (
    DEFAULT_SCHEDULES,
    Schedule,
    ScheduleError,
    chunks_per_device,
    model_chunks,
    validate,
)
from pptune.costmodel.search import (
    PP_INNER,
    RANK_ORDERS,
    CostKey,
    CostTable,
    LayerCosts,
    PlanRequest,
    PlanSpec,
    RankOrder,
    Reason,
    Recompute,
    Sharding,
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


def random_table(
    rng: random.Random, n_layers: int, memory: float = 1e12, slow_inter: bool = False
) -> CostTable:
    """Random per-layer costs; ``slow_inter``: an inter-node link whose hop
    (0.2 s + 1e5 bytes at 1 MB/s = 0.3 s) and all-reduce rival a layer's compute."""
    base = [rng.uniform(0.5, 3.0) for _ in range(n_layers)]
    by = {}
    for b in (1, 2):
        f = [x * b * rng.uniform(0.9, 1.1) for x in base]
        by[b] = LayerCosts(f, [2 * x for x in f], [0.5 * x for x in f], [1e6 * b] * n_layers,
                           [1e5 * b] * n_layers)
    inter = (Link(0.2, 1e6), AllReduceLink(0.2, 1e6)) if slow_inter else (
        Link(5e-3, 1e8), AllReduceLink(1e-3, 1e8))
    return CostTable(
        [f"l{i}" for i in range(n_layers)], [1e6] * n_layers, 2, by, 128, memory,
        Link(1e-3, 1e9), inter[0], AllReduceLink(1e-3, 1e9), inter[1],
    )


SCHEDS = (Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.ZB_H1)
# the oracle enumerates layouts only: no sharding, no recomputation
PLAIN = dict(shardings=(Sharding.NONE,), recomputes=(Recompute.NONE,))


def simulate_plan(
    table: CostTable, req: PlanRequest, schedule: Schedule, p: int, b: int, m: int, v: int,
    split: list[int], order: str,
) -> float:
    """One fully specified plan's simulated step time (the oracle's one call into search)."""
    spec = PlanSpec(schedule, p, b, m, tuple(split), v, RankOrder(order))
    return evaluate(table, req, spec).step_time_s


def allowed(req: PlanRequest, schedule: Schedule, p: int, m: int, v: int) -> bool:
    """The request's rules for (schedule, p, m, v), stated from the documented constraints."""
    plain = [s for s in req.schedules
             if s is not Schedule.INTERLEAVED and chunks_per_device(s, 1) == 1]
    single = Schedule.ONE_F_ONE_B if Schedule.ONE_F_ONE_B in plain else (plain[:1] or [None])[0]
    if p == 1 and schedule is not single:
        return False  # without a pipeline every schedule is one run: one is kept
    if schedule is Schedule.ONE_F_ONE_B and m < p:
        return False
    try:
        validate(schedule, p, m, v)
    except ScheduleError:
        return False
    return True


def exhaustive_best(table: CostTable, req: PlanRequest) -> float:
    """The fastest simulated step over every plan, split and rank order the request allows."""
    n = len(table.names)
    best = float("inf")
    for p in divisors(req.gpus // req.tp):
        if req.pp is not None and p not in req.pp:
            continue
        dp = req.gpus // (p * req.tp)
        for b in sorted(table.by_mb):
            if req.global_batch % (b * dp):
                continue
            m = req.global_batch // (b * dp)
            for schedule in req.schedules:
                vs = req.virtual_stages if schedule is Schedule.INTERLEAVED else (1,)
                for v in vs:
                    k = model_chunks(schedule, p, v)
                    if k > n or not allowed(req, schedule, p, m, v):
                        continue
                    for order in RANK_ORDERS:
                        for split in compositions(n, k):
                            t = simulate_plan(table, req, schedule, p, b, m, v, split, order)
                            best = min(best, t)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_chosen_plan_equals_exhaustive_best(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(4, 7)
    table = random_table(rng, n)
    req = PlanRequest(gpus=4, global_batch=16, schedules=SCHEDS, reserve_bytes=0, top=1,
                      **PLAIN)
    got = search(table, req).plans[0]
    assert got.step_time_s == pytest.approx(exhaustive_best(table, req), rel=1e-12)


# Requests the oracle also covers: several chunks per device, jobs over several
# nodes (a slow inter-node link, both rank orders tried), every schedule at once.
ORACLE_CASES: dict[str, tuple[dict[str, object], bool]] = {
    "interleaved": (dict(gpus=4, global_batch=16, pp=(2,), schedules=(Schedule.INTERLEAVED,)), False),
    "zbv": (dict(gpus=4, global_batch=16, pp=(2,), schedules=(Schedule.ZBV,)), False),
    "dualpipev": (dict(gpus=4, global_batch=16, pp=(2,), schedules=(Schedule.DUALPIPEV,)), False),
    "dualpipe": (dict(gpus=8, gpus_per_node=4, global_batch=32, pp=(2, 4),
                      schedules=(Schedule.DUALPIPE,)), True),
    "2-per-node": (dict(gpus=8, gpus_per_node=2, global_batch=16, pp=(2, 4), schedules=SCHEDS), True),
    "4-per-node": (dict(gpus=8, gpus_per_node=4, global_batch=32, pp=(2, 4), schedules=SCHEDS), True),
    "4-per-node-all": (
        dict(gpus=8, gpus_per_node=4, global_batch=32, pp=(2, 4), schedules=DEFAULT_SCHEDULES), True
    ),
}
# Where the planner's first plan is slower than the exhaustive best (found by
# this test), with the reason: none now. (Interleaved seed 0 and 4-per-node-all
# seed 5 were misses until plans with several chunks per device got their exact
# split search even outside the top, refine.always_refined, and a refined split
# was tried under the other rank order. 4-per-node seed 0, zb-h1 210.67 s against
# 205.08 s, was a bound above the step: the one-chunk bound made each stage's W
# wait for the backward of the stages before it, which a split backward does not.)
PLANNER_MISSES: dict[tuple[str, int], str] = {}


def _oracle_params() -> list[object]:
    out: list[object] = []
    for case in ORACLE_CASES:
        for seed in range(8):
            why = PLANNER_MISSES.get((case, seed))
            marks = [pytest.mark.xfail(reason=why, strict=True)] if why else []
            out.append(pytest.param(case, seed, marks=marks, id=f"{case}-{seed}"))
    return out


@pytest.mark.parametrize(("case", "seed"), _oracle_params())
def test_chosen_plan_equals_exhaustive_best_everywhere(case: str, seed: int) -> None:
    fields, slow_inter = ORACLE_CASES[case]
    rng = random.Random(seed)
    table = random_table(rng, rng.randint(4, 8 if "node" not in case else 7), slow_inter=slow_inter)
    req = PlanRequest(**fields, **PLAIN, reserve_bytes=0, top=1, virtual_stages=(2, 3))
    got = search(table, req).plans[0]
    assert got.step_time_s == pytest.approx(exhaustive_best(table, req), rel=1e-12)


def test_oracle_cases_reach_every_schedule_and_both_rank_orders() -> None:
    """The cases above are not all won by one layout: the oracle is exercised."""
    winners = set()
    for case, (fields, slow_inter) in ORACLE_CASES.items():
        for seed in range(8):
            rng = random.Random(seed)
            table = random_table(rng, rng.randint(4, 8 if "node" not in case else 7),
                                 slow_inter=slow_inter)
            req = PlanRequest(**fields, **PLAIN, reserve_bytes=0, top=1, virtual_stages=(2, 3))
            plan = search(table, req).plans[0]
            winners.add((plan.schedule, plan.rank_order, plan.virtual_stages > 1))
    assert {s for s, _, _ in winners} >= {Schedule.INTERLEAVED, Schedule.ZBV, Schedule.ZB_H1}
    assert {o for _, o, _ in winners} == set(RANK_ORDERS)


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


def test_interleaved_and_1f1b_require_m_ge_p() -> None:
    table = random_table(random.Random(3), 8)
    res = search(table, PlanRequest(gpus=4, global_batch=2, top=50,
                                    schedules=(Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)))
    assert res.rejected[Reason.M_LT_P] > 0
    # m < pp is that reason for interleaving too, not "not a multiple of pp"
    assert res.rejected.get(Reason.INTERLEAVE_MULT, 0) == 0
    for plan in res.plans:
        assert plan.num_microbatches >= plan.pp


def test_interleaved_m_lt_pp_and_m_not_a_multiple_are_counted_apart() -> None:
    """pp 4 on 4 GPUs (dp 1), micro-batches of 1: global batch 3 is 3 micro-batches,
    fewer than 4; 6 is 6, not a multiple of 4: one candidate each (v 2, no sharding, no
    recomputation). 6 runs in Megatron-LM's micro-batch groups; without them it is
    refused as not a multiple."""
    table = random_table(random.Random(3), 8)
    one = dict(gpus=4, pp=(4,), micro_batch_sizes=(1,), schedules=(Schedule.INTERLEAVED,),
               virtual_stages=(2,), **PLAIN)
    res = search(table, PlanRequest(global_batch=3, **one))
    assert {k: n for k, n in res.rejected.items() if n} == {Reason.M_LT_P.value: 1}
    res = search(table, PlanRequest(global_batch=6, interleaved_groups=False, **one))
    assert {k: n for k, n in res.rejected.items() if n} == {Reason.INTERLEAVE_MULT.value: 1}
    res = search(table, PlanRequest(global_batch=6, **one))
    assert not any(res.rejected.values()) and res.plans[0].num_microbatches == 6


def test_sharded_optimizer_bytes() -> None:
    # Megatron-LM distributed optimizer: 18 bytes/param, or 6 + 12/dp sharded
    assert state_bytes_per_param(Sharding.NONE, 8) == 18
    assert state_bytes_per_param(Sharding.ZERO1, 8) == 6 + 12 / 8
    # BF16 Adam moments (Megatron-LM's precision-aware optimizer): fp32 master + 2 + 2,
    # sharded where the state is; with BF16 gradient buckets as well: 2 + 2 + 8 / dp
    assert state_bytes_per_param(Sharding.NONE, 8, moment_bytes=2) == 2 + 4 + 8
    assert state_bytes_per_param(Sharding.ZERO1, 8, 2, moment_bytes=2) == 2 + 2 + 8 / 8
    assert state_bytes_per_param(Sharding.ZERO3, 4, moment_bytes=2) == (2 + 2 + 8) / 4
    assert state_bytes_per_param(Sharding.FSDP, 4, moment_bytes=2) == (4 + 4 + 4) / 4


def test_results_are_sorted_and_ideal_bounds_step() -> None:
    table = random_table(random.Random(4), 8)
    res = search(table, PlanRequest(gpus=8, global_batch=64, top=10))
    times = [p.step_time_s for p in res.plans]
    assert times == sorted(times)
    for p in res.plans:
        assert p.step_time_s >= p.ideal_step_s * (1 - 1e-12)
        assert 0 < p.efficiency <= 1


def _reordered(plain: list, margin: float) -> list:
    """What --pipeline-margin does to the list ranked by step time alone, stated from
    its documented rule: the best plan without a pipeline goes first when the fastest
    plan is pipelined and at most ``margin`` of the pp=1 plan's step time faster."""
    flat = [p for p in plain if p.pp == 1]
    if not plain or plain[0].pp == 1 or not flat:
        return plain
    if flat[0].step_time_s > plain[0].step_time_s * (1 + margin):
        return plain
    return [flat[0], *[p for p in plain if p is not flat[0]]]


def _margin_case() -> tuple[CostTable, PlanRequest, list]:
    """A random table whose fastest plan is pipelined and beats the best pp=1 plan."""
    for seed in range(200):
        table = random_table(random.Random(seed), 6)
        req = PlanRequest(gpus=4, global_batch=16, top=4, **PLAIN)
        plain = search(table, req).plans
        if plain and plain[0].pp > 1 and any(p.pp == 1 for p in plain):
            return table, req, plain
    raise AssertionError("no seed gives a pipelined winner with a pp=1 plan listed")


def test_pipeline_margin_puts_the_flat_plan_first_only_inside_the_margin() -> None:
    from dataclasses import replace

    table, req, plain = _margin_case()
    flat = next(p for p in plain if p.pp == 1)
    gain = flat.step_time_s / plain[0].step_time_s - 1  # what the pipeline buys, > 0
    assert gain > 0
    for margin in (gain * (1 + 1e-6), gain * (1 - 1e-6), 0.0, 1.0):
        res = search(table, replace(req, pipeline_margin=margin))
        got = [(p.pp, p.schedule, p.step_time_s) for p in res.plans]
        want = [(p.pp, p.schedule, p.step_time_s) for p in _reordered(plain, margin)]
        assert got == want, margin
        moved = margin >= gain and margin > 0
        assert (res.plans[0].pp == 1) is moved
        # the plan passed over is named, so the report can say what was given up
        assert (res.passed_over is not None) is moved
        if moved:
            assert res.passed_over.step_time_s == plain[0].step_time_s


@pytest.mark.parametrize("schedule", list(Schedule))
def test_an_unsplit_spec_made_at_once_is_the_dataclass_s(schedule: Schedule) -> None:
    """PlanSpec.unsplit (the candidates' fast path) sets every field as __init__ and
    __post_init__ would: equal, same hash, same fields."""
    args = (schedule, 4, 2, 16, 3, PP_INNER, Sharding.ZERO1, Recompute.FULL, CostKey(tp=2),
            True)
    fast = PlanSpec.unsplit(*args)
    slow = PlanSpec(schedule, 4, 2, 16, (), 3, PP_INNER, Sharding.ZERO1, Recompute.FULL,
                    CostKey(tp=2), True)
    assert fast == slow and hash(fast) == hash(slow)
    assert fast.__dict__ == slow.__dict__
