"""Collectives at what NCCL achieves, with the algorithm NCCL would choose.

A ``Fabric`` holds what nccl-tests and nvbandwidth measure on one kind of node
(presets.py cites each figure per GPU): the ring bus bandwidth inside a node,
NVLink SHARP's (NVLS) all-reduce bus bandwidth and the group size from which
NCCL picks it, the point-to-point copy rate, and what one NIC carries in a
cross-node ring. These are measured figures, below the line rate: on 8 H100/H200
a ring all-reduce reaches 367 GB/s of NVLink 4's 450 (all-gather 361,
reduce-scatter 363), NVLS 480, a pairwise copy 396 (stas00/ml-engineering,
network/README.md, commit 744d01e1, nccl-tests with NCCL 2.27.7), and one 400
Gb/s NIC 46-48 GB/s in a ring across nodes (NVIDIA/nccl-tests issue 290,
maintainer).

NCCL prices every (algorithm, protocol) pair with a latency and a bandwidth
and runs the fastest for the message (``ncclTopoTuneModel`` and
``ncclTopoGetAlgoTime`` in NVIDIA/nccl src/graph/tuning.cc, commit b6475625);
this module does the same for the pairs that matter here:

=========  ========  =========================================================
algorithm  protocol  latency (us), n ranks on k nodes, ppn = n / k
=========  ========  =========================================================
ring       Simple    8.4 + 3.4 per NVLink step + 14 per network step
ring       LL        6.6 + 0.6 per NVLink step + 2.7 per network step
                     (across nodes an NVLink step costs at least 1.0, Simple 3.0)
tree       Simple    2 ((ppn - 1) 28 + log2(k) 28)          (all-reduce only)
tree       LL        6.8 + 2 ((ppn - 1) 0.6 + log2(k) 5.0)  (all-reduce only)
NVLS       Simple    23                  (all-reduce inside one node only)
=========  ========  =========================================================

An all-reduce takes ``2 (n - 1)`` ring steps (``2 k`` of them on the network),
a reduce-scatter or all-gather ``n - 1`` (``k - 1``). The LL protocol moves a
flag with every 8 bytes: a quarter of the bandwidth for all-reduce and across
nodes, a third otherwise (tuning.cc). Tree all-reduce runs at 0.92 of the
ring's bus bandwidth (tuning.cc) and sends every byte twice (algorithm
bandwidth = bus bandwidth / 2); its LL protocol at 1/3.8 of that (tuning.cc), the
pick for the few bytes of an FP8 amax reduction across nodes. Across nodes a group with ``per_node`` members
on each node drives ``per_node`` NICs at once, up to the node's own ring
bandwidth (comm.group_link). NVLS is left out across nodes (NVLSTree measured
below the ring: 310 vs 365 GB/s on 4 x 8 H200, ml-engineering) and where a
recipe turns it off (``NCCL_NVLS_ENABLE=0``).

A switchless node (``Fabric.mesh_link_bytes_per_s``: 8 x MI300X, every GPU linked
directly to every other) has no NVLS, and a group's rate inside it is its members'
direct links (comm.mesh_ring_busbw, comm.mesh_a2a_bytes_per_s): a ring over ``m``
of the node's GPUs runs at ``m - 1`` links up to the full node's figure, inside one
node and as the cap of a ring across nodes alike; a copy runs over one link
(``p2p_bytes_per_s``). RCCL's tuner is taken to price its algorithms as NCCL's
does (its latencies above), an assumption presets_amd.py states.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.comm import AllReduceLink, Placement, mesh_a2a_bytes_per_s, mesh_ring_busbw

US = 1e-6
# NVIDIA/nccl src/graph/tuning.cc (commit b6475625): baseLat and hwLat, microseconds
RING_SIMPLE_BASE_US = 8.4
RING_SIMPLE_NVLINK_US = 3.4
RING_SIMPLE_NET_US = 14.0
RING_LL_BASE_US = 6.6
RING_LL_NVLINK_US = 0.6
RING_LL_NET_US = 2.7
TREE_SIMPLE_STEP_US = 28.0  # NVLink and network alike for Simple
# getNetOverhead: an x86 host's per-step network overhead (Intel 1.0 us, AMD 2.0; Intel
# taken), three times that for Simple; a multi-node ring's NVLink steps pay at least it
NET_OVERHEAD_US = 1.0
TREE_LL_BASE_US = 6.8
TREE_LL_NVLINK_US = 0.6
TREE_LL_NET_US = 5.0
TREE_LL_SHARE = 1 / 3.8  # LL's share of the tree's bus bandwidth (tuning.cc)
NVLS_SIMPLE_US = 23.0
TREE_BW_FACTOR = 0.92  # busBw * .92 for trees (tuning.cc)


class Collective(str, Enum):
    ALL_REDUCE = "all-reduce"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_GATHER = "all-gather"


class Algorithm(str, Enum):
    RING = "ring"
    RING_LL = "ring-ll"
    TREE = "tree"
    TREE_LL = "tree-ll"
    NVLS = "nvls"


@dataclass(frozen=True)
class Fabric:
    """What NCCL achieves on one node type (measured; presets.py cites each figure)."""

    ring_busbw_bytes_per_s: float  # ring all-reduce / all-gather / reduce-scatter, in a node
    p2p_bytes_per_s: float  # one pairwise copy inside a node, one direction
    nic_busbw_bytes_per_s: float  # one NIC in a cross-node ring
    nvls_busbw_bytes_per_s: float | None = None  # NVLink SHARP all-reduce, full node
    nvls_min_ranks: int = 5  # NCCL picks NVLS from this many ranks in the node
    nvls_enabled: bool = True  # NCCL_NVLS_ENABLE (the NVIDIA recipes set 0)
    # NCCL runs a collective as one thread block (CTA) per channel, each on an SM of its
    # own, so compute beside it runs on the others (evaluate.with_comm); 0: not priced.
    # ``sm_count`` is the GPU's (presets.GpuSpec.fabric_or_line fills it in)
    collective_ctas: int = 0
    sm_count: int = 0
    # one direct link, one direction, on a node whose GPUs are a full mesh without a
    # switch (MI300X's xGMI); None: a switched node, its figures node-wide
    mesh_link_bytes_per_s: float | None = None

    def without_nvls(self) -> Fabric:
        return dataclasses.replace(self, nvls_enabled=False)

    def intra_busbw(self, members: int) -> float:
        """A ring's bus bandwidth over ``members`` GPUs of one node (comm.mesh_ring_busbw)."""
        return mesh_ring_busbw(members, self.ring_busbw_bytes_per_s, self.mesh_link_bytes_per_s)

    def a2a_bytes_per_s(self, members: int) -> float:
        """What a member sends the others of ``members`` on its node at once in an
        all-to-all (comm.mesh_a2a_bytes_per_s)."""
        return mesh_a2a_bytes_per_s(members, self.p2p_bytes_per_s, self.mesh_link_bytes_per_s)

    @property
    def sm_share(self) -> float:
        """The share of the GPU's SMs a running collective holds."""
        return self.collective_ctas / self.sm_count if self.sm_count else 0.0


@dataclass(frozen=True)
class Choice:
    """The algorithm NCCL runs for one message, and what it costs."""

    algorithm: Algorithm
    latency_s: float
    busbw_bytes_per_s: float  # as nccl-tests reports it for this collective
    time_s: float


def _steps(kind: Collective, n: int, nodes: int) -> tuple[int, int]:
    """(all ring steps, those on the network) of one collective (tuning.cc)."""
    if kind is Collective.ALL_REDUCE:
        return 2 * (n - 1), (2 * nodes if nodes > 1 else 0)
    return n - 1, nodes - 1


def _bus_factor(kind: Collective, n: int) -> float:
    """Bytes each rank moves per byte of the array, as busbw counts them."""
    return (2.0 if kind is Collective.ALL_REDUCE else 1.0) * (n - 1) / n


def ring_busbw(group: Placement, fabric: Fabric) -> float:
    """A ring's bus bandwidth: what its members reach inside one node (the node's, or
    their direct links on a mesh), ``per_node`` NICs across, up to that."""
    inside = fabric.intra_busbw(group.per_node)
    if group.intra:
        return inside
    return min(inside, group.per_node * fabric.nic_busbw_bytes_per_s)


def choices(kind: Collective, nbytes: float, group: Placement, fabric: Fabric) -> list[Choice]:
    """Every algorithm NCCL would consider for ``nbytes`` over ``group``, priced."""
    n = group.size
    nodes = max(1, -(-n // max(1, group.per_node))) if not group.intra else 1
    steps, net = _steps(kind, n, nodes)
    bw = ring_busbw(group, fabric)
    factor = _bus_factor(kind, n)
    out = []

    def add(algo: Algorithm, lat_us: float, busbw: float, bus_factor: float) -> None:
        lat = lat_us * US
        out.append(Choice(algo, lat, busbw, lat + bus_factor * nbytes / busbw))

    # across nodes every ring step pays at least the network's per-op overhead
    overhead = NET_OVERHEAD_US if nodes > 1 else 0.0
    add(Algorithm.RING, RING_SIMPLE_BASE_US + (steps - net) * max(RING_SIMPLE_NVLINK_US,
                                                                  3 * overhead)
        + net * RING_SIMPLE_NET_US, bw, factor)
    ll_share = 0.25 if (nodes > 1 or kind is Collective.ALL_REDUCE) else 1 / 3
    add(Algorithm.RING_LL, RING_LL_BASE_US + (steps - net) * max(RING_LL_NVLINK_US, overhead)
        + net * RING_LL_NET_US, bw * ll_share, factor)
    if kind is Collective.ALL_REDUCE and nodes > 1:
        ppn = max(1, n // nodes)
        depth = int(math.log2(nodes))  # tuning.cc's log2i: the floor
        lat = 2 * ((ppn - 1) * TREE_SIMPLE_STEP_US + depth * TREE_SIMPLE_STEP_US)
        # algorithm bandwidth = busbw / 2: 2 bytes per byte; busbw reported on the ring's scale
        tree_bw = TREE_BW_FACTOR * bw * factor / 2.0
        add(Algorithm.TREE, lat, tree_bw, factor)
        add(Algorithm.TREE_LL, TREE_LL_BASE_US + 2 * ((ppn - 1) * TREE_LL_NVLINK_US
                                                      + depth * TREE_LL_NET_US),
            tree_bw * TREE_LL_SHARE, factor)
    if (kind is Collective.ALL_REDUCE and group.intra and fabric.nvls_enabled
            and fabric.nvls_busbw_bytes_per_s and n >= fabric.nvls_min_ranks):
        add(Algorithm.NVLS, NVLS_SIMPLE_US, fabric.nvls_busbw_bytes_per_s, factor)
    return out


def choose(kind: Collective, nbytes: float, group: Placement, fabric: Fabric) -> Choice:
    """The fastest algorithm for this message, as NCCL's tuner picks it."""
    return min(choices(kind, nbytes, group, fabric), key=lambda c: (c.time_s, c.algorithm.value))


def collective_s(kind: Collective, nbytes: float, group: Placement, fabric: Fabric) -> float:
    """Time of one collective of an ``nbytes`` array over ``group``."""
    if group.size <= 1 or nbytes <= 0:
        return 0.0
    return choose(kind, nbytes, group, fabric).time_s


def link_for(kind: Collective, nbytes: float, group: Placement, fabric: Fabric) -> AllReduceLink:
    """The (latency, bus bandwidth) of NCCL's pick at this message size, as the
    ``AllReduceLink`` comm.py's ring formulas take: ``latency + factor * bytes /
    busbw`` then reproduces the chosen algorithm's time at this size."""
    if group.size <= 1:
        return AllReduceLink(0.0, math.inf)
    c = choose(kind, nbytes, group, fabric)
    return AllReduceLink(c.latency_s, c.busbw_bytes_per_s)


def p2p_s(nbytes: float, intra: bool, fabric: Fabric,
          latency_intra_s: float, latency_inter_s: float) -> float:
    """One point-to-point send: a pairwise NVLink copy inside a node, one NIC across."""
    if nbytes <= 0:
        return 0.0
    if intra:
        return latency_intra_s + nbytes / fabric.p2p_bytes_per_s
    return latency_inter_s + nbytes / fabric.nic_busbw_bytes_per_s
