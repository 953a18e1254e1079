"""One fully specified plan -> its simulated step time and memory per GPU.

A ``PlanSpec`` names everything a plan chooses (schedule, depth, micro-batch
size and count, chunks, split, rank order, sharding, recomputation); the
``PlanRequest`` holds the job (GPUs, batch, tp, links, limits). ``evaluate``
simulates the spec and returns a frozen ``Plan``; ``explain`` returns a new
``Plan`` with the exposed p2p and data-parallel times filled in.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Dim, Layout, RankOrder
from pptune.costmodel.memory import (
    DEFAULT_RESERVE_BYTES,
    TORCHTITAN_SELECTIVE_EVERY,
    DeviceMemory,
    Recompute,
    p2p_buffer_bytes,
    with_recompute,
)
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.schedules import (
    DEFAULT_SCHEDULES,
    Schedule,
    chunks_per_device,
    stage_device,
)
from pptune.costmodel.sharding import (
    ShardComm,
    Sharding,
    reshards,
    stage_comm,
    state_bytes_per_param,
    working_bytes,
)
from pptune.costmodel.simulate import (
    Link,
    SimResult,
    StageCost,
    simulate,
    simulate_steady,
    with_allreduce,
)
from pptune.costmodel.table import CostTable, stage_costs

DEFAULT_VIRTUAL_STAGES = (2, 3, 4)


@dataclass(frozen=True)
class PlanRequest:
    gpus: int
    global_batch: int
    tp: int = 1
    gpus_per_node: int = 8
    schedules: Sequence[Schedule] = DEFAULT_SCHEDULES
    virtual_stages: Sequence[int] = DEFAULT_VIRTUAL_STAGES
    micro_batch_sizes: Sequence[int] | None = None  # None: all in the table
    pp: Sequence[int] | None = None  # None: every divisor
    shardings: Sequence[Sharding] = tuple(Sharding)
    recomputes: Sequence[Recompute] = tuple(Recompute)
    recompute_every: int | None = TORCHTITAN_SELECTIVE_EVERY  # selective: every N-th block
    fsdp_reshard_after_forward: bool | None = None  # None: torchtitan's default (not with pp)
    reserve_bytes: float = DEFAULT_RESERVE_BYTES
    grad_bytes_factor: float = 1.0  # gradient compression
    blocking_send: bool = False
    overlap_grad_reduce: bool = True  # DP reduction in buckets during backward (comm.py)
    top: int = 5
    rank_orders: Sequence[RankOrder] = tuple(RankOrder)
    with_best_pp1: bool = True  # keep the best plan without a pipeline in the list
    # full recomputation searched per stage too when no recomputation is searched as
    # well (a mix of both): the memory-bound stages recompute (stage_recompute.py)
    stage_recompute: bool = True

    def per_stage_recompute(self) -> bool:
        return (self.stage_recompute and Recompute.FULL in self.recomputes
                and Recompute.NONE in self.recomputes)
    # the per-layer splits and precisions to search, one cost table each (keys.py);
    # None: the one key of ``tp`` in BF16
    cost_keys: Sequence[CostKey] | None = None

    def keys(self) -> tuple[CostKey, ...]:
        return tuple(self.cost_keys) if self.cost_keys else (CostKey(tp=self.tp),)

    def key_of(self, spec: PlanSpec) -> CostKey:
        return spec.key if spec.key is not None else self.keys()[0]

    def layout(self, spec: PlanSpec) -> Layout:
        """The plan's ranks: ``gpus = pp x tp x cp x dp`` (layout.py does the arithmetic)."""
        k = self.key_of(spec)
        return Layout(pp=spec.pp, dp=self.gpus // (spec.pp * k.tp * k.cp), tp=k.tp, cp=k.cp,
                      ep=k.ep, etp=k.etp, gpus_per_node=self.gpus_per_node,
                      order=spec.rank_order)


@dataclass(frozen=True)
class PlanSpec:
    """Everything one plan chooses."""

    schedule: Schedule
    pp: int
    micro_batch_size: int
    num_microbatches: int
    stage_layers: tuple[int, ...]
    virtual_stages: int = 1  # chunks per device: v for interleaved, 2 for zbv, else 1
    rank_order: RankOrder = RankOrder.DP_INNER
    sharding: Sharding = Sharding.NONE
    recompute: Recompute = Recompute.NONE
    key: CostKey | None = None  # None: the request's first (PlanRequest.key_of)
    # blocks recomputed in full on each stage (memory.stage_recomputed_layers), which
    # replaces ``recompute``'s uniform choice; None: ``recompute`` on every block
    recompute_layers: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stage_layers", tuple(self.stage_layers))
        object.__setattr__(self, "virtual_stages",
                           chunks_per_device(self.schedule, self.virtual_stages))
        if self.recompute_layers is not None:
            object.__setattr__(self, "recompute_layers", tuple(self.recompute_layers))


@dataclass(frozen=True)
class Plan:
    pp: int
    dp: int
    tp: int
    schedule: Schedule
    virtual_stages: int
    micro_batch_size: int
    num_microbatches: int
    stage_layers: list[int]  # per global stage (pp * virtual_stages entries)
    step_time_s: float
    bubble_rate: float
    tokens_per_s: float
    peak_memory_bytes: list[float]  # per device (pipeline rank)
    memory_capacity_bytes: float
    ideal_step_s: float
    sim: SimResult = field(repr=False)
    exposed_p2p_s: float | None = None
    exposed_allreduce_s: float | None = None
    rank_order: RankOrder = RankOrder.DP_INNER
    sharding: Sharding = Sharding.NONE
    recompute: Recompute = Recompute.NONE
    memory: tuple[DeviceMemory, ...] = field(default=(), repr=False)
    key: CostKey = field(default_factory=CostKey)
    recompute_layers: tuple[int, ...] | None = None  # per stage (PlanSpec.recompute_layers)

    @property
    def spec(self) -> PlanSpec:
        return PlanSpec(self.schedule, self.pp, self.micro_batch_size, self.num_microbatches,
                        tuple(self.stage_layers), self.virtual_stages, self.rank_order,
                        self.sharding, self.recompute, self.key, self.recompute_layers)

    @property
    def cp(self) -> int:
        return self.key.cp

    @property
    def ep(self) -> int:
        return self.key.ep

    @property
    def etp(self) -> int:
        return self.key.etp

    @property
    def precision(self) -> Precision:
        return self.key.precision

    @property
    def grad_accum_steps(self) -> int:
        return self.num_microbatches

    @property
    def aligned(self) -> bool:
        return self.num_microbatches % self.pp == 0

    @property
    def efficiency(self) -> float:
        # at most 1: the step is never shorter than the ideal (float rounding aside)
        return min(1.0, self.ideal_step_s / self.step_time_s) if self.step_time_s > 0 else 0.0

    @property
    def headroom_bytes(self) -> float:
        return self.memory_capacity_bytes - max(self.peak_memory_bytes)


def with_comm(stages: Sequence[StageCost], comm: Sequence[ShardComm],
              first_share: Sequence[float]) -> list[StageCost]:
    """Fold per-micro-batch collectives into the ops they overlap.

    A gather or reduce-scatter of block i+1 runs behind the compute of block
    i, so an op takes ``max(compute, traffic)`` plus the share of the first
    block, which nothing hides (``first_share``: largest block / stage params).
    """
    out = []
    for s, c, share in zip(stages, comm, first_share, strict=True):
        if c.fwd_s == 0 and c.bwd_s == 0:
            out.append(s)
            continue
        fwd = max(s.fwd_s, c.fwd_s) + c.fwd_s * share
        bwd = max(s.bwd_s, c.bwd_s) + c.bwd_s * share
        out.append(dataclasses.replace(s, fwd_s=fwd, bwd_s=bwd))
    return out


@dataclass(frozen=True)
class StageLayout:
    """Per-stage quantities of one spec that do not need the simulator."""

    stages: list[StageCost]
    comm: list[ShardComm]
    params: list[float]
    largest: list[float]
    device_of: list[int]
    expert_params: list[float] = field(default_factory=list)  # the routed experts' part


def _both(a: ShardComm, b: ShardComm) -> ShardComm:
    """Dense and expert traffic of one stage, one after the other on its stream."""
    return ShardComm(a.fwd_s + b.fwd_s, a.bwd_s + b.bwd_s, a.start_s + b.start_s,
                     a.tail_s + b.tail_s)


def recompute_table(table: CostTable, req: PlanRequest, spec: PlanSpec) -> CostTable:
    """The table with the spec's recomputation: per stage when it states counts."""
    per_stage = ((spec.stage_layers, spec.recompute_layers)
                 if spec.recompute_layers is not None else None)
    return with_recompute(table, spec.recompute, req.recompute_every, per_stage)


def stage_layout(table: CostTable, req: PlanRequest, spec: PlanSpec) -> StageLayout:
    lay = req.layout(spec)
    # Megatron-core reduces dense gradients (and shards the distributed optimizer)
    # over data and context parallelism together (its data-parallel group with cp)
    dp = lay.dp * lay.cp
    group = lay.group(Dim.CP, Dim.DP)
    ar_link = table.ar_intra if group.intra else table.ar_inter
    bounds = stage_bounds(spec.stage_layers)
    params = [table.params(s, e) for s, e in bounds]
    # an empty stage (a Megatron-LM layout may state one) holds no parameters
    largest = [max((table.params(i, i + 1) for i in range(s, e)), default=0.0)
               for s, e in bounds]
    reshard = reshards(spec.sharding, spec.pp, req.fsdp_reshard_after_forward)
    rc = recompute_table(table, req, spec)
    compute = stage_costs(rc, spec.micro_batch_size, spec.stage_layers)
    experts = [table.expert_params(s, e) for s, e in bounds] if table.expert_param_bytes else []
    if not experts:
        comm = [stage_comm(spec.sharding, reshard, n, dp, ar_link, req.grad_bytes_factor,
                           req.overlap_grad_reduce, st.bwd_s + st.wgrad_s, st.fwd_s)
                for n, st in zip(params, compute, strict=True)]
    else:
        # routed experts' gradients reduce over the expert data-parallel group
        # (megatron-core's expert_data_parallel group: edp = tp cp dp / (ep etp))
        edp_group = lay.group(Dim.EDP)
        edp_link = table.ar_intra if edp_group.intra else table.ar_inter
        comm = [_both(stage_comm(spec.sharding, reshard, n - x, dp, ar_link,
                                 req.grad_bytes_factor, req.overlap_grad_reduce,
                                 st.bwd_s + st.wgrad_s, st.fwd_s),
                      stage_comm(spec.sharding, reshard, x, lay.edp, edp_link,
                                 req.grad_bytes_factor, req.overlap_grad_reduce,
                                 st.bwd_s + st.wgrad_s, st.fwd_s))
                for n, x, st in zip(params, experts, compute, strict=True)]
    share = [lg / n if n > 0 else 0.0 for lg, n in zip(largest, params, strict=True)]
    stages = with_comm(compute, comm, share)
    device_of = [stage_device(spec.schedule, spec.pp, k) for k in range(len(bounds))]
    return StageLayout(stages, comm, params, largest, device_of, experts)


def device_memory(
    req: PlanRequest, spec: PlanSpec, lay: StageLayout, activation_bytes: Sequence[float]
) -> list[DeviceMemory]:
    """Each pipeline rank's peak, by part (memory.py, sharding.py)."""
    p = spec.pp
    ranks = req.layout(spec)
    dp = ranks.dp * ranks.cp  # state sharded over the data-parallel group with cp
    per_param = state_bytes_per_param(spec.sharding, dp)
    reshard = reshards(spec.sharding, p, req.fsdp_reshard_after_forward)
    params = [0.0] * p
    largest = [0.0] * p
    experts = [0.0] * p
    for k, d in enumerate(lay.device_of):
        params[d] += lay.params[k]
        largest[d] = max(largest[d], lay.largest[k])
        if lay.expert_params:
            experts[d] += lay.expert_params[k]
    p2p = p2p_buffer_bytes([s.out_bytes for s in lay.stages], lay.device_of, p)
    # routed experts' state is sharded over the expert data-parallel group
    per_expert = state_bytes_per_param(spec.sharding, ranks.edp) if lay.expert_params else 0.0
    return [
        DeviceMemory(
            state_bytes=(params[d] * per_param if not lay.expert_params else
                         (params[d] - experts[d]) * per_param + experts[d] * per_expert),
            working_bytes=working_bytes(spec.sharding, reshard, params[d], largest[d]),
            activation_bytes=activation_bytes[d],
            p2p_bytes=p2p[d],
            reserve_bytes=req.reserve_bytes,
        )
        for d in range(p)
    ]


def evaluate(
    table: CostTable, req: PlanRequest, spec: PlanSpec, keep_events: bool = False
) -> Plan:
    """Simulate one fully specified plan (also used for configs and baselines)."""
    p, m = spec.pp, spec.num_microbatches
    ranks = req.layout(spec)
    dp = ranks.dp
    lay = stage_layout(table, req, spec)
    start = [0.0] * p
    for k, d in enumerate(lay.device_of):
        # a once-per-step gather overlaps the first forward, block by block
        c = lay.comm[k].start_s
        if c > 0:
            start[d] += max(0.0, c - lay.stages[k].fwd_s) + c * lay.largest[k] / lay.params[k]
    tail = [c.tail_s for c in lay.comm]
    if keep_events:
        sim = simulate(spec.schedule, p, m, lay.stages, v=spec.virtual_stages,
                       link=ranks.link(table.p2p_intra, table.p2p_inter),
                       blocking_send=req.blocking_send, dp_allreduce_s=tail,
                       device_start_s=start)
    else:
        ops = _ops(spec.schedule, p, m, spec.virtual_stages, tuple(lay.stages), tuple(start),
                   ranks, table.p2p_intra, table.p2p_inter, req.blocking_send)
        sim = with_allreduce(ops, tail)
    memory = device_memory(req, spec, lay, [d.peak_activation_bytes for d in sim.devices])
    work = sum(s.total_s for s in lay.stages) * m  # one replica's compute, device-seconds / tp
    return Plan(
        pp=p, dp=dp, tp=ranks.tp, schedule=spec.schedule, virtual_stages=spec.virtual_stages,
        micro_batch_size=spec.micro_batch_size, num_microbatches=m,
        stage_layers=list(spec.stage_layers),
        step_time_s=sim.step_time_s, bubble_rate=sim.bubble_rate,
        tokens_per_s=req.global_batch * table.seq_len / sim.step_time_s if sim.step_time_s else 0.0,
        peak_memory_bytes=[x.total_bytes for x in memory], memory_capacity_bytes=table.memory_bytes,
        ideal_step_s=work / p, sim=sim, rank_order=spec.rank_order, sharding=spec.sharding,
        recompute=spec.recompute, memory=tuple(memory), key=req.key_of(spec),
        recompute_layers=spec.recompute_layers,
    )


@functools.lru_cache(maxsize=512)
def _ops(schedule: Schedule, p: int, m: int, v: int, stages: tuple[StageCost, ...],
         start: tuple[float, ...], ranks: Layout, intra: Link, inter: Link,
         blocking_send: bool) -> SimResult:
    """The op timeline, shared by plans that differ only in their once-per-step
    data-parallel traffic (e.g. sharding none and zero1)."""
    return simulate_steady(schedule, p, m, stages, v=v, link=ranks.link(intra, inter),
                           blocking_send=blocking_send, device_start_s=start)


def explain(table: CostTable, req: PlanRequest, plan: Plan) -> Plan:
    """The plan with its exposed p2p and data-parallel times: re-simulated without each."""
    spec = plan.spec
    free = AllReduceLink(0.0, math.inf)
    quiet = dataclasses.replace(table, ar_intra=free, ar_inter=free)
    no_comm = simulate(plan.schedule, plan.pp, plan.num_microbatches,
                       stage_layout(quiet, req, spec).stages, v=plan.virtual_stages,
                       keep_events=False)
    with_p2p = evaluate(quiet, req, spec)
    return dataclasses.replace(
        plan,
        exposed_p2p_s=max(0.0, with_p2p.step_time_s - no_comm.step_time_s),
        exposed_allreduce_s=max(0.0, plan.step_time_s - with_p2p.step_time_s),
    )
