"""The planner's per-layer cost table and the per-stage sums it feeds the simulator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pptune.costmodel.collectives import Fabric
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.partition import stage_bounds
from pptune.costmodel.simulate import Link, StageCost


@dataclass(frozen=True)
class LayerCosts:
    """Per-layer costs at one micro-batch size (plain lists, same length)."""

    fwd_s: Sequence[float]
    bwd_s: Sequence[float]
    wgrad_s: Sequence[float]
    act_bytes: Sequence[float]
    out_bytes: Sequence[float]


@dataclass(frozen=True)
class CostTable:
    names: Sequence[str]
    param_bytes: Sequence[float]
    param_dtype_bytes: int
    by_mb: dict[int, LayerCosts]
    seq_len: int
    memory_bytes: float
    p2p_intra: Link
    p2p_inter: Link
    ar_intra: AllReduceLink
    ar_inter: AllReduceLink  # one member a node: one NIC's cross-node bus bandwidth
    # What NCCL achieves (collectives.py): with it the data-parallel collectives take
    # NCCL's algorithm for their size and group; None: ar_intra / ar_inter (comm.group_link)
    fabric: Fabric | None = None
    hbm_bytes_per_s: float | None = None  # achieved; prices the optimizer step (optimizer.py)
    # per layer, bytes held all step outside the training state (FP8 weight copies and
    # transposes, precision.py); None: nothing
    cache_bytes: Sequence[float] | None = None

    def params(self, start: int, end: int) -> float:
        """Parameter count of layers [start, end)."""
        return sum(self.param_bytes[start:end]) / self.param_dtype_bytes


def stage_costs(table: CostTable, b: int, stage_layers: Sequence[int]) -> list[StageCost]:
    """Per-stage sums of the per-layer costs at micro-batch size ``b``."""
    c = table.by_mb[b]
    out = []
    for s, e in stage_bounds(stage_layers):
        out.append(
            StageCost(
                fwd_s=sum(c.fwd_s[s:e]),
                bwd_s=sum(c.bwd_s[s:e]),
                wgrad_s=sum(c.wgrad_s[s:e]),
                act_bytes=sum(c.act_bytes[s:e]),
                out_bytes=c.out_bytes[e - 1],
            )
        )
    return out
