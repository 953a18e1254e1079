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
