"""A plan priced as DeepSpeed runs the config ``--emit deepspeed`` writes for it
(``Adapter.as_run``), where the config states the plan itself, and how much faster than
the search priced it that can be (``as_run_saving_s``, ``as_run_step_saving_s``):
``recommend --framework deepspeed`` ranks its plans so and check-config times the plans
it compares a config with so (frameworks/common/as_run.py).

The config runs the plan with its own kernels (closest.kernels: the model code's
attention, AutoTP without sequence parallelism, the standard all-to-all, BF16 weight
gradients) and as its engine runs the data-parallel traffic (closest.engine_request: its
overlap rules and 16-bit gradients). It cannot state, and ``closest_plan`` replaces: a
schedule but 1F1B, model ranks but data-parallel innermost, a split PipelineModule's
partition_method ("uniform", "parameters") does not build, AutoTP under a pipeline,
ZeRO-2/3 under a pipeline, torch FSDP, per-stage or every-Nth-block recomputation, and
AutoEP's expert tensor parallelism beyond 1.
"""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel import precision
from pptune.costmodel.dp_links import dp_link
from pptune.costmodel.layout import Dim
from pptune.costmodel.optimizer import AdamStep, step_s
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import DP_INNER, Plan, PlanRequest, PlanSpec, Recompute, Sharding
from pptune.costmodel.sharding import MEGATRON_GRAD_BYTES, ShardComm, stage_comm
from pptune.errors import BadInput
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.repricing import kernels_job, table_saving_s
from pptune.frameworks.deepspeed.closest import NAME, engine_request, kernels
from pptune.frameworks.deepspeed.partition import own_splits

PIPED = (Sharding.NONE, Sharding.ZERO1)  # PipelineEngine: ZeRO-2 and -3 refused


def refusal(job: Job, plan: Plan) -> str | None:
    """Why a DeepSpeed config cannot state the plan itself (None: it can)."""
    if plan.schedule is not Schedule.ONE_F_ONE_B or plan.virtual_stages != 1:
        return "DeepSpeed's pipeline engine runs 1F1B only"
    if plan.rank_order != DP_INNER:
        return "its topology keeps data-parallel ranks innermost"
    if plan.tp > 1 and plan.pp > 1:
        return "AutoTP runs without a pipeline (deepspeed/utils/groups.py _init_tp_mesh_device)"
    if plan.pp > 1 and plan.sharding not in PIPED:
        return "its pipeline engine runs ZeRO stage 0 or 1 only"
    if plan.sharding not in (*PIPED, Sharding.ZERO2, Sharding.ZERO3):
        return "it has no torch FSDP (written as ZeRO stage 3)"
    if plan.recompute_layers is not None or plan.recompute not in (Recompute.NONE,
                                                                   Recompute.FULL):
        return ("activation_checkpoint_interval recomputes every block or none, alike on "
                "every stage")
    if plan.ep > 1 and plan.etp != 1:
        return "AutoEP's expert_tensor_parallel_size is not supported beyond 1"
    if tuple(plan.stage_layers) not in own_splits(job.table, plan.key, plan.pp):
        return "partition_method cannot place these boundaries"
    return None


def as_run(job: Job, plan: Plan) -> tuple[Job, Plan]:
    """The job and plan priced as DeepSpeed runs the config written for the plan
    (``closest_plan``'s steps, none putting another plan in its place); BadInput where
    the config cannot state it (``refusal``). The model code builds no MTP layer: such a
    job is priced without them (as_run.as_itself then keeps the plan as searched)."""
    job, plan = ex.without_mtp(job, plan, name=NAME, rank=1, notes=[])
    why = refusal(job, plan)
    if why:
        raise BadInput(f"deepspeed cannot run the plan: {why}")
    job = kernels_job(job, plan.precision, **kernels(job, plan.tp)) or job
    run = engine_request(job.request, plan.sharding, plan.pp, plan.precision.value)
    job = replace(job, request=run)
    return job, ex.price(job, plan.spec)


def as_run_saving_s(job: Job, spec: PlanSpec) -> float:
    """The most seconds each micro-batch of a plan of ``spec`` runs faster as ``as_run``
    prices it: its layers with the config's kernels against the job's
    (repricing.table_saving_s), and, under ZeRO-2 and -3 (no pipeline: one stage), its
    per-micro-batch data-parallel traffic where the engine's runs shorter (its 16-bit
    gradients reduce half the bytes, on the link NCCL picks for its buckets). That
    traffic is folded into the ops (evaluate.with_comm): an op takes ``max(work +
    traffic x sm_share, traffic) + traffic x first_share``, with sm_share and first_share
    (the largest layer's share of the stage's parameters) at most 1, so traffic shorter
    by d shortens it by at most d x (1 + first_share); a path through the step passes
    each of the m micro-batches' forward and backward once."""
    key = spec.key or job.request.keys()[0]
    ran = kernels_job(job, key.precision, **kernels(job, key.tp))
    saved = 0.0 if ran is None else table_saving_s(job.table, ran.table, spec.micro_batch_size)
    if spec.sharding in (Sharding.ZERO2, Sharding.ZERO3) and spec.pp == 1:
        searched = _traffic(job, job.request, spec)
        run = _traffic(job, engine_request(job.request, spec.sharding, 1, key.precision.value),
                       spec)
        params = job.table.layer_params
        share = max(params, default=0.0) / (sum(params) or 1.0)
        saved += (1 + share) * (max(0.0, searched.fwd_s - run.fwd_s)
                                + max(0.0, searched.bwd_s - run.bwd_s))
    return saved


def as_run_step_saving_s(job: Job, spec: PlanSpec) -> float:
    """The most seconds a step of a plan of ``spec`` runs faster as ``as_run`` prices it,
    once, beside the micro-batches' (``as_run_saving_s``): the step ends on one rank's
    data-parallel traffic after its last backward and then the slowest rank's optimizer
    step (evaluate.evaluate). As run, that traffic takes no less than nothing, so it
    saves at most all of it as searched, exposed as it is with no backward to hide it
    (comm.dp_exposed_s with empty windows: its greatest), for the whole model's
    parameters (no stage holds more); the engine's 16-bit gradients shorten the Adam step
    (optimizer.py) by 2 bytes a gradient read and written, at most the whole model's."""
    req, table = job.request, job.table
    saved = _traffic(job, req, spec).tail_s
    run = engine_request(req, spec.sharding, spec.pp,
                         (spec.key or req.keys()[0]).precision.value)
    if table.hbm_bytes_per_s is not None and req.optimizer_step \
            and run.grad_buffer_bytes != req.grad_buffer_bytes:
        lay = req.layout(spec)
        shards = lay.dp * lay.cp if spec.sharding is not Sharding.NONE else 1
        n = table.params(0, len(table.layer_params))
        was = AdamStep(n / shards, n, req.moment_bytes, req.grad_buffer_bytes
                       or MEGATRON_GRAD_BYTES)
        now = AdamStep(n / shards, n, run.moment_bytes, run.grad_buffer_bytes or 0.0)
        saved += max(0.0, step_s(was, table.hbm_bytes_per_s) - step_s(now, table.hbm_bytes_per_s))
    return saved


def _traffic(job: Job, req: PlanRequest, spec: PlanSpec) -> ShardComm:
    """The data-parallel traffic of all the model's parameters on one stage of a plan of
    ``spec`` under ``req``, with no compute window to overlap (evaluate.stage_layout's
    ``traffic``, dense over the data-parallel group and routed experts over theirs)."""
    table, lay = job.table, req.layout(spec)
    key = req.key_of(spec)
    gather = precision.param_gather_bytes(key.precision, req.fp8_param_gather)
    n = len(table.layer_params)
    experts = table.expert_params(0, n) if table.expert_param_bytes else 0.0

    def one(params: float, dims: tuple[Dim, ...], ranks: int) -> ShardComm:
        link = dp_link(table, spec.sharding, lay.group(*dims), ranks, req.grad_bytes_factor)
        return stage_comm(spec.sharding, False, params, ranks, link, req.grad_bytes_factor,
                          req.overlap_grad_reduce, param_bytes=gather,
                          overlap_gather=req.overlap_param_gather)

    dense = one(table.params(0, n) - experts, (Dim.CP, Dim.DP), lay.dp * lay.cp)
    if not experts:
        return dense
    routed = one(experts, (Dim.EDP,), lay.edp)
    return ShardComm(dense.fwd_s + routed.fwd_s, dense.bwd_s + routed.bwd_s,
                     dense.start_s + routed.start_s, dense.tail_s + routed.tail_s)
