"""Each stage's data-parallel traffic in a stage layout (evaluate.stage_layout).

A stage's traffic (sharding.stage_comm) follows from what the layout holds fixed, the
sharding, its data-parallel group and link, the gradient's and gathered weights' bytes
and the overlaps (one ``Reduction`` a layout, two with routed experts, whose gradients
reduce over the expert data-parallel group), and from what changes stage by stage: its
parameters and the windows of its compute the collectives overlap. The search lays out
thousands of plans whose stages repeat those few figures; each stage's traffic is looked
up by them under its layout's reductions, the same ``ShardComm`` that
``sharding.stage_comm`` gives, without hashing the fixed part again for every stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.sharding import ShardComm, Sharding, stage_comm
from pptune.costmodel.sim_records import StageCost

# layouts' reductions kept at most; all are dropped when one more comes (each keeps the
# stages priced under it: a few hundred figures)
_KEPT = 4096


class Reduction(NamedTuple):
    """What a layout holds fixed of its stages' data-parallel traffic (``stage_comm``'s
    arguments but the parameters and the windows)."""

    sharding: Sharding
    reshard: bool
    ranks: int
    link: AllReduceLink
    grad_factor: float
    overlap: bool
    param_bytes: float
    overlap_gather: bool | None

    def comm(self, params: float, bwd_window_s: float, fwd_window_s: float) -> ShardComm:
        return stage_comm(self.sharding, self.reshard, params, self.ranks, self.link,
                          self.grad_factor, self.overlap, bwd_window_s, fwd_window_s,
                          self.param_bytes, self.overlap_gather)


_priced: dict[tuple[Reduction, Reduction | None],
              dict[tuple[float, float, float, float], ShardComm]] = {}


def stage_traffic(dense: Reduction, expert: Reduction | None, params: Sequence[float],
                  experts: Sequence[float], compute: Sequence[StageCost]) -> list[ShardComm]:
    """Per stage: its traffic over ``dense``, or with ``expert`` its dense parameters'
    (``params`` less ``experts``) over ``dense`` and then its routed experts' over
    ``expert``, one after the other on its stream. The windows each overlaps: the stage's
    backward (its weight gradient and all-to-alls included) and its forward (with its
    all-to-alls). Shared: read the traffic, do not change it."""
    priced = _priced.get((dense, expert))
    if priced is None:
        if len(_priced) >= _KEPT:
            _priced.clear()
        priced = _priced[(dense, expert)] = {}
    out = []
    for k, st in enumerate(compute):
        n = params[k]
        x = experts[k] if expert is not None else 0.0
        bwd_s = st.bwd_s + st.wgrad_s + st.bwd_comm_s
        fwd_s = st.fwd_s + st.fwd_comm_s
        at = (n, x, bwd_s, fwd_s)
        found = priced.get(at)
        if found is None:
            if expert is None:
                found = dense.comm(n, bwd_s, fwd_s)
            else:
                found = _both(dense.comm(n - x, bwd_s, fwd_s), expert.comm(x, bwd_s, fwd_s))
            priced[at] = found
        out.append(found)
    return out


def _both(a: ShardComm, b: ShardComm) -> ShardComm:
    """Dense and expert traffic of one stage, one after the other on its stream."""
    return ShardComm(a.fwd_s + b.fwd_s, a.bwd_s + b.bwd_s, a.start_s + b.start_s,
                     a.tail_s + b.tail_s)
