"""The closest plan a Megatron-LM script states.

Megatron-LM runs 1f1b and interleaved-1f1b, on the splits megatron-core
builds (``split.py``): even, uneven ``--decoder-first/last-pipeline-num-layers``
(also with ``--num-virtual-stages-per-pipeline-rank``), or the embedding /
loss counted as a layer (``--account-for-embedding/loss-in-pipeline-split``);
any other split (and any MTP placement) as ``--pipeline-model-parallel-layout``
(``layout.py``), unless megatron-core's MTP rules refuse it. Its scripts state
the distributed optimizer (ZeRO-1), Megatron-FSDP's optim_grads (ZeRO-2) and
optim_grads_params (ZeRO-3 with 16-bit gradients, FSDP with FP32 ones, which it
gathers every layer of in each micro-batch, under a pipeline too: ``fsdp.py``) or no
sharding, and full recomputation (its
selective recomputes core attention only: no every-Nth-block selective), of
every layer or of the first N of every stage (the block method: one N for all
stages, so a plan recomputing per stage is emitted with its largest count).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.partition import add_ends, is_mtp, mtp_count, strip_ends
from pptune.costmodel.precision import Fp8Kernels
from pptune.costmodel.rates import WgradAccum
from pptune.costmodel.schedules import OVERLAPPED, Schedule
from pptune.costmodel.search import Plan, PlanRequest, Recompute, Sharding, evaluate
from pptune.costmodel.sharding import FP32_MOMENT_BYTES
from pptune.costmodel.stage_recompute import stage_blocks
from pptune.errors import BadInput
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job, Stated, keep
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.megatron.connections import sequence_settings, without_contested_overlap
from pptune.frameworks.megatron.cp_fp8 import pp_last_with_cp
from pptune.frameworks.megatron.fsdp import GRAD_QUEUE_ELEMENTS, STRATEGY, WEIGHT_BYTES
from pptune.frameworks.megatron.layout import plan_layout
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks
from pptune.options import CostOptions
from pptune.report.fmt import fmt_bytes, fmt_seconds

NAME = "megatron"
# best first as a substitute (for FSDP that outgrows the GPU gathered per layer: ZeRO-3)
STATEABLE = (Sharding.ZERO3, Sharding.FSDP, Sharding.ZERO2, Sharding.ZERO1, Sharding.NONE)
BLOCK = "--recompute-method block --recompute-num-layers"
BUCKETS = ("each backward's gradients in unsharded buckets until their queued "
           "reduce-scatters pass {queue:,.0f} elements")
RUNS = (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)  # Megatron-LM's schedules
# where its scripts' weight gradients go (costmodel/rates.py WgradAccum), as priced
WGRAD_RUNS = {
    WgradAccum.FUSED: "weight gradients accumulated into the FP32 main_grad by their GEMMs "
                      "(gradient_accumulation_fusion, its default)",
    WgradAccum.UNFUSED: "weight gradients added into the FP32 main_grad after their GEMMs "
                        "(--no-gradient-accumulation-fusion)",
    WgradAccum.BF16: "Megatron-FSDP's BF16 weight gradients (--no-gradient-accumulation-fusion, "
                     "their copy into its gradient buckets not counted: fsdp.py)",
}

# Transformer Engine's attention backend at auto: cuDNN's fused attention (reader.py)
ATTENTION = "cudnn"
# the kernels its scripts state per kernel flag (Adapter.states_kernels), the first run for
# any other asked, as ``kernels`` prices them: Transformer Engine's attention or the local
# implementation's eager one, --cross-entropy-loss-fusion's loss (writer.py), weight
# gradients into main_grad fused or not (Megatron-FSDP's BF16 ones go with its shardings:
# ``wgrad_accum``) and Transformer Engine's FP8 linears
STATED_KERNELS = {"attention": (ATTENTION, "eager"), "cross_entropy": ("native",),
                  "wgrad_accum": ("fused", "unfused"), "fp8_kernels": ("te",)}


def wgrad_accum(asked: WgradAccum, sharding: Sharding) -> WgradAccum:
    """Where a script's weight gradients go: under Megatron-FSDP (ZeRO-2, ZeRO-3, FSDP),
    written with --no-gradient-accumulation-fusion, BF16 gradients copied into its
    buckets, priced without the copy as its reader prices them (fsdp.py); else into the
    main_grad, unfused where the job was priced so, else fused (Megatron-LM's default)."""
    if sharding in STRATEGY:
        return WgradAccum.BF16
    return WgradAccum.UNFUSED if asked is WgradAccum.UNFUSED else WgradAccum.FUSED


@dataclass(frozen=True)
class Placement:
    """How the script states the plan's stages and recomputation."""

    split: MegatronSplit | None  # the split flags, or None: the layout states the split
    layout: str | None = None  # --pipeline-model-parallel-layout
    block_layers: int | None = None  # --recompute-method block --recompute-num-layers N


def shardings(req: PlanRequest) -> tuple[Sharding, ...]:
    """The shardings a script states, best first as a substitute: the distributed
    optimizer alone under the precision-aware optimizer (widths.py)."""
    return STATEABLE if req.moment_bytes == FP32_MOMENT_BYTES else (Sharding.ZERO1,)


def queued(req: PlanRequest) -> float:
    """The gradient elements Megatron-FSDP's backward keeps queued in unsharded buckets
    (fsdp.py): the request's (a script's), else its default."""
    given = req.fsdp_grad_queue_elements
    return GRAD_QUEUE_ELEMENTS if given is None else given


def stateable_request(req: PlanRequest, model: str | None) -> PlanRequest:
    """The search over what a Megatron-LM script states: the distributed optimizer,
    Megatron-FSDP (FSDP resharded after every use, as it runs, and its queued gradient
    buckets: fsdp.py) or none, 1F1B
    and interleaved 1F1B, recomputation of whole blocks or of modules (no
    every-Nth-block selective recomputation: full recomputation instead, as
    ``closest_plan`` substitutes it), and recomputed-block counts as one count for
    every stage (``--recompute-method block --recompute-num-layers N``), not one a
    stage."""
    del model  # every model's layers can be pipelined
    recomputes = tuple(dict.fromkeys(Recompute.FULL if r is Recompute.SELECTIVE else r
                                     for r in req.recomputes))
    return replace(req, shardings=keep(req.shardings, shardings(req)),
                   schedules=keep(req.schedules, RUNS), recomputes=recomputes,
                   stage_recompute=True, uniform_recompute=True,
                   fsdp_reshard_after_forward=True, fsdp_weight_bytes=WEIGHT_BYTES,
                   fsdp_grad_queue_elements=queued(req))


def closest_plan(job: Job, plan: Plan, rank: int) -> Stated:
    """The plan itself when a script states it, else the closest one that does."""
    notes: list[str] = []
    job, resharded, as_ranked = megatron_fsdp(job, plan, notes)
    options = shardings(job.request)
    if resharded is None:  # as Megatron-FSDP runs it, it outgrows the GPU: another sharding
        options = tuple(s for s in options if s is not plan.sharding)
    plan = resharded or plan
    job, plan = with_sequence_parallel(job, plan, notes)
    asked = (job.cost_options or CostOptions()).wgrad
    accum = wgrad_accum(asked, plan.sharding)
    job, plan = run_kernels(job, plan, notes)
    job, plan, uncontested = without_contested_overlap(job, plan, rank, notes)
    plan, exact = ex.stateable_sharding(job, plan, name=NAME, options=options, notes=notes,
                                        within=stateable_request(job.request, job.model),
                                        as_run=lambda p: block_recompute(job, p, [])[0])
    exact = exact and as_ranked and uncontested
    if plan.recompute is Recompute.SELECTIVE:
        plan, exact = ex.full_recompute(job, plan, name=NAME, notes=notes), False
    moved = pp_last_with_cp(job, plan, rank=rank, notes=notes)
    exact = exact and moved is plan
    plan = moved
    chosen, names = plan, job.layer_names
    layout = None
    if megatron_split(plan, names) is None:
        layout = plan_layout(names, plan.stage_layers, plan.pp) if plan.schedule in RUNS else None
        if layout is None:
            why = (f"Megatron-LM has no {plan.schedule.value} schedule" + (
                       " (no DualPipe nor DualPipeV: it overlaps the expert all-to-all inside "
                       "interleaved 1F1B instead, --overlap-moe-expert-parallel-comm)"
                       if plan.schedule in OVERLAPPED else "")
                   if plan.schedule not in RUNS
                   else "megatron-core places every MTP layer in one stage, the last virtual "
                   "stage of its rank")
            found = ex.fastest_on(job, plan, RUNS) if plan.schedule not in RUNS else None
            if found is not None and megatron_split(found, names) is None and plan_layout(
                    names, found.stage_layers, found.pp) is None:
                found = None  # a split only a layout states, which megatron-core refuses
            chosen = ex.closest_or_refuse(job, plan, _options(plan, names), name=NAME,
                                          rank=rank, why=why, notes=notes, found=found,
                                          runs=RUNS, as_run=lambda p: block_recompute(
                                              job, p, [])[0])
            exact = False
            if megatron_split(chosen, names) is None:
                layout = plan_layout(names, chosen.stage_layers, chosen.pp)
    split = None if layout is not None else megatron_split(chosen, names)
    if split is None and layout is None:  # every option is a split megatron-core builds
        raise BadInput(f"megatron cannot express plan {rank}")
    chosen, block, same = block_recompute(job, chosen, notes)
    if wgrad_accum(asked, chosen.sharding) is not accum:  # another sharding than the plan's
        accum = wgrad_accum(asked, chosen.sharding)
        job, chosen = ex.priced_as_run(job, chosen, name=NAME, attention=job.attention,
                                       sequence_parallel=job.sequence_parallel, notes=notes,
                                       wgrad_accum=accum, runs=WGRAD_RUNS[accum])
    if chosen.sharding not in options:  # a script that states one would not fit
        why = ("Megatron-LM's precision-aware optimizer runs on the distributed optimizer "
               "alone" if options == (Sharding.ZERO1,) else "Megatron-FSDP gathers every "
               "layer in each micro-batch, under a pipeline too")
        raise BadInput(f"megatron cannot express plan {rank}: it shards the training state as "
                       f"{ex.SHARDING_NAMES[chosen.sharding]} and no plan with "
                       f"{' or '.join(ex.SHARDING_NAMES[s] for s in options)} fits ({why}); "
                       "use more GPUs")
    return Stated(job, chosen, exact and same, tuple(notes), Placement(split, layout, block))


def dispatcher(asked: Dispatcher, tp: int, ep: int) -> Dispatcher:
    """The token dispatcher a script states for the one ``asked`` (writer.moe_args): the
    flex dispatcher on DeepEP only where tp x ep > 1 (megatron-core: "Flex token
    dispatcher requires TPxEP > 1"), else alltoall."""
    return Dispatcher.ALLTOALL if asked is Dispatcher.DEEPEP and tp * ep == 1 else asked


def kernels(job: Job, sharding: Sharding, tp: int, ep: int) -> dict[str, Any]:
    """The kernels a script runs (``ex.priced_as_run``'s options): megatron-core's fused
    loss (writer.py), Transformer Engine's attention backend at auto (cuDNN's fused
    attention) and FP8 linears, its weight gradients where the sharding puts them
    (``wgrad_accum``) and the token dispatcher it can state at ``tp`` x ``ep``."""
    c = job.cost_options or CostOptions()
    return dict(attention="eager" if job.attention == "eager" else ATTENTION,
                cross_entropy=CrossEntropy.NATIVE, fp8_kernels=Fp8Kernels.TE,
                wgrad_accum=wgrad_accum(c.wgrad, sharding),
                dispatcher=dispatcher(c.dispatcher, tp, ep))


def run_kernels(job: Job, plan: Plan, notes: list[str], substitute: bool = True
                ) -> tuple[Job, Plan]:
    """The job and plan priced with the kernels the script runs (``kernels``), with a
    note where that changes them (``substitute``: as ``ex.priced_as_run`` takes it)."""
    run = kernels(job, plan.sharding, plan.tp, plan.ep)
    c = job.cost_options or CostOptions()
    asked = c.wgrad
    return ex.priced_as_run(job, plan, name=NAME, sequence_parallel=job.sequence_parallel,
                            notes=notes, substitute=substitute, **run,
                            runs="megatron-core's fused cross-entropy "
                            "(--cross-entropy-loss-fusion, costmodel/loss.py)"
                            + ("" if run["attention"] == job.attention else
                               " and Transformer Engine's cuDNN attention (its default "
                               "backend on Hopper and later)")
                            + ("" if run["wgrad_accum"] is asked
                               else f" and {WGRAD_RUNS[run['wgrad_accum']]}")
                            + ("" if run["dispatcher"] is c.dispatcher or job.shape is None
                               or not job.shape.moe else " and the alltoall dispatcher "
                               "(megatron-core's flex dispatcher needs tp x ep > 1)"))


def megatron_fsdp(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan | None, bool]:
    """The job as Megatron-FSDP runs ZeRO-2, ZeRO-3 and FSDP: each backward's gradients
    kept in unsharded buckets while their reduce-scatters are queued (``queued``), and
    for FSDP every layer's weights gathered again in each micro-batch's forward and
    backward (fsdp.py), also under a pipeline, where pptune's FSDP otherwise keeps a
    stage's weights gathered for the step as torch's pipelining does, and its BF16 weight
    shard kept beside the FP32 main weights (``WEIGHT_BYTES``); the plan re-priced so
    (with a note where that changes it), or None when it then outgrows the GPU; and
    whether it is gathered as ranked."""
    queue = queued(job.request)
    buckets = BUCKETS.format(queue=queue)
    kept = replace(job.request, fsdp_weight_bytes=WEIGHT_BYTES, fsdp_grad_queue_elements=queue)
    run = replace(job, request=replace(kept, fsdp_reshard_after_forward=True))
    if plan.sharding not in STRATEGY or run.request == job.request:
        return run, plan, True
    alt = ex.price(run, plan.spec)
    if not ex.fits(run, alt):  # the fastest plan a script states that fits, if any
        found = ex.stateable_best(run, plan, stateable_request(run.request, run.model))
        if found is not None:
            notes.append(f"Megatron-FSDP keeps {buckets} (fsdp.py): the plan outgrows the GPU "
                         f"so; emitting the best plan a script states instead (pp={found.pp} "
                         f"dp={found.dp} {found.sharding.value}/{found.recompute.value}), "
                         f"predicted step {fmt_seconds(found.step_time_s)} "
                         f"({ratio(found.step_time_s, plan.step_time_s)})")
        return run, found, False
    if (alt.step_time_s, alt.peak_memory_bytes) == (plan.step_time_s, plan.peak_memory_bytes):
        return run, plan, True
    if plan.sharding is not Sharding.FSDP:
        notes.append(f"Megatron-FSDP keeps {buckets} (fsdp.py): predicted so, peak memory "
                     f"{fmt_bytes(max(alt.peak_memory_bytes))}")
        return run, alt, True
    own = ex.price(replace(job, request=kept), plan.spec)  # with its shard alone
    gathered = (own.step_time_s, own.peak_memory_bytes) != (alt.step_time_s,
                                                            alt.peak_memory_bytes)
    notes.append(("Megatron-FSDP gathers every layer's weights in each micro-batch's forward "
                  "and backward, under a pipeline too (megatron_fsdp.py), and keeps"
                  if gathered else "Megatron-FSDP keeps")
                 + f" a BF16 weight shard beside its FP32 main weights and {buckets} "
                 "(fsdp.py): predicted "
                 f"so, step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)}), peak memory "
                 f"{fmt_bytes(max(alt.peak_memory_bytes))}")
    return run, alt, not gathered


def with_sequence_parallel(job: Job, plan: Plan, notes: list[str]) -> tuple[Job, Plan]:
    """The job and plan as the script runs them with tensor parallelism: with sequence
    parallelism where megatron-core needs it (MoE layers: moe_layer.py MoELayer.forward
    raises without it; --tp-comm-overlap: validate_args asserts it), and without
    Transformer Engine's TP overlap under --transformer-impl local (the plan's eager
    attention), whose linear layers have none (only extensions/transformer_engine.py
    reads tp_comm_overlap). Each re-priced, with a note."""
    split, overlap = sequence_settings(job, plan.tp, plan.ep)
    moe = plan.ep > 1 or (job.shape is not None and job.shape.moe)
    if split and not job.sequence_parallel:
        job, plan = ex.priced_as_run(
            job, plan, name=NAME, attention=job.attention, sequence_parallel=True, notes=notes,
            runs="sequence parallelism with " + ("MoE layers and tp > 1 (megatron-core raises "
                                                  "without it, moe_layer.py)" if moe else
                                                  "--tp-comm-overlap (validate_args asserts it)"))
        job = replace(job, sequence_parallel=True)
    if job.tp_comm_overlap and not overlap:
        job, plan = ex.priced_as_run(
            job, plan, name=NAME, attention=job.attention, sequence_parallel=job.sequence_parallel,
            notes=notes, tp_comm_overlap=False,
            runs="no tensor-parallel overlap with --transformer-impl local (its linear layers "
            "have none; the plan's eager attention is written so)")
        job = replace(job, tp_comm_overlap=False)
    return job, plan


def block_recompute(job: Job, plan: Plan, notes: list[str]) -> tuple[Plan, int | None, bool]:
    """(plan as run, N, exact): Megatron-LM's block method recomputes the first N
    layers of every stage, one N for all (transformer_block.py ``_checkpointed_forward``):
    the plan's largest per-stage count, which recomputes at least as much everywhere."""
    if plan.recompute_layers is None:
        return plan, None, True
    n = max(plan.recompute_layers)
    blocks = stage_blocks(list(job.table.names), plan.stage_layers)
    runs = tuple(min(n, b) for b in blocks)
    if runs == plan.recompute_layers:
        return plan, n, True
    alt = evaluate(job.table, job.request, replace(plan.spec, recompute_layers=runs))
    notes.append(f"Megatron-LM applies one {BLOCK} to every stage: emitting N = {n} (blocks "
                 f"recomputed per {'chunk' if plan.virtual_stages > 1 else 'stage'} "
                 f"{list(runs)} for the plan's "
                 f"{list(plan.recompute_layers)}), predicted step "
                 f"{fmt_seconds(alt.step_time_s)} ({ratio(alt.step_time_s, plan.step_time_s)})")
    return alt, n, False


def _candidates(blocks_total: int, p: int, v: int, firsts: list[int],
                lasts: list[int]) -> list[MegatronSplit]:
    """Megatron-LM splits to try: even, account-for embedding/loss, uneven first/last."""
    out = [MegatronSplit(blocks_total, p, v, account_embedding=e, account_loss=lo)
           for e in (False, True) for lo in (False, True)]
    if p >= 2:
        out += [MegatronSplit(blocks_total, p, v, first, last)
                for first in [*firsts, None] for last in [*lasts, None]
                if first is not None or last is not None]
    return out


def megatron_split(plan: Plan, names: Sequence[str]) -> MegatronSplit | None:
    """The Megatron-LM flags whose split (as megatron-core builds it) is the plan's:
    its MTP layers, if any, all on the last stage (where megatron-core builds them
    without a layout)."""
    if plan.schedule not in RUNS:
        return None
    if any(map(is_mtp, names[:len(names) - plan.stage_layers[-1]])):
        return None
    blocks = strip_ends(plan.stage_layers)
    blocks[-1] -= mtp_count(names)
    p, v = plan.pp, plan.virtual_stages if plan.schedule is Schedule.INTERLEAVED else 1
    first, last = sum(blocks[0::p]), sum(blocks[p - 1::p])
    for cand in _candidates(sum(blocks), p, v, [first], [last]):
        try:
            if megatron_blocks(cand) == blocks:
                return cand
        except FrameworkRefusal:
            continue
    return None


def _options(plan: Plan, names: Sequence[str]) -> list[ex.Option]:
    """Splits Megatron-LM builds near the plan's first and last ranks (+-6 blocks): with
    the plan's virtual stages when interleaved, and without (1F1B); MTP layers on the
    last stage."""
    p = plan.pp
    mtp = mtp_count(names)
    n_blocks = len(names) - 2 - mtp
    blocks = strip_ends(plan.stage_layers)
    shapes = [(Schedule.ONE_F_ONE_B, 1)]
    if plan.schedule is Schedule.INTERLEAVED:
        shapes.insert(0, (Schedule.INTERLEAVED, plan.virtual_stages))
    near = range(-6, 7)
    opts: list[ex.Option] = []
    for schedule, v in shapes:
        firsts = sorted({sum(blocks[0::p]) + d for d in near} & set(range(v, n_blocks, v)))
        lasts = sorted({sum(blocks[p - 1::p]) + d for d in near} & set(range(v, n_blocks, v)))
        for cand in _candidates(n_blocks, p, v, firsts, lasts):
            try:
                split = add_ends(megatron_blocks(cand))
            except FrameworkRefusal:
                continue
            split[-1] += mtp
            opts.append((schedule, v, split))
    return opts
