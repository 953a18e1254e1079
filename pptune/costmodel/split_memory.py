"""The memory tests of a contiguous split (splitting.py's): which starts let a stage
fit, and the lower bounds that rule a candidate out before any split is sought."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pptune.costmodel.partition import Starts

RangeMax = Callable[[int, int], float]


def range_max(values: Sequence[float]) -> RangeMax:
    """``max(values[s:e])`` (0 for an empty range) in constant time a query, from a
    sparse table built once: row j holds the maxima of the runs of 2**j values, and a
    range is covered by two runs of its largest power of two."""
    rows = [list(values)]
    width = 1
    while 2 * width <= len(values):
        prev = rows[-1]
        rows.append([max(prev[i], prev[i + width]) for i in range(len(values) - 2 * width + 1)])
        width *= 2

    def of(s: int, e: int) -> float:
        if e <= s:
            return 0.0
        j = (e - s).bit_length() - 1
        row = rows[j]
        return max(row[s], row[e - (1 << j)])

    return of


def memory_starts(n: int, n_stages: int, static: Sequence[float], act: Sequence[float],
                  inflight: Sequence[int], out: float, budget: float,
                  rerun: RangeMax | None = None) -> Starts:
    """``lowest_starts(n, n_stages, fits)`` for min_bottleneck_within_memory's ``fits``
    (prefix sums of the state and of one micro-batch's activations, ``inflight[k]``
    micro-batches held on stage k, the p2p buffers beside them, and the most one
    backward re-creates by recomputation, ``rerun(s, e)``), its test written in the
    loop: the search's hottest test, the same arithmetic, the same starts."""
    rows = []
    for k in range(n_stages):
        row = [0] * (n + 1)
        held, p2p = inflight[k], out * ((k > 0) + (k < n_stages - 1))
        s = k
        for e in range(k + 1, n - (n_stages - 1 - k) + 1):
            se, ae = static[e], act[e]
            if rerun is None:
                while s < e and not se - static[s] + held * (ae - act[s]) + p2p <= budget:
                    s += 1
            else:  # the rerun (>= 0) only asked where the rest fits: the same sums
                while s < e:
                    rest = se - static[s] + held * (ae - act[s]) + p2p
                    if rest <= budget and rest + rerun(s, e) <= budget:
                        break
                    s += 1
            row[e] = s
        rows.append(tuple(row))
    return tuple(rows)


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
