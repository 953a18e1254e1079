"""Improve a split for the simulated step, not for the bottleneck stage.

The min-max split (partition.py) is optimal when the steady state dominates
the step (many micro-batches). With m close to p the fill and drain matter
too: a stage that starts late (or ends the backward late) is worth
lightening even if that makes another stage the bottleneck. Example:
gpt-small on 4 GPUs, 1F1B, m = 4, micro-batch 8 simulates faster as
``3,2,2,1`` than as the min-max ``2,2,2,2``.

Starting from the min-max split, ``refine_split`` moves one layer from a
stage to another (any other for ``pp <= ALL_PAIRS_MAX_PP``, where the stages
in between shift by one so the split stays contiguous; a neighbour beyond),
simulates, and keeps any move that shortens the step and still fits in
memory; when no such move helps it tries moving two layers, and stops when
that does not help either or after ``MAX_RUNS_PER_STAGE * pp`` simulations
(hill climbing). When the layers allow at most ``EXHAUSTIVE_MAX_SPLITS``
contiguous splits it simulates every one of them instead, which is exact;
with several chunks per device (interleaved-1f1b, zbv) only that exact
search runs, over all ``pp * v`` stages (the search runs that one even for
plans outside its top, ``always_refined``). It runs for ``pp <= MAX_REFINE_PP``
and ``m <= REFINE_MAX_M_PER_PP * pp``: beyond that the min-max split is
already within the planner's tolerance and each simulation costs more. Where
it does not run and a device holds several chunks, the split balanced over
devices rather than chunks (``balanced_splits``: no simulation in the walk) is
simulated instead, up to ``BALANCED_TRIES`` of them until one fits, after the
min-max split over chunks without the memory test (the search's split gives each
chunk an even share of its device's memory, stricter than the device's peak).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import replace

from pptune.costmodel.evaluate import Plan, PlanRequest, PlanSpec, evaluate
from pptune.costmodel.schedules import (
    Schedule,
    chains,
    chunks_per_device,
    model_chunk,
    stage_device,
)
from pptune.costmodel.splitting import hop_extra, time_only_split
from pptune.costmodel.table import CostTable, stage_costs

MAX_REFINE_PP = 16
REFINE_MAX_M_PER_PP = 4
MAX_MOVES = 64  # accepted moves per plan, a safety bound on the climb
MAX_MOVE_LAYERS = 2  # a move shifts 1 layer; 2 when no 1-layer move helps
MAX_RUNS_PER_STAGE = 8  # simulations per plan at most 8 * stages
ALL_PAIRS_MAX_PP = 4  # deeper pipelines move layers between neighbouring stages only
EXHAUSTIVE_MAX_SPLITS = 120  # this few contiguous splits: simulate them all (exact)
ALL_PAIRS_MAX_CHUNKS = 24  # device balancing moves layers between any two chunks up to this
BALANCED_TRIES = 3  # device-balanced splits simulated at most, until one fits


def always_refined(spec: PlanSpec) -> bool:
    """Whether the search refines this split plan even when it simulates outside
    the top (and bounds it by its split-free bound, not its split's): with several
    chunks per device (interleaved-1f1b, zbv, the DualPipes) the min-max split
    over chunks is no device's bottleneck, so it may simulate far from the plan's
    best split; where the exact search is cheap it runs anyway."""
    n, k = sum(spec.stage_layers), len(spec.stage_layers)
    return (spec.virtual_stages > 1 and 1 < spec.pp <= MAX_REFINE_PP
            and spec.num_microbatches <= REFINE_MAX_M_PER_PP * spec.pp
            and math.comb(n - 1, k - 1) <= EXHAUSTIVE_MAX_SPLITS)


def refine_split(table: CostTable, req: PlanRequest, plan: Plan) -> tuple[Plan, int]:
    """(the best plan reachable by layer moves between stages, simulations run)."""
    n, k = sum(plan.stage_layers), len(plan.stage_layers)
    if (not 1 < plan.pp <= MAX_REFINE_PP
            or plan.num_microbatches > REFINE_MAX_M_PER_PP * plan.pp):
        return _balanced_over_devices(table, req, plan)
    if math.comb(n - 1, k - 1) <= EXHAUSTIVE_MAX_SPLITS:
        return _every_split(table, req, plan)
    if k > plan.pp:  # several chunks per device: their sums per device, then no climb
        return _balanced_over_devices(table, req, plan)
    best, runs, moves = plan, 0, 0
    size = 1
    while size <= MAX_MOVE_LAYERS and moves < MAX_MOVES:
        improved = False
        for src, dst in _moves(k):
            if runs >= MAX_RUNS_PER_STAGE * k:
                break
            split = list(best.stage_layers)
            split[src] -= size
            split[dst] += size
            if split[src] < 1:
                continue
            cand = evaluate(table, req, replace(best.spec, stage_layers=tuple(split)))
            runs += 1
            if (max(cand.peak_memory_bytes) <= table.memory_bytes
                    and cand.step_time_s < best.step_time_s * (1 - 1e-12)):
                best, improved, moves = cand, True, moves + 1
        size = 1 if improved else size + 1
    return best, runs


def _moves(p: int) -> list[tuple[int, int]]:
    if p <= ALL_PAIRS_MAX_PP:
        return list(itertools.permutations(range(p), 2))
    return [(k, k + d) for k in range(p) for d in (-1, 1) if 0 <= k + d < p]


def _every_split(table: CostTable, req: PlanRequest, plan: Plan) -> tuple[Plan, int]:
    n, p = sum(plan.stage_layers), len(plan.stage_layers)
    best, runs = plan, 0
    for cuts in itertools.combinations(range(1, n), p - 1):
        bounds = (0, *cuts, n)
        split = tuple(bounds[i + 1] - bounds[i] for i in range(p))
        if split == tuple(plan.stage_layers):
            continue
        cand = evaluate(table, req, replace(plan.spec, stage_layers=split))
        runs += 1
        if (max(cand.peak_memory_bytes) <= table.memory_bytes
                and cand.step_time_s < best.step_time_s * (1 - 1e-12)):
            best = cand
    return best, runs


def device_loads(layer_s: Sequence[float], split: Sequence[int], schedule: Schedule,
                 pp: int) -> list[float]:
    """Each device's work per micro-batch: the costs of the layers of every chunk it
    runs (``stage_device`` of each global stage, ``model_chunk`` its layers; the
    DualPipe's two chains carry half the micro-batches each)."""
    starts = list(itertools.accumulate(split, initial=0))
    chunk = [sum(layer_s[starts[c]:starts[c + 1]]) for c in range(len(split))]
    share = 1 / chains(schedule)
    loads = [0.0] * pp
    for s in range(pp * chunks_per_device(schedule, len(split) // pp or 1)):
        loads[stage_device(schedule, pp, s)] += share * chunk[model_chunk(schedule, pp, s)]
    # to the picosecond: sums of the same layers in another order are the same load
    return [round(x, 12) for x in loads]


def balanced_splits(layer_s: Sequence[float], split: Sequence[int], schedule: Schedule,
                    pp: int) -> list[tuple[int, ...]]:
    """Splits whose busiest devices' loads are lowest (compared busiest first), reached
    from ``split`` by moving one layer at a time from a chunk to another (the chunks in
    between shift along): with several chunks a device the steady state runs at the pace
    of the device with most work, which the min-max split over chunks does not balance.
    The most balanced first, then the others as balanced on its last move and the splits
    its descent passed (a memory limit may refuse the first); ``[split]`` with one chunk a
    device, where the two balances are the same, or when nothing balances better."""
    if len(split) <= pp and schedule is not Schedule.DUALPIPE:
        return [tuple(split)]
    k = len(split)
    pairs = (list(itertools.permutations(range(k), 2)) if k <= ALL_PAIRS_MAX_CHUNKS
             else [(a, a + d) for a in range(k) for d in (-1, 1) if 0 <= a + d < k])
    best = tuple(split)
    worst = sorted(device_loads(layer_s, best, schedule, pp), reverse=True)
    passed = [best]
    ties: list[tuple[list[float], tuple[int, ...]]] = []
    for _ in range(2 * sum(split)):
        moves = []
        for a, b in pairs:
            if best[a] > 1:
                cand = list(best)
                cand[a] -= 1
                cand[b] += 1
                moves.append((sorted(device_loads(layer_s, cand, schedule, pp),
                                     reverse=True), tuple(cand)))
        moves.sort()
        if not moves or moves[0][0] >= worst:
            break
        ties = [m for m in moves[1:] if m[0] < worst]
        worst, best = moves[0]
        passed.append(best)
    out = [best, *(c for _, c in ties[:BALANCED_TRIES]), *reversed(passed[:-1])]
    return list(dict.fromkeys(out))


def _balanced_over_devices(table: CostTable, req: PlanRequest, plan: Plan) -> tuple[Plan, int]:
    """The plan on the most device-balanced split that fits and steps faster
    (``balanced_splits``, at most ``BALANCED_TRIES`` simulations); the plan as it was
    otherwise."""
    per_layer = [c.total_s for c in stage_costs(table, plan.micro_batch_size,
                                                (1,) * sum(plan.stage_layers))]
    best, runs = plan, 0
    # the search splits for each chunk's even share of the device's memory; the chunks
    # of one device peak at different times, so the min-max split over chunks, memory
    # aside, may fit the device where that share refused it: it is tried first (Qwen3-
    # 235B-A22B on 256 H200s, interleaved v=4: 2 layers a chunk in the first 13 chunks
    # and 4 in the last 13 stepped 8.24 s where 3 a chunk fits and steps 7.61 s)
    free = time_only_split(per_layer, len(plan.stage_layers), hop_extra(table, req, plan.spec))
    if free is not None and tuple(free) != tuple(plan.stage_layers):
        cand = evaluate(table, req, replace(plan.spec, stage_layers=tuple(free)))
        runs += 1
        if (max(cand.peak_memory_bytes) <= table.memory_bytes
                and cand.step_time_s < best.step_time_s * (1 - 1e-12)):
            best = cand
    start, tries = best, 0
    for split in balanced_splits(per_layer, start.stage_layers, plan.schedule, plan.pp):
        if split == tuple(start.stage_layers) or tries >= BALANCED_TRIES:
            break
        cand = evaluate(table, req, replace(plan.spec, stage_layers=split))
        runs, tries = runs + 1, tries + 1
        if max(cand.peak_memory_bytes) <= table.memory_bytes:
            if cand.step_time_s < best.step_time_s * (1 - 1e-12):
                best = cand
            break
    return best, runs
