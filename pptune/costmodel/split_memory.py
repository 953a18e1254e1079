"""The memory tests of a contiguous split (splitting.py's): which starts let a stage
fit, and the lower bounds that rule a candidate out before any split is sought."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from pptune.costmodel.partition import Starts, ends_after, reached_ends


class RangeMax:
    """``max(values[s:e])`` (0 for an empty range) in constant time a query, from a
    sparse table built once: ``rows[j]`` holds the maxima of the runs of 2**j values,
    and a range is covered by two runs of its largest power of two."""

    __slots__ = ("rows",)

    def __init__(self, values: Sequence[float]) -> None:
        self.rows = [list(values)]
        width = 1
        while 2 * width <= len(values):
            prev = self.rows[-1]
            self.rows.append([max(prev[i], prev[i + width])
                              for i in range(len(values) - 2 * width + 1)])
            width *= 2

    def __call__(self, s: int, e: int) -> float:
        if e <= s:
            return 0.0
        j = (e - s).bit_length() - 1
        row = self.rows[j]
        return max(row[s], row[e - (1 << j)])


def range_max(values: Sequence[float]) -> RangeMax:
    """``RangeMax`` of ``values``."""
    return RangeMax(values)


def memory_starts(n: int, n_stages: int, static: Sequence[float], act: Sequence[float],
                  inflight: Sequence[int], out: float, budget: float,
                  rerun: RangeMax | None = None) -> Starts:
    """``lowest_starts(n, n_stages, fits)`` for min_bottleneck_within_memory's ``fits``
    (prefix sums of the state and of one micro-batch's activations, ``inflight[k]``
    micro-batches held on stage k, the p2p buffers beside them, and the most one
    backward re-creates by recomputation, ``rerun(s, e)``), its test written in the
    loop: the search's hottest test, the same arithmetic, the same starts.

    Stages that hold as many micro-batches and p2p buffers share one test, and a
    stage k's start for an end e is then ``max(k, s)`` with s the start the first of
    them finds for e: ``fits`` only loosens as a stage's start rises (the sums are
    prefix sums of non-negative terms), so a pointer from k stops at the first
    fitting start past k, which the first stage's pointer passed or stopped at. One
    pointer walk per test, over the ends of all of its stages."""
    return tuple(_rows(n, n_stages, static, act, inflight, out, budget, rerun))


def fitting_starts(n: int, n_stages: int, static: Sequence[float], act: Sequence[float],
                   inflight: Sequence[int], out: float, budget: float,
                   rerun: RangeMax | None = None) -> Starts | None:
    """``memory_starts`` where some split fits them (partition.some_split_fits), else
    None: the rows are found a stage at a time, and none past the first stage that no
    split reaches (most memory-bound candidates fit nowhere, many of them from their
    first stages on)."""
    if n_stages < 1 or n < n_stages:
        return None
    rows: list[tuple[int, ...]] = []
    reach: list[bool] = []
    for k, row in enumerate(_rows(n, n_stages, static, act, inflight, out, budget, rerun)):
        if k and not any(reach):
            return None
        rows.append(row)
        reach = reached_ends(row, n, n_stages) if k == 0 else ends_after(reach, row, k, n,
                                                                       n_stages)
    return tuple(rows) if reach[n] else None


def _rows(n: int, n_stages: int, static: Sequence[float], act: Sequence[float],
          inflight: Sequence[int], out: float, budget: float,
          rerun: RangeMax | None) -> Iterator[tuple[int, ...]]:
    """``memory_starts``' rows in stage order, each walk made when its first stage's
    row is asked for."""
    tests: dict[tuple[int, float], list[int]] = {}
    test_of = []
    for k in range(n_stages):
        test = (inflight[k], out * ((k > 0) + (k < n_stages - 1)))
        tests.setdefault(test, []).append(k)
        test_of.append(test)
    walks: dict[tuple[int, float], list[int]] = {}
    for k, test in enumerate(test_of):
        ks = tests[test]
        if test not in walks:  # k is the first of its stages
            walks[test] = _walk(n, k, n - (n_stages - 1 - ks[-1]), static, act, test[0],
                                test[1], budget, rerun)
        walk = walks[test]
        if len(ks) == 1:  # the walk is the stage's own
            yield tuple(walk)
            continue
        end = n - (n_stages - 1 - k) + 1
        row = [0] * (n + 1)
        row[k + 1:end] = [s if s > k else k for s in walk[k + 1:end]]
        yield tuple(row)


def _walk(n: int, k: int, last: int, static: Sequence[float], act: Sequence[float], held: int,
          p2p: float, budget: float, rerun: RangeMax | None) -> list[int]:
    """The lowest start from k on that fits each end e in (k, last] (e where none does)."""
    row = [0] * (n + 1)
    s = k
    for e in range(k + 1, last + 1):
        se, ae = static[e], act[e]
        if rerun is None:
            while s < e and not se - static[s] + held * (ae - act[s]) + p2p <= budget:
                s += 1
        else:  # the rerun (>= 0) only asked where the rest fits: the same sums
            tops = rerun.rows  # RangeMax's query, written in the loop
            while s < e:
                rest = se - static[s] + held * (ae - act[s]) + p2p
                if rest <= budget:
                    j = (e - s).bit_length() - 1
                    a, b = tops[j][s], tops[j][e - (1 << j)]
                    if rest + (a if a >= b else b) <= budget:
                        break
                s += 1
        row[e] = s
    return row


def surely_over(static: Sequence[float], act: Sequence[float], inflight: Sequence[int],
                out: float, budget: float, n: int, n_stages: int) -> bool:
    """True only when no split of the layers fits ``memory_starts``' test: the stages
    together hold every layer's state, at least the fewest in-flight copies of
    every activation and their p2p buffers, more than all their budgets (a
    relative 1e-9 margin for the rounding of the prefix sums). O(1): most
    memory-bound candidates are ruled out here."""
    p2p = out * 2 * (n_stages - 1)
    need = static[n] - static[0] + min(inflight[:n_stages]) * (act[n] - act[0]) + p2p
    return need > n_stages * budget * (1 + 1e-9) + 1e-9


def every_split_over(state: float, act: float, inflight: Sequence[int], p: int,
                     n_chunks: int, usable: float) -> bool:
    """True only when ``surely_oom`` holds for every split: summed over the devices,
    each one's state and the largest in-flight set of one of its stages (at least
    their average over its stages, so at least the fewest in-flight copies of every
    activation over the stages a device holds) exceed what ``p`` devices have.
    ``state`` / ``act``: the model's state and one micro-batch's activations;
    ``inflight`` per global stage (dualpipe holds each chunk twice). A relative 1e-9
    margin for the rounding of the sums."""
    copies = len(inflight) / n_chunks
    per_device = len(inflight) / p
    need = copies * (state + min(inflight) / per_device * act)
    return need > p * usable * (1 + 1e-9) + 1e-9
