"""Step times no plan beats, from per-stage costs alone: what the search prunes with.

``lower_bound`` is never above the simulated step (tests/costmodel/test_bounds.py
checks it against the simulator on random costs for every schedule), so a
candidate whose bound exceeds the plans already found is skipped without
changing the answer (search.py).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence

from pptune.costmodel.inflight import freed_stage, inflight_saturation
from pptune.costmodel.schedule_ops import RAW_B, RAW_BW
from pptune.costmodel.schedules import (
    OVERLAPPED,
    SPLIT_BACKWARD,
    Schedule,
    chains,
    device_stages,
    raw_orders,
    stage_devices,
)
from pptune.costmodel.simulate import StageCost


def lower_bound(schedule: Schedule, p: int, m: int, stages: list[StageCost],
                combined: bool = False, tail_s: Sequence[float] = ()) -> float:
    """A step time no plan of these per-global-stage costs beats: the busiest
    device's work, the pipeline fill in front of each stage and the drain after
    each device's last op. An op pays its all-to-alls unless the schedule's F&B
    pairs may hide them (the DualPipes, or a ``combined`` order): a pair still
    lasts at least its halves' compute and at least their communication, so such
    a device works at least the larger sum. Each stage runs m micro-batches
    (dualpipe's m / 2 in each direction). ``tail_s``: each stage's once-per-step
    traffic after its gradients are done (the data-parallel reduction as
    simulate.with_allreduce runs it); () for none."""
    hides = combined or schedule in OVERLAPPED
    split = schedule in SPLIT_BACKWARD
    runs = m / chains(schedule)
    per_dev = [0.0] * p
    comm = [0.0] * p
    for d, s in zip(stage_devices(schedule, p, len(stages)), stages, strict=True):
        per_dev[d] += _op_s(s, hides, split) * runs
        if hides:
            comm[d] += (s.fwd_comm_s + s.bwd_comm_s) * runs
    bound = max(max(per_dev), max(comm))
    if len(stages) == p:
        head = tail = 0.0
        for s in stages:
            # micro-batch 0 must pass F of stages < j before j starts, and the last
            # backward must pass B of stages < j after j's last B (where backward is
            # split, its W may still run beside them)
            own_b = min(s.bwd_s, s.split_b_s) if split else s.bwd_s + s.wgrad_s
            comm_f, comm_b = (0.0, 0.0) if hides else (s.fwd_comm_s, s.bwd_comm_s)
            last_b = s.fwd_s + own_b + comm_f + comm_b
            bound = max(bound, head + m * _op_s(s, hides, split), head + m * last_b + tail)
            head += s.fwd_s + comm_f
            tail += own_b + comm_b
    if chains(schedule) == 1:
        passes = _passes(stages, hides, split)
        if len(stages) != p:
            bound = max(bound, _fill_bound(schedule, p, m, passes))
        bound = max(bound, _drain_bound(schedule, p, m, passes, hides or split, per_dev,
                                        tail_s, combined))
    return bound


def _fill_bound(schedule: Schedule, p: int, m: int,
                passes: tuple[list[float], list[float], list[float]]) -> float:
    """Several chunks a device, one pipeline: a device holding stage j cannot start
    it before micro-batch 0's forward has passed stages < j (each F op lasts at
    least its compute and its own all-to-all), and then still runs, for every
    micro-batch, the forwards of its stages from j on and the backward of all its
    stages (each waits on the forward of the last stage, which waits on j's)."""
    fwd, back, heads = passes
    bound = 0.0
    for ks in device_stages(schedule, p, len(fwd) // p):
        backs = sum(back[k] for k in ks)
        for j in ks:
            after = sum(fwd[k] for k in ks if k >= j) + backs
            bound = max(bound, heads[j] + m * after)
    return bound


def _drain_bound(schedule: Schedule, p: int, m: int,
                 passes: tuple[list[float], list[float], list[float]], pairs_or_split: bool,
                 per_dev: list[float], tail_s: Sequence[float], combined: bool) -> float:
    """One pipeline: a device starts no earlier than micro-batch 0's forward reaches its
    first stage and runs all its work (``per_dev``); where its last op completes the
    gradients of stage t (interleaved's and 1F1B's: the last micro-batch's backward on
    its first stage), t's once-per-step traffic still follows it, and where that op is
    a whole backward of a schedule that neither splits it nor pairs it
    (``pairs_or_split``), so do that micro-batch's backwards on every stage before t,
    one after the other."""
    _, back, heads = passes
    drains = [0.0, *itertools.accumulate(back)]
    v = len(back) // p
    bound = 0.0
    for d, (ks, (t, whole)) in enumerate(zip(device_stages(schedule, p, v),
                                            last_ops(schedule, p, m, v, combined),
                                            strict=True)):
        if t >= 0:
            after = max(drains[t] if whole and not pairs_or_split else 0.0,
                        tail_s[t] if tail_s else 0.0)
            bound = max(bound, heads[ks[0]] + per_dev[d] + after)
    return bound


@functools.lru_cache(maxsize=1024)
def last_ops(schedule: Schedule, p: int, m: int, v: int,
             combined: bool = False) -> tuple[tuple[int, bool], ...]:
    """Per device, what its last op finishes: (the stage whose gradients it completes,
    -1 when it completes none; whether it is a whole backward, B or BW). Read from the
    order at ``inflight_saturation`` micro-batches at most: past it the orders only
    repeat their steady state, and end as they did (tests check it against the full
    orders)."""
    out = []
    for ops in raw_orders(schedule, p, min(m, inflight_saturation(p, v)), v, combined):
        t = freed_stage(schedule, ops[-1]) if ops else -1
        out.append((t, t >= 0 and ops[-1][0] in (RAW_B, RAW_BW)))
    return tuple(out)


def _passes(stages: list[StageCost], hides: bool, split: bool
            ) -> tuple[list[float], list[float], list[float]]:
    """Per stage: its F op's least time (compute, and its all-to-all unless hidden), the
    least time of the rest of its work a micro-batch, and when micro-batch 0's forward
    reaches it at the earliest (every F before it at its compute and all-to-all: the
    pipeline's first forwards run alone)."""
    fwd = [s.fwd_s + (0.0 if hides else s.fwd_comm_s) for s in stages]
    back = [_op_s(s, hides, split) - f for s, f in zip(stages, fwd, strict=True)]
    heads = [0.0, *itertools.accumulate(s.fwd_s + s.fwd_comm_s for s in stages)]
    return fwd, back, heads


def _op_s(s: StageCost, hides: bool, split: bool = False) -> float:
    """A micro-batch's work on a stage: its compute, and its all-to-alls unless hidden;
    where backward is split, B and W as the split runs them when that is less."""
    work = s.total_s
    if split and (s.split_bwd_s is not None or s.split_wgrad_s is not None):
        work = s.fwd_s + min(s.bwd_s + s.wgrad_s, s.split_b_s + s.split_w_s)
    return work if hides else work + s.fwd_comm_s + s.bwd_comm_s
