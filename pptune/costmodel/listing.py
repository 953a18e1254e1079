"""How the search lists its plans: in one order, each shown once.

The order is the step time, then the tie-breaks (a plan whose micro-batch count
pp divides first, the shallower pipeline, then the schedule, rank order,
sharding and recomputation in their enums' declaration order, the cost key and
the all-to-all overlap). A plan that differs from another only in its rank
order is shown once, in its faster order. The listed pipelined plans that
recompute are tried without it too (``without_recompute``). ``search.search_all``
lists the plans of several requests in this one order, as one search would
(``merged``), and with ``as_run`` the plans priced as a framework runs them
(``AsRunLog``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace

from pptune.costmodel.candidates import position
from pptune.costmodel.evaluate import Plan, PlanRequest, PlanSpec, evaluate, over_memory
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.memory import Recompute
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.table import CostTable


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


@dataclass(frozen=True)
class Ran:
    """A plan priced as a framework runs it, and the table and request it was so priced
    with (its exposed times are explained on them)."""

    plan: Plan
    table: CostTable
    request: PlanRequest


# a plan priced as a framework runs it (the same spec); None where it runs no such plan
# (it cannot, or so priced the plan outgrows the GPU: plan/framework_search.py)
AsRun = Callable[[Plan], Ran | None]
# the most seconds a plan of this cost key and spec runs faster as a framework runs it
# than the search priced it (0: never faster; frameworks/common/repricing.py)
Faster = Callable[[CostKey, PlanSpec], float]


@dataclass
class AsRunLog:
    """A search's plans priced as a framework runs them (``as_run``), as it finds them:
    each plan so priced, by spec, and as searched, those it left out and those it priced
    otherwise. The search ranks them so (search.rank): a plan runs at most ``faster`` s
    faster than the search priced it (without it, never faster: the framework's kernels
    or slower ones), so its bounds, less that, hold."""

    as_run: AsRun
    faster: Faster | None = None
    ran: dict[PlanSpec, Ran] = field(default_factory=dict)
    dropped: list[Plan] = field(default_factory=list)
    repriced: list[Plan] = field(default_factory=list)

    def priced(self, plan: Plan) -> Plan | None:
        """``plan`` as the framework runs it; None where it runs no such plan."""
        ran = self.as_run(plan)
        if ran is None:
            self.dropped.append(plan)
            return None
        self.ran[plan.spec] = ran
        if (ran.plan.step_time_s, ran.plan.peak_memory_bytes) != (plan.step_time_s,
                                                                  plan.peak_memory_bytes):
            self.repriced.append(plan)
        return ran.plan

    def lead_s(self, key: CostKey, spec: PlanSpec) -> float:
        """The most seconds a plan of ``spec`` runs faster so run than priced."""
        return 0.0 if self.faster is None else self.faster(key, spec)


@dataclass
class Ranked:
    """Requests' ranked plans (every one kept, not yet cut to ``top``)."""

    req: PlanRequest
    source: TableSource
    plans: list[Plan]
    best_by: dict[Schedule, Plan]
    best_pp1: Plan | None
    rejected: Counter[str]
    candidates: int
    simulated: int
    log: AsRunLog | None = None  # the plans priced as a framework runs them, if so


def merged(found: list[Ranked]) -> Ranked:
    """Several requests' ranked plans as one request's (the first's job, tables and
    ``as_run`` log, which the requests share)."""
    best_by: dict[Schedule, Plan] = {}
    rejected: Counter[str] = Counter()
    for f in found:
        rejected.update(f.rejected)
        for schedule, plan in f.best_by.items():
            if schedule not in best_by or plan.step_time_s < best_by[schedule].step_time_s:
                best_by[schedule] = plan
    pp1 = [f.best_pp1 for f in found if f.best_pp1 is not None]
    return Ranked(found[0].req, found[0].source, [p for f in found for p in f.plans],
                  best_by, min(pp1, key=lambda p: p.step_time_s) if pp1 else None, rejected,
                  sum(f.candidates for f in found), sum(f.simulated for f in found),
                  found[0].log)
