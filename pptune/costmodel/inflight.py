"""How much each stage holds in flight under a schedule's op order: the micro-batches
between a stage's forward and the backward that frees it (``peak_inflight_per_stage``),
and the activation bytes that makes per device (``activation_peaks``), counted on the
order alone (schedules.py), as simulate.py holds them; timing cannot change either."""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Sequence

from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB, RAW_W, RawOp
from pptune.costmodel.schedules import (
    SPLIT_BACKWARD,
    Schedule,
    chunks_per_device,
    model_chunks,
    raw_orders,
    stage_chunk_map,
)


def peak_inflight_per_stage(schedule: Schedule | str, p: int, m: int, v: int = 1,
                            combined: bool = False) -> list[int]:
    """Most micro-batches whose activations each stage holds at once.

    Follows only the op order (timing cannot change it): a micro-batch is
    in flight on a stage from its F until its backward completes (B, or W
    where backward is split, or a whole backward BW, alone or in an F&B
    pair). 1F1B gives ``min(m, p - s)``, GPipe ``m``; a combined order holds
    one micro-batch more where its warm-up is not cut short.
    """
    schedule = Schedule(schedule)
    n_stages = p * chunks_per_device(schedule, v)
    if schedule is Schedule.GPIPE:
        return [m] * n_stages
    return list(_peak_inflight(schedule, p, held_microbatches(schedule, p, m, v), v, combined))


@functools.lru_cache(maxsize=4096)
def chunk_inflight(schedule: Schedule, p: int, m: int, v: int, combined: bool
                   ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(``peak_inflight_per_stage``, per model chunk the most over its stages: dualpipe
    holds each chunk on two), as the split search asks them for every candidate."""
    per_stage = peak_inflight_per_stage(schedule, p, m, v, combined)
    inflight = [0] * model_chunks(schedule, p, v)
    for k, chunk in enumerate(stage_chunk_map(schedule, p, v)):
        inflight[chunk] = max(inflight[chunk], per_stage[k])
    return tuple(per_stage), tuple(inflight)


def inflight_saturation(p: int, v: int) -> int:
    """A micro-batch count past which no schedule but GPipe holds more in flight.

    Warm-up phases are at most (p-1)*2 + (v-1)*p forwards long (interleaved in
    groups of p: ``held_microbatches`` for larger groups),
    2p-1 (zbv) or 2p (the DualPipes, whose steady step 4 adds pairs that
    each start one micro-batch and finish another), so past 2*p*max(v, 2)
    micro-batches the steady state only repeats; tests check the peaks agree
    with the full order beyond that.
    """
    return 2 * p * max(v, 2)


def held_microbatches(schedule: Schedule, p: int, m: int, v: int) -> int:
    """The micro-batch count whose op order holds as much in flight as m's does: m for
    GPipe, and for interleaving with m not a multiple of p (its micro-batch group, and
    so its warm-up, grows with m: schedule_orders.microbatch_group); else at most
    ``inflight_saturation``."""
    if schedule is Schedule.GPIPE or (schedule is Schedule.INTERLEAVED and m % p):
        return m
    return min(m, inflight_saturation(p, v))


def releases(schedule: Schedule, kind: int) -> bool:
    """Whether a raw op of ``kind`` completes a micro-batch's backward on its
    stage (frees its activations): W, BW or an F&B pair where backward is
    split, B otherwise."""
    if schedule in SPLIT_BACKWARD:
        return kind in (RAW_W, RAW_BW, RAW_FB)
    return kind == RAW_B


def freed_stage(schedule: Schedule, op: RawOp) -> int:
    """The stage whose activations a raw op frees (``releases``; a pair: its B's), or -1."""
    return op[4] if op[0] == RAW_FB else op[2] if releases(schedule, op[0]) else -1


@functools.lru_cache(maxsize=1024)
def _peak_inflight(schedule: Schedule, p: int, m: int, v: int,
                   combined: bool = False) -> tuple[int, ...]:
    n_stages = p * chunks_per_device(schedule, v)
    now = [0] * n_stages
    peak = [0] * n_stages
    frees = [releases(schedule, kind) for kind in range(RAW_FB + 1)]  # freed_stage's test
    # ``_holds``' events, read off the orders as they are walked
    for ops in raw_orders(schedule, p, m, v, combined):
        for op in ops:
            kind, stage = op[0], op[2]
            if kind == RAW_F or kind == RAW_FB:
                held = now[stage] + 1
                now[stage] = held
                if held > peak[stage]:
                    peak[stage] = held
            if kind == RAW_FB:
                now[op[4]] -= 1
            elif frees[kind]:
                now[stage] -= 1
    return tuple(peak)


def activation_peaks(schedule: Schedule, p: int, m: int, v: int,
                     act_bytes: Sequence[float], combined: bool = False) -> list[float]:
    """Each rank's most activation bytes held at once: a micro-batch's ``act_bytes[k]``
    on stage k from its F until its backward frees it, in the schedule's op order
    (as simulate.py counts them; timing cannot change the order). Past
    ``inflight_saturation`` micro-batches only GPipe holds more. The peak is at one
    of the moments ``held_counts`` keeps, whatever the bytes."""
    held_m = held_microbatches(schedule, p, m, v)
    return [_rank_peak(schedule, p, held_m, v, combined, d, tuple(act_bytes[k] for k in stages))
            for d, (stages, _) in enumerate(held_counts(schedule, p, held_m, v, combined))]


def held_stages(schedule: Schedule, p: int, m: int, v: int,
                combined: bool = False) -> tuple[tuple[int, ...], ...]:
    """Per rank, the stages whose activations it holds, in the order ``rank_peak``
    takes their bytes."""
    held_m = held_microbatches(schedule, p, m, v)
    return tuple(stages for stages, _ in held_counts(schedule, p, held_m, v, combined))


def rank_peak(schedule: Schedule, p: int, m: int, v: int, d: int,
              act_bytes: tuple[float, ...], combined: bool = False) -> float:
    """Rank d's entry of ``activation_peaks``, ``act_bytes`` for its ``held_stages``."""
    return _rank_peak(schedule, p, held_microbatches(schedule, p, m, v), v, combined, d,
                      act_bytes)


# a rank's peak depends only on its own stages' bytes: the per-stage recomputation fit
# (stage_recompute.py) changes one chunk's bytes at a time and asks every rank again
@functools.lru_cache(maxsize=65536)
def _rank_peak(schedule: Schedule, p: int, m: int, v: int, combined: bool, d: int,
               act_bytes: tuple[float, ...]) -> float:
    """Rank d's peak (``activation_peaks``), ``act_bytes`` for its stages in order."""
    # the bytes held at every moment at once, summed over the stages in order
    totals: list[float] = []
    for i, (column, act) in enumerate(zip(held_counts(schedule, p, m, v, combined)[d][1],
                                          act_bytes, strict=True)):
        part = list(map(operator.mul, column, itertools.repeat(act)))
        totals = part if i == 0 else list(map(operator.add, totals, part))
    return max(0.0, max(totals, default=0.0))


@functools.lru_cache(maxsize=1024)
def held_counts(schedule: Schedule, p: int, m: int, v: int, combined: bool
                ) -> tuple[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]], ...]:
    """Per rank: (its stages, for each of them the micro-batches it holds at each moment
    kept: just after a forward, less the moments another holds at least as many on every
    stage). Bytes held are a non-negative sum over the stages, so a rank's peak is at
    one of these moments; a column a stage, so that a sum runs over all moments at once."""
    out = []
    for events in _holds(schedule, p, m, v, combined):
        stages = tuple(sorted({k for pair in events for k in pair if k >= 0}))
        index = {k: i for i, k in enumerate(stages)}
        now = [0] * len(stages)
        seen: set[tuple[int, ...]] = set()
        for add, free in events:
            if add >= 0:
                now[index[add]] += 1
                seen.add(tuple(now))
            if free >= 0:
                now[index[free]] -= 1
        kept = tuple(sorted(_undominated(seen)))
        out.append((stages, tuple(zip(*kept, strict=True)) if kept else ((),) * len(stages)))
    return tuple(out)


def _undominated(seen: set[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The moments of ``seen`` no other moment holds at least as many as on every stage.
    Walked from the lexicographically largest down: a moment's dominators come before
    it, and where one does, one of those already kept does (dominance is transitive),
    so each is compared with the kept ones only."""
    kept: list[tuple[int, ...]] = []
    for c in sorted(seen, reverse=True):
        if not any(all(map(operator.le, c, o)) for o in kept):
            kept.append(c)
    return kept


@functools.lru_cache(maxsize=256)
def _holds(schedule: Schedule, p: int, m: int, v: int,
           combined: bool) -> tuple[tuple[tuple[int, int], ...], ...]:
    """Per rank, its ops that hold or free activations in order: (the stage an F
    adds to or -1, the stage a backward frees or -1); a pair's forward counts
    before its backward frees."""
    frees = [releases(schedule, kind) for kind in range(RAW_FB + 1)]  # freed_stage's test
    out = []
    for ops in raw_orders(schedule, p, m, v, combined):
        events = []
        for op in ops:
            kind, stage = op[0], op[2]
            if kind == RAW_FB:
                events.append((stage, op[4]))
            elif kind == RAW_F:
                events.append((stage, stage if frees[kind] else -1))
            elif frees[kind]:
                events.append((-1, stage))
        out.append(tuple(events))
    return tuple(out)
