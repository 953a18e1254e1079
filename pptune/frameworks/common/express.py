"""The steps every adapter's ``express`` composes: the closest plan a framework states.

Each framework can state only some plans. When it cannot state the one
pptune chose (a schedule it lacks, an uneven split or a sharding it has no
knob for), its adapter picks the fastest plan it *can* state with the same
pp, dp, tp, micro-batch size and count, says so in one line, and reports
that plan's own predicted numbers — never a silently different plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.partition import (
    add_ends,
    even_split,
    is_mtp,
    mtp_count,
    stage_bounds,
)
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.schedules import Schedule, model_chunks
from pptune.costmodel.search import (
    Plan,
    PlanRequest,
    PlanSpec,
    RankOrder,
    Recompute,
    Sharding,
    evaluate,
    search,
)
from pptune.costmodel.stage_recompute import fit_stage_recompute
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.repricing import analytic, kernels_job, repriced
from pptune.frameworks.common.writing import domain_spans_hosts, plan_launch
from pptune.report.fmt import (
    blocks_text,
    fmt_bytes,
    fmt_microbatches,
    fmt_pct,
    fmt_seconds,
)

# (schedule, virtual stages, layers per stage with the embedding and the head)
Option = tuple[Schedule, int, list[int]]

SHARDING_NAMES = {Sharding.NONE: "no sharding", Sharding.ZERO1: "ZeRO-1",
                  Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3", Sharding.FSDP: "FSDP"}


def price(job: Job, spec: PlanSpec) -> Plan:
    """The spec predicted; recomputation per stage is fitted again for its split,
    schedule and sharding (the counts belong to them: stage_recompute.py)."""
    if spec.recompute_layers is None:
        return evaluate(job.table, job.request, spec)
    full = evaluate(job.table, job.request, replace(spec, recompute_layers=None))
    return fit_stage_recompute(job.table, job.request, full)[0] if fits(job, full) else full


def refit(job: Job, plan: Plan, schedule: Schedule, split: list[int], v: int,
          rank_order: str | None = None) -> Plan:
    """The plan re-predicted with another schedule, split or rank order; another
    schedule runs without the all-to-all overlap (its own framework flags, when it
    has any, are not the plan's)."""
    spec = replace(plan.spec, schedule=schedule, stage_layers=tuple(split), virtual_stages=v,
                   rank_order=plan.rank_order if rank_order is None else RankOrder(rank_order),
                   a2a_overlap=plan.a2a_overlap and schedule is plan.schedule)
    return price(job, spec)


def uniform_recompute(job: Job, plan: Plan, *, name: str, knob: str,
                      notes: list[str]) -> tuple[Plan, bool]:
    """(plan, exact): a plan recomputing per stage becomes full recomputation of every
    block, for a framework whose ``knob`` applies one choice to every layer."""
    if plan.recompute_layers is None:
        return plan, True
    alt = evaluate(job.table, job.request, replace(plan.spec, recompute_layers=None))
    notes.append(f"{name} states one recomputation for every layer ({knob}), not blocks "
                 f"per stage {list(plan.recompute_layers)}: emitting full recomputation of "
                 f"every block, predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return alt, False


def dualpipe_options(job: Job, plan: Plan) -> list[Option]:
    """What a framework without DeepSeek's DualPipe may run on the same ranks:
    DualPipeV and ZBV over 2 x pp stages (the blocks split evenly) and 1F1B over
    the plan's pp chunks."""
    n_blocks = len(job.layer_names) - 2
    opts: list[Option] = [(Schedule.ONE_F_ONE_B, 1, list(plan.stage_layers))]
    if n_blocks >= 2 * plan.pp:
        vee = add_ends(even_split(n_blocks, 2 * plan.pp))
        opts += [(Schedule.DUALPIPEV, 2, vee), (Schedule.ZBV, 2, vee)]
    return opts


def fits(job: Job, plan: Plan) -> bool:
    return max(plan.peak_memory_bytes) <= job.table.memory_bytes


def _as_is(plan: Plan) -> Plan:
    return plan


def closest(job: Job, plan: Plan, options: Sequence[Option], rank_order: str | None = None,
            as_run: Callable[[Plan], Plan] = _as_is) -> Plan | None:
    """The fastest option that fits (None when none does), timed as the framework runs
    it (``as_run``: what its files make of a plan, such as one recomputation count for
    every stage)."""
    best: Plan | None = None
    best_s = math.inf
    for schedule, v, split in options:
        if any(n < 1 for n in split):
            continue
        cand = refit(job, plan, schedule, split, v, rank_order)
        if fits(job, cand) and (step := as_run(cand).step_time_s) < best_s:
            best, best_s = cand, step
    return best


def fastest_on(job: Job, plan: Plan, schedules: Sequence[Schedule]) -> Plan | None:
    """The fastest plan the search finds on ``schedules`` (any stage split, any of the
    request's virtual stages and micro-batch sizes) with the plan's GPUs, cost key, pp,
    sharding, recomputation and rank order; None when none fits."""
    req = job.request
    runs = tuple(s for s in req.schedules if s in schedules) or tuple(schedules)
    recomputes = (plan.recompute,) if plan.recompute_layers is None else (
        Recompute.FULL, Recompute.NONE)
    res = search(job.table, replace(
        req, schedules=runs, pp=(plan.pp,), shardings=(plan.sharding,), recomputes=recomputes,
        rank_orders=(plan.rank_order,), cost_keys=(req.key_of(plan.spec),), top=1,
        with_best_pp1=False))
    return res.plans[0] if res.plans else None


def stateable_best(job: Job, plan: Plan, stateable: PlanRequest) -> Plan | None:
    """The fastest plan the search finds among those a framework's files state
    (``stateable``: the request narrowed by its adapter), on the plan's GPUs and cost key
    (tp, cp, ep, etp, precision), priced as ``job`` is; None when none fits."""
    found = stateable_fastest(job, plan, stateable, 1)
    return found[0] if found else None


def stateable_fastest(job: Job, plan: Plan, stateable: PlanRequest, top: int) -> list[Plan]:
    """The ``top`` fastest such plans (``stateable_best``), fastest first."""
    return search(job.table, replace(stateable, cost_keys=(job.request.key_of(plan.spec),),
                                     top=top, with_best_pp1=False)).plans


def closest_or_refuse(job: Job, plan: Plan, options: Sequence[Option], *, name: str, rank: int,
                      why: str, notes: list[str], rank_order: str | None = None,
                      found: Plan | None = None, runs: Sequence[Schedule] = (),
                      as_run: Callable[[Plan], Plan] = _as_is) -> Plan:
    """The closest option, or ``found`` (fastest_on's plan) where it runs faster (both
    timed by ``as_run``, as in ``closest``), with a note saying why and what it costs;
    BadInput when none fits (naming the framework's schedules ``runs``, for a search of
    only those)."""
    alt = closest(job, plan, options, rank_order, as_run)
    if found is not None and fits(job, found) and (
            alt is None or as_run(found).step_time_s < as_run(alt).step_time_s):
        alt = found
    if alt is None:
        raise BadInput(
            f"{name} cannot express plan {rank} ({why}) and no plan it runs on the same ranks "
            "fits" + (
                f"; --schedules {','.join(s.value for s in runs)} ranks only the plans it runs"
                if runs else ""))
    batches = ("micro-batches" if alt.micro_batch_size == plan.micro_batch_size else
               f"batch, {fmt_microbatches(alt.num_microbatches, alt.micro_batch_size)}")
    notes.append(
        f"{name} cannot express plan {rank} ({why}); emitting the fastest plan it can run "
        f"on the same ranks and {batches}: {alt.schedule.value}"
        + (f" v={alt.virtual_stages}" if alt.schedule is Schedule.INTERLEAVED else "")
        + f", blocks/stage {blocks_text(job.layer_names, alt.stage_layers)}"
        + (f", rank order {alt.rank_order.value}" if alt.rank_order != plan.rank_order else "")
        + f", predicted step {fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)})"
        f", bubble {fmt_pct(alt.bubble_rate)}"
    )
    return alt


def priced_as_run(job: Job, plan: Plan, *, name: str, attention: str | None,
                  sequence_parallel: bool, runs: str, notes: list[str],
                  cross_entropy: CrossEntropy | None = None,
                  dispatcher: Dispatcher | None = None,
                  swiglu: Swiglu | None = None,
                  fp8_kernels: Fp8Kernels | None = None, fp8_casts: Fp8Casts | None = None,
                  within: PlanRequest | None = None,
                  tp_comm_overlap: bool | None = None,
                  wgrad_accum: WgradAccum | None = None,
                  substitute: bool = True) -> tuple[Job, Plan]:
    """The job and plan re-priced with the attention kernel, sequence parallelism, loss
    kernels (``cross_entropy``, None: the job's), SwiGLU kernels (``swiglu``, None: the
    job's), FP8 linears and their casts (``fp8_kernels``, ``fp8_casts``) and MoE dispatcher
    (``dispatcher``, None: the job's), tensor-parallel overlap (``tp_comm_overlap``,
    None: the job's) and weight-gradient accumulation (``wgrad_accum``, None: the job's)
    the framework's files run (``runs`` says which, in
    the note); a plan that outgrows the GPU so priced gives way to the best of ``within``
    (the plans the framework's files state; None: the job's search), unless not to
    ``substitute`` (``Adapter.as_run``'s: the plan so priced is kept). Unchanged for
    measured costs, a shape or GPU
    pptune cannot price, or when the job already plans that way."""
    ran = kernels_job(job, plan.precision, attention=attention,
                      sequence_parallel=sequence_parallel, cross_entropy=cross_entropy,
                      dispatcher=dispatcher, swiglu=swiglu, fp8_kernels=fp8_kernels,
                      fp8_casts=fp8_casts, tp_comm_overlap=tp_comm_overlap,
                      wgrad_accum=wgrad_accum)
    if ran is None:
        return job, plan
    job = ran
    before, plan = plan, evaluate(job.table, job.request, plan.spec)
    notes.append(f"{name} runs {runs}: predicted that way, step {fmt_seconds(plan.step_time_s)} "
                 f"({ratio(plan.step_time_s, before.step_time_s)})")
    if substitute and not fits(job, plan):
        # priced as the files run, the plan outgrows the GPU (an eager SwiGLU keeps more):
        # the search's best plan on those costs instead, when one fits
        best = search(job.table, replace(within or job.request, top=1)).plans
        need = (f"so run, the plan needs {fmt_bytes(max(plan.peak_memory_bytes))} of "
                f"{fmt_bytes(job.table.memory_bytes)}")
        if best:
            notes.append(f"{need}: emitting the best plan that fits so (pp={best[0].pp} "
                         f"dp={best[0].dp} {best[0].schedule.value}, "
                         f"{best[0].sharding.value}/{best[0].recompute.value}), predicted step "
                         f"{fmt_seconds(best[0].step_time_s)} "
                         f"({ratio(best[0].step_time_s, before.step_time_s)})")
            plan = best[0]
        else:
            notes.append(f"{need} and no plan of the search fits so: the file states it "
                         "anyway, and check-config will say it overflows")
    return job, plan


def without_mtp(job: Job, plan: Plan, *, name: str, rank: int,
                notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan without their multi-token-prediction layers, for a framework
    that builds none: the costs priced again on the shape without them, each stage
    losing the MTP layers it held. Unchanged without MTP layers or for measured costs;
    BadInput when the layers it builds are fewer than the plan's stages."""
    mtp = mtp_count(job.layer_names)
    built = len(job.layer_names) - mtp
    chunks = model_chunks(plan.schedule, plan.pp, plan.virtual_stages)
    if mtp and chunks > built:
        raise BadInput(f"{name} cannot express plan {rank}: its model builds no "
                       f"multi-token-prediction layer, which leaves {built} layers (the "
                       f"embedding and the head included) for {chunks} stages; choose a plan "
                       "with fewer stages (--pp) or another framework")
    if not mtp or not analytic(job):
        return job, plan
    assert job.shape is not None
    split = [sum(not is_mtp(job.layer_names[i]) for i in range(s, e))
             for s, e in stage_bounds(plan.stage_layers)]
    before = plan.step_time_s
    job = repriced(job, replace(job.shape, mtp_layers=0))
    plan = price(job, replace(plan.spec, stage_layers=tuple(split)))
    notes.append(f"{name} builds no multi-token-prediction module: the plan priced without "
                 f"its {mtp} MTP layer{'s' if mtp > 1 else ''}, predicted step "
                 f"{fmt_seconds(plan.step_time_s)} ({ratio(plan.step_time_s, before)})")
    return job, plan


AS_RUN_TOP = 5  # the search's best plans a substitute is chosen from, timed as the files run


def stateable_sharding(job: Job, plan: Plan, *, name: str, options: tuple[Sharding, ...],
                       notes: list[str], within: PlanRequest | None = None,
                       as_run: Callable[[Plan], Plan] = _as_is,
                       why: str | None = None) -> tuple[Plan, bool]:
    """(plan, exact): the faster of the plan with a sharding the files can state
    (``options``, best first as a substitute) when one fits, and the best plan of the
    search with one of them (over ``within``, default the job's request: a framework
    narrows it to what else its files state), both timed by ``as_run`` (as the files
    run them: Megatron-LM's one recomputation count for every stage); else the plan as
    it is, which its caller refuses (no file of another sharding runs as predicted).
    ``why``: the notes' reason (default: the files state no such sharding)."""
    if plan.sharding in options:
        return plan, True
    said = why or f"{name} files state no {SHARDING_NAMES[plan.sharding]}"
    same = None
    for sharding in options:
        alt = price(job, replace(plan.spec, sharding=sharding))
        if fits(job, alt):
            same = alt
            break
    # the search's few best, the fastest as the files run it first
    searched = sorted(search(job.table, replace(within or job.request, shardings=options,
                                                top=AS_RUN_TOP)).plans,
                      key=lambda p: as_run(p).step_time_s)
    if same is not None and (not searched or as_run(same).step_time_s
                             <= as_run(searched[0]).step_time_s):
        notes.append(f"{said}: emitting the "
                     f"plan with {SHARDING_NAMES[same.sharding]}, predicted step "
                     f"{fmt_seconds(same.step_time_s)} "
                     f"({ratio(same.step_time_s, plan.step_time_s)})")
        return same, False
    if searched:
        alt = searched[0]
        reason = ("the plan does not fit with what they state" if same is None else
                  f"the plan with {SHARDING_NAMES[same.sharding]} would take "
                  f"{fmt_seconds(same.step_time_s)}")
        notes.append(f"{said} and {reason}: "
                     f"emitting the best plan with "
                     f"{' or '.join(SHARDING_NAMES[o] for o in options)} instead (pp={alt.pp} "
                     f"dp={alt.dp} {alt.sharding.value}/{alt.recompute.value}), predicted step "
                     f"{fmt_seconds(alt.step_time_s)} "
                     f"({ratio(alt.step_time_s, plan.step_time_s)})")
        return alt, False
    return plan, True


def full_recompute(job: Job, plan: Plan, *, name: str, notes: list[str]) -> Plan:
    """The plan with full recomputation of every block, for a framework that states no
    every-Nth-block selective recomputation (the planner's selective checkpoints
    every Nth block of each stage) or no recomputation by module."""
    alt = evaluate(job.table, job.request, replace(plan.spec, recompute=Recompute.FULL))
    what = ("recomputation by module (Megatron-LM --recompute-modules "
            + " ".join(plan.recompute_modules) + ")" if plan.recompute is Recompute.MODULES
            else "every-Nth-block selective recomputation")
    notes.append(f"{name} states no {what}: emitting the "
                 f"plan with full recomputation, predicted step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return alt


def unstated_sharding(plan: Plan, *, name: str, unstated: dict[Sharding, str],
                      notes: list[str]) -> None:
    """A note when the files cannot state the plan's sharding at all."""
    what = unstated.get(plan.sharding)
    if what:
        notes.append(f"{name}: the plan's sharding is {what}; these files do not set it, "
                     f"configure it by hand (pptune predicted it as {plan.sharding.value})")


def placed(job: Job, plan: Plan) -> Plan:
    """The plan re-predicted on the node shape its files launch (the same number of
    ranks on every node): itself when that is the request's shape, or when the NVLink
    domain spans the hosts launched (a GB200 NVL72's trays). The blocks each stage
    recomputes are the files' (a Megatron-LM script's one N for every stage), not fitted
    again: the node shape moves the links, not the memory."""
    nodes, per_node = plan_launch(plan, job)
    if nodes == 1 or per_node == job.request.gpus_per_node or domain_spans_hosts(job):
        return plan
    return evaluate(job.table, replace(job.request, gpus_per_node=per_node), plan.spec)
