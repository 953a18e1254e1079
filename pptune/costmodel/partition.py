"""Contiguous stage splits over plain lists of numbers.

``min_bottleneck_split(costs, n_stages, ...)`` splits layers 0..L-1 into
``n_stages`` contiguous, non-empty stages minimising the largest stage cost
(a stage's cost is the sum of its layers' costs plus a per-stage extra, e.g.
the time to send its output), subject to each stage fitting a memory
budget. Exact (dynamic programming), not a heuristic: the same problem
torchgpipe's ``balance/blockpartition.py`` solves, here with a per-stage
extra cost and a per-stage memory test (earlier 1F1B stages hold more
micro-batches, so the budget differs by stage and a greedy fill is not
exact).
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
from collections.abc import Callable, Iterable, Sequence


class SplitError(ValueError):
    """No split exists (too few layers, or nothing fits in memory)."""


def stage_bounds(stage_layers: Sequence[int]) -> list[tuple[int, int]]:
    """[(start, end)) layer ranges from layers-per-stage counts."""
    out, start = [], 0
    for n in stage_layers:
        out.append((start, start + n))
        start += n
    return out


def add_ends(blocks: Sequence[int]) -> list[int]:
    """Transformer blocks per stage -> layers per stage, with the embedding on
    the first stage and the LM head on the last (Megatron-LM's placement)."""
    out = list(blocks)
    out[0] += 1
    out[-1] += 1
    return out


MTP = "mtp"  # the name of a multi-token-prediction layer: mtp0, mtp1, ... (analytic.py)


def is_mtp(name: str) -> bool:
    return name.startswith(MTP)


def mtp_count(names: Iterable[str]) -> int:
    """The multi-token-prediction layers among a table's layer names."""
    return sum(1 for n in names if is_mtp(n))


def strip_ends(layers: Sequence[int]) -> list[int]:
    """Layers per stage -> transformer blocks per stage (inverse of add_ends)."""
    out = list(layers)
    out[0] -= 1
    out[-1] -= 1
    return out


def even_split(n_layers: int, n_stages: int) -> list[int]:
    """Megatron-style even split: the first ``n_layers % n_stages`` stages get one more."""
    if n_stages < 1 or n_layers < n_stages:
        raise SplitError(
            f"cannot split {n_layers} layers into {n_stages} stages "
            f"({n_layers} < {n_stages}); use fewer pipeline stages"
        )
    q, r = divmod(n_layers, n_stages)
    return [q + 1 if i < r else q for i in range(n_stages)]


Starts = tuple[tuple[int, ...], ...]


def lowest_starts(n: int, n_stages: int, fits: Callable[[int, int, int], bool]) -> Starts:
    """``out[k][e]``: the first layer a stage k ending at layer e may start at and still
    fit (``e`` when none fits), for the ends a split into ``n_stages`` can give it.

    ``fits`` is monotone (a longer stage never fits better), so the start only moves
    forward as the end does: two pointers, about 2 (n - n_stages) tests a stage. What
    ``fits`` says is all a split depends on: equal tables give equal splits."""
    out = []
    for k in range(n_stages):
        row = [0] * (n + 1)
        s = k
        for e in range(k + 1, n - (n_stages - 1 - k) + 1):
            while s < e and not fits(k, s, e):
                s += 1
            row[e] = s
        out.append(tuple(row))
    return tuple(out)


def some_split_fits(starts: Starts, n: int, n_stages: int) -> bool:
    """Whether any split of ``n`` layers into ``n_stages`` stages fits, given
    ``lowest_starts``: stage k may end at e after stage k - 1 ended at some s in
    [starts[k][e], e - 1]. The same answer as ``min_bottleneck_split`` raising
    SplitError or not, in O(n_stages x n) (prefix counts of the reachable ends):
    the search asks it first, since most memory-bound candidates fit nowhere."""
    if n_stages < 1 or n < n_stages:
        return False
    reach = reached_ends(starts[0], n, n_stages)
    for k in range(1, n_stages):
        if not any(reach):  # nothing reached: no later stage reaches anything
            return False
        reach = ends_after(reach, starts[k], k, n, n_stages)
    return reach[n]


def reached_ends(first: Sequence[int], n: int, n_stages: int) -> list[bool]:
    """``some_split_fits``' ends the first stage may reach (its starts ``first``)."""
    reach = [False] * (n + 1)
    for e in range(1, n - n_stages + 2):
        reach[e] = first[e] == 0
    return reach


def ends_after(reach: Sequence[bool], lo: Sequence[int], k: int, n: int,
               n_stages: int) -> list[bool]:
    """The ends stage k reaches (its starts ``lo``) from the ends ``reach`` of the stage
    before: e where some reached end lies in [lo[e], e)."""
    count = [0, *itertools.accumulate(reach)]  # count[i]: ends reached below i
    nxt = [False] * (n + 1)
    first, last = k + 1, n - (n_stages - 1 - k) + 1
    nxt[first:last] = [s < e and count[e] > count[s]
                       for e, s in zip(range(first, last), lo[first:last], strict=True)]
    return nxt


def min_bottleneck_split(
    costs: Sequence[float],
    n_stages: int,
    stage_extra: Sequence[float] | None = None,
    fits: Callable[[int, int, int], bool] | None = None,
    starts: Starts | None = None,
) -> list[int]:
    """Layers per stage minimising ``max_k(sum(costs[stage k]) + stage_extra[k])``.

    ``fits(k, start, end)`` says whether layers [start, end) fit on stage k;
    it must be monotone (a longer stage never fits better). ``starts``
    (``lowest_starts(len(costs), n_stages, fits)``) may stand in for ``fits``.
    Raises SplitError when no split fits.

    Dynamic programming over (stages, prefix length): ``best[k][e]`` is the
    smallest bottleneck of layers [0, e) on stages 0..k. The inner loop
    walks the last stage's start downward and stops as soon as that stage
    alone is no better than the best found, or stops fitting, so each cell
    costs about one stage's worth of layers.
    """
    n = len(costs)
    if n_stages < 1 or n < n_stages:
        raise SplitError(
            f"cannot split {n} layers into {n_stages} stages ({n} < {n_stages}); "
            "use fewer pipeline stages or virtual stages"
        )
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    extra = list(stage_extra) if stage_extra is not None else [0.0] * n_stages
    if starts is None and fits is not None:
        starts = lowest_starts(n, n_stages, fits)
    inf = math.inf
    best = [[inf] * (n + 1) for _ in range(n_stages)]
    arg = [[-1] * (n + 1) for _ in range(n_stages)]
    for e in range(1, n - n_stages + 2):
        if starts is None or starts[0][e] == 0:
            best[0][e] = prefix[e] + extra[0]
    for k in range(1, n_stages):
        prev, cur, cur_arg, xk = best[k - 1], best[k], arg[k], extra[k]
        lo = starts[k] if starts is not None else None
        if lo is None and _crossing_row(prefix, prev, cur, cur_arg, xk, k,
                                        n - (n_stages - 1 - k)):
            continue
        for e in range(k + 1, n - (n_stages - 1 - k) + 1):
            top, where = inf, -1
            pe = prefix[e]
            # the last stage's start walks down while it fits (monotone: from lo[e] up)
            for s in range(e - 1, (k if lo is None else lo[e]) - 1, -1):
                last = pe - prefix[s] + xk
                if last >= top:
                    break
                before = prev[s]
                val = last if last > before else before
                if val < top:
                    top, where = val, s
            cur[e], cur_arg[e] = top, where
    if best[n_stages - 1][n] == inf:
        raise SplitError("no split fits in memory")
    out, e = [], n
    for k in range(n_stages - 1, 0, -1):
        s = arg[k][e]
        out.append(e - s)
        e = s
    out.append(e)
    return out[::-1]


def _crossing_row(prefix: Sequence[float], prev: Sequence[float], cur: list[float],
                  cur_arg: list[int], xk: float, k: int, last_end: int) -> bool:
    """One row of ``min_bottleneck_split``'s table without a memory test, in one sweep:
    the same values and starts as its downward walk, or False (row left alone) where
    the previous row is not nondecreasing.

    With ``prev`` nondecreasing and the last stage's cost falling as its start ``s``
    rises, the best start sits where they cross: ``c`` the first start with
    ``prev[s] >= last(s)``. Starts from ``c`` on cost ``prev[s]`` (least at ``c``; the
    walk keeps the largest start of equal cost), starts below it ``last(s)`` (least at
    ``c - 1``). A longer prefix only raises ``last``, so ``c`` never moves back as ``e``
    grows: the sweep costs one pass over the row."""
    if not all(map(operator.le, prev[k:last_end - 1], prev[k + 1:last_end])):
        return False
    c = k
    for e in range(k + 1, last_end + 1):
        pe = prefix[e]
        while c < e and prev[c] < pe - prefix[c] + xk:
            c += 1
        if c == e:  # the last stage alone outweighs every earlier prefix: shortest
            cur[e], cur_arg[e] = pe - prefix[e - 1] + xk, e - 1
            continue
        at = prev[c]
        if c > k:
            below = pe - prefix[c - 1] + xk
            if below < at:
                cur[e], cur_arg[e] = below, c - 1
                continue
        # the largest start of equal cost (prev rarely repeats a value)
        cur[e] = at
        cur_arg[e] = c if c + 1 == e or prev[c + 1] != at else bisect.bisect_right(
            prev, at, c, e) - 1
    return True


def bottleneck(
    costs: Sequence[float],
    stage_layers: Sequence[int],
    stage_extra: Sequence[float] | None = None,
) -> float:
    extra = list(stage_extra) if stage_extra is not None else [0.0] * len(stage_layers)
    return max(sum(costs[s:e]) + extra[k] for k, (s, e) in enumerate(stage_bounds(stage_layers)))
