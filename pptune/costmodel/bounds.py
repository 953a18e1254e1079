"""Step times no plan beats, from per-stage costs alone: what the search prunes with.

``lower_bound`` is never above the simulated step (tests/costmodel/test_bounds.py
checks it against the simulator on random costs for every schedule), so a
candidate whose bound exceeds the plans already found is skipped without
changing the answer (search.py).
"""

from __future__ import annotations

from pptune.costmodel.schedules import (
    OVERLAPPED,
    SPLIT_BACKWARD,
    Schedule,
    chains,
    stage_devices,
)
from pptune.costmodel.simulate import StageCost


def lower_bound(schedule: Schedule, p: int, m: int, stages: list[StageCost],
                combined: bool = False) -> float:
    """A step time no plan of these per-global-stage costs beats: the busiest
    device's work and the pipeline fill in front of each stage. An op pays its
    all-to-alls unless the schedule's F&B pairs may hide them (the DualPipes, or
    a ``combined`` order): a pair still lasts at least its halves' compute and
    at least their communication, so such a device works at least the larger
    sum. Each stage runs m micro-batches (dualpipe's m / 2 in each direction)."""
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
    elif chains(schedule) == 1:
        bound = max(bound, _fill_bound(schedule, p, m, stages, hides, split))
    return bound


def _fill_bound(schedule: Schedule, p: int, m: int, stages: list[StageCost],
                hides: bool, split: bool) -> float:
    """Several chunks a device, one pipeline: a device holding stage j cannot start
    it before micro-batch 0's forward has passed stages < j (each F op lasts at
    least its compute and its own all-to-all), and then still runs, for every
    micro-batch, the forwards of its stages from j on and the backward of all its
    stages (each waits on the forward of the last stage, which waits on j's)."""
    fwd = [s.fwd_s + (0.0 if hides else s.fwd_comm_s) for s in stages]
    back = [_op_s(s, hides, split) - f for s, f in zip(stages, fwd, strict=True)]
    owned: list[list[int]] = [[] for _ in range(p)]
    for k, d in enumerate(stage_devices(schedule, p, len(stages))):
        owned[d].append(k)
    heads = [0.0]
    for s in stages:
        heads.append(heads[-1] + s.fwd_s + s.fwd_comm_s)
    bound = 0.0
    for ks in owned:
        backs = sum(back[k] for k in ks)
        for j in ks:
            after = sum(fwd[k] for k in ks if k >= j) + backs
            bound = max(bound, heads[j] + m * after)
    return bound


def _op_s(s: StageCost, hides: bool, split: bool = False) -> float:
    """A micro-batch's work on a stage: its compute, and its all-to-alls unless hidden;
    where backward is split, B and W as the split runs them when that is less."""
    work = s.total_s
    if split and (s.split_bwd_s is not None or s.split_wgrad_s is not None):
        work = s.fwd_s + min(s.bwd_s + s.wgrad_s, s.split_b_s + s.split_w_s)
    return work if hides else work + s.fwd_comm_s + s.bwd_comm_s
