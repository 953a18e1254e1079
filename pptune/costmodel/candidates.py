"""The plans the search may try, before any split or simulation (search.py's first half).

``candidates`` walks pipeline depth, micro-batch size, schedule (with its
chunks), sharding, recomputation, the all-to-all overlap and rank order, and
keeps every combination the frameworks accept, each with a lower bound on
its step time that needs no split: the busiest device does at least the
average work, and at least the heaviest layer's work for the micro-batches
that pass it (under dualpipe each layer sits on two devices, each running
half of them). Schedules whose F&B pairs can hide the expert all-to-all
(schedules.OVERLAPPED, and Megatron-LM's combined order) are bounded by
their compute alone; the others pay the all-to-all in every op.

The expert all-to-all overlap (``PlanSpec.a2a_overlap``), only for a model
with all-to-alls (MoE with ep > 1):

- dualpipe, dualpipev: on, unless the plan recomputes activations:
  torchtitan 0.2.2 refuses expert-parallel overlap with activation
  checkpointing under DualPipeV (distributed/dual_pipe_v.py,
  ``get_dual_pipe_v_flag``: "Expert Parallel with DualPipeV and Activation
  Checkpointing cannot be used together"); the plan then runs its pairs
  without the overlap (taken to hold for dualpipe as well);
- interleaved-1f1b, and 1f1b without a pipeline: off and on (Megatron-LM's
  ``--overlap-moe-expert-parallel-comm`` holds one more micro-batch in
  flight, so either may win), not with full recomputation (megatron-core 0.16
  TransformerConfig: "disable full recomputation when enabling
  overlap_moe_expert_parallel_comm") and, with pp > 1, only interleaved
  ("virtual_pipeline_model_parallel_size must be specified when
  pipeline_model_parallel_size > 1"); with one micro-batch a step only off
  (the combined order then pairs nothing: it is the plain order).
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.evaluate import PlanRequest, PlanSpec
from pptune.costmodel.keys import CostKey, TableSource
from pptune.costmodel.layout import DP_INNER, Layout, LayoutError, RankOrder
from pptune.costmodel.memory import Recompute, with_recompute
from pptune.costmodel.partition import MTP
from pptune.costmodel.schedules import (
    OVERLAPPED,
    SPLIT_BACKWARD,
    Schedule,
    ScheduleError,
    chains,
    chunks_per_device,
    model_chunks,
    validate,
)
from pptune.costmodel.sharding import MEGATRON_GRAD_BYTES, PIPELINE_SHARDINGS, Sharding
from pptune.costmodel.splitting import bound_recompute
from pptune.costmodel.table import CostTable


class Reason(str, Enum):
    """Why a candidate was rejected (stable JSON keys)."""

    BATCH = "batch_not_divisible"
    M_LT_P = "microbatches_less_than_pp"  # 1f1b and interleaved-1f1b
    # interleaved-1f1b with m >= pp not a multiple of pp, for a framework that does not
    # run Megatron-LM's micro-batch groups (PlanRequest.interleaved_groups)
    INTERLEAVE_MULT = "microbatches_not_multiple_of_pp"
    NEEDS_PP2 = "schedule_needs_pp_2"
    FEW_LAYERS = "too_few_layers"
    OOM = "out_of_memory"
    TOO_LARGE = "too_large_to_simulate"
    SHARDING_PP = "sharding_without_pipeline_only"
    EXPERTS_WORLD = "experts_do_not_divide_ranks"
    M_LT_STAGES = "microbatches_less_than_stages"  # the DualPipes: m >= 2 pp
    DUALPIPE_EVEN = "dualpipe_needs_even_pp_and_microbatches"
    # recomputation by module of a plan that fits without recomputation (search.py)
    NEEDLESS_MODULES = "modules_fit_without_recomputation"
    # --recompute modules alone, on a model whose modules pptune does not price (dense)
    MODULES_UNPRICED = "recompute_modules_not_modelled"


GRAD_DTYPE_BYTES = MEGATRON_GRAD_BYTES  # gradients reduced in fp32 (Megatron-LM's default)

# Candidates with more ops than this are not simulated (~3 us an op: ~6 s).
MAX_SIMULATED_OPS = 2_000_000


@dataclass(frozen=True)
class Candidate:
    """A plan to try; ``spec.stage_layers`` is empty until it is split."""

    bound_s: float
    spec: PlanSpec
    # the bound already covers every split (splitting.any_split_bound)
    any_split: bool = False
    # the bound already covers the split's exposed traffic (splitting.layout_bound)
    exposed: bool = False

    @property
    def split(self) -> bool:
        return bool(self.spec.stage_layers)

    def key(self) -> tuple[object, ...]:
        s = self.spec
        return (self.bound_s, s.pp, position(s.schedule), s.virtual_stages,
                s.micro_batch_size, position(s.rank_order), position(s.sharding),
                position(s.recompute), s.key or CostKey(), s.a2a_overlap,
                0 if self.split else 1)


@functools.cache
def position(member: Enum) -> int:
    """A member's place in its enum's declaration order (the search's tie-break)."""
    return list(type(member)).index(member)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _structure(p: int, m: int, schedule: Schedule, v: int,
               single: Schedule | None, regroup: bool = True) -> Reason | None:
    """Why the frameworks refuse (p, m, schedule, v), or None. ``regroup``: interleaving
    with m not a multiple of p, in Megatron-LM's micro-batch groups, is searched."""
    if p == 1 and schedule is not single:
        # without a pipeline every schedule is the same run: keep one
        return Reason.NEEDS_PP2
    if schedule in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED) and m < p:
        # interleaved too: Megatron-LM's micro-batch groups need m >= pp
        # (schedules.validate), whatever m % pp is
        return Reason.M_LT_P
    if schedule is Schedule.INTERLEAVED and m % p and not regroup:
        return Reason.INTERLEAVE_MULT
    if schedule is Schedule.DUALPIPE and (p % 2 or m % 2):
        return Reason.DUALPIPE_EVEN
    if schedule in OVERLAPPED and m < 2 * p:
        return Reason.M_LT_STAGES
    try:
        validate(schedule, p, m, v)
    except ScheduleError:
        return Reason.INTERLEAVE_MULT
    return None


def a2a_overlaps(a2a: bool, schedule: Schedule, p: int, m: int, recompute: Recompute,
                 combined_order: bool = True, mtp: bool = False) -> list[bool]:
    """The all-to-all overlap settings to search (module docstring) for ``m``
    micro-batches a step; ``combined_order`` False: no combined 1F1B order
    (PlanRequest.combined_order); ``mtp``: the model has an MTP layer, which
    megatron-core's combined order runs only with a pipeline ('Pipeline model parallel
    size must be larger than 1 when enabling overlap_moe_expert_parallel_comm with MTP
    layer', transformer_config.py)."""
    if not a2a:
        return [False]
    if schedule in OVERLAPPED:
        return [recompute is Recompute.NONE]
    # the combined order pairs one micro-batch's forward with another's backward:
    # with one micro-batch it runs the plain order, the same plan twice
    # (interleaved: in groups of p, the order pptune builds for it: schedules.validate)
    combinable = combined_order and m > 1 and (
        (schedule is Schedule.INTERLEAVED and m % p == 0)
        or (schedule is Schedule.ONE_F_ONE_B and p == 1 and not mtp))
    return [False, True] if combinable and recompute is not Recompute.FULL else [False]


def _single(schedules: list[Schedule]) -> Schedule | None:
    """The one schedule kept without a pipeline: 1f1b, else the first with one chunk."""
    plain = [s for s in schedules
             if s is not Schedule.INTERLEAVED and chunks_per_device(s, 1) == 1]
    return Schedule.ONE_F_ONE_B if Schedule.ONE_F_ONE_B in plain else (
        plain[0] if plain else None)


def candidates(tables: CostTable | TableSource, req: PlanRequest
               ) -> tuple[list[Candidate], Counter[str], int]:
    """Every plan the frameworks accept, with a split-free lower bound; rejected counts."""
    source = table_source(tables, req)
    rejected: Counter[str] = Counter()
    out: list[Candidate] = []
    single = _single(list(req.schedules))
    count = 0
    for key in req.keys():
        table = source(key)
        n_layers = len(table.names)
        # module recomputation where the table prices it (recompute_modules.py)
        recomputes = [r for r in req.recomputes
                      if r is not Recompute.MODULES or table.modules_table is not None]
        if not recomputes:
            rejected[Reason.MODULES_UNPRICED.value] += 1
            continue
        rcs = {r: with_recompute(table, r, req.recompute_every) for r in recomputes}
        work = {r: {b: rc.by_mb[b].work_s() for b in sizes(table, req)}
                for r, rc in rcs.items()}
        compute = {r: {b: rc.by_mb[b].compute_s() for b in sizes(table, req)}
                   for r, rc in rcs.items()}
        chain = {r: {b: _chain_s(rc, b) for b in sizes(table, req)} for r, rc in rcs.items()}
        # each recomputation's per-layer work as (sum, largest layer), with and without
        # what an overlapping schedule hides; a hidden all-to-all still occupies its
        # device: a pair lasts at least its halves' communication (bounds.lower_bound)
        totals = {r: {b: (sum(x), max(x)) for b, x in by.items()} for r, by in compute.items()}
        work_totals = {r: {b: (sum(x), max(x)) for b, x in by.items()} for r, by in work.items()}
        a2a_totals = {r: {b: sum(rc.by_mb[b].fwd_a2a_s) + sum(rc.by_mb[b].bwd_a2a_s)
                          for b in sizes(table, req)} for r, rc in rcs.items()}
        a2a = any(c.has_a2a for c in table.by_mb.values())
        mtp = any(n.startswith(MTP) for n in table.names)
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
            for b in sizes(table, req):
                m = req.global_batch // (b * dp)
                for schedule in req.schedules:
                    vs = (list(req.virtual_stages) if schedule is Schedule.INTERLEAVED
                          else [chunks_per_device(schedule, 1)])
                    split_bwd = schedule in SPLIT_BACKWARD
                    for v in vs:
                        # what rules out (p, b, schedule, v) whatever the sharding
                        why_v = (Reason.BATCH if req.global_batch % (b * dp) else
                                 _structure(p, m, schedule, v, single,
                                            req.interleaved_groups))
                        if why_v is None and model_chunks(schedule, p, v) > n_layers:
                            why_v = Reason.FEW_LAYERS
                        if why_v is None and p * v * m * 3 > MAX_SIMULATED_OPS:
                            why_v = Reason.TOO_LARGE
                        overlaps_of = {r: a2a_overlaps(a2a, schedule, p, m, r,
                                                         req.combined_order, mtp)
                                       for r in recomputes}
                        per_sharding = sum(map(len, overlaps_of.values()))
                        count += per_sharding * len(shardings)
                        if why_v is not None:
                            rejected[why_v.value] += per_sharding * len(shardings)
                            continue
                        for sharding, r in ((sh, r) for sh in shardings for r in recomputes):
                            overlaps = overlaps_of[r]
                            if p > 1 and sharding not in PIPELINE_SHARDINGS:
                                rejected[Reason.SHARDING_PP.value] += len(overlaps)
                                continue
                            # a per-stage variant of full recomputation may recompute
                            # nothing: bound it by the work without recomputation
                            rb = bound_recompute(req, r, p, schedule)
                            for overlap in overlaps:
                                hides = overlap or schedule in OVERLAPPED
                                total, largest = (totals if hides else work_totals)[rb][b]
                                # the busiest device works (and, where the all-to-alls
                                # hide, communicates) at least the average, and one
                                # micro-batch's forward and backward pass every layer in turn
                                talk = a2a_totals[rb][b] if hides else 0.0
                                bound = max(m * max(total / p, talk / p,
                                                    largest / chains(schedule)),
                                            chain[rb][b][1 if split_bwd else 0])
                                out.extend(Candidate(bound, PlanSpec.unsplit(
                                    schedule, p, b, m, v, o, sharding, r, key, overlap))
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


def _chain_s(table: CostTable, b: int) -> tuple[float, float]:
    """One micro-batch's path through every layer: (F + B + W, F + B), the second for
    schedules that defer W (the chain a micro-batch must run whatever the split). Its
    all-to-alls are on the path under any schedule: an op's output waits on its own
    all-to-all, and an F&B pair lasts at least each half's compute and communication
    (sim_records.overlapped_pair_s)."""
    c = table.by_mb[b]
    fb = sum(c.fwd_s) + sum(c.bwd_s) + sum(c.fwd_a2a_s) + sum(c.bwd_a2a_s)
    return fb + sum(c.wgrad_s), fb


def sizes(table: CostTable, req: PlanRequest) -> list[int]:
    """The micro-batch sizes to search."""
    return sorted(req.micro_batch_sizes or table.by_mb)

