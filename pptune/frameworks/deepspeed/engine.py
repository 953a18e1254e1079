"""What DeepSpeed 0.19.8's engines overlap with the backward, and the ZeRO stage of
each sharding.

With a pipeline the engine reduces the gradients (``ReduceTiedGrads``,
``ReduceGrads``) after the last micro-batch (deepspeed/runtime/pipe/schedule.py,
``TrainSchedule``): nothing overlaps. Without one, ZeRO's bucketed reduction
overlaps the backward when ``zero_optimization.overlap_comm`` says so, by default
at stage 3 only (runtime/zero/config.py, ``overlap_comm_valid``); ZeRO-1 and -2
all-gather the updated parameters after the optimizer step, and stage 0
all-reduces after the backward.
"""

from __future__ import annotations

from pptune.costmodel.sharding import Sharding

ZERO_STAGE = {Sharding.NONE: 0, Sharding.ZERO1: 1, Sharding.ZERO2: 2, Sharding.ZERO3: 3}


def overlap(overlap_comm: bool | None, zero_stage: int, pp: int) -> tuple[bool, bool]:
    """(gradient reduction overlapped, parameter gather overlapped) as DeepSpeed runs
    a config with this ``overlap_comm`` (None: unset), ZeRO stage and pipeline size."""
    on = pp == 1 and zero_stage > 0 and (
        overlap_comm if overlap_comm is not None else zero_stage == 3)
    return on, on and zero_stage == 3


def stated_overlap_comm(overlap_grad_reduce: bool, sharding: Sharding, pp: int) -> bool | None:
    """``zero_optimization.overlap_comm`` as pptune's files state it for a plan priced
    with ``overlap_grad_reduce``: true for ZeRO-1/2 without a pipeline (stage 3 overlaps
    by default, and a pipeline never does); None: left out."""
    if overlap_grad_reduce and pp == 1 and sharding in (Sharding.ZERO1, Sharding.ZERO2):
        return True
    return None


def sixteen_bit_mode(precision: str) -> str:
    """The 16-bit mode (config section) a written file trains a plan of ``precision`` in:
    "fp16" for FP16, else "bf16" (its files state no FP8: Adapter.states_precisions)."""
    return "fp16" if precision == "fp16" else "bf16"


def gradient_width(precision: str | None, grad_accum_dtype: object, zero_stage: int,
                   pp: int) -> str | None:
    """"bf16" where the engine keeps the gradients at the model's 16-bit width (2 bytes a
    parameter), None for FP32 gradients, as ``_do_optimizer_sanity_check``
    (runtime/engine.py) picks the optimizer: ``data_types.grad_accum_dtype`` defaults to
    the model's dtype (``get_data_types``); ZeRO (stage >= 1) then accumulates in it,
    unless BF16 with FP32 accumulation at stage 1 (BF16_Optimizer); stage 0 runs
    DDP_BFLOAT16 / FP16_Optimizer on 16-bit gradients, except BF16 with a pipeline, whose
    BF16_Optimizer keeps FP32 gradients (runtime/bf16_optimizer.py)."""
    if precision not in ("bf16", "fp16") or grad_accum_dtype in ("fp32", "float32"):
        return None
    if zero_stage == 0 and pp > 1 and precision == "bf16":
        return None
    return "bf16"  # 2 bytes (pptune's gradient width names the 16-bit buffer bf16)
