"""The closest plan a DeepSpeed config states.

Its PipelineEngine runs 1F1B only (``TrainSchedule``) with data-parallel
ranks innermost, on the partitions DeepSpeed's ``partition_uniform`` /
``partition_balanced`` build for ``partition_method`` "uniform" /
"parameters" (``partition.py``); ZeRO-2/3 only without a pipeline. AutoTP
runs tensor parallelism without sequence parallelism, and the model code's
attention kernel is kept; recomputation is full (activation_checkpoint_interval
checkpoints every layer, N at a time: no every-Nth-block selective).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.partition import mtp_count
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import OVERLAPPED, Schedule
from pptune.costmodel.search import DP_INNER, Plan, PlanRequest, Recompute, Sharding, evaluate
from pptune.costmodel.table import built_params
from pptune.errors import BadInput
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job, Stated, keep
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.deepspeed.engine import (
    ZERO_STAGE,
    gradient_width,
    overlap,
    sixteen_bit_mode,
    stated_overlap_comm,
)
from pptune.frameworks.deepspeed.partition import DEEPSPEED, METHODS, ds_split
from pptune.frameworks.deepspeed.rules import autotp_zero3
from pptune.report.fmt import fmt_seconds

NAME = "deepspeed"
UNSTATED = {Sharding.FSDP: "torch FSDP (written as ZeRO stage 3, its equivalent)"}
STATEABLE = (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3)


def stateable_request(req: PlanRequest, model: str | None,
                      versions: Versions | None = None) -> PlanRequest:
    """The search over what a DeepSpeed config states: its pipeline engine's 1F1B with
    data-parallel ranks innermost, ZeRO stages 0-3 (2 and 3 without a pipeline, as the
    search has it; 3 with AutoTP from release 0.19.4 of ``versions`` only:
    rules.autotp_zero3), every block recomputed or none (one
    activation_checkpoint_interval), no combined 1F1B order. Any split: partition_method
    "type:" patterns place more than the uniform and parameters splits pptune writes
    (``recommend --framework`` searches those alone: Adapter.own_splits)."""
    del model  # PipelineModule pipelines any layer list
    stateable: tuple[Sharding, ...] = STATEABLE
    if req.tp > 1:  # AutoTP runs without a pipeline (rules.py)
        req = replace(req, pp=(1,))
        if not autotp_zero3(versions):
            stateable = tuple(s for s in STATEABLE if s is not Sharding.ZERO3)
    return replace(req, shardings=keep(req.shardings, stateable),
                   schedules=keep(req.schedules, (Schedule.ONE_F_ONE_B,)),
                   rank_orders=(DP_INNER,), combined_order=False, stage_recompute=False,
                   recomputes=keep(req.recomputes, (Recompute.NONE, Recompute.FULL)))


def kernels(job: Job, tp: int) -> dict[str, Any]:
    """The kernels a DeepSpeed config runs a plan of tensor-parallel size ``tp`` with
    (express.priced_as_run's keywords): the model code's attention, AutoTP without
    sequence parallelism, its MoE layers' standard all-to-all and autograd's BF16 weight
    gradients."""
    return {"attention": job.attention, "sequence_parallel": job.sequence_parallel and tp == 1,
            "dispatcher": Dispatcher.ALLTOALL, "wgrad_accum": WgradAccum.BF16}


def engine_request(req: PlanRequest, sharding: Sharding, pp: int,
                   precision: str = "bf16") -> PlanRequest:
    """``req`` as DeepSpeed's engine runs the file the writer states for a plan of this
    sharding, depth and precision (engine.py): its data-parallel overlap, and the 16-bit
    gradients it keeps (held and reduced at 2 bytes) where ``gradient_width`` says so."""
    stage = ZERO_STAGE.get(sharding, 3)
    said = stated_overlap_comm(req.overlap_grad_reduce, sharding, pp)
    grad, gather = overlap(said, stage, pp)
    run = replace(req, overlap_grad_reduce=grad, overlap_param_gather=gather)
    # the file trains in its 16-bit mode (writer.py)
    if gradient_width(sixteen_bit_mode(precision), None, stage, pp) is not None \
            and req.grad_buffer_bytes is None:
        # 2 bytes on the wire: --grad-compression fp16/bf16 narrows them no further
        run = replace(run, grad_buffer_bytes=2.0, grad_bytes_factor=min(req.grad_bytes_factor, 0.5))
    return run


def closest_plan(job: Job, plan: Plan, rank: int, versions: Versions | None = None) -> Stated:
    """The plan itself when the config states it, else the closest one that does; the
    detail is the partition method. ``versions``: the releases the file is for (before
    DeepSpeed 0.19.4 AutoTP runs no ZeRO-3: rules.autotp_zero3)."""
    notes: list[str] = []
    # PipelineModule runs the model code's layers: DeepSpeed has no MTP module, nor has
    # the Hugging Face DeepSeek-V3 code (it skips the checkpoint's MTP layer)
    mtp = mtp_count(job.layer_names)
    job, plan = ex.without_mtp(job, plan, name=NAME, rank=rank, notes=notes)
    split_sequence = job.sequence_parallel and plan.tp > 1
    runs = [*(["tensor parallelism (AutoTP) without sequence parallelism"] if plan.tp > 1
              else []),
            *(["its MoE layers' standard all-to-all"] if plan.ep > 1 else [])]
    # a plan that outgrows the GPU so priced gives way to one its engine runs (1F1B, ZeRO
    # 0-3): at the plan's depths, whose AutoTP substitute (_without_pipeline) says why pp 1
    within = replace(stateable_request(job.request, None, versions), pp=job.request.pp)
    job, plan = ex.priced_as_run(job, plan, name=NAME, notes=notes,
                                 runs=" and ".join(runs) or "its own kernels",
                                 within=within, **kernels(job, plan.tp))
    if split_sequence:  # the search ranked plans that split the sequence
        notes.append("recommend --no-sequence-parallel ranks the plans as DeepSpeed runs "
                     "tensor parallelism")
    if plan.tp > 1 and plan.pp > 1:
        plan = _without_pipeline(job, plan, rank, notes, versions)
    plan, exact = ex.uniform_recompute(job, plan, name=NAME, notes=notes,
                                       knob="pipeline.activation_checkpoint_interval")
    if plan.recompute in (Recompute.SELECTIVE, Recompute.MODULES):
        plan, exact = ex.full_recompute(job, plan, name=NAME, notes=notes), False
    params = built_params(job.table, plan.tp, plan.ep, plan.etp)
    methods = {m: sp for m in METHODS if (sp := ds_split(m, params, plan.pp)) is not None}
    same = [name for name, sp in methods.items() if sp == plan.stage_layers]
    chosen = plan
    if (plan.schedule is Schedule.ONE_F_ONE_B and plan.virtual_stages == 1 and same
            and plan.rank_order == DP_INNER):
        method = same[0]
    else:
        why = ("DeepSpeed's pipeline engine runs 1F1B only" + (
                   " (no DualPipe nor DualPipeV)" if plan.schedule in OVERLAPPED else "")
               if plan.schedule is not Schedule.ONE_F_ONE_B
               else "partition_method cannot place these boundaries"
               if not same else "its topology keeps data-parallel ranks innermost")
        options = [(Schedule.ONE_F_ONE_B, 1, sp) for sp in methods.values()]
        chosen = ex.closest_or_refuse(job, plan, options, name=NAME, rank=rank, why=why,
                                      notes=notes, rank_order=DP_INNER)
        exact = False
        method = next(n for n, sp in methods.items() if sp == chosen.stage_layers)
    if chosen.pp > 1 and chosen.sharding not in (Sharding.NONE, Sharding.ZERO1):
        # PipelineEngine: 'ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism'
        alt = ex.price(job, replace(chosen.spec, sharding=Sharding.ZERO1))
        if not ex.fits(job, alt):
            raise BadInput(f"deepspeed cannot express plan {rank}: its pipeline engine runs "
                           f"ZeRO-0/1 only and the plan does not fit with ZeRO-1")
        notes.append(f"deepspeed's pipeline engine runs ZeRO stage 0 or 1 only: emitting the "
                     f"plan with ZeRO-1 instead of {chosen.sharding.value}, predicted step "
                     f"{fmt_seconds(alt.step_time_s)}")
        chosen, exact = alt, False
    if chosen.tp > 1 and chosen.sharding is Sharding.ZERO3 and not autotp_zero3(versions):
        chosen, exact = _autotp_without_zero3(job, chosen, rank, notes, versions), False
    ex.unstated_sharding(chosen, name=NAME, unstated=UNSTATED, notes=notes)
    _experts(chosen, rank)
    job, chosen, exact = _as_engine_overlaps(job, chosen, exact, notes)
    return Stated(job, chosen, exact and not mtp, tuple(notes), method)


def _as_engine_overlaps(job: Job, plan: Plan, exact: bool, notes: list[str]
                        ) -> tuple[Job, Plan, bool]:
    """The plan re-priced as DeepSpeed's engine runs the file the writer states
    (engine.py): its data-parallel overlap, and the 16-bit gradients it keeps."""
    req = job.request
    run = engine_request(req, plan.sharding, plan.pp, plan.precision.value)
    grad = run.overlap_grad_reduce
    if run == req:
        return job, plan, exact
    alt = evaluate(job.table, run, plan.spec)
    if alt.step_time_s != plan.step_time_s or alt.peak_memory_bytes != plan.peak_memory_bytes:
        why = ("its pipeline engine reduces the gradients after the last micro-batch"
               if plan.pp > 1 else "ZeRO gathers the updated parameters after the step"
               if grad else "it overlaps no data-parallel traffic at this ZeRO stage")
        if run.grad_buffer_bytes != req.grad_buffer_bytes:
            why += (f"; it keeps and reduces {sixteen_bit_mode(plan.precision.value)} "
                    "gradients (data_types.grad_accum_dtype defaults to the model's, "
                    "runtime/engine.py get_data_types)")
        notes.append(f"deepspeed: {why} (deepspeed/runtime/pipe/schedule.py, "
                     f"runtime/zero/config.py): predicted so, step "
                     f"{fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)})")
        exact = False
    return replace(job, request=run), alt, exact


def _autotp_without_zero3(job: Job, plan: Plan, rank: int, notes: list[str],
                          versions: Versions | None) -> Plan:
    """The best plan at the plan's tp without ZeRO-3, which AutoTP runs before DeepSpeed
    0.19.4 (its engine asserts ZeRO stage <= 2 there: rules.autotp_zero3); BadInput where
    none fits."""
    release = (versions or Versions()).of(DEEPSPEED)
    why = (f"deepspeed {release}'s AutoTP runs ZeRO stage 2 at most (ZeRO-3 from 0.19.4, "
           "deepspeed/runtime/engine.py")
    return _best_at_tp(job, plan, notes, versions, f"{why}): emitting the best plan at tp "
                       f"{plan.tp} without ZeRO-3", (
        f"deepspeed {release} cannot express plan {rank}: its AutoTP runs ZeRO stage 2 at "
        "most (deepspeed/runtime/engine.py _configure_tensor_parallel_states, until 0.19.4) "
        f"and no plan at tp {plan.tp} fits without ZeRO-3; choose a plan with tp 1 or "
        "DeepSpeed 0.19.4 or later"))


def _without_pipeline(job: Job, plan: Plan, rank: int, notes: list[str],
                      versions: Versions | None = None) -> Plan:
    """The best plan at the plan's tp without a pipeline: AutoTP's mesh has no pipeline
    dimension (rules.py)."""
    mesh = "its mesh is data x tensor parallel: deepspeed/utils/groups.py _init_tp_mesh_device"
    return _best_at_tp(job, plan, notes, versions, (
        f"deepspeed runs AutoTP without a pipeline ({mesh}): emitting the best plan at tp "
        f"{plan.tp} without one"), (
        f"deepspeed cannot express plan {rank}: AutoTP (tp {plan.tp}) runs without a "
        f"pipeline ({mesh}) and no plan at tp {plan.tp} fits without one; choose a plan with "
        "tp 1 or another framework"))


def _best_at_tp(job: Job, plan: Plan, notes: list[str], versions: Versions | None,
                said: str, refusal: str) -> Plan:
    """The best plan DeepSpeed's files state at the plan's tp (pp 1), noted as ``said``
    with its sizes and step; BadInput ``refusal`` where none fits."""
    best = ex.stateable_best(job, plan, stateable_request(job.request, None, versions))
    if best is None:
        raise BadInput(refusal)
    notes.append(f"{said}, pp=1 dp={best.dp} {best.sharding.value}/{best.recompute.value}, "
                 f"predicted step {fmt_seconds(best.step_time_s)} "
                 f"({ratio(best.step_time_s, plan.step_time_s)})")
    return best


def _experts(plan: Plan, rank: int) -> None:
    """What AutoEP refuses (experts.py): expert tensor parallelism (AutoTP beside it runs
    without a pipeline, as AutoTP always does here: _without_pipeline)."""
    if plan.ep > 1 and plan.etp != 1:
        raise BadInput(f"deepspeed cannot express plan {rank}: etp {plan.etp} (AutoEP's "
                       "expert_tensor_parallel_size is not supported beyond 1); choose a plan "
                       "with etp 1 or another framework")
