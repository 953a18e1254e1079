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
already within the planner's tolerance and each simulation costs more.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from pptune.costmodel.evaluate import Plan, PlanRequest, PlanSpec, evaluate
from pptune.costmodel.table import CostTable

MAX_REFINE_PP = 16
REFINE_MAX_M_PER_PP = 4
MAX_MOVES = 64  # accepted moves per plan, a safety bound on the climb
MAX_MOVE_LAYERS = 2  # a move shifts 1 layer; 2 when no 1-layer move helps
MAX_RUNS_PER_STAGE = 8  # simulations per plan at most 8 * stages
ALL_PAIRS_MAX_PP = 4  # deeper pipelines move layers between neighbouring stages only
EXHAUSTIVE_MAX_SPLITS = 120  # this few contiguous splits: simulate them all (exact)


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
    if (not 1 < plan.pp <= MAX_REFINE_PP
            or plan.num_microbatches > REFINE_MAX_M_PER_PP * plan.pp):
        return plan, 0
    n, k = sum(plan.stage_layers), len(plan.stage_layers)
    if math.comb(n - 1, k - 1) <= EXHAUSTIVE_MAX_SPLITS:
        return _every_split(table, req, plan)
    if k > plan.pp:
        return plan, 0  # several chunks per device: only the exact search above
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
