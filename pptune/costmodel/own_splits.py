"""Pipelines on the splits a framework builds alone (``PlanRequest.stage_splits``).

Most frameworks place a pipeline's stage boundaries where their files say, and the
search chooses each plan's split (splitting.py) and refines it for the simulated step
(refine.py). Some build the stages themselves from a rule of their own: DeepSpeed's
PipelineModule splits its layer list by ``partition_method`` ("uniform": equal layer
counts; "parameters": balanced parameter counts), nothing else. A plan on any other
split is one such a framework cannot run, so a request that names its splits has the
search place each pipeline on those alone: a candidate is bounded on the best of them
(``own_split_bound``), simulated on each (``others``: the fastest that fits is kept) and
never refined.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pptune.costmodel.evaluate import PlanRequest, PlanSpec
from pptune.costmodel.schedules import model_chunks
from pptune.costmodel.splitting import SplitCache, bound_split, compute_stages, surely_oom
from pptune.costmodel.table import CostTable


def own_splits(table: CostTable, req: PlanRequest, spec: PlanSpec,
               cache: SplitCache) -> tuple[tuple[int, ...], ...]:
    """The splits the request's framework builds the model chunks of ``spec`` on, over
    the layers of ``table`` (its cost key's), each once and none with an empty stage (a
    rule's split of fewer layers than stages); kept in ``cache`` by chunks. Empty where
    the request names none or the framework builds none for so many chunks."""
    rule = req.stage_splits
    chunks = model_chunks(spec.schedule, spec.pp, spec.virtual_stages)
    if rule is None or chunks == 1:
        return ()
    if chunks not in cache.own:
        built = rule(table, req.key_of(spec), chunks)
        cache.own[chunks] = tuple(dict.fromkeys(
            tuple(s) for s in built if len(s) == chunks and min(s) >= 1))
    return cache.own[chunks]


def own_split_bound(table: CostTable, req: PlanRequest, spec: PlanSpec,
                    cache: SplitCache) -> tuple[float, PlanSpec] | None:
    """(a step-time bound no plan of ``spec`` on the framework's splits beats, the spec
    on the split of that bound), over the splits that may fit in memory (splitting's
    ``surely_oom`` and ``bound_split`` leave out those that surely do not); None where
    none is left. The least bound of the splits bounds them all, since the search
    simulates each of them (``others``)."""
    rc = cache.recomputed(table, spec.recompute, req.recompute_every)
    best: tuple[float, PlanSpec] | None = None
    for split in own_splits(table, req, spec, cache):
        on = replace(spec, stage_layers=split)
        if spec.virtual_stages == 1 and surely_oom(rc, req, on, compute_stages(rc, on)):
            continue  # bound_split tests several chunks a device itself
        found = bound_split(table, req, on, cache)
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    return best


def others(table: CostTable, req: PlanRequest, spec: PlanSpec,
           cache: SplitCache) -> Sequence[tuple[int, ...]]:
    """The framework's splits of ``spec`` other than its own (the search simulates
    those too and keeps the fastest that fits); empty where the request names none."""
    return [s for s in own_splits(table, req, spec, cache) if s != spec.stage_layers]
