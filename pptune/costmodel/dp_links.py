"""The link a data-parallel reduction runs at: NCCL's algorithm for one gradient bucket
over the group's placement (collectives.py), or the table's links (comm.group_link), and
the group DualPipe's two copies of a chunk reduce over."""

from __future__ import annotations

import functools

from pptune.costmodel import collectives
from pptune.costmodel.comm import AllReduceLink, Placement, group_link, megatron_bucket_params
from pptune.costmodel.layout import Group
from pptune.costmodel.sharding import MEGATRON_GRAD_BYTES, Sharding
from pptune.costmodel.table import CostTable


def both_copies(group: Group, copies: int, together: bool) -> Group:
    """A reduction group over both copies of a dualpipe chunk: twice the ranks, on the
    same nodes when the rank pair shares them, else on twice the nodes."""
    if copies == 1:
        return group
    if together:
        return Group(group.size * copies, group.per_node * copies, group.nodes)
    return Group(group.size * copies, group.per_node, group.nodes * copies)


def dp_link(table: CostTable, sharding: Sharding, group: Placement, dp: int,
            grad_factor: float = 1.0) -> AllReduceLink:
    """The link the data-parallel gradient collectives run at: NCCL's algorithm for
    one bucket over this group where the table has the fabric (collectives.py),
    else the table's links with the group's NICs (comm.group_link)."""
    if table.fabric is None:
        return group_link(group, table.ar_intra, table.ar_inter)
    kind = (collectives.Collective.ALL_REDUCE if sharding is Sharding.NONE
            else collectives.Collective.REDUCE_SCATTER)
    bucket = megatron_bucket_params(dp) * MEGATRON_GRAD_BYTES * grad_factor
    if isinstance(group, Group):  # hashable: the pick cached
        return _bucket_link(kind, bucket, group, table.fabric)
    return collectives.link_for(kind, bucket, group, table.fabric)


@functools.lru_cache(maxsize=4096)
def _bucket_link(kind: collectives.Collective, bucket_bytes: float, group: Group,
                 fabric: collectives.Fabric) -> AllReduceLink:
    """``collectives.link_for``, cached (pure): a search asks for the same few groups'
    links for every plan it lays out (evaluate.stage_layout)."""
    return collectives.link_for(kind, bucket_bytes, group, fabric)
