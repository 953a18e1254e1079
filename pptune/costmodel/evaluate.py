"""One fully specified plan -> its simulated step time and memory per GPU.

A ``PlanSpec`` names everything a plan chooses (schedule, depth, micro-batch
size and count, chunks, split, rank order, sharding, recomputation, the
all-to-all overlap); the ``PlanRequest`` holds the job (GPUs, batch, tp,
links, limits); both and the ``Plan`` are in records.py. ``evaluate``
simulates the spec and returns a frozen ``Plan``; ``explain`` returns a new
``Plan`` with the exposed p2p and data-parallel times filled in.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from pptune.costmodel import amax, optimizer, precision
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.dp_links import both_copies, dp_link
from pptune.costmodel.inflight import activation_peaks, peak_inflight_per_stage
from pptune.costmodel.layout import Dim, Layout
from pptune.costmodel.memo import ByIdentity
from pptune.costmodel.memory import (
    DeviceMemory,
    Recompute,
    embedding_holders,
    p2p_buffer_bytes,
    shared_embedding,
    uniform_groups,
    with_recompute,
)
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.records import (
    DEFAULT_VIRTUAL_STAGES,
    Plan,
    PlanRequest,
    PlanSpec,
)
from pptune.costmodel.schedules import (
    Schedule,
    chains,
    stage_chains,
    stage_chunk_map,
    stage_device,
    stage_devices,
)
from pptune.costmodel.sharding import (
    MEGATRON_GRAD_BYTES,
    ShardComm,
    Sharding,
    reshards,
)
from pptune.costmodel.simulate import (
    Link,
    SimResult,
    StageCost,
    simulate,
    simulate_steady,
    with_allreduce,
)
from pptune.costmodel.stage_traffic import Reduction, stage_traffic
from pptune.costmodel.table import CostTable, stage_costs

__all__ = ["CANCELLED", "DEFAULT_VIRTUAL_STAGES", "Plan", "PlanRequest", "PlanSpec",
           "StageLayout", "device_memory", "evaluate", "explain", "exposed", "recompute_table",
           "stage_layout", "with_comm"]


def with_comm(stages: Sequence[StageCost], comm: Sequence[ShardComm],
              first_share: Sequence[float], sm_share: float = 0.0) -> list[StageCost]:
    """Fold per-micro-batch collectives into the ops they overlap.

    A gather or reduce-scatter of block i+1 runs behind the work of block
    i, so an op takes ``max(work, traffic)`` plus the share of the first
    block, which nothing hides (``first_share``: largest block / stage params).
    The work is the op's compute and its all-to-alls, which stay on the
    communication stream (``fwd_comm_s`` / ``bwd_comm_s``). While a collective
    runs it holds ``sm_share`` of the SMs (collectives.Fabric: one CTA a NCCL
    channel), so the compute beside ``traffic`` seconds of it takes ``traffic x
    sm_share`` longer, as Transformer Engine's overlap prices a GEMM beside its
    communication kernel (tp_overlap.shared): a plain op's time is ``max(compute +
    traffic x sm_share + all-to-all, traffic) + first share``.
    """
    out = []
    for s, c, share in zip(stages, comm, first_share, strict=True):
        if c.fwd_s == 0 and c.bwd_s == 0:
            out.append(s)
            continue
        fwd = (max(s.fwd_s + c.fwd_s * sm_share + s.fwd_comm_s, c.fwd_s) + c.fwd_s * share
               - s.fwd_comm_s)
        bwd = (max(s.bwd_s + c.bwd_s * sm_share + s.bwd_comm_s, c.bwd_s) + c.bwd_s * share
               - s.bwd_comm_s)
        out.append(s.retimed(fwd, bwd))
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
    cache: list[float] = field(default_factory=list)  # per stage, precision.py
    # per stage: the embedding's parameters where the stage holds the embedding, and its
    # MTP modules' copies of it (shared_embedding)
    embedding: list[float] = field(default_factory=list)
    mtp_copies: list[int] = field(default_factory=list)
    dispatch_buffer_bytes: float = 0.0  # on a device with an expert layer (CostTable's)


def recompute_table(table: CostTable, req: PlanRequest, spec: PlanSpec) -> CostTable:
    """The table with the spec's recomputation: per stage when it states counts."""
    per_stage = ((spec.stage_layers, spec.recompute_layers)
                 if spec.recompute_layers is not None else None)
    groups = (uniform_groups(table.names, spec.stage_layers, req.recompute_group)
              if req.recompute_group > 1 and spec.recompute is Recompute.FULL else None)
    return with_recompute(table, spec.recompute, req.recompute_every, per_stage, groups)


# stage_layout's results by (table, request, spec): the search asks for a spec's layout
# when it bounds it and again when it simulates it
_LAYOUTS: ByIdentity[StageLayout] = ByIdentity(8192)


def stage_layout(table: CostTable, req: PlanRequest, spec: PlanSpec) -> StageLayout:
    """Per global stage (schedules.stage_chunk_map: under dualpipe each chunk's
    figures twice, for its down and its up copy). The result is shared: read it,
    do not change it."""
    # keyed by what it reads: a spec's all-to-all overlap only as ``a2a_stream``, which
    # 1f1b and interleaved-1f1b plans with and without the combined order share (a fifth
    # of DeepSeek-V3 FP8 --framework megatron's 29,813 layouts on 256 GPUs); every other
    # PlanSpec field is in the key (tests/costmodel/test_layout_memo.py)
    key = (spec.schedule, spec.pp, spec.micro_batch_size, spec.num_microbatches,
           spec.stage_layers, spec.virtual_stages, spec.rank_order, spec.sharding,
           spec.recompute, spec.key, spec.a2a_stream, spec.recompute_layers)
    return _LAYOUTS.of((table, req), key, lambda: _stage_layout(table, req, spec))


def _stage_layout(table: CostTable, req: PlanRequest, spec: PlanSpec) -> StageLayout:
    lay = req.layout(spec)
    # Megatron-core reduces dense gradients (and shards the distributed optimizer)
    # over data and context parallelism together (its data-parallel group with cp);
    # dualpipe holds each chunk twice (ranks c and pp-1-c), and the two copies
    # must end the step with one gradient: its reduction spans both, 2 x dp ranks
    copies = chains(spec.schedule)
    together = copies == 1 or lay.same_node(0, spec.pp - 1)
    dp = lay.dp * lay.cp * copies
    ar_link = dp_link(table, spec.sharding, both_copies(lay.group(Dim.CP, Dim.DP), copies,
                                                         together), dp, req.grad_bytes_factor)
    key = req.key_of(spec)
    gather_bytes = precision.param_gather_bytes(key.precision, req.fp8_param_gather)
    bounds = stage_bounds(spec.stage_layers)
    params = [table.params(s, e) for s, e in bounds]
    # an empty stage (a Megatron-LM layout may state one) holds no parameters
    each = table.layer_params
    largest = [max(each[s:e], default=0.0) for s, e in bounds]
    reshard = reshards(spec.sharding, spec.pp, req.fsdp_reshard_after_forward)
    rc = recompute_table(table, req, spec)
    compute = stage_costs(rc, spec.micro_batch_size, spec.stage_layers, spec.a2a_stream)

    def over(ranks: int, link: AllReduceLink) -> Reduction:
        return Reduction(spec.sharding, reshard, ranks, link, req.grad_bytes_factor,
                         req.overlap_grad_reduce, gather_bytes, req.overlap_param_gather)

    experts = [table.expert_params(s, e) for s, e in bounds] if table.expert_param_bytes else []
    expert = None
    if experts:
        # routed experts' gradients reduce over the expert data-parallel group
        # (megatron-core's expert_data_parallel group: edp = tp cp dp / (ep etp))
        edp = lay.edp * copies
        expert = over(edp, dp_link(table, spec.sharding, both_copies(
            lay.group(Dim.EDP), copies, together), edp, req.grad_bytes_factor))
    comm = stage_traffic(over(dp, ar_link), expert, params, experts, compute)
    share = [lg / n if n > 0 else 0.0 for lg, n in zip(largest, params, strict=True)]
    stages = with_comm(compute, comm, share,
                       table.fabric.sm_share if table.fabric is not None else 0.0)
    if amax.applies(key.precision, req.fp8_amax_reduction):
        # delayed scaling: every chunk pass waits on its amax all-reduce (amax.py)
        group = lay.group(Dim.TP, Dim.CP, Dim.DP)
        stages = amax.with_reductions(
            stages, amax.block_counts(table.blocks_before, bounds),
            lambda n: amax.reduction_s(n, group, table.fabric, table.ar_intra, table.ar_inter))
    cache = ([sum(table.cache_bytes[s:e]) for s, e in bounds] if table.cache_bytes
             else [0.0] * len(bounds))
    embedding, mtp_copies = embedding_holders(table, bounds)
    chunk_of = stage_chunk_map(spec.schedule, spec.pp, spec.virtual_stages)
    if chunk_of != list(range(len(bounds))):  # dualpipe: each chunk on two stages
        stages = [stages[c] for c in chunk_of]
        comm = [comm[c] for c in chunk_of]
        params = [params[c] for c in chunk_of]
        largest = [largest[c] for c in chunk_of]
        experts = [experts[c] for c in chunk_of] if experts else []
        cache = [cache[c] for c in chunk_of]
        embedding = [embedding[c] for c in chunk_of]
        mtp_copies = [mtp_copies[c] for c in chunk_of]
    device_of = list(stage_devices(spec.schedule, spec.pp, len(chunk_of)))
    return StageLayout(stages, comm, params, largest, device_of, experts, cache, embedding,
                       mtp_copies, table.dispatch_buffer_bytes)


def device_memory(
    req: PlanRequest, spec: PlanSpec, lay: StageLayout, activation_bytes: Sequence[float]
) -> list[DeviceMemory]:
    """Each pipeline rank's peak, by part (memory.py, sharding.py). Its activations are
    ``activation_bytes`` held and, where it recomputes, the most one backward of its
    stages re-creates (``StageCost.rerun_bytes``): an upper bound, exact where the
    peak falls on a backward (1F1B and GPipe free nothing before it)."""
    p = spec.pp
    ranks = req.layout(spec)
    dp = ranks.dp * ranks.cp  # state sharded over the data-parallel group with cp
    per_param = req.state_per_param(spec.sharding, dp)
    # routed experts' state is sharded over the expert data-parallel group
    per_expert = req.state_per_param(spec.sharding, ranks.edp) if lay.expert_params else 0.0
    reshard = reshards(spec.sharding, p, req.fsdp_reshard_after_forward)
    params = [0.0] * p
    largest = [0.0] * p
    experts = [0.0] * p
    cache = [0.0] * p
    rerun = [0.0] * p
    for k, d in enumerate(lay.device_of):
        rerun[d] = max(rerun[d], lay.stages[k].rerun_bytes)
        params[d] += lay.params[k]
        largest[d] = max(largest[d], lay.largest[k])
        if lay.expert_params:
            experts[d] += lay.expert_params[k]
        cache[d] += lay.cache[k] if lay.cache else 0.0
    p2p = p2p_buffer_bytes([s.out_bytes for s in lay.stages], lay.device_of, p)
    shared = shared_embedding(lay.device_of, lay.embedding, lay.mtp_copies, p)
    params = [x - y for x, y in zip(params, shared, strict=True)]
    return [
        DeviceMemory(
            state_bytes=((params[d] - experts[d]) * per_param + experts[d] * per_expert
                         + cache[d]),
            working_bytes=req.working(spec.sharding, reshard, params[d], largest[d]),
            activation_bytes=activation_bytes[d] + rerun[d],
            p2p_bytes=p2p[d], reserve_bytes=req.reserve_bytes, fp8_copies_bytes=cache[d],
            dispatch_buffer_bytes=lay.dispatch_buffer_bytes if experts[d] else 0.0,
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
                       device_start_s=start, combined=spec.combined)
    else:
        ops = _ops(spec.schedule, p, m, spec.virtual_stages, tuple(lay.stages), tuple(start),
                   _hops(spec.schedule, p, spec.virtual_stages, ranks), table.p2p_intra,
                   table.p2p_inter, req.blocking_send, spec.combined)
        sim = with_allreduce(ops, tail)
    memory = device_memory(req, spec, lay, [d.peak_activation_bytes for d in sim.devices])
    # one replica's work: the time its devices are busy, all-to-alls included unless an
    # F&B pair hides them
    work = sum(d.busy_s for d in sim.devices)
    opt_s = optimizer_step_s(table, req, spec, lay)
    step_s = sim.step_time_s + opt_s
    return Plan(
        pp=p, dp=dp, tp=ranks.tp, schedule=spec.schedule, virtual_stages=spec.virtual_stages,
        micro_batch_size=spec.micro_batch_size, num_microbatches=m,
        stage_layers=list(spec.stage_layers),
        step_time_s=step_s, bubble_rate=sim.bubble_rate,
        tokens_per_s=req.global_batch * table.seq_len / step_s if step_s else 0.0,
        peak_memory_bytes=[x.total_bytes for x in memory], memory_capacity_bytes=table.memory_bytes,
        ideal_step_s=work / p, sim=sim, rank_order=spec.rank_order, sharding=spec.sharding,
        recompute=spec.recompute, memory=tuple(memory), key=req.key_of(spec), optimizer_s=opt_s,
        a2a_overlap=spec.a2a_overlap, recompute_layers=spec.recompute_layers,
        recompute_modules=recompute_table(table, req, spec).recompute_modules,
    )


def over_memory(table: CostTable, req: PlanRequest, spec: PlanSpec) -> bool:
    """Whether the plan's peak exceeds the device's memory, known without simulating it:
    its activations are held in the schedule's op order (schedules.activation_peaks,
    the simulator's own accounting), which timing cannot change. A relative 1e-9
    margin leaves a peak within rounding of the capacity to the simulation."""
    lay = stage_layout(table, req, spec)
    # first with every stage at its most in flight at once: a peak no order exceeds
    most = [0.0] * spec.pp
    inflight = peak_inflight_per_stage(spec.schedule, spec.pp, spec.num_microbatches,
                                       spec.virtual_stages, spec.combined)
    for k, d in enumerate(lay.device_of):
        most[d] += inflight[k] * lay.stages[k].act_bytes
    cap = table.memory_bytes * (1 + 1e-9)
    if max(x.total_bytes for x in device_memory(req, spec, lay, most)) <= cap:
        return False
    held = activation_peaks(spec.schedule, spec.pp, spec.num_microbatches,
                            spec.virtual_stages, [s.act_bytes for s in lay.stages],
                            spec.combined)
    return max(x.total_bytes for x in device_memory(req, spec, lay, held)) > cap


def optimizer_step_s(table: CostTable, req: PlanRequest, spec: PlanSpec,
                     lay: StageLayout) -> float:
    """The slowest pipeline rank's Adam step after its last backward (optimizer.py):
    its shard of the state is ``1 / (dp x cp)`` of its parameters under any sharding
    of the optimizer state, all of them without."""
    if not req.optimizer_step or table.hbm_bytes_per_s is None:
        return 0.0
    ranks = req.layout(spec)
    shards = ranks.dp * ranks.cp if spec.sharding is not Sharding.NONE else 1
    local = [0.0] * spec.pp
    for k, d in enumerate(lay.device_of):
        local[d] += lay.params[k]
    grad = req.grad_buffer_bytes or MEGATRON_GRAD_BYTES
    return max(optimizer.step_s(optimizer.AdamStep(n / shards, n, req.moment_bytes, grad),
                                table.hbm_bytes_per_s) for n in local)


@functools.lru_cache(maxsize=4096)
def _ops(schedule: Schedule, p: int, m: int, v: int, stages: tuple[StageCost, ...],
         start: tuple[float, ...], hops: tuple[tuple[int, int, bool], ...], intra: Link,
         inter: Link, blocking_send: bool, combined: bool) -> SimResult:
    """The op timeline, shared by plans that differ only in their once-per-step
    data-parallel traffic (e.g. sharding none and zero1) or in a rank layout whose
    pipeline hops cross the same links (``_hops``: e.g. another data-parallel size)."""
    inside = {(a, z): same for a, z, same in hops}
    return simulate_steady(schedule, p, m, stages, v=v,
                           link=lambda a, z: intra if inside[(a, z)] else inter,
                           blocking_send=blocking_send, device_start_s=start,
                           combined=combined)


@functools.lru_cache(maxsize=4096)
def _hops(schedule: Schedule, p: int, v: int, ranks: Layout) -> tuple[tuple[int, int, bool], ...]:
    """The device pairs the schedule's stages send between (each way), and whether
    each pair shares a node: all of the layout the op timeline depends on."""
    out = set()
    for chain in stage_chains(schedule, p, v):
        for a, b in itertools.pairwise(chain):
            da, db = stage_device(schedule, p, a), stage_device(schedule, p, b)
            if da != db:
                out |= {(da, db, ranks.same_node(da, db)), (db, da, ranks.same_node(db, da))}
    return tuple(sorted(out))


# A part not there (no sends at pp 1) leaves, as two simulated steps' difference, a float
# residue (7.5e-15 s of p2p in a 45 s step): doubles round each of at most 2,000,000 sums
# (candidates.MAX_SIMULATED_OPS) by 1.1e-16 of it, < 2.2e-10 in all; 1e-9 of the step is
# above that and far under any part priced (an NCCL send's microseconds).
CANCELLED = 1e-9


def exposed(with_s: float, without_s: float, step_s: float) -> float:
    """What a part adds to the step, ``with_s - without_s``: 0 within rounding of nothing
    (``CANCELLED``), never negative."""
    diff = with_s - without_s
    return diff if diff > CANCELLED * abs(step_s) else 0.0


def explain(table: CostTable, req: PlanRequest, plan: Plan) -> Plan:
    """The plan with its exposed p2p, data-parallel and FP8 amax times (``exposed``)."""
    spec = plan.spec
    free = AllReduceLink(0.0, math.inf)
    quiet = dataclasses.replace(table, ar_intra=free, ar_inter=free, fabric=None)
    bare = dataclasses.replace(req, fp8_amax_reduction=False)
    no_comm = simulate(plan.schedule, plan.pp, plan.num_microbatches,
                       stage_layout(quiet, bare, spec).stages, v=plan.virtual_stages,
                       keep_events=False, combined=spec.combined)
    with_p2p = evaluate(quiet, bare, spec)
    amax_s = 0.0
    if amax.applies(req.key_of(spec).precision, req.fp8_amax_reduction):
        amax_s = exposed(plan.step_time_s, evaluate(table, bare, spec).step_time_s,
                         plan.step_time_s)
    return dataclasses.replace(
        plan,
        exposed_p2p_s=exposed(with_p2p.step_time_s, no_comm.step_time_s + plan.optimizer_s,
                              plan.step_time_s),
        exposed_allreduce_s=exposed(plan.step_time_s, with_p2p.step_time_s + amax_s,
                                    plan.step_time_s),
        exposed_amax_s=amax_s,
    )
