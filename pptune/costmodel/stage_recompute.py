"""Recomputation per stage: the memory-bound stages recompute, the others do not.

Full recomputation of every block (``Recompute.FULL``) is priced by the
busiest stage only where memory binds: under 1F1B stage s holds
``min(m, p - s)`` micro-batches' activations, so the first stages need
recomputation long before the last ones do. ``fit_stage_recompute`` starts
from a plan that fits with every block recomputed and gives each stage the
fewest recomputed blocks (the first N_k of stage k, Megatron-LM's block
method with a count per stage) with which every pipeline rank still fits:
each recomputed block keeps only its input instead of its saved tensors and
runs its forward again before its backward (memory.with_layers_recomputed),
so fewer recomputed blocks are never slower. A rank's peak depends only on
its own stages' activations in the schedule's op order (simulate.py), so
the ranks are fitted independently: an over-full rank adds blocks on its
stage with the most micro-batches in flight (an estimate from the blocks'
savings, then simulated again until it fits), and a last pass takes back a
block wherever the rank still fits without it.

The split stays the one found for full recomputation.
"""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.evaluate import Plan, PlanRequest, evaluate
from pptune.costmodel.memory import Recompute, recomputed_layers, recomputed_per_stage
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.schedules import peak_inflight_per_stage, stage_device
from pptune.costmodel.table import CostTable


def stage_blocks(names: list[str] | tuple[str, ...], stage_layers: list[int] | tuple[int, ...]
                 ) -> list[int]:
    """Transformer blocks per stage (what full recomputation reruns)."""
    return recomputed_per_stage(names, stage_layers, recomputed_layers(names, Recompute.FULL))


def fit_stage_recompute(table: CostTable, req: PlanRequest, plan: Plan) -> tuple[Plan, int]:
    """(the plan with the fewest recomputed blocks per stage that fits, simulations run).

    ``plan`` recomputes every block and fits; it comes back unchanged when every
    block is needed, with ``recompute`` none when no stage needs any."""
    if plan.recompute is not Recompute.FULL or plan.recompute_layers is not None:
        return plan, 0
    names, split = list(table.names), list(plan.stage_layers)
    blocks = stage_blocks(names, split)
    inflight = peak_inflight_per_stage(plan.schedule, plan.pp, plan.num_microbatches,
                                       plan.virtual_stages)
    saving = _savings(table, plan.micro_batch_size, split)
    cap = table.memory_bytes
    counts = [0] * len(split)
    runs = 0
    for _ in range(sum(blocks) + 1):
        cand = evaluate(table, req, replace(plan.spec, recompute_layers=tuple(counts)))
        runs += 1
        over = [(d, peak - cap) for d, peak in enumerate(cand.peak_memory_bytes) if peak > cap]
        if not over:
            break
        if not _grow(plan, counts, blocks, inflight, saving, over):
            return plan, runs
    else:
        return plan, runs
    cand, trimmed = _trim(table, req, cand, counts, inflight, saving)
    runs += trimmed
    if counts == blocks:
        return plan, runs
    if not any(counts):
        return replace(cand, recompute=Recompute.NONE, recompute_layers=None), runs
    return cand, runs


def _savings(table: CostTable, b: int, split: list[int]) -> list[list[float]]:
    """Per stage, the bytes each of its blocks stops holding per micro-batch when
    recomputed (its saved tensors less its input), in block order."""
    c = table.by_mb[b]
    out = []
    for s, e in stage_bounds(split):
        out.append([max(0.0, c.act_bytes[i] - (c.out_bytes[i - 1] if i else 0.0))
                    for i in range(s, e) if table.names[i].startswith("block")])
    return out


def _trim(table: CostTable, req: PlanRequest, plan: Plan, counts: list[int],
          inflight: list[int], saving: list[list[float]]) -> tuple[Plan, int]:
    """Drop one recomputed block from a stage whose rank's headroom looks large enough,
    kept when the rank still fits (the estimate in ``_grow`` can overshoot where a rank
    holds several stages)."""
    runs = 0
    for k in range(len(counts)):
        d = stage_device(plan.schedule, plan.pp, k)
        if not counts[k] or (table.memory_bytes - plan.peak_memory_bytes[d]
                             < inflight[k] * saving[k][counts[k] - 1]):
            continue
        counts[k] -= 1
        cand = evaluate(table, req, replace(plan.spec, recompute_layers=tuple(counts)))
        runs += 1
        if max(cand.peak_memory_bytes) <= table.memory_bytes:
            plan = cand
        else:
            counts[k] += 1
    return plan, runs


def _grow(plan: Plan, counts: list[int], blocks: list[int], inflight: list[int],
          saving: list[list[float]], over: list[tuple[int, float]]) -> bool:
    """Add recomputed blocks on each over-full rank; False when none can be added."""
    grew = False
    for d, excess in over:
        mine = [k for k in range(len(counts)) if stage_device(plan.schedule, plan.pp, k) == d
                and counts[k] < blocks[k]]
        if not mine:
            continue
        k = max(mine, key=lambda j: (inflight[j], -j))
        need, freed = 0, 0.0
        for step in saving[k][counts[k]:]:
            need += 1
            freed += inflight[k] * step
            if freed >= excess:
                break
        counts[k] += max(1, min(need, blocks[k] - counts[k]))
        grew = True
    return grew


def summary_blocks(table: CostTable, plan: Plan, every: int | None) -> list[int]:
    """Blocks recomputed in full on each stage of ``plan`` (its per-stage counts, or what
    its uniform choice recomputes)."""
    if plan.recompute_layers is not None:
        return list(plan.recompute_layers)
    layers = recomputed_layers(table.names, plan.recompute, every)
    return recomputed_per_stage(table.names, plan.stage_layers, layers)

