"""Megatron-LM's schedule rules, as check-config applies them (core_r0.16).

The non-interleaved schedule clamps its warm-up (``get_pp_rank_microbatches``),
so m < pp runs; the interleaved one
(``forward_backward_pipelining_with_interleaving``,
megatron/core/pipeline_parallel/schedules.py) needs the micro-batch group N
(default pp) within [pp, m] and ``m % N`` either 0 or >= pp; interleaving
needs pp > 1, or pp > 2 without p2p overlap (validate_args,
megatron/training/arguments.py).
"""

from __future__ import annotations

from pptune.costmodel.schedule_orders import microbatch_group
from pptune.costmodel.schedules import Schedule
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.megatron.pipeline import Knobs
from pptune.schemas import TrainingConfig


def knobs(semantics: Semantics) -> Knobs:
    """The reader's knobs; Megatron-LM's defaults for a config it did not read."""
    return semantics.details if isinstance(semantics.details, Knobs) else Knobs()


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    p = cfg.pp
    if cfg.schedule is not Schedule.INTERLEAVED:
        return
    group = knobs(semantics).microbatch_group or p
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


def unsimulated_group(cfg: TrainingConfig, m: int, semantics: Semantics) -> str | None:
    """A stated micro-batch group other than the one pptune simulates for (pp, m): pp
    where it divides m, else the least valid one (schedule_orders.microbatch_group)."""
    group = knobs(semantics).microbatch_group
    if cfg.schedule is not Schedule.INTERLEAVED or group is None:
        return None
    simulated = microbatch_group(cfg.pp, m)
    if simulated is None or group == simulated:
        return None
    return (f"--microbatch-group-size-per-virtual-pipeline-stage {group}; pptune simulates "
            f"{m} micro-batches on pp {cfg.pp} in groups of {simulated}")


def interleave_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """validate_args: interleaving needs pp > 1, or pp > 2 with --no-overlap-p2p-communication."""
    if cfg.schedule is not Schedule.INTERLEAVED:
        return
    overlap = knobs(semantics).overlap_p2p
    floor = 1 if overlap else 2
    if cfg.pp <= floor:
        add("megatron-interleaved-pp", "error",
            f"interleaved schedule with pp {cfg.pp}: Megatron-LM validate_args requires the "
            f"pipeline-model-parallel size to be greater than {floor}"
            + ("" if overlap else " without p2p overlap")
            + " (megatron/training/arguments.py)", pp=cfg.pp)


def a2a_overlap_rule(cfg: TrainingConfig, add: Add) -> None:
    """--overlap-moe-expert-parallel-comm: megatron-core 0.16 TransformerConfig asserts a
    virtual pipeline with pp > 1 and no full recomputation (transformer_config.py)."""
    if not cfg.a2a_overlap:
        return
    if cfg.pp > 1 and cfg.schedule is not Schedule.INTERLEAVED:
        add("megatron-a2a-overlap", "error",
            f"--overlap-moe-expert-parallel-comm with pp {cfg.pp} and no virtual pipeline: "
            "megatron-core asserts 'If enabling EP A2A overlap, "
            "virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1' (transformer_config.py); add "
            "--num-virtual-stages-per-pipeline-rank", pp=cfg.pp)
    if cfg.recompute == "full":
        add("megatron-a2a-overlap", "error",
            "--overlap-moe-expert-parallel-comm with full recomputation: megatron-core asserts "
            "'disable full recomputation when enabling overlap_moe_expert_parallel_comm' "
            "(transformer_config.py)")
    if cfg.mtp_layers == 1 and cfg.pp == 1:
        add("megatron-a2a-overlap", "error",
            "--overlap-moe-expert-parallel-comm with an MTP layer and no pipeline: megatron-core "
            "asserts 'Pipeline model parallel size must be larger than 1 when enabling "
            "overlap_moe_expert_parallel_comm with MTP layer' (transformer_config.py)")


def overlap_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """--overlap-param-gather: validate_args asserts the distributed optimizer or
    Megatron-FSDP, and --overlap-grad-reduce (megatron/training/arguments.py)."""
    if not cfg.overlap_param_gather:
        return
    if not cfg.sharded_optimizer and not knobs(semantics).megatron_fsdp:
        add("megatron-overlap-param-gather", "error",
            "--overlap-param-gather without --use-distributed-optimizer or "
            "--use-megatron-fsdp: Megatron-LM validate_args asserts '--overlap-param-gather "
            "only supported with distributed optimizer or megatron fsdp' "
            "(megatron/training/arguments.py)")
    if not cfg.overlap_grad_reduce:
        add("megatron-overlap-param-gather", "error",
            "--overlap-param-gather without --overlap-grad-reduce: Megatron-LM validate_args "
            "asserts 'Must use --overlap-param-gather with --overlap-grad-reduce' "
            "(megatron/training/arguments.py)")
