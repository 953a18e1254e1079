"""The closest plan a torchtitan job file states.

torchtitan runs GPipe, 1F1B (micro-batches >= stages, torch's Schedule1F1B),
Interleaved1F1B, ZBVZeroBubble and DualPipeV (torch's ScheduleDualPipeV) with
pipeline ranks outermost in its device mesh, on any split
(``module_fqns_per_model_part``); ZB-H1 with one stage per rank is not
expressible there (InterleavedZeroBubble needs two), nor DeepSeek's
bidirectional DualPipe (torch has none): its closest plans are DualPipeV and
ZBV on the same ranks (2 x pp stages, split evenly) and 1F1B over its pp chunks.
Its attention is a fused kernel (SDPA or flex attention) and its tensor
parallelism shards the sequence too; its files state FSDP or no sharding.
"""

from __future__ import annotations

from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import DP_INNER, Plan, Sharding
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job, Stated
from pptune.frameworks.torchtitan.cp_fp8 import stateable_exchange

NAME = "torchtitan"
STATEABLE = (Sharding.FSDP, Sharding.NONE)  # best first as a substitute
UNSTATED = {Sharding.ZERO1: "ZeRO-1", Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3"}


def closest_plan(job: Job, plan: Plan, rank: int) -> Stated:
    """The plan itself when the job file states it, else the closest one that does."""
    notes: list[str] = []
    job, plan = ex.priced_as_run(
        job, plan, name=NAME, attention="flash", sequence_parallel=job.request.tp > 1,
        notes=notes,
        runs="flash attention (SDPA) and sequence parallelism with tensor parallelism")
    job, plan = stateable_exchange(job, plan, notes)
    plan, exact = ex.stateable_sharding(job, plan, name=NAME, options=STATEABLE, notes=notes)
    chosen = plan
    few = plan.schedule is Schedule.ONE_F_ONE_B and plan.num_microbatches < plan.pp
    if plan.schedule is Schedule.DUALPIPE:
        chosen = ex.closest_or_refuse(
            job, plan, ex.dualpipe_options(job, plan), name=NAME, rank=rank, notes=notes,
            why="torch.distributed.pipelining has DualPipeV, not the bidirectional DualPipe",
            rank_order=DP_INNER)
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
                                      notes=notes, rank_order=DP_INNER)
        exact = False
    ex.unstated_sharding(chosen, name=NAME, unstated=UNSTATED, notes=notes)
    return Stated(job, chosen, exact, tuple(notes))
