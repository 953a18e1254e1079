"""A plan priced as a Megatron-LM script runs it (``Adapter.as_run``), where the script
states the plan itself, and how much faster than the search priced it that can be
(``Adapter.as_run_saving_s``): ``recommend --framework megatron`` ranks its plans so and
check-config times the plans it compares a script with so (frameworks/common/as_run.py).

The script runs the plan with its own kernels (closest.kernels: under Megatron-FSDP,
ZeRO-2 and beyond, BF16 weight gradients, priced without their copy into its buckets,
which runs a plan faster than the fused accumulation the search ranks with), sequence
parallelism where megatron-core needs it, Megatron-FSDP's resharding and one block
recomputation count for every stage; megatron-core refuses --use-tp-pp-dp-mapping with
context parallelism under a pipeline (cp_fp8.refuses_rank_order), and its scripts run
neither pptune's other schedules, every-Nth-block selective recomputation, nor an MTP
placement megatron-core refuses (closest.py)."""

from __future__ import annotations

from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.search import Plan, PlanSpec, Recompute
from pptune.errors import BadInput
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.repricing import kernels_job, table_saving_s
from pptune.frameworks.megatron.closest import (
    RUNS,
    block_recompute,
    kernels,
    megatron_fsdp,
    megatron_split,
    run_kernels,
    shardings,
    with_sequence_parallel,
)
from pptune.frameworks.megatron.connections import contested, sequence_settings
from pptune.frameworks.megatron.cp_fp8 import RANK_ORDER_REFUSED, refuses_rank_order
from pptune.frameworks.megatron.layout import plan_layout
from pptune.options import CostOptions

# the loss kernels as a script states them (reader.py: megatron-core's unfused loss unless
# --cross-entropy-loss-fusion; Transformer Engine's with --cross-entropy-fusion-impl te)
LOSS_FLAGS = {CrossEntropy.UNFUSED: "unfused",
              CrossEntropy.NATIVE: "fused (--cross-entropy-loss-fusion)",
              CrossEntropy.FUSED: "fused (--cross-entropy-loss-fusion "
                                  "--cross-entropy-fusion-impl te)",
              CrossEntropy.EAGER: "eager"}


def refusal(job: Job, plan: Plan) -> str | None:
    """Why a script cannot state the plan itself (None: it can)."""
    names = job.layer_names
    if plan.schedule not in RUNS:
        return f"Megatron-LM has no {plan.schedule.value} schedule"
    if plan.recompute is Recompute.SELECTIVE:
        return "Megatron-LM recomputes no every-Nth block (its selective is core attention)"
    if plan.sharding not in shardings(job.request):
        return "Megatron-LM's precision-aware optimizer runs on the distributed optimizer alone"
    if refuses_rank_order(job, plan):
        return RANK_ORDER_REFUSED
    if contested(job, plan):
        return ("Megatron-LM's scripts leave the expert all-to-all overlap out beside "
                "context parallelism or overlapped tensor-parallel collectives before "
                "Blackwell, where validate_args warns of it")
    if megatron_split(plan, names) is None and plan_layout(
            names, plan.stage_layers, plan.pp) is None:
        return ("megatron-core places every MTP layer in one stage, the last virtual stage "
                "of its rank")
    return None


def as_run(job: Job, plan: Plan, substitute: bool = True) -> tuple[Job, Plan]:
    """The job and plan priced as the script runs the plan (``closest_plan``'s steps, with
    no plan put in its place unless ``substitute``); BadInput where the script cannot
    state it (``refusal``)."""
    why = refusal(job, plan)
    if why:
        raise BadInput(f"megatron cannot run the plan: {why}")
    job, resharded, _ = megatron_fsdp(job, plan, [])
    if resharded is None:
        raise BadInput("megatron cannot run the plan: it outgrows the GPU as Megatron-FSDP "
                       "runs it")
    job, plan = with_sequence_parallel(job, resharded, [])
    job, plan = run_kernels(job, plan, [], substitute)
    plan, _, _ = block_recompute(job, plan, [])
    return job, plan


def as_run_saving_s(job: Job, spec: PlanSpec) -> float:
    """The most seconds a micro-batch of a plan of ``spec`` runs faster so than priced:
    its layers with the script's kernels against the job's (repricing.table_saving_s);
    the rest of ``as_run`` only adds work (FSDP resharded, more blocks recomputed)."""
    key = spec.key or job.request.keys()[0]
    split, overlap = sequence_settings(job, key.tp, key.ep)
    ran = kernels_job(job, key.precision, sequence_parallel=split, tp_comm_overlap=overlap,
                      **kernels(job, spec.sharding, key.tp, key.ep))
    return 0.0 if ran is None else table_saving_s(job.table, ran.table, spec.micro_batch_size)


def run_settings(job: Job, plan: Plan) -> dict[str, str]:
    """The kernels a plan is priced with (``as_run``'s job: the script's loss, attention
    backend, token dispatcher and weight-gradient accumulation, ``closest.kernels``), so
    that check-config's comparison names each one the file would have to change to run
    the best plan at its predicted step, not only the plan's sizes."""
    c = job.cost_options or CostOptions()
    out = {"cross-entropy": LOSS_FLAGS[c.loss_kernels], "attention": str(job.attention),
           "weight gradients": c.wgrad.value}
    if job.shape is not None and job.shape.moe:
        out["dispatcher"] = c.dispatcher.value
    return out
