"""The split a candidate starts from, and what bounds it (search.py's helpers).

``min_bottleneck_within_memory`` finds the contiguous split that minimises
the bottleneck stage (compute plus its p2p send and gradient receive) within
each stage's memory: the stage's training state and working copies under the
plan's sharding, its in-flight micro-batches' activations in the schedule's
order and its p2p buffers (partition.py solves it exactly). The time-only
optimum is computed once per depth, micro-batch size, schedule, chunks, rank
order and recomputation and reused whenever it fits. ``surely_oom`` and the
split's ``lower_bound`` (bounds.py) let the search skip candidates without
simulating them.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from pptune.costmodel.bounds import lower_bound
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, optimizer_step_s, stage_layout
from pptune.costmodel.inflight import chunk_inflight, peak_inflight_per_stage
from pptune.costmodel.layout import Layout
from pptune.costmodel.memo import ByIdentity
from pptune.costmodel.memory import Recompute, embedding_holders, shared_embedding, with_recompute
from pptune.costmodel.partition import (
    SplitError,
    bottleneck,
    min_bottleneck_split,
    stage_bounds,
)
from pptune.costmodel.schedules import (
    OVERLAPPED,
    Schedule,
    chains,
    model_chunks,
    stage_chunk_map,
    stage_devices,
)
from pptune.costmodel.sharding import (
    reshards,
    traffic_in_ops,
)
from pptune.costmodel.sim_records import Link
from pptune.costmodel.simulate import StageCost
from pptune.costmodel.split_memory import (
    RangeMax,
    every_split_over,
    fitting_starts,
    range_max,
    surely_over,
)
from pptune.costmodel.table import CostTable, stage_costs


def per_param_bytes(req: PlanRequest, spec: PlanSpec) -> tuple[float, float]:
    """(bytes per parameter that scale with a stage, fixed working bytes) on one device,
    without Megatron-FSDP's queued gradient buckets, which are not linear in a stage's
    parameters (sharding.py): a lower bound."""
    ranks = req.layout(spec)
    dp = ranks.dp * ranks.cp  # state sharded over the data-parallel group with cp
    reshard = reshards(spec.sharding, spec.pp, req.fsdp_reshard_after_forward)
    per = req.state_per_param(spec.sharding, dp) + req.working(spec.sharding, reshard, 1.0, 0.0,
                                                               buckets=False)
    return per, 0.0 if not reshard else req.working(spec.sharding, reshard, 0.0, 1.0,
                                                    buckets=False)


def expert_per_param_bytes(req: PlanRequest, spec: PlanSpec) -> float:
    """Bytes per routed-expert parameter: their training state is sharded over the
    expert data-parallel group rather than data parallelism."""
    ranks = req.layout(spec)
    reshard = reshards(spec.sharding, spec.pp, req.fsdp_reshard_after_forward)
    return (req.state_per_param(spec.sharding, ranks.edp)
            + req.working(spec.sharding, reshard, 1.0, 0.0, buckets=False))


def layer_state_bytes(table: CostTable, req: PlanRequest, spec: PlanSpec) -> list[float]:
    """Each layer's training state (and kept working copies) on one device. The result is
    shared (kept by table and bytes per parameter): read it, do not change it."""
    per, _ = per_param_bytes(req, spec)
    if not table.expert_param_bytes:
        return _STATE.of((table,), (per, None), lambda: [x * per for x in table.layer_params])
    per_expert = expert_per_param_bytes(req, spec)
    experts = table.layer_expert_params
    return _STATE.of((table,), (per, per_expert), lambda: [
        (table.layer_params[i] - experts[i]) * per + experts[i] * per_expert
        for i in range(len(table.param_bytes))])


# layer_state_bytes' results: surely_oom asks them for every split it tests
_STATE: ByIdentity[list[float]] = ByIdentity(4096)


def surely_oom(table: CostTable, req: PlanRequest, spec: PlanSpec,
                stages: list[StageCost]) -> bool:
    """A lower bound on a device's peak (all its state, the largest in-flight
    activation set of any one chunk) already exceeds its memory; ``stages``
    per global stage."""
    p = spec.pp
    inflight = peak_inflight_per_stage(spec.schedule, p, spec.num_microbatches,
                                       spec.virtual_stages, spec.combined)
    per, _ = per_param_bytes(req, spec)
    state = layer_state_bytes(table, req, spec) if table.expert_param_bytes else []
    static = [0.0] * p
    act = [0.0] * p
    bounds = stage_bounds(spec.stage_layers)
    chunk_of = stage_chunk_map(spec.schedule, p, spec.virtual_stages)
    for k, (chunk, d) in enumerate(zip(chunk_of, stage_devices(spec.schedule, p, len(chunk_of)),
                                       strict=True)):
        s, e = bounds[chunk]
        static[d] += sum(state[s:e]) if state else table.params(s, e) * per
        act[d] = max(act[d], inflight[k] * stages[k].act_bytes)
    embedding, copies = embedding_holders(table, bounds)
    devices = stage_devices(spec.schedule, p, len(chunk_of))
    # an MTP module's embedding shared with the device's (memory.py)
    for d, shared in enumerate(shared_embedding(devices, [embedding[c] for c in chunk_of],
                                                [copies[c] for c in chunk_of], p)):
        static[d] -= per * shared
    usable = table.memory_bytes - req.reserve_bytes
    return any(static[d] + act[d] > usable for d in range(p))


@dataclass
class SplitCache:
    """What the splits of one cost table share across candidates (search.py keeps
    one a cost key): the splits, the recomputed tables, per-layer prefix sums."""

    splits: dict[tuple[object, ...], list[int] | None] = field(default_factory=dict)
    tables: dict[tuple[object, ...], CostTable] = field(default_factory=dict)
    sums: dict[tuple[object, ...], list[float]] = field(default_factory=dict)

    reruns: dict[tuple[object, ...], RangeMax | None] = field(default_factory=dict)
    # split_with_bound's compute-only bounds, by what they read: specs that differ in
    # sharding, rank order or recomputation bounded alike share one
    bounds: dict[tuple[object, ...], float] = field(default_factory=dict)
    # the request's own splits (own_splits.py), by model chunks
    own: dict[int, tuple[tuple[int, ...], ...]] = field(default_factory=dict)

    def rerun(self, recompute: Recompute, b: int, values: Sequence[float]) -> RangeMax | None:
        """``range_max`` of a recomputed table's ``rerun_bytes``; None where it has none."""
        key = (recompute, b)
        if key not in self.reruns:
            self.reruns[key] = range_max(values) if any(values) else None
        return self.reruns[key]

    def recomputed(self, table: CostTable, recompute: Recompute, every: int | None) -> CostTable:
        key = (recompute, every)
        if key not in self.tables:
            self.tables[key] = with_recompute(table, recompute, every)
        return self.tables[key]


def min_bottleneck_within_memory(
    table: CostTable, req: PlanRequest, spec: PlanSpec, cache: SplitCache
) -> list[int] | None:
    p, m, v, schedule = spec.pp, spec.num_microbatches, spec.virtual_stages, spec.schedule
    b = spec.micro_batch_size
    c = table.by_mb[b]
    n_stages = model_chunks(schedule, p, v)
    per_stage, inflight = chunk_inflight(schedule, p, m, v, spec.combined)
    experts = bool(table.expert_param_bytes)
    # the request's bytes a parameter: the same for every table of the cache's key
    bytes_key = ("per_param", spec.sharding, p, spec.rank_order)
    if bytes_key not in cache.sums:
        cache.sums[bytes_key] = [*per_param_bytes(req, spec),
                                 expert_per_param_bytes(req, spec) if experts else 0.0]
    per_param, fixed, per_expert = cache.sums[bytes_key]
    n = len(c.act_bytes)
    if ("largest",) not in cache.sums:
        cache.sums[("largest",)] = [max(table.layer_params)]
    largest = cache.sums[("largest",)][0]
    out = max(c.out_bytes[:-1]) if len(c.out_bytes) > 1 else 0.0
    # a device's memory shared evenly by its chunks, less its fixed working copies
    budget = (table.memory_bytes - req.reserve_bytes - table.dispatch_buffer_bytes
              - fixed * largest) / v
    # one stage holds a tied head and the embedding: their matrix once (table.py)
    tied = table.tied_param_bytes / table.param_dtype_bytes * per_param if n_stages == 1 else 0.0
    static_key = ("static", per_param, per_expert if experts else None, tied)
    if static_key not in cache.sums:
        static = [0.0]
        state = layer_state_bytes(table, req, spec) if experts else []
        for i in range(n):
            static.append(static[-1] + (state[i] if state else table.layer_params[i] * per_param))
        static[-1] -= tied
        cache.sums[static_key] = static
    static = cache.sums[static_key]
    act_key = ("act", spec.recompute, b)
    if act_key not in cache.sums:
        act = [0.0]
        for i in range(n):
            act.append(act[-1] + c.act_bytes[i])
        cache.sums[act_key] = act
    act = cache.sums[act_key]
    # the most one backward of a stage re-creates, where it recomputes (device_memory)
    rerun = cache.rerun(spec.recompute, b, c.rerun_bytes)

    def fits(k: int, s: int, e: int) -> bool:
        p2p = out * ((k > 0) + (k < n_stages - 1))
        return (static[e] - static[s] + inflight[k] * (act[e] - act[s]) + p2p
                + (rerun(s, e) if rerun is not None else 0.0) <= budget)

    # memory no split escapes: the time-only split need not be found (the same None
    # as below: with one chunk a device the split search's, else surely_oom's)
    usable = table.memory_bytes - req.reserve_bytes
    over = surely_over(static, act, inflight, out, budget, n, n_stages)
    if over if v == 1 else every_split_over(static[n] - static[0], act[n] - act[0],
                                            per_stage, p, n_stages, usable):
        return None
    key = (p, b, schedule, v, spec.rank_order, spec.recompute)
    splits = cache.splits
    if key not in splits:
        splits[key] = time_only_split(c.work_s(), n_stages, hop_extra(table, req, spec))
    free = splits[key]
    if free is None:
        return None
    if all(fits(k, s, e) for k, (s, e) in enumerate(stage_bounds(free))):
        return free  # the time-only optimum fits: no need to constrain it
    # what the memory allows each stage decides the split: shardings, micro-batch
    # counts and data-parallel sizes that allow the same stages share it
    fitted = None
    starts = None if over else fitting_starts(n, n_stages, static, act, inflight, out,
                                                budget, rerun)
    if starts is not None:
        fitted_key = (*key, starts)
        if fitted_key in splits:
            fitted = splits[fitted_key]
        else:
            try:
                fitted = min_bottleneck_split(c.work_s(), n_stages, hop_extra(table, req, spec),
                                              starts=starts)
            except SplitError:
                fitted = None
            splits[fitted_key] = fitted
    if fitted is not None:
        return fitted
    if v == 1:
        return None  # exact: one stage per device, the budget is the device's
    # Several chunks share a device: the even share per chunk was too strict.
    # Split for time alone; the simulated per-device peak decides the fit.
    return free


def any_split_bound(table: CostTable, req: PlanRequest, spec: PlanSpec,
                    cache: SplitCache) -> float:
    """A step time no split of ``spec`` beats (0 where this bound does not apply).

    The time-only split (cached, shared by shardings and micro-batch counts) has the
    least bottleneck B of any split, a stage's work plus its hop cost ``extra``; a
    device runs its chunks ``m / chains`` times each, so every split's busiest device
    works at least ``m / chains x (B - max extra)``. Per-stage recomputation is
    bounded by the work without it (``bound_recompute``); where an overlap may hide
    all-to-alls the ops are not the work this split weighs, so the bound is 0. A
    relative 1e-9 covers the rounding of sums taken in another order."""
    rb = bound_recompute(req, spec.recompute, spec.pp, spec.schedule)
    rc = cache.recomputed(table, rb, req.recompute_every)
    b = spec.micro_batch_size
    c = rc.by_mb[b]
    if c.has_a2a and (spec.a2a_overlap or spec.schedule in OVERLAPPED):
        return 0.0
    v = spec.virtual_stages
    key = (spec.pp, b, spec.schedule, v, spec.rank_order, rb)
    b_key = ("bottleneck", *key)
    if b_key not in cache.sums:
        extra = hop_extra(rc, req, spec)
        if key not in cache.splits:
            cache.splits[key] = time_only_split(
                c.work_s(), model_chunks(spec.schedule, spec.pp, v), extra)
        free = cache.splits[key]
        cache.sums[b_key] = [0.0 if free is None else
                             bottleneck(c.work_s(), free, extra) - max(extra)]
    return spec.num_microbatches / chains(spec.schedule) * cache.sums[b_key][0] * (1 - 1e-9)


def time_only_split(costs: list[float], n_stages: int,
                    extra: Sequence[float]) -> list[int] | None:
    """The min-bottleneck split without a memory test, or None (too few layers);
    shared by every cost key whose layers cost the same (e.g. rank orders whose
    hops cross the same links)."""
    found = _time_only(tuple(costs), n_stages, tuple(extra))
    return list(found) if found is not None else None


@functools.lru_cache(maxsize=4096)
def _time_only(costs: tuple[float, ...], n_stages: int, extra: tuple[float, ...]
               ) -> tuple[int, ...] | None:
    try:
        return tuple(min_bottleneck_split(costs, n_stages, extra))
    except SplitError:
        return None


def hop_extra(table: CostTable, req: PlanRequest, spec: PlanSpec) -> tuple[float, ...]:
    """A stage's extra cost: sending its output forward and receiving the gradient
    back (same size), over the link to the next stage's device. Cached by what it
    reads: recomputed tables and the cost keys' tables share their hops."""
    c = table.by_mb[spec.micro_batch_size]
    out = max(c.out_bytes[:-1]) if len(c.out_bytes) > 1 else 0.0
    return _hop_costs(req.layout(spec), spec.schedule, spec.pp, spec.virtual_stages, out,
                      table.p2p_intra, table.p2p_inter)


@functools.lru_cache(maxsize=4096)
def _hop_costs(ranks: Layout, schedule: Schedule, p: int, v: int, out: float, intra: Link,
               inter: Link) -> tuple[float, ...]:
    n_stages = model_chunks(schedule, p, v)
    extra = []
    dev = stage_devices(schedule, p, n_stages)
    for k in range(n_stages):
        a, z = dev[k], dev[min(k + 1, n_stages - 1)]
        hop = k < n_stages - 1 and a != z
        link = intra if ranks.same_node(a, z) else inter
        extra.append(2 * link.time_s(out) if hop else 0.0)
    return tuple(extra)


def split_with_bound(table: CostTable, req: PlanRequest, spec: PlanSpec,
                     cache: SplitCache) -> tuple[float, PlanSpec] | None:
    """(a tighter step-time bound, the spec with its min-bottleneck split), or None
    (nothing fits in memory)."""
    rc = cache.recomputed(table, spec.recompute, req.recompute_every)
    split = min_bottleneck_within_memory(rc, req, spec, cache)
    if split is None:
        return None
    return bound_split(table, req, replace(spec, stage_layers=tuple(split)), cache)


def bound_split(table: CostTable, req: PlanRequest, spec: PlanSpec,
                cache: SplitCache) -> tuple[float, PlanSpec] | None:
    """(a step-time bound of the split plan ``spec``, it), or None where several chunks
    a device surely outgrow its memory."""
    rc = cache.recomputed(table, spec.recompute, req.recompute_every)
    rb = bound_recompute(req, spec.recompute, spec.pp, spec.schedule)
    if not traffic_in_ops(spec.sharding, reshards(spec.sharding, spec.pp,
                                                  req.fsdp_reshard_after_forward)):
        # their data-parallel traffic runs once per step (start_s, tail_s), never inside
        # an op: the compute alone bounds the stages (evaluate.with_comm leaves them as
        # they are; FP8's amax waits, which it adds, only raise them)
        if spec.virtual_stages > 1 and surely_oom(rc, req, spec, compute_stages(rc, spec)):
            return None
        # all the bound reads: the compute of the split under the bound's recomputation
        key = (rb, spec.micro_batch_size, spec.stage_layers, spec.a2a_stream, spec.schedule,
               spec.pp, spec.virtual_stages, spec.num_microbatches, spec.combined)
        bound = cache.bounds.get(key)
        if bound is None:
            fastest = compute_stages(cache.recomputed(table, rb, req.recompute_every), spec)
            bound = cache.bounds[key] = lower_bound(spec.schedule, spec.pp,
                                                    spec.num_microbatches, fastest, spec.combined)
        return bound, spec
    bounded = replace(spec, recompute=rb)
    fastest = stage_layout(table, req, bounded).stages  # the spec's own: for memory alone
    if spec.virtual_stages > 1 and surely_oom(rc, req, spec, fastest if bounded == spec
                                              else stage_layout(table, req, spec).stages):
        return None
    return lower_bound(spec.schedule, spec.pp, spec.num_microbatches, fastest,
                       spec.combined), spec


def layout_bound(table: CostTable, req: PlanRequest, spec: PlanSpec) -> float:
    """A step time the split plan ``spec`` cannot beat, from the stages ``evaluate``
    simulates (their data-parallel traffic and FP8 amax waits inside the ops) with
    each stage's once-per-step data-parallel traffic after its gradients
    (bounds.lower_bound's ``tail_s``) and the optimizer step after that, as
    ``evaluate`` adds them. Tighter than the split's compute bound where a plan's
    traffic is exposed, and no cheaper than a stage layout (which ``evaluate`` reuses).

    With ``spec`` recomputing nothing it also bounds the same split recomputing any
    blocks of any stage: a recomputed forward lengthens its device's work and the
    backward its stage's gradient buckets overlap by the same seconds, and a bucket
    tail shrinks by at most the time its window grows (comm.overlapped_tail_s)."""
    lay = stage_layout(table, req, spec)
    return (lower_bound(spec.schedule, spec.pp, spec.num_microbatches, lay.stages,
                        spec.combined, [c.tail_s for c in lay.comm])
            + optimizer_step_s(table, req, spec, lay))


def compute_stages(rc: CostTable, spec: PlanSpec) -> list[StageCost]:
    """Per global stage, the compute alone (dualpipe: each chunk on two stages)."""
    chunks = stage_costs(rc, spec.micro_batch_size, spec.stage_layers, spec.a2a_stream)
    return [chunks[c] for c in stage_chunk_map(spec.schedule, spec.pp, spec.virtual_stages)]


def fitted_per_stage(req: PlanRequest, recompute: Recompute, pp: int,
                     schedule: Schedule) -> bool:
    """Whether the search fits full recomputation per stage for such a plan
    (stage_recompute.py): with or without a pipeline (Megatron-LM's --recompute-num-layers
    counts a pp = 1 rank's blocks as a stage's), not for dualpipe. The fit handles
    dualpipe (one count per chunk, binding both of its copies), but bounding every
    dualpipe candidate with full recomputation as if it recomputed nothing took the
    searches from 91 to 102 simulations (recommend --gpus 8) and from 100 to 397 (16 GPUs
    on a calibrated profile), for plans that rarely rank."""
    return (recompute is Recompute.FULL and schedule is not Schedule.DUALPIPE
            and req.per_stage_recompute())


def bound_recompute(req: PlanRequest, recompute: Recompute, pp: int,
                    schedule: Schedule) -> Recompute:
    """The recomputation a candidate's step-time bound assumes: none for full
    recomputation fitted per stage (its plan may recompute no block at all)."""
    return Recompute.NONE if fitted_per_stage(req, recompute, pp, schedule) else recompute
