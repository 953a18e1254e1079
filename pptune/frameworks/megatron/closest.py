"""The closest plan a Megatron-LM script states.

Megatron-LM runs 1f1b and interleaved-1f1b, on the splits megatron-core
builds (``split.py``): even, uneven ``--decoder-first/last-pipeline-num-layers``
(also with ``--num-virtual-stages-per-pipeline-rank``), or the embedding /
loss counted as a layer (``--account-for-embedding/loss-in-pipeline-split``).
Its scripts state the distributed optimizer (ZeRO-1) or no sharding, and
full recomputation (its selective recomputes core attention only, and its
block method one count for every stage: no every-Nth-block selective).
"""

from __future__ import annotations

from pptune.costmodel.partition import add_ends, strip_ends
from pptune.costmodel.schedules import OVERLAPPED, Schedule
from pptune.costmodel.search import Plan, Recompute, Sharding
from pptune.errors import BadInput
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job, Stated
from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.megatron.cp_fp8 import pp_last_with_cp
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks

NAME = "megatron"
STATEABLE = (Sharding.ZERO1, Sharding.NONE)  # best first as a substitute
UNSTATED = {Sharding.ZERO2: "ZeRO-2", Sharding.ZERO3: "ZeRO-3", Sharding.FSDP: "FSDP"}


def closest_plan(job: Job, plan: Plan, rank: int) -> Stated:
    """The plan itself when a script states it, else the closest one that does."""
    notes: list[str] = []
    plan, exact = ex.stateable_sharding(job, plan, name=NAME, options=STATEABLE, notes=notes)
    if plan.recompute is Recompute.SELECTIVE:
        plan, exact = ex.full_recompute(job, plan, name=NAME, notes=notes), False
    moved = pp_last_with_cp(job, plan, rank=rank, notes=notes)
    exact = exact and moved is plan
    chosen = plan = moved
    if megatron_split(plan) is None:
        why = (f"Megatron-LM has no {plan.schedule.value} schedule" + (
                   " (no DualPipe nor DualPipeV: it overlaps the expert all-to-all inside "
                   "interleaved 1F1B instead, --overlap-moe-expert-parallel-comm)"
                   if plan.schedule in OVERLAPPED else "")
               if plan.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED)
               else "megatron-core builds no such split")
        options = _options(plan, len(job.layer_names) - 2)
        chosen = ex.closest_or_refuse(job, plan, options, name=NAME, rank=rank, why=why,
                                      notes=notes)
        exact = False
    split = megatron_split(chosen)
    if split is None:  # every option is a split megatron-core builds
        raise BadInput(f"megatron cannot express plan {rank}")
    ex.unstated_sharding(chosen, name=NAME, unstated=UNSTATED, notes=notes)
    return Stated(job, chosen, exact, tuple(notes), split)


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


def megatron_split(plan: Plan) -> MegatronSplit | None:
    """The Megatron-LM flags whose split (as megatron-core builds it) is the plan's."""
    if plan.schedule not in (Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED):
        return None
    blocks = strip_ends(plan.stage_layers)
    p, v = plan.pp, plan.virtual_stages if plan.schedule is Schedule.INTERLEAVED else 1
    first, last = sum(blocks[0::p]), sum(blocks[p - 1::p])
    for cand in _candidates(sum(blocks), p, v, [first], [last]):
        try:
            if megatron_blocks(cand) == blocks:
                return cand
        except FrameworkRefusal:
            continue
    return None


def _options(plan: Plan, n_blocks: int) -> list[ex.Option]:
    """Splits Megatron-LM builds near the plan's first and last ranks (+-6 blocks): with
    the plan's virtual stages when interleaved, and without (1F1B)."""
    p = plan.pp
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
                opts.append((schedule, v, add_ends(megatron_blocks(cand))))
            except FrameworkRefusal:
                continue
    return opts
