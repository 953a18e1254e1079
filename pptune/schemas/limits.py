"""``Limits``: the thresholds check-config holds a training config to, and the parallel
sizes its best-plan comparison keeps at the config's own (``limits:`` in pptune's
config; a ``# pptune-plan: held=`` line in a file recommend --emit wrote)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from pptune.schemas.base import Strict

HELD = ("tp", "cp", "ep", "etp", "pp")  # what recommend's --tp, --cp, --ep, --etp, --pp force


class Limits(Strict):
    # strict: a quoted "0.2" in a hand-written file is an error, not a number.
    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    max_bubble: float = Field(0.25, ge=0, le=1)
    max_slowdown: float = Field(1.10, ge=1)
    memory_fraction: float = Field(1.0, gt=0, le=1, description="usable share of device memory")
    held: list[Literal["tp", "cp", "ep", "etp", "pp"]] = Field(
        default_factory=list, max_length=len(HELD), description="parallel sizes the "
        "comparison with the best plan keeps at the config's own (recommend --emit states "
        "those its --tp, --cp, --ep, --etp or --pp held)")
