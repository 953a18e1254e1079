"""Stage splits: exact answers by hand, optimality against brute force."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pptune.costmodel.partition import (
    SplitError,
    _crossing_row,
    bottleneck,
    even_split,
    lowest_starts,
    min_bottleneck_split,
    some_split_fits,
    stage_bounds,
)


def all_splits(n: int, k: int):
    for cuts in itertools.combinations(range(1, n), k - 1):
        b = (0, *cuts, n)
        yield [b[i + 1] - b[i] for i in range(k)]


def test_even_split_like_megatron() -> None:
    assert even_split(12, 3) == [4, 4, 4]
    assert even_split(10, 4) == [3, 3, 2, 2]
    with pytest.raises(SplitError, match="3 < 4"):
        even_split(3, 4)


def test_heavy_head_gets_its_own_stage() -> None:
    # embedding 1, six blocks of 2, head 6: best bottleneck is 6
    costs = [1, 2, 2, 2, 2, 2, 2, 6]
    split = min_bottleneck_split(costs, 4)
    assert sum(split) == 8
    assert bottleneck(costs, split) == 6
    assert split[-1] == 1


def test_stage_bounds() -> None:
    assert stage_bounds([2, 3, 1]) == [(0, 2), (2, 5), (5, 6)]


def test_memory_limit_forces_a_worse_split() -> None:
    costs = [1.0, 1.0, 1.0, 1.0]
    # stage 0 may hold only one layer
    fits = lambda k, s, e: k != 0 or e - s <= 1
    split = min_bottleneck_split(costs, 2, fits=fits)
    assert split == [1, 3]
    with pytest.raises(SplitError):
        min_bottleneck_split(costs, 2, fits=lambda k, s, e: e - s <= 1)


def test_too_few_layers() -> None:
    with pytest.raises(SplitError, match="3 < 4"):
        min_bottleneck_split([1, 1, 1], 4)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 50), min_size=1, max_size=9),
    st.integers(1, 5),
    st.integers(0, 20),
    st.integers(0, 200),
)
def test_optimal_against_brute_force(costs: list[int], k: int, send: int, mem: int) -> None:
    n = len(costs)
    if k > n:
        return
    extra = [float(send)] * (k - 1) + [0.0]
    # memory: layer i weighs costs[i]; earlier stages hold more in flight
    fits = lambda stage, s, e: sum(costs[s:e]) * (k - stage) <= mem * 3 + 60
    feasible = [
        sp for sp in all_splits(n, k)
        if all(fits(i, s, e) for i, (s, e) in enumerate(stage_bounds(sp)))
    ]
    if not feasible:
        with pytest.raises(SplitError):
            min_bottleneck_split(costs, k, extra, fits)
        return
    best = min(bottleneck(costs, sp, extra) for sp in feasible)
    got = min_bottleneck_split(costs, k, extra, fits)
    assert sum(got) == n and all(x >= 1 for x in got)
    assert all(fits(i, s, e) for i, (s, e) in enumerate(stage_bounds(got)))
    assert bottleneck(costs, got, extra) == best


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=9),
    st.integers(1, 5),
    st.integers(0, 200),
)
def test_some_split_fits_exactly_when_a_split_is_found(costs: list[int], k: int,
                                                        mem: int) -> None:
    # the feasibility test the search runs before the split: brute force agrees,
    # and so does min_bottleneck_split (it raises exactly when none fits)
    n = len(costs)
    if k > n:
        return
    fits = lambda stage, s, e: sum(costs[s:e]) * (k - stage) <= mem
    starts = lowest_starts(n, k, fits)
    brute = any(all(fits(i, s, e) for i, (s, e) in enumerate(stage_bounds(sp)))
                for sp in all_splits(n, k))
    assert some_split_fits(starts, n, k) == brute
    try:
        min_bottleneck_split([float(c) for c in costs], k, starts=starts)
        found = True
    except SplitError:
        found = False
    assert found == brute


def test_large_instance_uses_bisection_and_stays_optimal_for_uniform_costs() -> None:
    costs = [1.0] * 130
    split = min_bottleneck_split(costs, 64)
    assert sum(split) == 130
    assert bottleneck(costs, split) == 3.0


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.1, 0.5, 1.0, 1.0, 2.0, 3.0]), min_size=1, max_size=14),
    st.integers(1, 8),
    st.lists(st.sampled_from([0.0, 0.0, 0.05, 0.3, 1.0]), min_size=8, max_size=8),
)
def test_time_only_sweep_gives_the_walks_split(costs: list[float], k: int,
                                               extra: list[float]) -> None:
    # without a memory test each row is one sweep (partition._crossing_row); with
    # starts that allow everything the rows are walked start by start: the same
    # split, ties included (repeated costs, stage extras that break monotonicity)
    n = len(costs)
    if k > n:
        return
    allow_all = lowest_starts(n, k, lambda stage, s, e: True)
    assert (min_bottleneck_split(costs, k, extra[:k])
            == min_bottleneck_split(costs, k, extra[:k], starts=allow_all))


def test_time_only_row_by_hand() -> None:
    # four layers of cost 1 on two stages: the second stage ending at e = 2, 3, 4
    # starts at 1, 2, 2 (bottlenecks 1, 2, 2; at e = 3 the walk keeps the later of
    # two equal starts), and a row after a falling one is left to the walk
    prefix, prev = [0.0, 1.0, 2.0, 3.0, 4.0], [math.inf, 1.0, 2.0, 3.0, math.inf]
    cur, arg = [math.inf] * 5, [-1] * 5
    assert _crossing_row(prefix, prev, cur, arg, 0.0, 1, 4)
    assert (cur[2:], arg[2:]) == ([1.0, 2.0, 2.0], [1, 2, 2])
    assert not _crossing_row(prefix, [math.inf, 2.0, 1.0, 3.0, math.inf], cur, arg, 0.0, 1, 4)
