"""Megatron-LM's expert all-to-all overlap where CUDA_DEVICE_MAX_CONNECTIONS is contested.

Before Blackwell, validate_args asserts one connection beside tensor or context
parallelism, and only warns beside ``--overlap-moe-expert-parallel-comm``, which wants
more than one (megatron-core's MoE README: 'Requirements for EP A2A Overlap: ...
CUDA_DEVICE_MAX_CONNECTIONS > 1'): 'For Hopper and before, try not to use tensor model
parallelism or context parallelism with overlap_moe_expert_parallel_comm'
(megatron/training/arguments.py). Where the plan also prices communication hidden that
the one connection orders (context parallelism's ring exchange, Transformer Engine's
overlapped tensor-parallel collectives) no value serves both (rules.contested_connections),
and a script follows that advice: it leaves the overlap out, exports one connection, and
is priced so (``without_contested_overlap``); ``as_run`` refuses a plan with the overlap
there, so ``recommend --framework megatron`` ranks none.
"""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.search import Plan
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.common.baseline import ratio
from pptune.frameworks.megatron.rules import contested_connections
from pptune.report.fmt import fmt_seconds


def sequence_settings(job: Job, tp: int, ep: int) -> tuple[bool, bool]:
    """(sequence parallelism, Transformer Engine's TP overlap) as the script runs a plan of
    this tp and ep (``with_sequence_parallel`` says why)."""
    if tp == 1:
        return job.sequence_parallel, job.tp_comm_overlap
    moe = ep > 1 or (job.shape is not None and job.shape.moe)
    overlap = job.tp_comm_overlap and job.attention != "eager"
    return job.sequence_parallel or moe or overlap, overlap


def contested(job: Job, plan: Plan, overlap: bool | None = None) -> bool:
    """Whether a script of the plan (with the expert all-to-all overlap: ``overlap``, else
    the plan's own) runs it beside communication that wants one connection, before
    Blackwell (rules.contested_connections: context parallelism, or the tensor-parallel
    collectives Transformer Engine overlaps, as the script runs its tp: sequence_settings)."""
    split, tp_overlap = sequence_settings(job, plan.tp, plan.ep)
    return contested_connections(plan.tp, plan.cp, plan.a2a_overlap if overlap is None
                                 else overlap, job.device, plan.tp > 1 and split and tp_overlap)


def without_contested_overlap(job: Job, plan: Plan, rank: int, notes: list[str]
                              ) -> tuple[Job, Plan, bool]:
    """(job, plan, as ranked): on ranks where Megatron-LM warns of the expert all-to-all
    overlap (``contested``), the job searched without its combined order, so that no plan
    put in this one's place runs it either, and the plan re-priced without it, with a
    note: the script leaves the overlap out and exports one connection (module doc)."""
    if not contested(job, plan, overlap=True):
        return job, plan, True
    job = replace(job, request=replace(job.request, combined_order=False))
    if not plan.a2a_overlap:
        return job, plan, True
    alt = ex.price(job, replace(plan.spec, a2a_overlap=False))
    notes.append(f"megatron: plan {rank}'s expert all-to-all overlap "
                 "(--overlap-moe-expert-parallel-comm) left out: beside "
                 + ("context parallelism" if plan.cp > 1 else "overlapped tensor-parallel "
                    "collectives") + " before Blackwell Megatron-LM validate_args warns 'try "
                 "not to use tensor model parallelism or context parallelism with "
                 "overlap_moe_expert_parallel_comm', and no CUDA_DEVICE_MAX_CONNECTIONS serves "
                 "both; emitting it with the all-to-all exposed and one connection, predicted "
                 f"step {fmt_seconds(alt.step_time_s)} "
                 f"({ratio(alt.step_time_s, plan.step_time_s)})")
    return job, alt, False
