"""``PlanFile``: what ``pptune recommend --json`` prints and ``-o`` saves
(``pptune schema plan``)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from pptune.costmodel.keys import Precision
from pptune.costmodel.schedules import Schedule
from pptune.options.record import PlanFileRequest, RequestField
from pptune.schemas.base import Strict


class MemoryParts(Strict):
    """One GPU's peak memory by part, bytes; the parts sum to its ``peak_memory_bytes``
    (costmodel/memory.py's DeviceMemory, docs/models.md)."""

    state_bytes: float = Field(description="training state: weights, gradients, optimizer "
                               "state, after sharding")
    working_copies_bytes: float = Field(description="unsharded copies on top of the state "
                                        "(ZeRO-3 / FSDP gathered blocks and gradients); 0 "
                                        "for none, zero1, zero2")
    activation_bytes: float = Field(description="activations held for backward at the "
                                    "schedule's most micro-batches in flight")
    p2p_bytes: float = Field(description="pipeline send and receive buffers; 0 with pp 1")
    reserve_bytes: float = Field(description="what the framework and allocator keep beyond "
                                 "the tensors (--reserve-gib)")


class PlanRecord(Strict):
    """One ranked plan, as ``pptune recommend --json`` prints it."""

    rank: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    tp: int = Field(ge=1)
    cp: int = Field(1, ge=1, description="context-parallel size: the sequence over cp ranks")
    ep: int = Field(1, ge=1, description="expert-parallel size (mixture of experts)")
    etp: int = Field(1, ge=1, description="expert tensor-parallel size")
    precision: Precision = Field(Precision.BF16, description="GEMM precision")
    schedule: Schedule
    virtual_stages: int = Field(ge=1)
    micro_batch_size: int = Field(ge=1)
    num_microbatches: int = Field(ge=1)
    grad_accum_steps: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    stage_layers: list[int] = Field(
        description="layer count per stage in pipeline order (pp * chunks entries; dualpipe: "
        "pp, each chunk run by two ranks, down and up)")
    stage_layer_names: list[list[str]] = Field(description="first and last layer of each stage")
    bubble_rate: float
    step_time_s: float
    tokens_per_s: float
    peak_memory_bytes: list[float] = Field(description="per pipeline rank (GPU)")
    peak_memory_parts: list[MemoryParts] | None = Field(
        None, description="per pipeline rank (GPU), as peak_memory_bytes: its parts, which "
        "sum to it; null where the plan's memory is not itemized")
    memory_capacity_bytes: float
    headroom_bytes: float
    ideal_step_s: float
    efficiency: float = Field(description="ideal step time / predicted step time")
    mfu: float | None = Field(
        None, description="model FLOPs utilisation: model FLOPs per step / (step x GPUs x peak "
        "FLOP/s); null when the device's peak is unknown"
    )
    gradient_accumulation_aligned: bool = Field(description="micro-batches a multiple of pp")
    exposed_p2p_s: float | None = None
    exposed_allreduce_s: float | None = None
    exposed_amax_s: float | None = Field(
        None, description="seconds FP8 delayed scaling's amax all-reduces (one per chunk "
        "forward and backward, over the stage's tp x cp x dp ranks) add to the step; 0 "
        "without them, null when not explained"
    )
    exposed_cp_s: float | None = Field(
        None, description="seconds the context-parallel K/V exchange adds to the step on the "
        "busiest pipeline rank (what outlasts the attention it runs beside, recomputed "
        "forwards included); 0 with cp 1, null when not explained or the costs are measured"
    )
    rank_order: Literal["tp-dp-pp", "tp-pp-dp"] = Field(
        "tp-dp-pp", description="global rank order, fastest first (Megatron-LM: tp-cp-ep-dp-pp "
        "default, tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping)"
    )
    sharding: Literal["none", "zero1", "zero2", "zero3", "fsdp"] = Field(
        "none", description="training-state sharding over data parallelism"
    )
    recompute: Literal["none", "selective", "full", "modules"] = Field(
        "none", description="activation recomputation (the summary: see "
        "recompute_layers_per_stage); modules: Megatron-LM's selective recomputation of "
        "recompute_modules"
    )
    recompute_modules: list[str] | None = Field(
        None, description="recompute modules: the modules recomputed in every block they "
        "apply to (megatron-core's names: mla_up_proj, mlp of the dense blocks, moe_act); "
        "null otherwise"
    )
    recompute_layers_per_stage: list[int] | None = Field(
        None, description="transformer blocks recomputed in full on each stage (pp * chunks "
        "entries, as stage_layers): the first N of the stage, as Megatron-LM's --recompute-method "
        "block runs them; full recomputation searched per stage recomputes only where memory "
        "binds. Selective recomputation of core attention counts 0"
    )
    a2a_overlap: bool = Field(
        False, description="the MoE expert all-to-all hidden behind another micro-batch's "
        "compute: the DualPipes' F&B pairs, or Megatron-LM's combined 1F1B "
        "(--overlap-moe-expert-parallel-comm) for 1f1b and interleaved-1f1b; false without MoE"
    )
    training_days: float | None = Field(None, description="with --train-tokens")
    gpu_hours: float | None = Field(None, description="with --train-tokens")
    measured_step_s: float | None = Field(
        None, description="pptune tune: median measured step of one pipeline of this plan"
    )
    calibrated_step_s: float | None = Field(
        None, description="pptune tune: predicted step over the calibrated profile"
    )
    tune_status: str | None = Field(
        None, description="pptune tune: measured, pruned, skipped, failed or not run (and why)"
    )


class PlanFile(Strict):
    """What ``pptune recommend --json`` prints and ``-o FILE`` saves."""

    plans: list[PlanRecord]
    rejected: dict[str, int]
    source: str = Field(description="where the costs came from")
    request: RequestField = Field(
        default_factory=PlanFileRequest,
        description="what the plan was made for: the planning options as the run resolved them")
    notes: list[str] = Field(default_factory=list)

