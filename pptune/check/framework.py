"""Schedule rules each framework enforces on the micro-batch count, per version.

A rule here is the framework's own: when it fires, the framework refuses
the run (an error finding citing its source). What only costs speed (few
micro-batches, a large bubble) is left to the predictions.

- DeepSpeed 0.19.8: ``TrainSchedule`` (deepspeed/runtime/pipe/schedule.py)
  runs any number of micro-batches (GA) on any number of stages; the
  PipelineEngine (deepspeed/runtime/pipe/engine.py) refuses ZeRO-2/3.
- Megatron-LM core_r0.16: the non-interleaved schedule clamps its warm-up
  (``get_pp_rank_microbatches``), so m < pp runs; the interleaved one
  (``forward_backward_pipelining_with_interleaving``) needs the
  micro-batch group N (default pp) within [pp, m] and ``m % N`` either 0 or
  >= pp; interleaving needs pp > 1, or pp > 2 without p2p overlap
  (validate_args).
- torch 2.13 (torchtitan and pptune's own runs): ``Schedule1F1B`` needs
  m >= stages (from 2.7); ``ScheduleInterleaved1F1B`` and
  ``ScheduleInterleavedZeroBubble`` need m a multiple of their round count
  max(1, m // pp) (from 2.6; before, a multiple of pp); ``ScheduleGPipe``
  has no rule; ZBV runs exactly two stages per rank.
"""

from __future__ import annotations

from collections.abc import Callable

from pptune.configs.fields import Semantics
from pptune.costmodel.schedules import Schedule
from pptune.schemas import TrainingConfig

Add = Callable[..., None]


def schedule_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    """Error findings for micro-batch counts the config's framework refuses."""
    if cfg.source_format == "deepspeed":
        return  # TrainSchedule has no micro-batch rule
    if cfg.source_format == "megatron":
        _megatron(cfg, m, semantics, add)
    else:
        _torch(cfg, m, semantics, add)


def _megatron(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    p = cfg.pp
    if cfg.schedule is not Schedule.INTERLEAVED:
        return
    group = semantics.microbatch_group or p
    where = ("(megatron/core/pipeline_parallel/schedules.py "
             "forward_backward_pipelining_with_interleaving)")
    if not p <= group <= m:
        add("megatron-microbatch-group", "error",
            f"interleaved schedule with {m} micro-batches and a micro-batch group of {group} "
            f"per virtual stage (pp {p}): Megatron-LM raises 'The number of contiguous "
            f"micro-batches in a virtual pipeline stage should range in [PP={p} , M={m}]' "
            f"{where}; use >= {max(p, group)} micro-batches", microbatches=m, pp=p, group=group)
    elif 0 < m % group < p:
        add("interleaved-m-not-multiple", "error",
            f"interleaved schedule: {m} micro-batches leave a remainder of {m % group} after "
            f"groups of {group}, below pp {p}: Megatron-LM raises 'The remainder of M ... "
            f"should be 0, or larger than or equal to the pipeline-parallel size' {where}; "
            f"use {m + group - m % group}", microbatches=m, pp=p, group=group)


def megatron_interleave_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """validate_args: interleaving needs pp > 1, or pp > 2 with --no-overlap-p2p-communication."""
    if cfg.source_format != "megatron" or cfg.schedule is not Schedule.INTERLEAVED:
        return
    floor = 1 if semantics.overlap_p2p else 2
    if cfg.pp <= floor:
        add("megatron-interleaved-pp", "error",
            f"interleaved schedule with pp {cfg.pp}: Megatron-LM validate_args requires the "
            f"pipeline-model-parallel size to be greater than {floor}"
            + ("" if semantics.overlap_p2p else " without p2p overlap")
            + " (megatron/training/arguments.py)", pp=cfg.pp)


def _torch(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    p, versions = cfg.pp, semantics.versions
    where = f"(torch {versions.torch} torch/distributed/pipelining/schedules.py"
    if cfg.schedule is Schedule.ONE_F_ONE_B and m < p and versions.torch_1f1b_needs_m_ge_stages():
        add("1f1b-m-lt-pp", "error",
            f"1f1b with fewer micro-batches than stages ({m} < {p}): torch's Schedule1F1B raises "
            f"'Number of microbatches ({m}) must be greater than or equal to the number of "
            f"stages ({p})' {where}, Schedule1F1B.__init__); raise the micro-batches to >= {p}",
            microbatches=m, pp=p)
    if cfg.schedule not in (Schedule.INTERLEAVED, Schedule.ZB_H1) or p < 2:
        return
    if cfg.schedule is Schedule.ZB_H1 and cfg.source_format != "torchtitan":
        return  # pptune's own zb-h1 runs one stage per rank: no round rule
    name = ("ScheduleInterleaved1F1B" if cfg.schedule is Schedule.INTERLEAVED
            else "ScheduleInterleavedZeroBubble")
    if versions.torch_interleaved_rounds():
        rounds = max(1, m // p)
        if m % rounds:
            good = _next_valid(m, p)
            add("interleaved-rounds", "error",
                f"{m} micro-batches on pp {p}: torch's {name} needs a multiple of its round "
                f"count max(1, m // pp) = {rounds} ('Interleaved 1F1B requires the number of "
                f"microbatches to be a multiple of the number of rounds') {where}); use {good}",
                microbatches=m, pp=p, rounds=rounds)
    elif m % p:
        add("interleaved-m-not-multiple", "error",
            f"{m} micro-batches on pp {p}: torch {versions.torch}'s {name} requires a multiple of "
            f"the number of pipeline ranks {where}); use {m + p - m % p}", microbatches=m, pp=p)


def _next_valid(m: int, p: int) -> int:
    """The smallest count above m that torch's round rule accepts."""
    n = m + 1
    while n % max(1, n // p):
        n += 1
    return n


def deepspeed_rules(cfg: TrainingConfig, add: Add) -> None:
    """DeepSpeed PipelineEngine.__init__ asserts 'ZeRO-2 and ZeRO-3 are incompatible with
    pipeline parallelism' (deepspeed/runtime/pipe/engine.py)."""
    if cfg.source_format == "deepspeed" and cfg.zero_stage >= 2 and cfg.pp > 1:
        add("deepspeed-zero-pp", "error",
            f"ZeRO stage {cfg.zero_stage} with pipeline parallelism (pp={cfg.pp}): DeepSpeed's "
            "PipelineEngine asserts 'ZeRO-2 and ZeRO-3 are incompatible with pipeline "
            "parallelism' (deepspeed/runtime/pipe/engine.py); use stage 0 or 1",
            zero_stage=cfg.zero_stage)

