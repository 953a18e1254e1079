"""Enumerate pipeline plans, then rank them best-first by simulating.

For N GPUs and tensor-parallel size tp the search walks pipeline depth p
over the divisors of N / tp (data parallel dp = N / (p tp)), micro-batch
size b over the sizes the cost table has, the number of micro-batches m
from ``global_batch = b * m * dp`` (exactly; m is also the gradient-
accumulation steps), the schedules asked for (for interleaved-1f1b the
virtual stages v), the rank orders, the sharding of the training state
(sharding.py) and the recomputation (memory.py).

``candidates`` lists every combination the frameworks accept, each with a
lower bound on its step time that needs no split (the busiest device does
at least the average work). ``rank`` then pops candidates cheapest bound
first: the first time, it finds the contiguous split that minimises the
bottleneck stage within each stage's memory (partition.py) and pushes the
candidate back with a tighter bound (the busiest device's work, and with
one chunk per device the pipeline fill in front of each stage); the second
time it simulates it (evaluate.py) and, for shallow pipelines with few
micro-batches, improves the split for the simulated step (refine.py). A
candidate whose bound exceeds the ``top``-th step time found (and, for 1f1b,
the best 1f1b plan; for pp = 1, the best plan without a pipeline) is never
split or simulated: the top plans, the best 1f1b plan and the best plan
without a pipeline are the same as when simulating all of them. The best
plan of each other schedule is the best among those simulated.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import Enum

from pptune.costmodel.evaluate import (
    DEFAULT_VIRTUAL_STAGES,
    Plan,
    PlanRequest,
    PlanSpec,
    evaluate,
    explain,
)
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.layout import (
    DP_INNER,
    PP_INNER,
    RANK_ORDERS,
    Layout,
    LayoutError,
    RankOrder,
)
from pptune.costmodel.memory import DEFAULT_RESERVE_BYTES, Recompute, with_recompute
from pptune.costmodel.refine import refine_split
from pptune.costmodel.schedules import (
    Schedule,
    ScheduleError,
    chunks_per_device,
    validate,
)
from pptune.costmodel.sharding import (
    MEGATRON_GRAD_BYTES,
    PIPELINE_SHARDINGS,
    Sharding,
    state_bytes_per_param,
)
from pptune.costmodel.splitting import SplitCache, bound_recompute, split_with_bound
from pptune.costmodel.stage_recompute import fit_stage_recompute
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
    "stage_costs",
    "state_bytes_per_param",
]


class Reason(str, Enum):
    """Why a candidate was rejected (stable JSON keys)."""

    BATCH = "batch_not_divisible"
    M_LT_P = "microbatches_less_than_pp"
    INTERLEAVE_MULT = "microbatches_not_multiple_of_pp"
    NEEDS_PP2 = "schedule_needs_pp_2"
    FEW_LAYERS = "too_few_layers"
    OOM = "out_of_memory"
    TOO_LARGE = "too_large_to_simulate"
    SHARDING_PP = "sharding_without_pipeline_only"
    EXPERTS_WORLD = "experts_do_not_divide_ranks"


GRAD_DTYPE_BYTES = MEGATRON_GRAD_BYTES  # gradients reduced in fp32 (Megatron-LM's default)

# Candidates with more ops than this are not simulated (~3 us an op: ~6 s).
MAX_SIMULATED_OPS = 2_000_000


@dataclass(frozen=True)
class Candidate:
    """A plan to try; ``spec.stage_layers`` is empty until it is split."""

    bound_s: float
    spec: PlanSpec

    @property
    def split(self) -> bool:
        return bool(self.spec.stage_layers)

    def key(self) -> tuple[object, ...]:
        s = self.spec
        return (self.bound_s, s.pp, list(Schedule).index(s.schedule), s.virtual_stages,
                s.micro_batch_size, RANK_ORDERS.index(s.rank_order),
                list(Sharding).index(s.sharding), list(Recompute).index(s.recompute),
                s.key or CostKey(), 0 if self.split else 1)


@dataclass
class SearchResult:
    plans: list[Plan]
    rejected: Counter[str]
    candidates: int
    simulated: int
    best_by_schedule: dict[Schedule, Plan]
    notes: list[str] = field(default_factory=list)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _structure(req: PlanRequest, p: int, m: int, schedule: Schedule, v: int,
               single: Schedule | None) -> Reason | None:
    """Why the frameworks refuse (p, m, schedule, v), or None."""
    if p == 1 and schedule is not single:
        # without a pipeline every schedule is the same run: keep one
        return Reason.NEEDS_PP2
    if schedule is Schedule.ONE_F_ONE_B and m < p:
        return Reason.M_LT_P
    if schedule is Schedule.INTERLEAVED and m % p:
        return Reason.INTERLEAVE_MULT
    try:
        validate(schedule, p, m, v)
    except ScheduleError:
        return Reason.INTERLEAVE_MULT
    return None


def candidates(tables: CostTable | TableSource, req: PlanRequest
               ) -> tuple[list[Candidate], Counter[str], int]:
    """Every plan the frameworks accept, with a split-free lower bound; rejected counts."""
    source = table_source(tables, req)
    rejected: Counter[str] = Counter()
    out: list[Candidate] = []
    plain = [s for s in req.schedules if s not in (Schedule.INTERLEAVED, Schedule.ZBV)]
    single = Schedule.ONE_F_ONE_B if Schedule.ONE_F_ONE_B in plain else (
        plain[0] if plain else None)
    count = 0
    for key in req.keys():
        table = source(key)
        n_layers = len(table.names)
        # a per-stage variant of full recomputation may recompute nothing: bound it
        # by the work without recomputation (bound_recompute)
        work = {r: {b: _layer_work(with_recompute(table, bound_recompute(req, r),
                                                  req.recompute_every), b)
                    for b in _sizes(table, req)} for r in req.recomputes}
        ranks = req.gpus // (key.tp * key.cp) if req.gpus % (key.tp * key.cp) == 0 else 0
        for p in [p for p in divisors(ranks) if req.pp is None or p in req.pp]:
            dp = ranks // p
            if (key.tp * key.cp * dp) % (key.ep * key.etp):
                rejected[Reason.EXPERTS_WORLD.value] += 1
                continue
            distinct = req.gpus > req.gpus_per_node and p > 1 and dp > 1
            orders = [o for o in req.rank_orders if (distinct or o is DP_INNER)
                      and _order_holds(req, key, p, dp, o)] or [DP_INNER]
            shardings = list(req.shardings) if dp * key.cp > 1 else list(req.shardings)[:1]
            if p > 1 and dp * key.cp > 1 and _zero1_dominates(req):
                shardings.remove(Sharding.NONE)
            for b in _sizes(table, req):
                for schedule in req.schedules:
                    vs = (list(req.virtual_stages) if schedule is Schedule.INTERLEAVED
                          else [chunks_per_device(schedule, 1)])
                    for v, sharding, r in ((v, sh, r) for v in vs for sh in shardings
                                           for r in req.recomputes):
                        count += 1
                        m = req.global_batch // (b * dp)
                        why = (Reason.BATCH if req.global_batch % (b * dp) else
                               _structure(req, p, m, schedule, v, single))
                        n_stages = p * chunks_per_device(schedule, v)
                        if why is None and n_stages > n_layers:
                            why = Reason.FEW_LAYERS
                        if why is None and n_stages * m * 3 > MAX_SIMULATED_OPS:
                            why = Reason.TOO_LARGE
                        if why is None and p > 1 and sharding not in PIPELINE_SHARDINGS:
                            why = Reason.SHARDING_PP
                        if why is not None:
                            rejected[why.value] += 1
                            continue
                        per_layer = work[r][b]
                        bound = m * max(sum(per_layer) / p, max(per_layer))
                        out.extend(Candidate(bound, PlanSpec(schedule, p, b, m, (), v, o,
                                                             sharding, r, key))
                                   for o in orders)
    return out, rejected, count


def _order_holds(req: PlanRequest, key: CostKey, p: int, dp: int, order: RankOrder) -> bool:
    """Whether megatron-core can lay the key's expert groups out in this rank order
    (layout.py says when it cannot)."""
    try:
        Layout(pp=p, dp=dp, tp=key.tp, cp=key.cp, ep=key.ep, etp=key.etp,
               gpus_per_node=req.gpus_per_node, order=order)
    except LayoutError:
        return False
    return True


def table_source(tables: CostTable | TableSource, req: PlanRequest) -> TableSource:
    """The request's cost tables: one table answers for the request's one key."""
    if not isinstance(tables, CostTable):
        return tables
    keys = req.keys()
    if len(keys) != 1:
        raise ValueError(f"one cost table for {len(keys)} cost keys; pass a table source")
    only = tables

    def one(key: CostKey) -> CostTable:
        if key != keys[0]:
            raise ValueError(f"no cost table for {key} (the table is for {keys[0]})")
        return only

    return one


def _zero1_dominates(req: PlanRequest) -> bool:
    """Under a pipeline with data parallelism, no sharding is left out when ZeRO-1 is
    searched too: both run the same ops, ZeRO-1 holds less memory, and their
    data-parallel tails differ by about one bucket's transfer (comm.py). A
    search policy, stated in the README; ``--sharding none`` shows the plan."""
    return Sharding.NONE in req.shardings and Sharding.ZERO1 in req.shardings


def _sizes(table: CostTable, req: PlanRequest) -> list[int]:
    return sorted(req.micro_batch_sizes or table.by_mb)


def _layer_work(table: CostTable, b: int) -> list[float]:
    return table.by_mb[b].work_s()


def rank(tables: CostTable | TableSource, req: PlanRequest, pending: list[Candidate],
         rejected: Counter[str]) -> tuple[list[Plan], dict[Schedule, Plan], Plan | None, int]:
    """Best-first: (feasible plans, best per schedule, best pp=1 plan, simulations)."""
    source = table_source(tables, req)
    heap = [(c.key(), c) for c in pending]
    heapq.heapify(heap)
    plans: list[Plan] = []
    best_by: dict[Schedule, Plan] = {}
    best_pp1: Plan | None = None
    times: list[float] = []  # the top step times so far, sorted
    simulated = 0
    oom_seen: set[tuple[object, ...]] = set()
    splits: dict[CostKey, SplitCache] = {}  # time-only splits, shared by shardings and m
    while heap:
        _, cand = heapq.heappop(heap)
        spec = cand.spec
        key = req.key_of(spec)
        table = source(key)
        kth = times[req.top - 1] if len(times) >= req.top else math.inf
        # the best 1f1b plan is kept exact (the reference the report compares against)
        own = (best_by[spec.schedule].step_time_s if spec.schedule in best_by else math.inf) if (
            spec.schedule is Schedule.ONE_F_ONE_B) else -math.inf
        pp1 = (best_pp1.step_time_s if best_pp1 else math.inf) if (
            spec.pp == 1 and req.with_best_pp1) else -math.inf
        if cand.bound_s > kth and cand.bound_s > own and cand.bound_s > pp1:
            continue
        if not cand.split:
            shape = (key, spec.pp, spec.micro_batch_size, spec.schedule, spec.virtual_stages,
                     spec.sharding, spec.recompute)
            if shape in oom_seen:
                continue  # memory does not depend on the rank order
            tighter = _split_candidate(table, req, spec, splits.setdefault(key, {}))
            if tighter is None:
                oom_seen.add(shape)
                rejected[Reason.OOM.value] += 1
                continue
            heapq.heappush(heap, (tighter.key(), tighter))
            continue
        plan = evaluate(table, req, spec)
        simulated += 1
        if max(plan.peak_memory_bytes) > table.memory_bytes:
            rejected[Reason.OOM.value] += 1
            continue
        if plan.step_time_s < kth and spec.pp > 1:
            plan, extra = refine_split(table, req, plan)
            simulated += extra
        if plan.recompute is Recompute.FULL and req.per_stage_recompute() and spec.pp > 1:
            plan, extra = fit_stage_recompute(table, req, plan, max(kth, own, pp1))
            simulated += extra
        plans.append(plan)
        times = sorted([*times, plan.step_time_s])[: req.top]
        if spec.schedule not in best_by or plan.step_time_s < best_by[spec.schedule].step_time_s:
            best_by[spec.schedule] = plan
        if spec.pp == 1 and (best_pp1 is None or plan.step_time_s < best_pp1.step_time_s):
            best_pp1 = plan
    return plans, best_by, best_pp1, simulated


def search(tables: CostTable | TableSource, req: PlanRequest) -> SearchResult:
    """Every feasible plan's simulated step time, fastest first (top ``req.top``).

    ``tables``: one cost table (for the request's one key), or a source with a
    table per key of ``req.keys()``."""
    source = table_source(tables, req)
    pending, rejected, count = candidates(source, req)
    plans, best_by, best_pp1, simulated = rank(source, req, pending, rejected)
    top = list(_unique(sorted(plans, key=_order)))[: req.top]
    if top:
        top[0] = explain(source(top[0].key), req, top[0])
    if req.with_best_pp1 and best_pp1 is not None and all(p.pp > 1 for p in top):
        top.append(best_pp1)  # the honest baseline: the best plan without a pipeline
    notes = []
    sizes = _sizes(source(top[0].key), req) if top else []
    if top and not any(
        req.global_batch % (b * top[0].dp) == 0
        and (req.global_batch // (b * top[0].dp)) % top[0].pp == 0
        for b in sizes
    ):
        notes.append(
            f"no micro-batch size makes the micro-batch count a multiple of pp={top[0].pp} "
            f"at global batch {req.global_batch} and dp={top[0].dp}; "
            "gradient-accumulation steps cannot be aligned to pipeline depth"
        )
    return SearchResult(top, rejected, count, simulated, best_by, notes)


def _order(plan: Plan) -> tuple[object, ...]:
    return (plan.step_time_s, not plan.aligned, plan.pp, list(Schedule).index(plan.schedule),
            RANK_ORDERS.index(plan.rank_order), list(Sharding).index(plan.sharding),
            list(Recompute).index(plan.recompute), plan.key)


def _unique(plans: list[Plan]) -> Iterator[Plan]:
    """A plan that differs only in its rank order is listed once, in its faster order."""
    seen: set[tuple[object, ...]] = set()
    for plan in plans:
        key = (plan.pp, plan.dp, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
               plan.num_microbatches, tuple(plan.stage_layers), plan.sharding, plan.recompute,
               plan.key, plan.recompute_layers)
        if key not in seen:
            seen.add(key)
            yield plan


def _split_candidate(table: CostTable, req: PlanRequest, spec: PlanSpec,
                     cache: SplitCache) -> Candidate | None:
    """The candidate with its min-bottleneck split and a tighter bound, or None (memory)."""
    found = split_with_bound(table, req, spec, cache)
    return None if found is None else Candidate(found[0], found[1])
