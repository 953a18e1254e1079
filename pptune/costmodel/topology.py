"""Where ranks sit: which pipeline hops and data-parallel groups leave a node.

Rank layout follows Megatron-LM's RankGenerator: tensor fastest, then data,
then pipeline ("tp-cp-ep-dp-pp", the default), or pipeline before data
("tp-cp-ep-pp-dp", ``--use-tp-pp-dp-mapping``). A pipeline hop crosses nodes
when the two ranks sit on different nodes; a data-parallel group is inside a
node when all its ranks are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.simulate import Link


class RankOrder(str, Enum):
    """Global rank order, fastest-varying first."""

    DP_INNER = "tp-dp-pp"  # a stage's data-parallel replicas sit side by side
    PP_INNER = "tp-pp-dp"  # a pipeline's stages sit side by side


DP_INNER = RankOrder.DP_INNER
PP_INNER = RankOrder.PP_INNER
RANK_ORDERS = tuple(RankOrder)


@dataclass(frozen=True)
class Topology:
    """Which pipeline hops and data-parallel groups leave the node."""

    p: int
    dp: int
    tp: int
    gpus_per_node: int
    order: RankOrder = RankOrder.DP_INNER

    def rank(self, stage: int, replica: int, t: int) -> int:
        if self.order is RankOrder.DP_INNER:
            return (stage * self.dp + replica) * self.tp + t
        return (replica * self.p + stage) * self.tp + t

    def node(self, stage: int, replica: int, t: int) -> int:
        return self.rank(stage, replica, t) // self.gpus_per_node

    def same_node(self, a: int, b: int) -> bool:
        """Every replica's hop from pipeline rank a to b stays inside a node."""
        return all(
            self.node(a, i, t) == self.node(b, i, t)
            for i in range(self.dp) for t in (0, self.tp - 1)
        )

    def dp_intra(self) -> bool:
        """Every data-parallel group fits inside one node."""
        return all(
            self.node(s, 0, t) == self.node(s, self.dp - 1, t)
            for s in range(self.p) for t in (0, self.tp - 1)
        )

    def link(self, intra: Link, inter: Link) -> Callable[[int, int], Link]:
        """The point-to-point link between two pipeline ranks."""

        @functools.cache
        def between(a: int, z: int) -> Link:
            return intra if self.same_node(a, z) else inter

        return between
