"""`pptune recommend`: resolve the cost source, build the request, search.

A ``RecommendSpec`` is the command's option groups (``pptune.options``): the job and
search space (``PlanSpace``), the cost source (``CostOptions``) and how many plans to
keep. ``recommend`` resolves what was left open (the costs by ``pptune.costs.resolve``,
every schedule, sharding and recomputation when none was named, the model's batch) and
records the groups as resolved in the plan file's ``request`` (``PlanFileRequest``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import BLOCKWISE_RATE_NOTE, Fp8Recipe, reduces_amax
from pptune.costmodel.presets import MODELS
from pptune.costmodel.records import DEFAULT_TOP
from pptune.costmodel.schedules import DEFAULT_SCHEDULES
from pptune.costmodel.search import (
    PlanRequest,
    Recompute,
    Sharding,
    search,
)
from pptune.costmodel.sharding import moment_bytes
from pptune.costs.dims import cp_not_searched, fp8_flags_problem, search_keys
from pptune.costs.measured import tp_heads_problem
from pptune.costs.resolve import Costs, resolve
from pptune.costs.resolve import find as find_costs
from pptune.errors import BadInput
from pptune.frameworks.registry import ADAPTERS
from pptune.options.record import PlanFileRequest
from pptune.plan.attention_share import attention_note
from pptune.plan.forced import unforced
from pptune.plan.framework_search import FrameworkSearch, as_built, check_moments, parse_framework
from pptune.plan.gradients import gradients
from pptune.plan.headroom import winner_notes
from pptune.plan.jobs import Jobs, held, recorded
from pptune.plan.reserve import check_reserve, reserve_bytes, within_memory
from pptune.plan.spec import RecommendRun, RecommendSpec, check_spec, request_for, with_moments
from pptune.plan.what_if import (
    MOE_HOST_NOTE,
    batch_tokens_note,
    batch_what_if,
    dispatch_what_if,
    fp8_gather_what_if,
    margin_note,
    memory_what_if,
    nearby_batch,
)
from pptune.plan.written import written_kernels
from pptune.report.domain_note import domain_note, host_note, rack_host, wider_note

__all__ = ["DEFAULT_GLOBAL_BATCH", "RecommendRun", "RecommendSpec", "check_spec", "recommend",
           "request_for"]

GIB = 1024**3
# samples per step when neither --global-batch nor the profile names one: the
# batch pptune assumes for a Hugging Face config (pptune.costs.modelspec)
DEFAULT_GLOBAL_BATCH = 512


def recommend(spec: RecommendSpec, costs: Costs | None = None) -> RecommendRun:
    """The search over ``costs`` (None: resolved from ``spec.costs`` with every layout its
    flags allow, dims.search_keys; tune passes its own, priced at the one layout it runs).
    ``spec.framework``: only the plans its files state (plan/framework_search.py)."""
    check_spec(spec)
    if spec.framework is not None:
        check_moments(spec.framework, (spec.space.exp_avg_dtype.value,
                                       spec.space.exp_avg_sq_dtype.value), "--framework")
    s = spec.space
    compression, widths, c, held_note = gradients(  # as its files state it
        s.grad_compression, spec.files_of, "--framework" if spec.framework else "--emit",
        spec.costs, spec.jobs_gradients)
    s = replace(s, grad_compression=compression)
    spec = replace(spec, costs=c, space=s)
    recomputes = s.recompute or tuple(Recompute)
    shardings = s.sharding or tuple(Sharding)
    if s.sharded_optimizer:
        if s.sharding is not None and shardings != (Sharding.ZERO1,):
            raise BadInput("--sharded-optimizer means --sharding zero1; drop one of them")
        shardings = (Sharding.ZERO1,)
    shardings = with_moments(shardings, s)
    given = costs is not None  # tune prices one layout, the one its trials run
    ranked: list[str] = []
    if costs is None:
        costs = resolve(spec.costs, sizes=s.micro_batch_sizes, search=True,
                        gpus_per_node=s.gpus_per_node, gpus=s.gpus)
        chosen, ranked = written_kernels(
            spec.files_of, spec.costs, costs.measured, sequence=spec.framework is not None,
            model=costs.profile.model.name, shape=costs.shape, versions=spec.versions)
        if chosen:
            spec = replace(spec, costs=replace(spec.costs, **chosen))
            costs = resolve(spec.costs, sizes=s.micro_batch_sizes, search=True,
                            gpus_per_node=s.gpus_per_node, gpus=s.gpus)
        costs, built = as_built(spec.framework, costs, lambda shape: find_costs(
            spec.costs, sizes=s.micro_batch_sizes, shape=shape, search=True,
            gpus_per_node=s.gpus_per_node, gpus=s.gpus))
        ranked += [built] if built else []
    reserve = reserve_bytes(s, costs)
    check_reserve(reserve, costs.table.memory_bytes, costs.profile.device.name, s.reserve_gib,
                  s.max_memory)
    if s.max_memory is not None:
        costs = within_memory(costs, s.max_memory)
    notes = [*ranked, *costs.notes, f"costs: {costs.described}", *filter(None, [held_note])]
    table = costs.table
    gpn = s.gpus_per_node or (costs.gpu.gpus_per_node if costs.gpu is not None else 8)
    keys = ((costs.key,) if given or costs.shape is None or costs.gpu is None
            else search_keys(costs.options or spec.costs, costs.shape, costs.gpu, s.gpus, gpn,
                             spec.kv_heads))
    why = tp_heads_problem(costs.profile, costs.key.tp, costs.origin, spec.kv_heads) \
        if costs.measured and not given else None
    # a measured profile's model, by the framework's rule (analytic: search_keys); FP8
    # flags where no key is FP8
    why = why or fp8_flags_problem(spec.costs, keys)
    if why:
        raise BadInput(why)
    within = None if spec.framework is None else FrameworkSearch(
        ADAPTERS[parse_framework(spec.framework, "--framework")], table.seq_len,
        costs.profile.model.name, costs.shape or MODELS.get(costs.profile.model.name))
    if within is not None:  # BadInput when its files state none of the keys
        notes += [note for note in [within.dropped(keys), within.restated(keys)] if note]
        keys = within.keys(keys)
    priced = costs.options or spec.costs  # a calibrated profile's jobs' choices filled in
    jobs = Jobs.of(recorded(priced, costs, keys), tuple(table.names), costs.origin,
                   costs.shape, costs, table.seq_len,
                   (s.exp_avg_dtype.value, s.exp_avg_sq_dtype.value), held(spec.costs, s.pp),
                   s.grad_compression, spec.versions)  # as that release runs them
    if within is not None:  # its plans priced as its files run them
        within = replace(within, jobs=jobs, versions=spec.versions)  # and releases
    searching = within or search
    sizes = s.micro_batch_sizes or tuple(sorted(table.by_mb))
    schedules = s.schedules or DEFAULT_SCHEDULES
    global_batch = s.global_batch or costs.profile.model.global_batch
    if global_batch is None:
        global_batch = DEFAULT_GLOBAL_BATCH
        notes.append(f"the profile names no global batch; planning for {global_batch} samples "
                     "per step (pass --global-batch to change it)")
    batch_note = (f"a Hugging Face config names no global batch; planned for {global_batch} "
                  "samples per step, pptune's default (pass --global-batch to plan for your "
                  "run's)") if s.global_batch is None and spec.costs.hf_config is not None else None
    if s.reserve_gib is None and costs.reserve_bytes is not None:
        notes.append(f"reserve: {reserve / GIB:.2f} GiB a GPU, what the calibrated profile's "
                     "jobs held beyond pptune's tensors (--reserve-gib overrides)")
    req = PlanRequest(
        gpus=s.gpus, global_batch=global_batch, tp=keys[0].tp, gpus_per_node=gpn,
        cost_keys=keys, overlap_param_gather=s.overlap_param_gather,
        fp8_param_gather=priced.fp8_params,
        fp8_amax_reduction=reduces_amax(priced.recipe.value),
        schedules=tuple(schedules), virtual_stages=s.virtual_stages,
        micro_batch_sizes=sizes, pp=s.pp or None,
        shardings=shardings, recomputes=recomputes,
        recompute_every=s.recompute_every, reserve_bytes=reserve,
        **widths, blocking_send=s.blocking_send, top=spec.top, rank_top=DEFAULT_TOP,
        overlap_grad_reduce=s.overlap_grad_reduce, pipeline_margin=s.pipeline_margin,
        moment_bytes=moment_bytes(s.exp_avg_dtype, s.exp_avg_sq_dtype),
    )
    tables = costs.table_for
    result = searching(tables, req)
    requested = global_batch
    if not result.plans and result.rejected.get("out_of_memory", 0) == 0:
        alt = nearby_batch(tables, table, req, searching)
        if alt is not None:
            req, result = alt
            global_batch = req.global_batch
            change = (global_batch - requested) / requested
            result.notes.insert(0, (
                f"no plan divides global batch {requested}; changed it to {global_batch} "
                f"({change:+.1%}) so that one does. The learning rate may need rescaling "
                "(e.g. linearly with the batch, Goyal et al. 2017)"
            ))
    groups = () if within is None else tuple(within.groups(req))
    if within is not None:  # what its files state no plan of, and what its release does not
        notes += [n for n in (within.narrowed(req, groups), within.released(req)) if n]
    if batch_note is not None:
        result.notes.insert(0, batch_note)
    model = costs.profile.model
    if (s.global_batch is None and spec.costs.seq_len is not None and model.name in MODELS
            and spec.costs.hf_config is None and not costs.measured):
        hint = batch_tokens_note(model.name, global_batch, table.seq_len,
                                 MODELS[model.name].seq_len)
        if hint:
            result.notes.insert(0, hint)
    if result.passed_over is not None:
        result.notes.append(margin_note(result, s.pipeline_margin))
    if result.rejected.get("out_of_memory", 0):
        hint = memory_what_if(tables, req, result, searching)
        if hint:
            result.notes.append(hint)
    hint = batch_what_if(tables, req, result, s.global_batch is not None, searching)
    if hint:
        result.notes.append(hint)
    best_req = request_for(groups, req, result.plans[0].key) if result.plans else req
    if not given:
        hint = dispatch_what_if(spec.costs, s.gpus, costs, best_req, result)
        if hint:
            result.notes.append(hint)
    gathered = searching if within is None else replace(within, jobs=replace(
        jobs, options=replace(jobs.options, fp8_param_gather=True)))  # as its tables
    # Megatron-LM's flag (and pptune's key): no what-if for a framework that cannot state it
    unstated = within is not None and not within.adapter.states_fp8_param_gather
    # as priced: a calibration's jobs may have stated --fp8-param-gather (costs.options)
    hint = None if given or costs.measured or unstated else fp8_gather_what_if(
        costs.options or spec.costs, req, result, lambda o: resolve(o, sizes=sizes, search=True,
                                                   gpus_per_node=gpn, gpus=s.gpus).table_for,
        gathered)
    if hint:
        result.notes.append(hint)
    forced = None
    if not given and costs.shape is not None and costs.gpu is not None and not costs.measured:
        forced = unforced(spec.costs, costs.shape, costs.gpu, req, result, costs.table_for,
                          searching, spec.kv_heads)
        hint = forced.note(result.plans[0]) if forced is not None else None
        result.notes += [hint] if hint else []
    if not given and spec.costs.cp is None and costs.shape is not None and not costs.measured:
        hint = cp_not_searched(costs.shape, costs.options or spec.costs, s.gpus)
        if hint:
            result.notes.append(hint)
    if (result.plans and costs.shape is not None and costs.shape.moe and not costs.measured
            and costs.profile.calibration is None):
        result.notes.append(MOE_HOST_NOTE)
    if (not costs.measured and priced.recipe is Fp8Recipe.BLOCKWISE
            and any(k.precision is Precision.FP8 for k in keys)):
        result.notes.append(BLOCKWISE_RATE_NOTE)
    c = priced
    if result.plans and not costs.measured:
        best = result.plans[0]
        hint = attention_note(costs.table_for(best.key), best_req, best, costs.gpu,
                              c.attention or Attention.SDPA)
        if hint:
            result.notes.append(hint)
    for hint in (domain_note(s.gpus, gpn, "NVLink domain" if gpn > 8 else "node",
                             rack_host(costs.gpu, gpn)),
                 host_note(s.gpus_per_node, costs.gpu) if costs.gpu is not None else None,
                 wider_note(s.gpus_per_node, costs.gpu) if costs.gpu is not None else None,
                 *winner_notes(result, reserve, table.memory_bytes, s.max_memory, global_batch)):
        result.notes += [hint] if hint else []
    request = PlanFileRequest(
        costs=jobs.options,
        space=replace(s, global_batch=global_batch, micro_batch_sizes=sizes, gpus_per_node=gpn,
                      schedules=_of(groups, "schedules") or tuple(schedules),
                      recompute=_of(groups, "recomputes") or recomputes,
                      sharding=_of(groups, "shardings") or shardings,
                      reserve_gib=s.reserve_gib if costs.reserve_bytes is None else reserve / GIB),
        global_batch_requested=requested,
        framework=None if within is None else within.adapter.name,
    )
    return RecommendRun(result, table, req, list(table.names), global_batch, costs.origin,
                        request, notes, costs.shape,
                        _times(costs.model_flops_per_token, global_batch * table.seq_len),
                        _peaks(costs), costs, groups, jobs, forced)


def _of(groups: Sequence[PlanRequest], name: str) -> tuple[Any, ...]:
    """The choices the groups searched of one field ("schedules", ...), in their order."""
    return tuple(dict.fromkeys(x for g in groups for x in getattr(g, name)))


def _peaks(costs: Costs) -> dict[Precision, float] | float | None:
    """The GPU's dense peak by GEMM precision (MFU is reported against the plan's own)."""
    bf16 = costs.profile.device.peak_flops
    if costs.gpu is None or bf16 is None:
        return bf16
    out = {p: bf16 for p in (Precision.BF16, Precision.FP16)}
    if costs.gpu.fp8_peak_flops is not None:
        out |= {Precision.FP8: costs.gpu.fp8_peak_flops, Precision.MXFP8: costs.gpu.fp8_peak_flops}
    if costs.gpu.fp4_peak_flops is not None:
        out[Precision.NVFP4] = costs.gpu.fp4_peak_flops
    return out


def _times(a: float | None, b: float) -> float | None:
    return None if a is None else a * b
