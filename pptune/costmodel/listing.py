"""How the search lists its plans: in one order, each shown once.

The order is the step time, then the tie-breaks (a plan whose micro-batch count
pp divides first, the shallower pipeline, then the schedule, rank order,
sharding and recomputation in their enums' declaration order, the cost key and
the all-to-all overlap). A plan that differs from another only in its rank
order is shown once, in its faster order. The listed pipelined plans that
recompute are tried without it too (``without_recompute``). ``search.search_all``
lists the plans of several requests in this one order, as one search would.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from pptune.costmodel.candidates import position
from pptune.costmodel.evaluate import Plan, PlanRequest, evaluate, over_memory
from pptune.costmodel.keys import TableSource
from pptune.costmodel.memory import Recompute


def order(plan: Plan) -> tuple[object, ...]:
    """The list's sort key: fastest first, then the tie-breaks (module docstring)."""
    return (plan.step_time_s, not plan.aligned, plan.pp, position(plan.schedule),
            position(plan.rank_order), position(plan.sharding), position(plan.recompute),
            plan.key, plan.a2a_overlap)


def listed_as(plan: Plan) -> tuple[object, ...]:
    """What the list shows of a plan: all but its rank order."""
    return (plan.pp, plan.dp, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
            plan.num_microbatches, tuple(plan.stage_layers), plan.sharding, plan.recompute,
            plan.key, plan.a2a_overlap, plan.recompute_layers)


def unique(plans: Iterable[Plan]) -> Iterator[Plan]:
    """A plan that differs only in its rank order is listed once, in its faster order
    (``plans`` sorted by ``order``)."""
    seen: set[tuple[object, ...]] = set()
    for plan in plans:
        key = listed_as(plan)
        if key not in seen:
            seen.add(key)
            yield plan


def without_recompute(source: TableSource, req: PlanRequest, top: list[Plan]) -> list[Plan]:
    """The listed pipelined plans that recompute, on their own (refined) split without
    recomputation, where that fits: a split refined under recomputation can beat the one
    refined for the same plan without it (each refinement is a local search from its own
    start), and a plan that recomputes is never the faster of two on one split."""
    if Recompute.NONE not in req.recomputes:
        return []
    found = []
    for plan in top:
        if plan.pp == 1 or plan.recompute is Recompute.NONE:
            continue
        spec = replace(plan.spec, recompute=Recompute.NONE, recompute_layers=None)
        table = source(req.key_of(spec))
        if over_memory(table, req, spec):
            continue
        plain = evaluate(table, req, spec)
        if max(plain.peak_memory_bytes) <= table.memory_bytes:
            found.append(plain)
    return found
