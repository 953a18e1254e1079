"""Enumerate pipeline plans, then rank them best-first by simulating.

For N GPUs and tensor-parallel size tp the search walks pipeline depth p
over the divisors of N / tp (data parallel dp = N / (p tp)), micro-batch
size b over the sizes the cost table has, the number of micro-batches m
from ``global_batch = b * m * dp`` (exactly; m is also the gradient-
accumulation steps), the schedules asked for (for interleaved-1f1b the
virtual stages v), the rank orders, the sharding of the training state
(sharding.py), the recomputation (memory.py) and, on MoE costs, the
all-to-all overlap.

``candidates`` (candidates.py) lists every combination the frameworks
accept, each with a lower bound on its step time that needs no split (the
busiest device does at least the average work). ``rank`` then pops candidates cheapest bound
first: the first time, it finds the contiguous split that minimises the
bottleneck stage within each stage's memory (partition.py) and pushes the
candidate back with a tighter bound (the busiest device's work, and with
one chunk per device the pipeline fill in front of each stage); the second
time it simulates it (evaluate.py) and, for shallow pipelines with few micro-batches,
improves the split for the simulated step (refine.py; with several chunks per device,
where the exact search is cheap, for every simulated candidate, which then keeps its
split-free bound; a split refined under one rank order, sharding or recomputation is
tried under the others; 1f1b plans faster than the best 1f1b plan so far too). A
request that names the only splits its framework builds (``PlanRequest.stage_splits``)
is split on those alone, each simulated, none refined (own_splits.py). A
candidate whose bound exceeds the ``top``-th step time found (and, for 1f1b,
the best 1f1b plan; for pp = 1, the best plan without a pipeline) is never
split or simulated: the top plans, the best 1f1b plan and the best plan
without a pipeline are the same as when simulating all of them. The best
plan of each other schedule is the best among those simulated.

The list is by step time, except that with ``PlanRequest.pipeline_margin`` the best
plan without a pipeline ranks first when the fastest plan is pipelined and beats it
by no more than that share of its step time: a pipeline adds stages, a bubble and
sends to get wrong, and differences of a per cent or so are below what the cost
model resolves (docs/accuracy.md). ``SearchResult.passed_over`` names the faster
plan it was ranked before.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from pptune.costmodel.breakdown import exposed_cp_s
from pptune.costmodel.candidates import (
    GRAD_DTYPE_BYTES,
    MAX_SIMULATED_OPS,
    Candidate,
    Reason,
    candidates,
    divisors,
    sizes,
    table_source,
)
from pptune.costmodel.evaluate import (
    DEFAULT_VIRTUAL_STAGES,
    Plan,
    PlanRequest,
    PlanSpec,
    evaluate,
    explain,
    over_memory,
)
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.layout import DP_INNER, PP_INNER, RANK_ORDERS, RankOrder
from pptune.costmodel.listing import (
    AsRun,
    AsRunLog,
    Faster,
    Ranked,
    listed_as,
    merged,
    order,
    unique,
    without_recompute,
)
from pptune.costmodel.memo import collector_paused
from pptune.costmodel.memory import DEFAULT_RESERVE_BYTES, Recompute
from pptune.costmodel.own_splits import others, own_split_bound
from pptune.costmodel.refine import always_refined, refine_split
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.sharding import Sharding, state_bytes_per_param
from pptune.costmodel.splitting import (
    SplitCache,
    any_split_bound,
    fitted_per_stage,
    layout_bound,
    split_with_bound,
)
from pptune.costmodel.stage_recompute import fit_stage_recompute, fitted_counts
from pptune.costmodel.table import CostTable, LayerCosts, stage_costs

__all__ = [
    "DEFAULT_RESERVE_BYTES",
    "DEFAULT_VIRTUAL_STAGES",
    "DP_INNER",
    "GRAD_DTYPE_BYTES",
    "MAX_SIMULATED_OPS",
    "PP_INNER",
    "RANK_ORDERS",
    "Candidate",
    "CostKey",
    "CostTable",
    "LayerCosts",
    "Plan",
    "PlanRequest",
    "PlanSpec",
    "RankOrder",
    "Reason",
    "Recompute",
    "SearchResult",
    "Sharding",
    "candidates",
    "divisors",
    "evaluate",
    "rank",
    "search",
    "search_all",
    "stage_costs",
    "state_bytes_per_param",
    "table_source",
]


@dataclass
class SearchResult:
    plans: list[Plan]
    rejected: Counter[str]
    candidates: int
    simulated: int
    best_by_schedule: dict[Schedule, Plan]
    notes: list[str] = field(default_factory=list)
    # the fastest plan, pipelined, when the best plan without a pipeline was ranked
    # before it (PlanRequest.pipeline_margin); None when the list is by step time
    passed_over: Plan | None = None
    # ``as_run`` (search_all): the plans it left out and those it priced otherwise, as searched
    dropped: list[Plan] = field(default_factory=list)
    repriced: list[Plan] = field(default_factory=list)


def rank(tables: CostTable | TableSource, req: PlanRequest, pending: list[Candidate],
         rejected: Counter[str], log: AsRunLog | None = None
         ) -> tuple[list[Plan], dict[Schedule, Plan], Plan | None, int]:
    """Best-first: (feasible plans, best per schedule, best pp=1 plan, simulations); with
    ``log``, those that could be listed or kept as a best plan, priced as run, ranked so
    (the cut-offs plus ``log.lead_s``: how much faster than priced a plan so runs)."""
    source = table_source(tables, req)
    heap = [(c.key(), c) for c in pending]
    heapq.heapify(heap)
    plans: list[Plan] = []
    best_by: dict[Schedule, Plan] = {}
    best_pp1: Plan | None = None
    times: list[float] = []  # the top step times so far, sorted, one per listed plan
    best_of: dict[tuple[object, ...], float] = {}  # by listing.unique's key: what the list keeps
    simulated = 0
    oom_seen: set[tuple[object, ...]] = set()
    splits: dict[CostKey, SplitCache] = {}  # time-only splits, shared by shardings and m
    # plans that fit without recomputation, less their split: recomputing modules there
    # only slows them down (B reruns forwards, nothing else changes), so it is not tried
    plain_fits: set[tuple[object, ...]] = set()
    refined: dict[PlanSpec, tuple[int, ...]] = {}  # refined splits, by spec less its order
    purged = False  # the candidates only the top-th time could admit dropped
    while heap:
        _, cand = heapq.heappop(heap)
        spec = cand.spec
        kth = times[req.top - 1] if len(times) >= req.top else math.inf
        # the best 1f1b plan is kept exact (the reference the report compares against)
        own = best_by[spec.schedule].step_time_s if spec.schedule in best_by else math.inf
        own = own if spec.schedule is Schedule.ONE_F_ONE_B and req.with_best_1f1b else -math.inf
        pp1 = (best_pp1.step_time_s if best_pp1 else math.inf) if (
            spec.pp == 1 and req.with_best_pp1) else -math.inf
        key = req.key_of(spec)
        lead_s = 0.0 if log is None else log.lead_s(key, spec)
        cut = max(kth, own, pp1) + lead_s
        if cand.bound_s > cut:
            if own == pp1 == -math.inf and not purged and (log is None or log.faster is None):
                # every candidate left is bounded at least this high (the heap's least) and
                # the top-th time only falls: those it alone admits never will be
                heap = [x for x in heap if (x[1].spec.schedule is Schedule.ONE_F_ONE_B
                                            and req.with_best_1f1b) or (
                    x[1].spec.pp == 1 and req.with_best_pp1)]
                heapq.heapify(heap)  # the same order: no two keys are equal
                purged = True
            continue
        table = source(key)
        if spec.recompute is Recompute.MODULES and _unsplit(spec) in plain_fits:
            rejected[Reason.NEEDLESS_MODULES.value] += 1
            continue
        if not cand.split:
            shape = (key, spec.pp, spec.micro_batch_size, spec.schedule, spec.virtual_stages,
                     spec.sharding, spec.recompute, spec.a2a_overlap)
            if shape in oom_seen:
                continue  # memory does not depend on the rank order
            cache = splits.get(key) or splits.setdefault(key, SplitCache())
            if not cand.any_split:
                # first a bound over every split (cheap: the time-only split is shared)
                above = any_split_bound(table, req, spec, cache)
                if above > cand.bound_s:
                    raised = Candidate(above, spec, any_split=True)
                    heapq.heappush(heap, (raised.key(), raised))
                    continue
            tighter = _split_candidate(table, req, cand, cache)
            if tighter is None:
                oom_seen.add(shape)
                rejected[Reason.OOM.value] += 1
                continue
            heapq.heappush(heap, (tighter.key(), tighter))
            continue
        twin = replace(spec, rank_order=DP_INNER, stage_layers=())
        theirs = others(table, req, spec, splits.setdefault(key, SplitCache())) if (
            req.stage_splits and spec.pp > 1) else ()
        if not cand.exposed and twin not in refined and (theirs or not always_refined(spec)):
            # before simulating: the bound with its exposed data-parallel traffic and optimizer
            # step, where the split's bound stands for the plan (its own split: no refined
            # twin; a framework's own splits: the least of theirs)
            bound_s = min(_outcome_bound(table, req, x, cut) for x in (
                spec, *(replace(spec, stage_layers=s) for s in theirs)))
            raised = Candidate(max(cand.bound_s, bound_s), spec, cand.any_split, exposed=True)
            if raised.bound_s > cand.bound_s:
                heapq.heappush(heap, (raised.key(), raised))
                continue
        # a plan over memory in its op order alone is not simulated (over_memory)
        found = None if over_memory(table, req, spec) else evaluate(table, req, spec)
        simulated += found is not None
        # a split refined under another rank order is tried under this one too, or under
        # another sharding or recomputation (its memory is checked below); a framework's
        # other own splits (own_splits.py)
        sibling = replace(twin, sharding=Sharding.NONE, recompute=Recompute.NONE)
        for alt_split in theirs or (refined.get(twin, refined.get(sibling, spec.stage_layers)),):
            if alt_split == spec.stage_layers or over_memory(
                    table, req, alt_spec := replace(spec, stage_layers=alt_split)):
                continue
            alt = evaluate(table, req, alt_spec)
            simulated += 1
            if (max(alt.peak_memory_bytes) <= table.memory_bytes
                    and (found is None or alt.step_time_s < found.step_time_s
                         or max(found.peak_memory_bytes) > table.memory_bytes)):
                found = alt
        if found is None or max(found.peak_memory_bytes) > table.memory_bytes:
            rejected[Reason.OOM.value] += 1
            continue
        plan = found
        # refined where it could be listed, or be the best 1f1b plan (own: kept exact);
        # never on a framework's own splits
        if req.stage_splits is None and spec.pp > 1 and (
                plan.step_time_s < max(kth, own) + lead_s or always_refined(spec)):
            plan, extra = refine_split(table, req, plan)
            simulated += extra
            if extra:
                refined[twin] = refined[sibling] = tuple(plan.stage_layers)
        if fitted_per_stage(req, plan.recompute, spec.pp, spec.schedule):
            plan, extra = fit_stage_recompute(table, req, plan, cut)
            simulated += extra
        # past the cut-off so run, never listed; nor one it runs no such plan for (its twins)
        past = log is not None and plan.step_time_s > cut
        ran = plan if log is None or past else log.priced(plan)
        if spec.recompute is Recompute.NONE and ran is not None:
            plain_fits.add(_unsplit(spec))
        if ran is None or past:
            continue
        plans.append(plan := ran)
        # a plan the list shows once (its rank-order twin, or a per-stage fit that came
        # out as a plan already found) counts once towards the cut-off
        k = listed_as(plan)
        best_of[k] = min(best_of.get(k, math.inf), plan.step_time_s)
        times = sorted(best_of.values())[: req.top]
        if spec.schedule not in best_by or plan.step_time_s < best_by[spec.schedule].step_time_s:
            best_by[spec.schedule] = plan
        if spec.pp == 1 and (best_pp1 is None or plan.step_time_s < best_pp1.step_time_s):
            best_pp1 = plan
    return plans, best_by, best_pp1, simulated


def search(tables: CostTable | TableSource, req: PlanRequest,
           as_run: AsRun | None = None, faster: Faster | None = None) -> SearchResult:
    """Every feasible plan's simulated step time, fastest first (top ``req.top``).

    ``tables``: one cost table (for the request's one key), or a source with a
    table per key of ``req.keys()``; ``as_run``, ``faster`` as ``search_all`` takes them."""
    return search_all(tables, (req,), as_run, faster)


def search_all(tables: CostTable | TableSource, reqs: Sequence[PlanRequest],
               as_run: AsRun | None = None, faster: Faster | None = None) -> SearchResult:
    """The plans of several requests of one job as one search would list them all: each
    request searched on its own, then one list in the search's order (listing.py), cut
    and noted as ``search``'s. The requests differ in what they search (cost keys,
    shardings, schedules: ``Adapter.stateable_groups``), not in the job (GPUs, batch,
    ``top``, margin: the first's); each key is in one, which prices its plans.
    ``as_run``: each plan priced as a framework runs it, and ranked so, those it runs no
    such plan for left out, ``faster`` how much faster than priced it may run one
    (listing.AsRunLog; None: as searched, never faster)."""
    if not reqs:
        return SearchResult([], Counter(), 0, 0, {})
    log = AsRunLog(as_run, faster) if as_run is not None else None
    with collector_paused():
        found = [_ranked(table_source(tables, r), r, log) for r in reqs]
        if len(found) == 1:
            return _finished(found[0], lambda key: reqs[0])
        by_key = {k: r for r in reqs for k in r.keys()}
        return _finished(merged(found), lambda key: by_key.get(key, reqs[0]))


def _ranked(source: TableSource, req: PlanRequest, log: AsRunLog | None) -> Ranked:
    pending, rejected, count = candidates(source, req)
    ranked = replace(req, top=max(req.top, req.rank_top))  # the cut-off (PlanRequest)
    plans, best_by, best_pp1, simulated = rank(source, ranked, pending, rejected, log)
    for plain in without_recompute(source, req, list(unique(sorted(plans, key=order)))[
            : ranked.top]):
        simulated += 1
        if (ran := plain if log is None else log.priced(plain)) is None:
            continue
        plans.append(ran)
        if ran.step_time_s < best_by[ran.schedule].step_time_s:
            best_by[ran.schedule] = ran
    return Ranked(req, source, plans, best_by, best_pp1, rejected, count, simulated, log)


def _finished(found: Ranked, req_of: Callable[[CostKey], PlanRequest]) -> SearchResult:
    """The list of ``found``'s plans: cut to ``top``, the margin's reordering, the first
    plan explained, and the best plan without a pipeline; ``req_of``: the request a
    cost key's plans were searched with."""
    req, source, plans, best_pp1 = found.req, found.source, found.plans, found.best_pp1
    top = list(unique(sorted(plans, key=order)))[: req.top]
    passed_over = None
    if (req.pipeline_margin > 0 and req.with_best_pp1 and best_pp1 is not None and top
            and top[0].pp > 1
            and best_pp1.step_time_s <= top[0].step_time_s * (1 + req.pipeline_margin)):
        passed_over = top[0]
        flat = listed_as(best_pp1)
        # still --top plans: the plan moved up takes the last place, not one more
        top = [best_pp1, *(p for p in top if listed_as(p) != flat)][: req.top]
    first = req_of(top[0].key) if top else req  # the request of the plan listed first
    if top:  # explained on the table and request it was priced with
        ran = found.log.ran.get(top[0].spec) if found.log is not None else None
        table, how = (ran.table, ran.request) if ran else (source(top[0].key), first)
        top[0] = explain(table, how, top[0])
        top[0] = replace(top[0], exposed_cp_s=exposed_cp_s(table, how, top[0]))
    if req.with_best_pp1 and best_pp1 is not None and all(p.pp > 1 for p in top):
        top.append(best_pp1)  # the honest baseline: the best plan without a pipeline
    notes = []
    shown = sizes(source(top[0].key), first) if top else []
    if top and not any((req.global_batch // (b * top[0].dp)) % top[0].pp == 0
                       for b in shown if req.global_batch % (b * top[0].dp) == 0):
        notes.append(
            f"no micro-batch size makes the micro-batch count a multiple of pp={top[0].pp} "
            f"at global batch {req.global_batch} and dp={top[0].dp}; "
            "gradient-accumulation steps cannot be aligned to pipeline depth"
        )
    log = found.log or AsRunLog(lambda plan: None)  # without as_run: nothing left out
    return SearchResult(top, found.rejected, found.candidates, found.simulated, found.best_by,
                        notes, passed_over, sorted(log.dropped, key=order),
                        sorted(log.repriced, key=order))


def _unsplit(spec: PlanSpec) -> tuple[object, ...]:
    """The plan less its split and recomputation (what plain_fits in ``rank`` keys)."""
    return (spec.key, spec.pp, spec.micro_batch_size, spec.num_microbatches, spec.schedule,
            spec.virtual_stages, spec.sharding, spec.rank_order, spec.a2a_overlap)


def _outcome_bound(table: CostTable, req: PlanRequest, spec: PlanSpec, cut_s: float) -> float:
    """A step time no plan the search makes of the split plan ``spec`` beats
    (splitting.layout_bound). Full recomputation fitted per stage ends as the plan
    recomputing every block or as its fitted counts; with its split's own layout
    refined only while it simulates under the cut-off ``cut_s`` (which only falls),
    a plan whose full recomputation is bounded above it keeps its split, and its
    counts are known from memory alone (stage_recompute.fitted_counts); else it is
    bounded as it bounds its split, recomputing nothing."""
    full = layout_bound(table, req, spec)
    if not fitted_per_stage(req, spec.recompute, spec.pp, spec.schedule):
        return full
    if full <= cut_s:
        return layout_bound(table, req, replace(spec, recompute=Recompute.NONE))
    counts = fitted_counts(table, req, spec)
    if counts is None:
        return full
    return min(full, layout_bound(table, req, replace(spec, recompute_layers=tuple(counts))))


def _split_candidate(
    table: CostTable, req: PlanRequest, cand: Candidate, cache: SplitCache
) -> Candidate | None:
    """The candidate with its min-bottleneck split (or the request's framework's best
    own split) and a tighter bound, or None (memory)."""
    found = (own_split_bound if req.stage_splits and cand.spec.pp > 1 else split_with_bound)(
        table, req, cand.spec, cache)
    if found is None:
        return None
    bound_s, split_spec = found
    if always_refined(split_spec) and req.stage_splits is None:  # another split may beat it
        return Candidate(cand.bound_s, split_spec)
    return Candidate(bound_s, split_spec)
