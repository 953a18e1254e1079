"""What a layer's costs depend on besides the micro-batch size.

A cost table (table.py) prices every layer for one way of splitting it over
the ranks of its pipeline stage and one numeric precision: the ``CostKey``.
The search walks several keys (tensor, context, expert and expert-tensor
parallel sizes; BF16 or FP8 GEMMs) with one table each; a measured profile is
one table at one key.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pptune.costmodel.table import CostTable


class Precision(str, Enum):
    """The GEMMs' input precision (attention, norms and communication stay BF16
    unless a recipe says otherwise)."""

    BF16 = "bf16"
    FP16 = "fp16"  # the 2021-2022 runs: BF16's tensor-core rate
    FP8 = "fp8"  # E4M3/E5M2 per-tensor or blockwise scaling (Hopper, Blackwell)
    MXFP8 = "mxfp8"  # OCP microscaling FP8, 32-element blocks (Blackwell)
    NVFP4 = "nvfp4"  # E2M1 with E4M3 16-element block scales (Blackwell: nvfp4.py)


@dataclass(frozen=True, order=True)
class CostKey:
    """How the stage's ranks split each layer, and its GEMM precision."""

    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    precision: Precision = Precision.BF16

    def __str__(self) -> str:
        parts = [f"tp{self.tp}"]
        parts += [f"{n}{v}" for n, v in (("cp", self.cp), ("ep", self.ep), ("etp", self.etp))
                  if v != 1]
        return " ".join([*parts, self.precision.value])


# The cost tables of a search: one per key (costs/ builds them; a measured
# profile answers for its own key only).
TableSource = Callable[[CostKey], "CostTable"]
