"""The closest plan a torchtitan job file states.

torchtitan runs GPipe, 1F1B (micro-batches >= stages, torch's Schedule1F1B),
Interleaved1F1B, ZBVZeroBubble and DualPipeV (torch's ScheduleDualPipeV) with
pipeline ranks outermost in its device mesh, on any split
(``module_fqns_per_model_part``); ZB-H1 with one stage per rank is not
expressible there (InterleavedZeroBubble needs two), nor DeepSeek's
bidirectional DualPipe (torch has none): its closest plans are DualPipeV and
ZBV on the same ranks (2 x pp stages, split evenly) and 1F1B over its pp chunks.
Its attention is a fused kernel (SDPA or flex attention) and its tensor
parallelism shards the sequence too; its files state FSDP or no sharding,
and one activation checkpointing for every block (full, or selective: every
Nth block or per op), never a count per stage. Where the plan recomputes fully
or every Nth block, torchtitan's per-op policy is stated instead when it fits
and is faster (its default option; costmodel/op_sac.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.partition import mtp_count
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, TorchaoRecipe, eager_casts, is_low
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule
from pptune.costmodel.search import (
    DP_INNER,
    Plan,
    PlanRequest,
    Recompute,
    Sharding,
    evaluate,
)
from pptune.errors import BadInput
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job, Stated, keep
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.torchtitan import main_plan
from pptune.frameworks.torchtitan.attention import cp_refusal, priced_kernel
from pptune.frameworks.torchtitan.converters import expert_setting, stateable_experts
from pptune.frameworks.torchtitan.cp_fp8 import (
    compiled,
    per_op_checkpointing,
    stateable_exchange,
    stateable_recipe,
    uncompiled,
)
from pptune.frameworks.torchtitan.experts import (
    dispatcher_of,
    experts_run,
    key_shardings,
    mesh_problem,
)
from pptune.frameworks.torchtitan.reader import NO_PIPELINE, flavor_of
from pptune.frameworks.torchtitan.widths import reduce_as_run
from pptune.options import CostOptions
from pptune.report.fmt import fmt_bytes, fmt_seconds

NAME = "torchtitan"
STATEABLE = (Sharding.FSDP, Sharding.NONE)  # best first as a substitute
_LINEARS = {Precision.MXFP8: "MXFP8"}  # torchao's linears of a low precision, as notes name them


def stateable_request(req: PlanRequest, model: str | None,
                      shape: ModelShape | None = None) -> PlanRequest:
    """The search over what a torchtitan file states: FSDP or no sharding; its
    schedules (no bidirectional DualPipe; InterleavedZeroBubble, not ZB-H1's one stage
    a rank); pipeline ranks outermost; no combined 1F1B order; no interleaving with m not
    a multiple of pp (torch's ScheduleInterleaved1F1B refuses such a count or runs it in
    an order of its own: torch_schedules.refused_rounds); no pipeline for the
    models without a pipelining_fn; no megatron-core recompute modules (its per-op
    policy is per_op_checkpointing's) and no recomputed-block count per stage (one
    [activation_checkpoint] mode for every block)."""
    name = (flavor_of(model, shape) or ("", ""))[0]  # the shape: a Hugging Face config's model
    shardings = keep(req.shardings, STATEABLE)
    if len(req.keys()) == 1:  # one cost key (a job's): the shardings its expert mesh allows
        shardings = keep(shardings, key_shardings(req.keys()[0], shardings))
    return replace(req, shardings=shardings,
                   schedules=keep(req.schedules, [s for s in Schedule
                                                  if s not in (Schedule.DUALPIPE, Schedule.ZB_H1)]),
                   rank_orders=(DP_INNER,), combined_order=False, stage_recompute=False,
                   interleaved_groups=False,
                   pp=(1,) if name in NO_PIPELINE else req.pp,
                   recomputes=keep(req.recomputes, [r for r in Recompute
                                                    if r is not Recompute.MODULES]))


def closest_plan(job: Job, plan: Plan, rank: int) -> Stated:
    """The plan itself when the job file states it, else the closest one that does: the
    plan's substitutions one by one (_substituted), or, where the model has no
    pipelining, the fastest plan a torchtitan file states on the same GPUs and costs
    (emit checks substitutions that cost much against such a plan for every
    framework)."""
    flavor = flavor_of(job.model, job.shape) or ("", "")
    model = flavor[0]
    refused = cp_refusal(*flavor, plan.cp) if model else None
    if refused:  # the cost key's cp: no plan of these costs runs it
        raise BadInput(f"torchtitan cannot express plan {rank}: {refused}; plan with --cp 1 "
                       "(or emit another framework)")
    if plan.pp > 1 and model in main_plan.no_pipeline(job.versions):
        best = _stateable_best(job, plan)
        if best is None:
            raise BadInput(f"torchtitan cannot express plan {rank}: its {model} model has no "
                           "pipelining (pipelining_fn None in torchtitan 0.2.2) and no plan "
                           "without one fits; choose another framework")
        stated = _substituted(job, best, rank)
        why = (f"torchtitan's {model} model has no pipelining (pipelining_fn None in torchtitan "
               f"0.2.2): emitting the fastest plan without one on plan {rank}'s sizes, "
               f"{_describe(best)}, predicted "
               f"step {fmt_seconds(best.step_time_s)} ({ratio(best.step_time_s, plan.step_time_s)})")
        return replace(stated, exact=False, notes=(why, *stated.notes))
    notes: list[str] = []
    run_job, run_plan = _as_run(job, plan, rank, notes)
    return _stated(run_job, run_plan, rank, notes, mtp_count(job.layer_names))


def _describe(plan: Plan) -> str:
    v = f" v={plan.virtual_stages}" if plan.schedule is Schedule.INTERLEAVED else ""
    ep = f" ep={plan.ep}" + (f" etp={plan.etp}" if plan.etp > 1 else "") if plan.ep > 1 else ""
    return (f"pp={plan.pp} dp={plan.dp} tp={plan.tp} cp={plan.cp}{ep} {plan.schedule.value}{v}, "
            f"{plan.num_microbatches} x {plan.micro_batch_size}, "
            f"{plan.sharding.value}/{plan.recompute.value}")


def _stateable_best(job: Job, plan: Plan) -> Plan | None:
    """The fastest plan a torchtitan file states on the plan's GPUs and cost key."""
    return ex.stateable_best(job, plan, stateable_request(job.request, job.model, job.shape))


def as_run(job: Job, plan: Plan, substitute: bool = True) -> tuple[Job, Plan]:
    """The job and plan priced as a torchtitan file runs the plan (``_as_run``, where
    ``closest_plan`` starts): for check-config, which times the plans it compares a file
    with so; BadInput for a plan whose expert mesh torchtitan refuses as the file would
    state it (FSDP over dp, or one shard: experts.mesh_problem), as its reader does."""
    if job.shape is not None and job.shape.moe and plan.ep > 1:
        shard = plan.dp if plan.sharding is Sharding.FSDP else 1
        why = (f"etp {plan.etp} with tp {plan.tp}: torchtitan supports ETP=TP or ETP=1"
               if plan.etp not in (1, plan.tp)
               else mesh_problem(plan.ep, plan.etp, shard, plan.cp, plan.tp))
        if why:
            raise BadInput(f"torchtitan cannot run the plan: {why}")
    return _as_run(job, plan, 1, [], substitute)


def run_settings(job: Job, plan: Plan) -> dict[str, str]:
    """What the file's [compile] table compiles for the plan as priced (``as_run``'s job
    and plan): "model,loss", "model", "loss" or "off"; the attention kernel it is priced
    with (a main dump's FlexAttention is priced as flash, a plan its files state as SDPA);
    for a MoE plan in low precision, the routed experts' precision
    (converters.expert_setting)."""
    return {"compile": ",".join(compiled(plan, job.cost_options, float8=False)) or "off",
            "attention": str(job.attention), **expert_setting(job, plan)}


def _as_run(job: Job, plan: Plan, rank: int, notes: list[str], substitute: bool = True
            ) -> tuple[Job, Plan]:
    """The job and plan priced as a torchtitan file runs them (no MTP module, its
    attention, loss, SwiGLU, float8 and dispatcher kernels, its K/V exchange, float8
    recipe and the experts' precision), each change with a note (``substitute``: as
    ``Adapter.as_run`` takes it)."""
    model = (flavor_of(job.model, job.shape) or ("", ""))[0]
    job, plan = ex.without_mtp(job, plan, name=NAME, rank=rank, notes=notes)
    # the loss and the SwiGLU as the file runs them: compiled as the plan was priced
    # (cp_fp8.compiled: the file's [compile] table), else PyTorch's eager kernels
    # (costmodel/loss.py, rates.Swiglu)
    route = dispatcher_of(job, plan, model or str(job.model))
    job, plan = _kernels_as_run(job, plan, compiled(plan, job.cost_options), route, notes,
                                substitute)
    job, plan = stateable_exchange(job, plan, notes)
    job, plan = stateable_recipe(job, plan, notes)
    job, plan = reduce_as_run(job, plan, notes)  # its reduce dtype (--grad-compression)
    return stateable_experts(job, plan, notes)


def _kernels_as_run(job: Job, plan: Plan, parts: tuple[str, ...], route: Dispatcher,
                    notes: list[str], substitute: bool = True) -> tuple[Job, Plan]:
    """The job and plan re-priced with torchtitan's kernels: flash attention, sequence
    parallelism, its dispatcher, torchao's float8 and the loss and SwiGLU compiled where
    ``parts`` says."""
    experts = experts_run(job, plan, route)
    eager = [name for part, name in (("model", "SwiGLU"), ("loss", "cross-entropy"))
             if part not in parts]
    loss = ", ".join([f"its {' and '.join(parts)} compiled ([compile] enable)"] * bool(parts)
                     + [f"its {' and '.join(eager)} eager"] * bool(eager))
    flavor, main = flavor_of(job.model, job.shape), main_plan.writes_main(job.versions)
    kind = main_plan.attention_kind(job.model, job.shape, job.versions)
    said = ('main\'s config states attn_backend "flex"' if main or not flavor else
            f'torchtitan\'s {flavor[0]} {flavor[1]} sets attn_type "flex"')
    attn = ("FlexAttention priced as FlashAttention-2, the closest kernel pptune "
            f"models ({said}; pptune has no FlexAttention rate)" if kind == "flex" else
            "torch's varlen attention (FlashAttention-2)" if kind == "varlen" else "torch's SDPA")
    why = uncompiled(plan)
    split = (" (torch's zero-bubble and DualPipeV schedules refuse a compiled model)"
             if plan.pp > 1 and plan.schedule in SPLIT_BACKWARD
             else f" (the model not compiled: {why})" if why else "")
    casts = _casts(job, plan, parts)
    fp8 = (f" and torchao's {_LINEARS.get(plan.precision, 'float8')} linears (no cached FP8 "
           "weights" + (", their casts eager: each op a kernel of its own"
                        * (casts is Fp8Casts.EAGER)) + ")" if is_low(plan.precision) else "")
    return ex.priced_as_run(
        job, plan, name=NAME, attention=priced_kernel(kind), sequence_parallel=job.request.tp > 1,
        cross_entropy=CrossEntropy.FUSED if "loss" in parts else CrossEntropy.EAGER,
        swiglu=Swiglu.FUSED if "model" in parts else Swiglu.EAGER, notes=notes,
        fp8_kernels=Fp8Kernels.TORCHAO, fp8_casts=casts, dispatcher=route,
        wgrad_accum=WgradAccum.BF16, within=stateable_request(job.request, job.model, job.shape),
        substitute=substitute,
        runs=f"{attn}, sequence parallelism with tensor parallelism{experts}, {loss}{split}{fp8}")


def _casts(job: Job, plan: Plan, parts: tuple[str, ...]) -> Fp8Casts:
    """torchao's float8 casts as the file runs them: fused where [compile] compiles the
    model (``parts``), else eager where pptune derives them (precision.eager_casts:
    tensorwise FP8; MXFP8 and the rowwise recipes stay priced as compiled)."""
    recipe = (job.cost_options or CostOptions()).torchao_recipe
    return (Fp8Casts.EAGER if "model" not in parts
            and eager_casts(plan.precision, recipe, Fp8Casts.EAGER) else Fp8Casts.FUSED)


def _substituted(job: Job, plan: Plan, rank: int) -> Stated:
    """The plan with what torchtitan cannot state replaced, step by step, each with a note."""
    notes: list[str] = []
    mtp = mtp_count(job.layer_names)
    job, plan = _as_run(job, plan, rank, notes)
    return _stated(job, plan, rank, notes, mtp)


def _stated(job: Job, plan: Plan, rank: int, notes: list[str], mtp: int) -> Stated:
    """A plan priced as torchtitan runs it (_as_run) with what its files cannot state
    replaced, step by step, each with a note; ``mtp``: the MTP layers the job had."""
    # torchtitan shards over the context-parallel ranks whatever the shard degree
    # (distributed/parallel_dims.py fsdp_enabled: dp_shard_enabled or cp_enabled)
    sharded = plan.cp > 1 and plan.sharding is Sharding.NONE
    stateable = (Sharding.FSDP,) if sharded else STATEABLE
    timed = _timed(job)  # what the substitutions choose between, timed as the file runs it
    plan, exact = ex.stateable_sharding(
        job, plan, name=NAME, options=stateable, notes=notes,
        within=stateable_request(job.request, job.model), as_run=timed,
        why=f"torchtitan shards the training state over the cp {plan.cp} ranks (its "
        "fsdp_enabled: dp_shard or cp above 1, distributed/parallel_dims.py)" if sharded
        else None)
    if plan.sharding not in stateable:  # none fits: never written with another sharding
        raise BadInput(_unstateable(job, plan, stateable, rank))
    job, plan = reduce_as_run(job, plan, notes)  # the reduce dtype of the sharding written
    if plan.spec.combined:  # no combined 1F1B order in torch.distributed.pipelining
        plan = ex.price(job, replace(plan.spec, a2a_overlap=False))
        notes.append("torchtitan has no combined 1F1B order (Megatron-LM's "
                     "--overlap-moe-expert-parallel-comm): emitting the plan with the expert "
                     f"all-to-all exposed, predicted step {fmt_seconds(plan.step_time_s)}")
        exact = False
    if plan.recompute is Recompute.MODULES or main_plan.layerwise_refused(job, plan):  # no such AC option
        named = NAME + " main" * main_plan.writes_main(job.versions)
        plan, exact = ex.full_recompute(job, plan, name=named, notes=notes), False
    plan, same = ex.uniform_recompute(job, plan, name=NAME, notes=notes,
                                      knob="[activation_checkpoint] mode, applied to every block")
    exact = exact and same
    chosen = plan
    few = plan.schedule is Schedule.ONE_F_ONE_B and plan.num_microbatches < plan.pp
    if plan.schedule is Schedule.DUALPIPE:
        chosen = ex.closest_or_refuse(
            job, plan, ex.dualpipe_options(job, plan), name=NAME, rank=rank, notes=notes,
            why="torch.distributed.pipelining has DualPipeV, not the bidirectional DualPipe",
            rank_order=DP_INNER, as_run=timed)
        exact = False
    elif plan.schedule is Schedule.ZB_H1 or plan.rank_order != DP_INNER or few:
        why = ("torchtitan's InterleavedZeroBubble needs >= 2 stages per rank"
               if plan.schedule is Schedule.ZB_H1
               else "torch's Schedule1F1B needs micro-batches >= stages" if few
               else "its device mesh keeps pipeline ranks outermost")
        sched = (Schedule.GPIPE if few else Schedule.ONE_F_ONE_B
                 if plan.schedule is Schedule.ZB_H1 else plan.schedule)
        options = [(sched, plan.virtual_stages if sched is Schedule.INTERLEAVED else 1,
                    plan.stage_layers)]
        chosen = ex.closest_or_refuse(job, plan, options, name=NAME, rank=rank, why=why,
                                      notes=notes, rank_order=DP_INNER, as_run=timed)
        exact = False
    job, per_op = per_op_checkpointing(job, chosen, notes)
    exact = exact and per_op is chosen
    chosen = per_op
    chosen, exact = _experts(job, chosen, rank, notes, exact)
    job, final = _compiled_as_stated(job, chosen, notes)
    refused = uncompiled(final)
    if is_low(final.precision) and refused and "model" not in compiled(final, job.cost_options):
        notes.append(f"the {final.precision.value} linears run with the model not compiled: "
                     f"{refused}, so [compile] leaves the model out; torchao's casts then run "
                     f"as separate kernels, {_eager_priced(job, final)}")
    unstated = main_plan.main_refusal(job, final)  # what main's configs cannot state
    if unstated:
        raise BadInput(f"torchtitan main cannot express plan {rank}: {unstated}")
    return Stated(job, final, exact and not mtp and final is chosen, tuple(notes))


def _unstateable(job: Job, plan: Plan, options: tuple[Sharding, ...], rank: int) -> str:
    """Why a plan whose sharding torchtitan's files do not state is refused: FSDP2
    (data_parallel_shard_degree) keeps ZeRO-3's bytes of state but reduce-scatters each
    block's gradient through an FP32 copy (costmodel/sharding.py working_bytes), so where
    ZeRO-3 fits it may not, and no plan of the cost key fits with what the files state
    (express.stateable_sharding); a file that replicated the state would not fit either."""
    fsdp = ex.price(job, replace(plan.spec, sharding=Sharding.FSDP))
    return (f"torchtitan cannot express plan {rank}: it shards the training state as "
            f"{ex.SHARDING_NAMES[plan.sharding]}, which torchtitan's files do not state, and no "
            f"plan on {plan.key} fits with "
            f"{' or '.join(ex.SHARDING_NAMES[s] for s in options)} (plan {rank} with FSDP "
            f"over data_parallel_shard_degree needs {fmt_bytes(max(fsdp.peak_memory_bytes))} "
            f"of {fmt_bytes(job.table.memory_bytes)} a GPU); plan with --framework torchtitan "
            "(only the plans its files state)")


def _eager_priced(job: Job, plan: Plan) -> str:
    """How the plan's eager torchao casts are priced (precision.eager_casts), in words."""
    c = job.cost_options or CostOptions()
    if c.fp8_casts is Fp8Casts.EAGER:
        return "priced so (torchao's eager float8 casts: costmodel/precision.py)"
    why = ("MXFP8's eager casts (torchao's prototype/mx_formats, a code path of their own) "
           "are not derived" if plan.precision is Precision.MXFP8 else
           f"the {c.torchao_recipe.value} recipe's eager casts are not derived"
           if c.torchao_recipe is not TorchaoRecipe.TENSORWISE else
           "measured costs are not priced again")
    return (f"which pptune prices as compiled ({why}): the step is predicted faster than "
            "it runs")


def _timed(job: Job) -> Callable[[Plan], Plan]:
    """A plan timed as the file runs it, beside ``job`` (priced as the file runs another
    plan): with the kernels its [compile] table runs for the plan's schedule (cp_fp8.compiled:
    the SwiGLU and float8 casts eager where the schedule cannot compile the model), the
    costs priced once for each such table."""
    model = (flavor_of(job.model, job.shape) or ("", ""))[0] or str(job.model)
    priced: dict[tuple[str, ...], Job] = {}

    def timed(plan: Plan) -> Plan:
        parts = compiled(plan, job.cost_options)
        if parts not in priced:
            route = dispatcher_of(job, plan, model)
            priced[parts] = _kernels_as_run(job, plan, parts, route, [])[0]
        ran = priced[parts]
        return plan if ran is job else evaluate(ran.table, ran.request, plan.spec)
    return timed


def _compiled_as_stated(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The plan priced with the SwiGLU and float8 casts its file's [compile] table runs: a
    substitution may have chosen a schedule that cannot compile the model
    (cp_fp8.compiled), or one that can where they were priced eager for such a schedule.
    Priced again until they agree (an eager SwiGLU agrees with every schedule but an FP8
    plan's)."""
    model = (flavor_of(job.model, job.shape) or ("", ""))[0] or str(job.model)
    for _ in range(3):
        parts = compiled(plan, job.cost_options)
        c = job.cost_options or CostOptions()
        fused = c.swiglu_kernels is not Swiglu.EAGER
        if ((("model" in parts) == fused or job.shape is None or not job.shape.gated_mlp)
                and c.fp8_casts is _casts(job, plan, parts)):
            break
        job, plan = _kernels_as_run(job, plan, parts, dispatcher_of(job, plan, model), notes)
    return job, plan


def _experts(job: Job, plan: Plan, rank: int, notes: list[str], exact: bool
             ) -> tuple[Plan, bool]:
    """torchtitan's expert mesh (experts.py): etp is 1 or tp, and ep x etp divides
    dp_shard x cp x tp, so a plan without FSDP keeps ep x etp inside tp x cp; with ep 1
    its tensor-parallel plan shards the experts by tp."""
    if job.shape is None or not job.shape.moe:
        return plan, exact
    if plan.ep == 1:
        if plan.tp > 1 and plan.etp != plan.tp:
            notes.append(f"torchtitan shards the experts by tp {plan.tp} when ep is 1 (its "
                         f"tensor-parallel plan); this plan was priced with etp {plan.etp}")
        return plan, exact
    if plan.etp not in (1, plan.tp):
        raise BadInput(f"torchtitan cannot express plan {rank}: etp {plan.etp} with tp "
                       f"{plan.tp} (torchtitan supports ETP=TP or ETP=1); choose another plan "
                       "or framework")
    shard = plan.dp if plan.sharding is Sharding.FSDP else 1
    if mesh_problem(plan.ep, plan.etp, shard, plan.cp, plan.tp) is None:
        return plan, exact
    if mesh_problem(plan.ep, plan.etp, plan.dp, plan.cp, plan.tp):
        raise BadInput(f"torchtitan cannot express plan {rank}: ep {plan.ep} x etp "
                       f"{plan.etp} does not divide dp x cp x tp")
    fsdp = evaluate(job.table, job.request, replace(plan.spec, sharding=Sharding.FSDP))
    if not ex.fits(job, fsdp):  # its stages' weights gathered for the step under a pipeline
        raise BadInput(f"torchtitan cannot express plan {rank}: its expert parallelism "
                       f"borrows FSDP ranks (ep {plan.ep} > tp x cp), and with FSDP over dp "
                       f"{plan.dp} the plan needs {fmt_bytes(max(fsdp.peak_memory_bytes))} of "
                       f"{fmt_bytes(job.table.memory_bytes)}; choose another plan or framework")
    notes.append(f"torchtitan's expert parallelism borrows FSDP ranks (ep {plan.ep} > tp x cp): "
                 f"stated with FSDP over dp {plan.dp}; predicted step "
                 f"{fmt_seconds(fsdp.step_time_s)} (plan: {fmt_seconds(plan.step_time_s)})")
    return fsdp, False
