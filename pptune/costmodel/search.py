"""Enumerate feasible pipeline plans, simulate each, rank them.

For N GPUs and tensor-parallel size tp the search walks pipeline depth p
over the divisors of N / tp (data parallel dp = N / (p tp)), micro-batch
size b over the sizes the cost table has, the number of micro-batches m
from ``global_batch = b * m * dp`` (exactly; m is also the gradient-
accumulation steps), the schedules asked for and, for interleaved-1f1b, the
virtual stages v. For each candidate it finds the contiguous split that
minimises the bottleneck stage (compute plus its p2p send) subject to each
stage's memory (partition.py), then *simulates* it: per-micro-batch
overheads, communication, uneven stages and the data-parallel all-reduce
all count. A lower bound on the step time (the busiest device's work, and
for one chunk per device the fill and drain of the pipeline in front of the
bottleneck stage) lets it skip simulating candidates that cannot reach the
top of the ranking; the ranking is the same as simulating all of them.

Rank layout follows Megatron-LM's default order (tensor fastest, then data,
then pipeline): a pipeline hop crosses nodes when the ranks tp*dp apart sit
on different nodes, a data-parallel group is inside a node when
tp * dp <= gpus_per_node.

Memory per GPU: parameters, gradients and optimizer state at 18 bytes per
parameter (bf16 weights 2 + fp32 gradients 4 + fp32 master weights, Adam
moments 12), or ``6 + 12 / dp`` with the optimizer state sharded over data
parallel ranks (Megatron-LM docs, distributed optimizer), plus the
activation peak the simulator reports, plus a fixed reserve (CUDA context,
NCCL buffers, allocator fragmentation).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pptune.costmodel.comm import AllReduceLink, DpReduction, dp_exposed_s
from pptune.costmodel.partition import SplitError, min_bottleneck_split, stage_bounds
from pptune.costmodel.schedules import (
    SPLIT_BACKWARD,
    Schedule,
    ScheduleError,
    chunks_per_device,
    peak_inflight_per_stage,
    stage_device,
    validate,
)
from pptune.costmodel.simulate import Link, SimResult, StageCost, simulate

STATE_BYTES_PER_PARAM = 18.0  # Megatron-LM distributed-optimizer doc, mixed-precision Adam
SHARDED_FIXED_BYTES = 6.0  # bf16 weights 2 + fp32 gradients 4, not sharded
SHARDED_STATE_BYTES = 12.0  # fp32 master weights + Adam m and v, sharded over dp
GRAD_DTYPE_BYTES = 4  # gradients reduced in fp32 (Megatron-LM's default)
DEFAULT_RESERVE_BYTES = 2 * 1024**3  # CUDA context + NCCL buffers + fragmentation (assumed)
DEFAULT_VIRTUAL_STAGES = (2, 3, 4)

# Rank orders, fastest-varying first (Megatron-LM's RankGenerator names them
# "tp-cp-ep-dp-pp", the default, and "tp-cp-ep-pp-dp", --use-tp-pp-dp-mapping).
DP_INNER = "tp-dp-pp"  # a stage's data-parallel replicas sit side by side
PP_INNER = "tp-pp-dp"  # a pipeline's stages sit side by side
RANK_ORDERS = (DP_INNER, PP_INNER)


class Reason:
    """Why a candidate was rejected (stable JSON keys)."""

    BATCH = "batch_not_divisible"
    M_LT_P = "microbatches_less_than_pp"
    INTERLEAVE_MULT = "microbatches_not_multiple_of_pp"
    NEEDS_PP2 = "schedule_needs_pp_2"
    FEW_LAYERS = "too_few_layers"
    OOM = "out_of_memory"
    TOO_LARGE = "too_large_to_simulate"


# Candidates with more ops than this are not simulated (~3 us an op: ~6 s).
MAX_SIMULATED_OPS = 2_000_000


@dataclass(frozen=True)
class LayerCosts:
    """Per-layer costs at one micro-batch size (plain lists, same length)."""

    fwd_s: Sequence[float]
    bwd_s: Sequence[float]
    wgrad_s: Sequence[float]
    act_bytes: Sequence[float]
    out_bytes: Sequence[float]


@dataclass(frozen=True)
class CostTable:
    names: Sequence[str]
    param_bytes: Sequence[float]
    param_dtype_bytes: int
    by_mb: dict[int, LayerCosts]
    seq_len: int
    memory_bytes: float
    p2p_intra: Link
    p2p_inter: Link
    ar_intra: AllReduceLink
    ar_inter: AllReduceLink


@dataclass(frozen=True)
class PlanRequest:
    gpus: int
    global_batch: int
    tp: int = 1
    gpus_per_node: int = 8
    schedules: Sequence[Schedule] = tuple(Schedule)
    virtual_stages: Sequence[int] = DEFAULT_VIRTUAL_STAGES
    micro_batch_sizes: Sequence[int] | None = None  # None: all in the table
    pp: Sequence[int] | None = None  # None: every divisor
    sharded_optimizer: bool = False
    reserve_bytes: float = DEFAULT_RESERVE_BYTES
    grad_bytes_factor: float = 1.0  # gradient compression
    blocking_send: bool = False
    overlap_grad_reduce: bool = True  # DP reduction in buckets during backward (comm.py)
    top: int = 5
    rank_orders: Sequence[str] = RANK_ORDERS


@dataclass
class Plan:
    pp: int
    dp: int
    tp: int
    schedule: Schedule
    virtual_stages: int
    micro_batch_size: int
    num_microbatches: int
    stage_layers: list[int]  # per global stage (pp * chunks entries)
    step_time_s: float
    bubble_rate: float
    tokens_per_s: float
    peak_memory_bytes: list[float]  # per device (pipeline rank)
    memory_capacity_bytes: float
    ideal_step_s: float
    sim: SimResult = field(repr=False)
    exposed_p2p_s: float | None = None
    exposed_allreduce_s: float | None = None
    rank_order: str = DP_INNER

    @property
    def grad_accum_steps(self) -> int:
        return self.num_microbatches

    @property
    def aligned(self) -> bool:
        return self.num_microbatches % self.pp == 0

    @property
    def efficiency(self) -> float:
        return self.ideal_step_s / self.step_time_s if self.step_time_s > 0 else 0.0

    @property
    def headroom_bytes(self) -> float:
        return self.memory_capacity_bytes - max(self.peak_memory_bytes)


@dataclass
class SearchResult:
    plans: list[Plan]
    rejected: Counter[str]
    candidates: int
    simulated: int
    best_by_schedule: dict[Schedule, Plan]
    notes: list[str]


def with_full_recompute(table: CostTable) -> CostTable:
    """Full activation recomputation (Chen et al. 2016; Megatron-LM
    --recompute-granularity full): each layer keeps only its input for
    backward and runs its forward again before its backward."""
    by = {}
    for b, c in table.by_mb.items():
        n = len(c.fwd_s)
        by[b] = LayerCosts(
            fwd_s=c.fwd_s,
            bwd_s=[c.bwd_s[i] + c.fwd_s[i] for i in range(n)],
            wgrad_s=c.wgrad_s,
            act_bytes=[min(c.act_bytes[i], c.out_bytes[i - 1] if i else 0.0) for i in range(n)],
            out_bytes=c.out_bytes,
        )
    return dataclasses.replace(table, by_mb=by)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def state_bytes_per_param(sharded: bool, dp: int) -> float:
    return SHARDED_FIXED_BYTES + SHARDED_STATE_BYTES / dp if sharded else STATE_BYTES_PER_PARAM


@dataclass
class _Topology:
    """Which pipeline hops and data-parallel groups leave the node."""

    p: int
    dp: int
    tp: int
    gpn: int
    order: str = DP_INNER

    def rank(self, stage: int, replica: int, t: int) -> int:
        if self.order == DP_INNER:
            return (stage * self.dp + replica) * self.tp + t
        return (replica * self.p + stage) * self.tp + t

    def node(self, stage: int, replica: int, t: int) -> int:
        return self.rank(stage, replica, t) // self.gpn

    def same_node(self, a: int, b: int) -> bool:
        """Every replica's hop from stage a to stage b stays inside a node."""
        return all(
            self.node(a, i, t) == self.node(b, i, t)
            for i in range(self.dp) for t in (0, self.tp - 1)
        )

    def dp_intra(self) -> bool:
        """Every data-parallel group fits inside one node."""
        return all(
            self.node(s, 0, t) == self.node(s, self.dp - 1, t)
            for s in range(self.p) for t in (0, self.tp - 1)
        )

    def link(self, table: CostTable) -> Callable[[int, int], Link]:
        @functools.cache
        def between(a: int, z: int) -> Link:
            return table.p2p_intra if self.same_node(a, z) else table.p2p_inter

        return between


def stage_costs(table: CostTable, b: int, stage_layers: Sequence[int]) -> list[StageCost]:
    c = table.by_mb[b]
    out = []
    for s, e in stage_bounds(stage_layers):
        out.append(
            StageCost(
                fwd_s=sum(c.fwd_s[s:e]),
                bwd_s=sum(c.bwd_s[s:e]),
                wgrad_s=sum(c.wgrad_s[s:e]),
                act_bytes=sum(c.act_bytes[s:e]),
                out_bytes=c.out_bytes[e - 1],
            )
        )
    return out


def evaluate(
    table: CostTable,
    req: PlanRequest,
    schedule: Schedule,
    p: int,
    b: int,
    m: int,
    v: int,
    stage_layers: Sequence[int],
    keep_events: bool = False,
    rank_order: str = DP_INNER,
) -> Plan:
    """Simulate one fully specified plan (also used for configs and baselines)."""
    dp = req.gpus // (p * req.tp)
    topo = _Topology(p, dp, req.tp, req.gpus_per_node, rank_order)
    stages = stage_costs(table, b, stage_layers)
    link = topo.link(table)
    ar_link = table.ar_intra if topo.dp_intra() else table.ar_inter
    bounds = stage_bounds(stage_layers)
    params = [sum(table.param_bytes[s:e]) / table.param_dtype_bytes for s, e in bounds]
    ar = [  # exposed part of each stage's bucketed gradient reduction (comm.py)
        dp_exposed_s(DpReduction(n, dp, ar_link, GRAD_DTYPE_BYTES * req.grad_bytes_factor,
                                 table.param_dtype_bytes, req.sharded_optimizer,
                                 req.overlap_grad_reduce), st.bwd_s + st.wgrad_s, st.fwd_s)
        for n, st in zip(params, stages, strict=True)
    ]
    sim = simulate(
        schedule, p, m, stages, v=v,
        link=link,
        blocking_send=req.blocking_send,
        dp_allreduce_s=ar,
        keep_events=keep_events,
    )
    per_param = state_bytes_per_param(req.sharded_optimizer, dp)
    static = [0.0] * p
    for k, n in enumerate(params):
        static[stage_device(schedule, p, k)] += n * per_param
    peak = [
        static[d] + sim.devices[d].peak_activation_bytes + req.reserve_bytes for d in range(p)
    ]
    work = sum(s.total_s for s in stages) * m  # one replica's compute, device-seconds / tp
    return Plan(
        pp=p, dp=dp, tp=req.tp, schedule=schedule, virtual_stages=v,
        micro_batch_size=b, num_microbatches=m, stage_layers=list(stage_layers),
        step_time_s=sim.step_time_s, bubble_rate=sim.bubble_rate,
        tokens_per_s=req.global_batch * table.seq_len / sim.step_time_s if sim.step_time_s else 0.0,
        peak_memory_bytes=peak, memory_capacity_bytes=table.memory_bytes,
        ideal_step_s=work / p, sim=sim, rank_order=rank_order,
    )


def _surely_oom(
    table: CostTable, schedule: Schedule, p: int, m: int, v: int, split: Sequence[int],
    stages: Sequence[StageCost], per_param: float, usable: float,
) -> bool:
    """A lower bound on a device's peak already exceeds its memory.

    The peak holds all of the device's training state and at least the
    largest in-flight activation set of any one of its chunks."""
    inflight = peak_inflight_per_stage(schedule, p, m, v)
    static = [0.0] * p
    act = [0.0] * p
    for k, (s, e) in enumerate(stage_bounds(split)):
        d = stage_device(schedule, p, k)
        static[d] += sum(table.param_bytes[s:e]) / table.param_dtype_bytes * per_param
        act[d] = max(act[d], inflight[k] * stages[k].act_bytes)
    return any(static[d] + act[d] > usable for d in range(p))


def _lower_bound(schedule: Schedule, p: int, m: int, stages: Sequence[StageCost]) -> float:
    per_dev = [0.0] * p
    for k, s in enumerate(stages):
        per_dev[stage_device(schedule, p, k)] += s.total_s * m
    bound = max(per_dev)
    if len(stages) == p:
        split = schedule in SPLIT_BACKWARD
        head = 0.0
        for s in stages:
            # micro-batch 0 must pass F of stages < j before j starts, and the
            # last backward must pass B of stages < j after j ends
            bound = max(bound, head + m * s.total_s)
            head += s.fwd_s + s.bwd_s + (0.0 if split else s.wgrad_s)
    return bound


def search(table: CostTable, req: PlanRequest) -> SearchResult:
    """Every feasible plan's simulated step time, fastest first (top ``req.top``)."""
    n_layers = len(table.names)
    rejected: Counter[str] = Counter()
    notes: list[str] = []
    sizes = sorted(req.micro_batch_sizes or table.by_mb)
    depths = [p for p in divisors(req.gpus // req.tp) if req.pp is None or p in req.pp]
    usable = table.memory_bytes - req.reserve_bytes
    candidates: list[tuple[float, int, Schedule, int, int, int, list[int], str]] = []
    plain = [s for s in req.schedules if s not in (Schedule.INTERLEAVED, Schedule.ZBV)]
    single_stage = Schedule.ONE_F_ONE_B if Schedule.ONE_F_ONE_B in plain else (
        plain[0] if plain else None)
    n_candidates = 0
    for p in depths:
        dp = req.gpus // (p * req.tp)
        per_param = state_bytes_per_param(req.sharded_optimizer, dp)
        # the two rank orders differ only when a job spans nodes with both pp and dp > 1
        distinct = req.gpus > req.gpus_per_node and p > 1 and dp > 1
        orders = [o for o in req.rank_orders if distinct or o == DP_INNER] or [DP_INNER]
        for b in sizes:
            for schedule in req.schedules:
                vs = list(req.virtual_stages) if schedule is Schedule.INTERLEAVED else [1]
                for v in vs:
                    n_candidates += 1
                    if req.global_batch % (b * dp):
                        rejected[Reason.BATCH] += 1
                        continue
                    m = req.global_batch // (b * dp)
                    if p == 1 and schedule is not single_stage:
                        # without a pipeline every schedule is the same run:
                        # keep one (1f1b when asked for) and say the rest need pp >= 2
                        rejected[Reason.NEEDS_PP2] += 1
                        continue
                    if schedule is Schedule.ONE_F_ONE_B and m < p:
                        rejected[Reason.M_LT_P] += 1
                        continue
                    if schedule is Schedule.INTERLEAVED and m % p:
                        rejected[Reason.INTERLEAVE_MULT] += 1
                        continue
                    try:
                        validate(schedule, p, m, v)
                    except ScheduleError:
                        rejected[Reason.INTERLEAVE_MULT] += 1
                        continue
                    chunks = chunks_per_device(schedule, v)
                    n_stages = p * chunks
                    if n_stages > n_layers:
                        rejected[Reason.FEW_LAYERS] += 1
                        continue
                    if n_stages * m * 3 > MAX_SIMULATED_OPS:
                        rejected[Reason.TOO_LARGE] += 1
                        continue
                    for order in orders:
                        split = _split(table, req, schedule, p, m, v, b, n_stages, chunks,
                                       per_param, usable, order)
                        if split is None:
                            rejected[Reason.OOM] += 1
                            break  # memory does not depend on the rank order
                        stages = stage_costs(table, b, split)
                        if chunks > 1 and _surely_oom(table, schedule, p, m, v, split, stages,
                                                      per_param, usable):
                            rejected[Reason.OOM] += 1
                            break
                        lb = _lower_bound(schedule, p, m, stages)
                        candidates.append((lb, p, schedule, v, b, m, split, order))
    candidates.sort(key=lambda c: (c[0], c[1], list(Schedule).index(c[2]), c[3], c[4],
                                   RANK_ORDERS.index(c[7])))
    plans: list[Plan] = []
    best_by: dict[Schedule, Plan] = {}
    simulated = 0
    times: list[float] = []  # step times of the plans so far, kept sorted
    for lb, p, schedule, v, b, m, split, order in candidates:
        kth = times[req.top - 1] if len(times) >= req.top else math.inf
        own = best_by[schedule].step_time_s if schedule in best_by else math.inf
        if lb > kth and lb > own:
            continue
        plan = evaluate(table, req, schedule, p, b, m, v, split, rank_order=order)
        simulated += 1
        if max(plan.peak_memory_bytes) > table.memory_bytes:
            rejected[Reason.OOM] += 1
            continue
        plans.append(plan)
        bisect.insort(times, plan.step_time_s)
        if schedule not in best_by or plan.step_time_s < best_by[schedule].step_time_s:
            best_by[schedule] = plan
    plans.sort(key=lambda x: (x.step_time_s, not x.aligned, x.pp, list(Schedule).index(x.schedule),
                              RANK_ORDERS.index(x.rank_order)))
    # a plan that differs only in its rank order is listed once, in its faster order
    seen: set[tuple[object, ...]] = set()
    unique = []
    for plan in plans:
        key = (plan.pp, plan.dp, plan.schedule, plan.virtual_stages, plan.micro_batch_size,
               plan.num_microbatches, tuple(plan.stage_layers))
        if key not in seen:
            seen.add(key)
            unique.append(plan)
    top = unique[: req.top]
    if top:
        _explain_costs(table, req, top[0])
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
    return SearchResult(top, rejected, n_candidates, simulated, best_by, notes)


def _split(
    table: CostTable, req: PlanRequest, schedule: Schedule, p: int, m: int, v: int, b: int,
    n_stages: int, chunks: int, per_param: float, usable: float, order: str = DP_INNER,
) -> list[int] | None:
    c = table.by_mb[b]
    costs = [c.fwd_s[i] + c.bwd_s[i] + c.wgrad_s[i] for i in range(len(c.fwd_s))]
    dp = req.gpus // (p * req.tp)
    topo = _Topology(p, dp, req.tp, req.gpus_per_node, order)
    inflight = peak_inflight_per_stage(schedule, p, m, v)
    budget = usable / chunks  # a device's memory shared evenly by its chunks
    # a stage's extra cost: sending its output forward and receiving the
    # gradient back (same size), over the link to the next stage's device
    out = max(c.out_bytes[:-1]) if len(c.out_bytes) > 1 else 0.0
    extra = []
    for k in range(n_stages):
        if k == n_stages - 1:
            extra.append(0.0)
            continue
        a, z = stage_device(schedule, p, k), stage_device(schedule, p, k + 1)
        if a == z:
            extra.append(0.0)
            continue
        link = table.p2p_intra if topo.same_node(a, z) else table.p2p_inter
        extra.append(2 * link.time_s(out))
    static = [0.0]
    act = [0.0]
    for i in range(len(costs)):
        static.append(static[-1] + table.param_bytes[i] / table.param_dtype_bytes * per_param)
        act.append(act[-1] + c.act_bytes[i])

    def fits(k: int, s: int, e: int) -> bool:
        return static[e] - static[s] + inflight[k] * (act[e] - act[s]) <= budget

    try:
        return min_bottleneck_split(costs, n_stages, extra, fits)
    except SplitError:
        if chunks == 1:
            return None  # exact: one stage per device, the budget is the device's
    # Several chunks share a device: the even share per chunk was too strict.
    # Split for time alone; the simulated per-device peak decides the fit.
    try:
        return min_bottleneck_split(costs, n_stages, extra)
    except SplitError:
        return None


def _explain_costs(table: CostTable, req: PlanRequest, plan: Plan) -> None:
    """Exposed p2p and all-reduce time: re-simulate without each."""
    base = plan.sim
    no_comm = simulate(
        plan.schedule, plan.pp, plan.num_microbatches,
        stage_costs(table, plan.micro_batch_size, plan.stage_layers),
        v=plan.virtual_stages, keep_events=False,
    )
    with_p2p = evaluate(
        _no_allreduce(table), req, plan.schedule, plan.pp, plan.micro_batch_size,
        plan.num_microbatches, plan.virtual_stages, plan.stage_layers,
        rank_order=plan.rank_order,
    )
    plan.exposed_p2p_s = max(0.0, with_p2p.step_time_s - no_comm.step_time_s)
    plan.exposed_allreduce_s = max(0.0, base.step_time_s - with_p2p.step_time_s)


def _no_allreduce(table: CostTable) -> CostTable:
    free = AllReduceLink(0.0, math.inf)
    return dataclasses.replace(table, ar_intra=free, ar_inter=free)
