"""Megatron-LM's settings beyond TrainingConfig that its rules judge (``Semantics.details``:
written by the reader, read by rules.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pptune.frameworks.common.fields import Ctx, Semantics


@dataclass(frozen=True)
class Knobs:
    """Megatron-LM's schedule knobs and the job's environment, beyond TrainingConfig."""

    microbatch_group: int | None = None  # --microbatch-group-size-per-virtual-pipeline-stage
    overlap_p2p: bool = True  # off with --no-overlap-p2p-communication
    megatron_fsdp: bool = False  # --use-megatron-fsdp (rules.overlap_rule)
    # a layout whose stage count pp does not divide: validate_args stops there, before it
    # derives the virtual stages, so no rule that needs them can be judged (layout.py)
    virtual_unknown: bool = False
    # the job's environment as a launch script sets it (``environment``; an argument file
    # sets none): CUDA_DEVICE_MAX_CONNECTIONS (None: not set), and whether Megatron-FSDP
    # or torch FSDP2 runs, with which validate_args only warns (rules.connections_rule)
    launched: bool = False
    connections: str | None = None
    fsdp: bool = False


def knobs(semantics: Semantics) -> Knobs:
    """The reader's knobs; Megatron-LM's defaults for a config it did not read."""
    return semantics.details if isinstance(semantics.details, Knobs) else Knobs()


def with_knobs(ctx: Ctx, **changes: Any) -> None:
    """The reader's knobs with ``changes``."""
    ctx.semantics.details = replace(knobs(ctx.semantics), **changes)
