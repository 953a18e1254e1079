"""The planner's shortcuts that must not change what it returns: the stage starts
memory allows (partition.lowest_starts) and the bound over every split
(splitting.any_split_bound), and the memory sums that rule a candidate out before any
split is sought (splitting.surely_over, every_split_over)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate
from pptune.costmodel.inflight import chunk_inflight, peak_inflight_per_stage
from pptune.costmodel.memory import Recompute
from pptune.costmodel.partition import (
    SplitError,
    lowest_starts,
    min_bottleneck_split,
    some_split_fits,
)
from pptune.costmodel.schedules import Schedule, model_chunks, stage_chunk_map
from pptune.costmodel.sharding import Sharding
from pptune.costmodel.simulate import Link
from pptune.costmodel.split_memory import fitting_starts, memory_starts, range_max
from pptune.costmodel.splitting import (
    SplitCache,
    any_split_bound,
    every_split_over,
    per_param_bytes,
    surely_oom,
    surely_over,
)
from pptune.costmodel.table import CostTable, LayerCosts, stage_costs

AR = AllReduceLink(0.0, 1e9)


def reference_split(costs: list[float], k: int, extra: list[float], fits) -> list[int]:
    """The dynamic programme as it read before ``starts``: ``fits`` asked in the loop."""
    n = len(costs)
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    best = [[math.inf] * (n + 1) for _ in range(k)]
    arg = [[-1] * (n + 1) for _ in range(k)]
    for e in range(1, n - k + 2):
        if fits(0, 0, e):
            best[0][e] = prefix[e] + extra[0]
    for j in range(1, k):
        for e in range(j + 1, n - (k - 1 - j) + 1):
            top, where = math.inf, -1
            for s in range(e - 1, j - 1, -1):
                last = prefix[e] - prefix[s] + extra[j]
                if last >= top or not fits(j, s, e):
                    break
                val = max(last, best[j - 1][s])
                if val < top:
                    top, where = val, s
            best[j][e], arg[j][e] = top, where
    if best[k - 1][n] == math.inf:
        raise SplitError("no split fits in memory")
    out, e = [], n
    for j in range(k - 1, 0, -1):
        s = arg[j][e]
        out.append(e - s)
        e = s
    out.append(e)
    return out[::-1]


def test_lowest_starts_by_hand() -> None:
    # 4 layers of 1, 2 stages; stage k holds (2 - k) copies of its layers within 4:
    # stage 0 fits 2 layers, stage 1 fits 4 (it can end anywhere from 2 to 4)
    fits = lambda k, s, e: (e - s) * (2 - k) <= 4
    starts = lowest_starts(4, 2, fits)
    # stage 0 ends at 1..3: it starts at layer 0 while it holds <= 2 layers
    assert starts[0][1:4] == (0, 0, 1)
    # stage 1 ends at 2..4 and may start at layer 1 whatever its end
    assert starts[1][2:5] == (1, 1, 1)
    # so stage 0 takes 2 layers and stage 1 the other 2, never 3 + 1
    assert min_bottleneck_split([1.0] * 4, 2, starts=starts) == [2, 2]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=10), st.integers(1, 5),
       st.integers(0, 15), st.integers(0, 150))
def test_starts_give_the_splits_the_loop_gave(costs: list[int], k: int, send: int,
                                               mem: int) -> None:
    # the same split, ties included, as the programme testing fits in its loop
    if k > len(costs):
        return
    extra = [float(send)] * (k - 1) + [0.0]
    fits = lambda stage, s, e: sum(costs[s:e]) * (k - stage) <= mem * 3 + 40
    floats = [float(c) for c in costs]
    try:
        want = reference_split(floats, k, extra, fits)
    except SplitError:
        with pytest.raises(SplitError):
            min_bottleneck_split(floats, k, extra, fits)
        return
    assert min_bottleneck_split(floats, k, extra, fits) == want
    assert min_bottleneck_split(floats, k, extra,
                                starts=lowest_starts(len(costs), k, fits)) == want


def seven_layers(hop_s: float) -> CostTable:
    """7 layers of F 1, B 2, W 0.5 (3.5 a micro-batch), hops of ``hop_s`` latency."""
    names = ["embedding", *[f"block{i}" for i in range(5)], "head"]
    costs = LayerCosts([1.0] * 7, [2.0] * 7, [0.5] * 7, [100.0] * 7, [5.0] * 7)
    return CostTable(names, [2e6] * 7, 2, {1: costs}, 128, 1e12, Link(hop_s), Link(hop_s),
                     AR, AR)


def test_any_split_bound_by_hand() -> None:
    # pp 2, 4 micro-batches; a hop costs 2 x 0.5 (output forward, gradient back) on
    # stage 0. Splits 4+3: max(14 + 1, 10.5) = 15; 3+4: max(10.5 + 1, 14) = 14, so the
    # least bottleneck is 14 and every split's busiest stage works >= 14 - 1 = 13
    # a micro-batch: 4 x 13 = 52
    table = seven_layers(0.5)
    req = PlanRequest(gpus=2, global_batch=4, shardings=(Sharding.NONE,),
                      recomputes=(Recompute.NONE,), with_best_pp1=False)
    spec = PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, ())
    bound = any_split_bound(table, req, spec, SplitCache())
    assert bound == pytest.approx(52.0, rel=1e-9) and bound < 52.0
    # no split beats it: 4+3 and 3+4 both hold a stage of 4 layers, 4 x 14 = 56 of work
    for split in ((4, 3), (3, 4), (5, 2)):
        plan = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 4, split))
        assert plan.step_time_s >= bound
    # dualpipe runs each chunk for half the micro-batches (m / 2 each way)
    dual = PlanSpec(Schedule.DUALPIPE, 2, 1, 4, ())
    free = seven_layers(0.0)
    # 2 chunks (one a direction's stage): 4 + 3 layers, bottleneck 14, 2 x 14 = 28
    assert any_split_bound(free, req, dual, SplitCache()) == pytest.approx(28.0)


def _prefixes(state: list[float], acts: list[float],
              k: int) -> tuple[int, int, list[float], list[float]]:
    """(layers, stages, prefix sums of the state and of the activations)."""
    static, act = [0.0], [0.0]
    for i in range(len(state)):
        static.append(static[-1] + state[i])
        act.append(act[-1] + acts[i])
    return len(state), min(k, len(state)), static, act


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=2, max_size=24),
       st.lists(st.floats(0, 5), min_size=24, max_size=24),
       st.integers(1, 6), st.floats(0, 3), st.floats(1, 80),
       st.lists(st.integers(1, 8), min_size=6, max_size=6))
def test_memory_starts_are_lowest_starts(state: list[float], acts: list[float], k: int,
                                         out: float, budget: float, held: list[int]) -> None:
    """splitting.memory_starts writes min_bottleneck_within_memory's test into the
    loop: it must give lowest_starts' starts exactly, for any prefix sums."""
    n, k, static, act = _prefixes(state, acts, k)

    def fits(j: int, s: int, e: int) -> bool:
        p2p = out * ((j > 0) + (j < k - 1))
        return static[e] - static[s] + held[j] * (act[e] - act[s]) + p2p <= budget

    assert memory_starts(n, k, static, act, held, out, budget) == lowest_starts(n, k, fits)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=2, max_size=24),
       st.lists(st.floats(0, 5), min_size=24, max_size=24),
       st.lists(st.floats(0, 20), min_size=24, max_size=24),
       st.integers(1, 6), st.floats(0, 3), st.floats(1, 80),
       st.lists(st.integers(1, 8), min_size=6, max_size=6))
def test_memory_starts_with_a_rerun_are_lowest_starts(
        state: list[float], acts: list[float], reruns: list[float], k: int, out: float,
        budget: float, held: list[int]) -> None:
    """With recomputation a stage also holds the most one backward re-creates, the
    largest ``rerun_bytes`` of its layers (a range maximum): still lowest_starts'."""
    n, k, static, act = _prefixes(state, acts, k)
    rerun = range_max(reruns[:n])

    def fits(j: int, s: int, e: int) -> bool:
        p2p = out * ((j > 0) + (j < k - 1))
        return (static[e] - static[s] + held[j] * (act[e] - act[s]) + p2p
                + max(reruns[s:e], default=0.0) <= budget)

    assert memory_starts(n, k, static, act, held, out, budget, rerun) == lowest_starts(
        n, k, fits)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=2, max_size=24),
       st.lists(st.floats(0, 5), min_size=24, max_size=24),
       st.lists(st.floats(0, 20), min_size=24, max_size=24), st.booleans(),
       st.integers(1, 8), st.floats(0, 3), st.floats(1, 80),
       st.lists(st.integers(1, 2), min_size=8, max_size=8))
def test_stages_sharing_a_test_share_a_walk(
        state: list[float], acts: list[float], reruns: list[float], with_rerun: bool, k: int,
        out: float, budget: float, held: list[int]) -> None:
    """Stages holding as many micro-batches share one pointer walk (memory_starts): each
    stage's starts are still lowest_starts' own."""
    n, k, static, act = _prefixes(state, acts, k)
    rerun = range_max(reruns[:n]) if with_rerun else None

    def fits(j: int, s: int, e: int) -> bool:
        p2p = out * ((j > 0) + (j < k - 1))
        again = max(reruns[s:e], default=0.0) if with_rerun else 0.0
        return static[e] - static[s] + held[j] * (act[e] - act[s]) + p2p + again <= budget

    assert memory_starts(n, k, static, act, held, out, budget, rerun) == lowest_starts(
        n, k, fits)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=16),
       st.lists(st.floats(0, 5), min_size=16, max_size=16),
       st.lists(st.floats(0, 20), min_size=16, max_size=16), st.booleans(),
       st.integers(1, 8), st.floats(0, 3), st.floats(1, 60),
       st.lists(st.integers(1, 3), min_size=8, max_size=8))
def test_fitting_starts_are_the_starts_some_split_fits(
        state: list[float], acts: list[float], reruns: list[float], with_rerun: bool, k: int,
        out: float, budget: float, held: list[int]) -> None:
    """fitting_starts stops at the first stage no split reaches: memory_starts' starts
    where some_split_fits says a split fits them, None where it says none does."""
    n, k, static, act = _prefixes(state, acts, k)
    rerun = range_max(reruns[:n]) if with_rerun else None
    starts = memory_starts(n, k, static, act, held, out, budget, rerun)
    expected = starts if some_split_fits(starts, n, k) else None
    assert fitting_starts(n, k, static, act, held, out, budget, rerun) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=2, max_size=12),
       st.lists(st.floats(0, 5), min_size=12, max_size=12),
       st.integers(1, 6), st.floats(0, 3), st.floats(1, 80),
       st.lists(st.integers(1, 8), min_size=6, max_size=6))
def test_a_memory_sum_over_the_budgets_means_no_split_fits(
        state: list[float], acts: list[float], k: int, out: float, budget: float,
        held: list[int]) -> None:
    """surely_over: the stages' memory summed is at least the state, the fewest
    in-flight copies of the activations and the p2p buffers; above every stage's
    budget together, no split fits (and it never says so of one that does)."""
    n, k, static, act = _prefixes(state, acts, k)
    starts = memory_starts(n, k, static, act, held[:k], out, budget)
    if surely_over(static, act, held[:k], out, budget, n, k):
        assert not some_split_fits(starts, n, k)
    # a generous budget is never called over
    assert not surely_over(static, act, held[:k], out, 2 * (static[n] + 8 * act[n] + 2 * out) + 1,
                           n, k)


def _compositions(n: int, k: int) -> list[tuple[int, ...]]:
    """Every split of n layers into k non-empty stages."""
    if k == 1:
        return [(n,)]
    return [(first, *rest) for first in range(1, n - k + 2)
            for rest in _compositions(n - first, k - 1)]


@settings(max_examples=150, deadline=None)
@given(schedule=st.sampled_from([Schedule.INTERLEAVED, Schedule.ZBV, Schedule.DUALPIPEV,
                                 Schedule.DUALPIPE]),
       m=st.sampled_from([4, 8]), n=st.integers(4, 7),
       params=st.lists(st.floats(1e3, 1e7), min_size=7, max_size=7),
       acts=st.lists(st.floats(0.0, 1e8), min_size=7, max_size=7),
       memory=st.floats(1e6, 1e9))
def test_every_split_over_means_surely_oom_on_every_split(
        schedule: Schedule, m: int, n: int, params: list[float], acts: list[float],
        memory: float) -> None:
    """every_split_over (several chunks a device): when it says so, surely_oom rejects
    every split the search could try, so skipping the split search changes nothing."""
    p, v = 2, 2
    names = ["embedding", *[f"block{i}" for i in range(n - 2)], "head"]
    costs = LayerCosts([1.0] * n, [2.0] * n, [0.5] * n, acts[:n], [5.0] * n)
    table = CostTable(names, [2.0 * x for x in params[:n]], 2, {1: costs}, 128, memory,
                      Link(0.0), Link(0.0), AR, AR)
    req = PlanRequest(gpus=2, global_batch=m, shardings=(Sharding.NONE,),
                      recomputes=(Recompute.NONE,), reserve_bytes=0.0)
    spec = PlanSpec(schedule, p, 1, m, (), v if schedule is Schedule.INTERLEAVED else 2)
    inflight = peak_inflight_per_stage(schedule, p, m, spec.virtual_stages)
    n_chunks = model_chunks(schedule, p, spec.virtual_stages)
    per, _ = per_param_bytes(req, spec)
    state = sum(table.layer_params) * per
    if not every_split_over(state, sum(acts[:n]), inflight, p, n_chunks, memory):
        return
    for split in _compositions(n, n_chunks):
        s = replace(spec, stage_layers=split)
        stages = stage_costs(table, 1, split)
        per_stage = [stages[c] for c in stage_chunk_map(schedule, p, spec.virtual_stages)]
        assert surely_oom(table, req, s, per_stage)


def test_chunk_inflight_is_each_chunks_most_over_its_stages() -> None:
    # 1F1B holds min(m, p - s) on stage s (one chunk a stage); GPipe all m everywhere
    assert chunk_inflight(Schedule.ONE_F_ONE_B, 4, 8, 1, False) == ((4, 3, 2, 1), (4, 3, 2, 1))
    assert chunk_inflight(Schedule.GPIPE, 2, 3, 1, False) == ((3, 3), (3, 3))
    # dualpipe holds chunk c twice, as global stages c and p + c: the chunk the more
    per_stage, per_chunk = chunk_inflight(Schedule.DUALPIPE, 4, 8, 1, False)
    assert len(per_stage) == 8
    assert per_chunk == tuple(max(per_stage[c], per_stage[4 + c]) for c in range(4))
