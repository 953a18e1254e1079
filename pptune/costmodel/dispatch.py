"""How a MoE layer's tokens reach their experts: the token dispatchers, and what each moves.

Three dispatchers, as megatron-core 0.16.1 runs them
(megatron/core/transformer/moe/token_dispatcher.py) and torchtitan 0.2.1+ chooses them
(``[parallelism] expert_parallel_comm_backend``):

``alltoall`` (``MoEAlltoAllTokenDispatcher``; torchtitan's ``standard``): every
    (token, expert) pair is one row: a rank permutes its ``T`` tokens into ``T k``
    rows and sends each to its expert's rank in one NCCL all-to-all over the ep
    group, ``T k`` copies whether or not two of a token's experts share a rank or
    a node (comm.all_to_all_s: NVLink for the ranks on the node, the NIC for the
    rest, concurrently). The combine moves them back.
``deepep`` (``MoEFlexTokenDispatcher`` with ``--moe-flex-dispatcher-backend deepep``;
    torchtitan's ``deepep``; DeepSeek-V3 report sec. 3.2.2): a token goes once to
    each node holding one of its experts, over RDMA to the rank of the same local
    index there, and is forwarded over NVLink to each rank of that node holding
    one of its experts. Per rank and dispatch, with ``d_n`` the distinct nodes and
    ``d_g`` the distinct ranks a token reaches (``reach``), the NIC carries
    ``d_n (N - 1)/N`` copies of each token (``N`` nodes in the ep group) and NVLink
    ``d_g (p - 1)/p`` (``p`` ranks of the group a node: every copy but the one
    reached directly takes one NVLink hop), concurrently; the combine sends the
    per-rank sums back the same way. The received copies are permuted into
    expert order on arrival (``2h (T d_g + R)`` bytes, ``R`` the rows of the local
    experts) instead of before sending, and unpermuted before the combine.
    DeepEP's kernels hold SMs while they run: megatron-core's default
    ``moe_deepep_num_sms`` is 20 (DeepSeek-V3 report sec. 3.2.2: "only 20 SMs are
    sufficient to fully utilize the bandwidths of IB and NVLink").
``allgather`` (``MoEAllGatherTokenDispatcher``, Megatron-LM's default): every rank
    all-gathers the tokens (BF16), their routing map (1 byte an expert) and
    probabilities (fp32) over the ep x etp group, ``G = ep etp`` ranks, keeps the
    rows of its own experts (a permute of the ``T G`` gathered tokens into ``R``
    rows) and reduce-scatters the ``T G`` outputs back: two collectives of the
    gathered array each way at the group's ring bandwidth, no all-to-all and no
    separate expert-tensor-parallel gather.

Where a token's experts are (``reach``): with balanced routing a token's ``k``
experts are ``k`` of the ``E`` drawn without replacement, and the expected number
of ``B`` equal blocks (nodes, or ranks) they fall in is
``B (1 - C(E - E/B, k) / C(E, k))``. Group-limited routing (megatron-core
``moe_router_num_groups`` / ``moe_router_group_topk``; Hugging Face deepseek_v3
``n_group`` / ``topk_group``; DeepSeek-V3 sec. 2.1.2 "each token will be sent to
at most M = 4 nodes") first picks ``g`` of the ``n`` expert groups: where a group
lies inside one block (``n >= B``, experts contiguous by rank as megatron-core
places them) the token reaches the blocks of ``g`` groups drawn from ``n``; where
a group spans ``B/n`` blocks, its ``k`` experts fall in the ``g B/n`` blocks of
the chosen groups.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from pptune.costmodel.comm import (
    AllReduceLink,
    all_gather_s,
    all_to_all_s,
    group_link,
    mesh_a2a_bytes_per_s,
    mesh_ring_busbw,
)
from pptune.costmodel.keys import Precision
from pptune.costmodel.layout import Dim, Group, Layout
from pptune.costmodel.ops import BF16_BYTES, Kind, OpCost, Phase, Rates, memory
from pptune.costmodel.presets import (
    ALLREDUCE_LATENCY_INTRA_S,
    P2P_LATENCY_INTER_S,
    P2P_LATENCY_INTRA_S,
)
from pptune.costmodel.simulate import Link

if TYPE_CHECKING:
    from pptune.costmodel.models import ModelShape


class Dispatcher(str, Enum):
    ALLTOALL = "alltoall"
    DEEPEP = "deepep"
    ALLGATHER = "allgather"


# megatron-core 0.16.1 TransformerConfig.moe_deepep_num_sms (module docstring)
DEEPEP_SMS = 20
# the allgather dispatcher's routing metadata a token: the routing map (bool) and
# the probabilities (fp32) of every expert, gathered with the tokens
ROUTING_BYTES_PER_EXPERT = 1 + 4


# Default links: the h100-sxm preset's (presets.py: NVLink 450 GB/s a direction,
# one 400 Gb/s NIC per GPU, nccl-tests-order latencies); costs/profiles.py
# passes each GPU preset's own.
DEFAULT_NVLINK = Link(P2P_LATENCY_INTRA_S, 450e9)
DEFAULT_NIC = Link(P2P_LATENCY_INTER_S, 50e9)
DEFAULT_ETP_LINK = AllReduceLink(ALLREDUCE_LATENCY_INTRA_S, 450e9)


@dataclass(frozen=True)
class ExpertParallel:
    """How a MoE block's experts are placed and fed."""

    ep: int = 1
    etp: int = 1
    gpus_per_node: int = 8
    imbalance: float = 1.0  # tokens of the busiest expert / the mean (1.0: force-balanced)
    dispatch_bytes: float = float(BF16_BYTES)  # per dispatched element (FP8_DISPATCH_BYTES)
    grouped_gemm: bool = True  # local experts in one grouped GEMM (Megatron --moe-grouped-gemm)
    dispatcher: Dispatcher = Dispatcher.ALLTOALL  # how tokens reach their experts
    dispatch_sms: int = DEEPEP_SMS  # SMs DeepEP's kernels hold while they run
    intra: Link = DEFAULT_NVLINK  # NVLink, one direction per GPU
    inter: Link = DEFAULT_NIC  # the GPU's NIC
    etp_link: AllReduceLink = DEFAULT_ETP_LINK  # the etp group's collectives
    # the routed experts' GEMMs where they run at another precision than the block's
    # linears (None: the block's, CostKey.precision): torchtitan converts its linears
    # and its experts' grouped GEMMs by separate converters (frameworks/torchtitan)
    precision: Precision | None = None
    # one direct link of a switchless full-mesh node (MI300X's xGMI): the all-to-all's
    # and the collectives' rates inside the node are then the group's links
    # (comm.mesh_a2a_bytes_per_s, comm.mesh_ring_busbw); None: ``intra`` and ``etp_link``
    mesh_link_bytes_per_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("ep", "etp", "gpus_per_node", "dispatch_sms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer (got {value!r})")
        if not self.imbalance >= 1.0:
            raise ValueError(f"the routing imbalance is the busiest expert's tokens over the "
                             f"mean, at least 1.0 (got {self.imbalance!r})")

    def group(self, *dims: Dim) -> Group:
        """Where the ep (or etp, or ep x etp) group's ranks sit: experts are grouped etp
        fastest, then ep (megatron-core's expert rank order etp-ep-edp-pp), so the
        placement depends on etp, ep and the node size only."""
        return _expert_group(self.ep, self.etp, self.gpus_per_node, dims)

    def near_link(self, group: Group) -> Link:
        """What a member of ``group`` sends its node's other members at once."""
        return Link(self.intra.latency_s, mesh_a2a_bytes_per_s(
            group.per_node, self.intra.bytes_per_s, self.mesh_link_bytes_per_s))

    def ring_link(self, group: Group) -> AllReduceLink:
        """The link ``group``'s collectives run at inside a node (``etp_link``, or on a
        mesh its members' direct links)."""
        return AllReduceLink(self.etp_link.latency_s, mesh_ring_busbw(
            group.per_node, self.etp_link.busbw_bytes_per_s, self.mesh_link_bytes_per_s))


@functools.lru_cache(maxsize=256)
def _expert_group(ep: int, etp: int, gpus_per_node: int, dims: tuple[Dim, ...]) -> Group:
    return Layout(pp=1, dp=ep * etp, ep=ep, etp=etp, gpus_per_node=gpus_per_node).group(*dims)


def expected_hit(items: float, blocks: float, picks: int) -> float:
    """Expected number of ``blocks`` equal blocks hit when ``picks`` of ``items``
    spread evenly over them are drawn without replacement."""
    if blocks <= 1 or picks <= 0:
        return float(min(blocks, max(picks, 0)) if blocks >= 1 else 0)
    per = items / blocks
    miss = 1.0
    for i in range(picks):
        left = items - per - i
        if left <= 0:
            miss = 0.0
            break
        miss *= left / (items - i)
    return blocks * (1.0 - miss)


@dataclass(frozen=True)
class Reach:
    """Expected distinct nodes and ranks of the ep group one token's experts are on."""

    nodes: float
    ranks: float


def reach(experts: int, top_k: int, ranks: int, nodes: int, groups: int = 0,
          group_topk: int = 0) -> Reach:
    """Where a token's ``top_k`` experts are, over ``ranks`` ranks on ``nodes`` nodes
    (module docstring); ``groups`` / ``group_topk``: group-limited routing (0: none)."""
    if groups <= 0 or group_topk <= 0 or group_topk >= groups:
        return Reach(expected_hit(experts, nodes, top_k), expected_hit(experts, ranks, top_k))
    chosen = min(group_topk, top_k)

    def within(blocks: int) -> float:
        if groups >= blocks:  # each group inside one block
            return expected_hit(groups, blocks, chosen)
        span = blocks / groups
        return expected_hit(experts * chosen / groups, chosen * span, top_k)

    return Reach(within(nodes), within(ranks))


@dataclass(frozen=True)
class Copies:
    """Copies of each token one dispatch moves per rank, by link."""

    nvlink: float
    nic: float


def runs_as(dispatcher: Dispatcher, ep: int) -> Dispatcher:
    """The dispatcher that runs for the one asked at expert-parallel size ``ep``. DeepEP
    moves tokens between an ep group's ranks; a group of one rank has none to move, and
    the frameworks that offer DeepEP run their standard dispatcher there, whose local
    permute and sort by expert still run (megatron-core token_dispatcher.py: the flex
    dispatcher asserts TP x EP > 1, and MoEAlltoAllTokenDispatcher sorts by local expert
    at any ep; torchtitan builds DeepEP only where ep > 1)."""
    return Dispatcher.ALLTOALL if dispatcher is Dispatcher.DEEPEP and ep == 1 else dispatcher


def token_reach(m: ModelShape, group: Group) -> Reach:
    """Where one of the model's tokens' experts are over the ep ``group`` (``reach``)."""
    return reach(m.experts, m.top_k, group.size, group.nodes, m.route_groups,
                 m.route_group_topk)


def deepep_copies(r: Reach, nodes: int, per_node: int) -> Copies:
    """DeepEP's copies a token per rank (module docstring) over ``nodes`` nodes of
    ``per_node`` ranks of the group: ``d_g (p - 1)/p`` over NVLink, ``d_n (N - 1)/N``
    over the NIC."""
    return Copies(r.ranks * (per_node - 1) / per_node, r.nodes * (nodes - 1) / nodes)


def dispatch(token_bytes: float, m: ModelShape, ex: ExpertParallel) -> tuple[float, float]:
    """(bytes sent, seconds) of one dispatch or combine over the ep group, ``token_bytes``
    one copy of each of the rank's tokens: the alltoall dispatcher's ``k`` copies over
    comm.all_to_all_s, DeepEP's copies per distinct node and rank (module docstring)."""
    group = ex.group(Dim.EP)
    if token_bytes <= 0 or group.size <= 1:
        return 0.0, 0.0
    if ex.dispatcher is Dispatcher.DEEPEP:
        c = deepep_copies(token_reach(m, group), group.nodes, group.per_node)
        latency = ex.inter.latency_s if c.nic > 0 else ex.intra.latency_s
        seconds = latency + max(c.nvlink * token_bytes / ex.near_link(group).bytes_per_s,
                                c.nic * token_bytes / ex.inter.bytes_per_s)
        return (c.nvlink + c.nic) * token_bytes, seconds
    nbytes = m.top_k * token_bytes
    return nbytes, all_to_all_s(nbytes, group, ex.near_link(group), ex.inter)


def _a2a(name: str, phase: Phase, token_bytes: float, m: ModelShape,
         ex: ExpertParallel) -> OpCost:
    nbytes, time_s = dispatch(token_bytes, m, ex)
    return OpCost(name, phase, Kind.ALL_TO_ALL, 0.0, nbytes, time_s, 0)


def _gathered(name: str, phase: Phase, nbytes: float, ex: ExpertParallel) -> OpCost:
    """The allgather dispatcher's all-gather (or reduce-scatter) of an ``nbytes`` array
    over the ep x etp group, at the group's ring bandwidth (comm.group_link)."""
    group = ex.group(Dim.ETP, Dim.EP)
    link = group_link(group, ex.ring_link(group),
                      AllReduceLink(ex.inter.latency_s, ex.inter.bytes_per_s))
    return OpCost(name, phase, Kind.COMM, 0.0, nbytes, all_gather_s(nbytes, group.size, link), 0)


def _etp_collective(name: str, phase: Phase, nbytes: float, ex: ExpertParallel) -> OpCost:
    """All-gather (or reduce-scatter) of an ``nbytes`` array over the etp group."""
    if ex.etp == 1:
        return OpCost(name, phase, Kind.COMM, 0.0, 0.0, 0.0, 0)
    link = ex.ring_link(ex.group(Dim.ETP))
    return OpCost(name, phase, Kind.COMM, 0.0, nbytes, all_gather_s(nbytes, ex.etp, link), 0)


Ops = list[OpCost]


def route(m: ModelShape, t_loc: float, rows: float, n_local: int, rates: Rates,
           ex: ExpertParallel, cast_in: Ops) -> tuple[Ops, Ops, Ops, Ops]:
    """The ops that take the rank's ``t_loc`` tokens to the ``rows`` rows of its experts
    and back, by dispatcher (module docstring): forward in, forward out, backward out (the
    combine's gradient), backward in (the dispatch's gradient); ``cast_in``: the FP8
    casts of an FP8 dispatch, before it."""
    h, k, r = m.hidden, m.top_k, ex.imbalance
    one = BF16_BYTES * h * t_loc * r  # one BF16 copy of each token (imbalance included)

    def mem(name: str, phase: Phase, nbytes: float) -> OpCost:
        return memory(name, phase, nbytes, rates)

    if ex.dispatcher is Dispatcher.ALLGATHER:
        tokens = t_loc * ex.ep * ex.etp  # every rank's tokens, gathered
        gather = _gathered("ep_gather", Phase.F, tokens * (
            BF16_BYTES * h + ROUTING_BYTES_PER_EXPERT * m.experts), ex)
        grads = tokens * BF16_BYTES * h
        keep = 2 * h * (tokens + rows)  # the local experts' rows picked from the gathered
        return ([*cast_in, gather, mem("permute", Phase.F, keep)],
                [mem("unpermute", Phase.F, keep), _gathered("ep_scatter", Phase.F, grads, ex)],
                [_gathered("ep_scatter.bwd", Phase.B, grads, ex),
                 mem("unpermute.bwd", Phase.B, keep)],
                [mem("permute.bwd", Phase.B, keep),
                 _gathered("ep_gather.bwd", Phase.B, grads, ex)])
    # around the all-to-all: a permute of each token into its k copies before it and
    # back after (alltoall), and a reorder of the received rows by local expert
    # (alltoall with more than one local expert; DeepEP, whose one copy a destination
    # rank is permuted into expert order on arrival): (names, forward bytes, bytes)
    before = 0.0 if ex.dispatcher is Dispatcher.DEEPEP else 2 * h * t_loc * (1 + k * r)
    after: tuple[str, str, float, float] | None = None
    if ex.dispatcher is Dispatcher.DEEPEP:
        group = ex.group(Dim.EP)
        got = token_reach(m, group).ranks if group.size > 1 else 1.0
        sort = 2 * h * (t_loc * r * got + rows)
        after = ("permute", "unpermute", sort, sort)
    elif n_local > 1:
        after = ("sort_by_expert", "unsort_by_expert", 2 * ex.dispatch_bytes * h * rows,
                 2 * BF16_BYTES * h * rows)
    in_pre = [mem("permute", Phase.F, before)] if before else []
    out_post = [mem("unpermute", Phase.F, before)] if before else []
    out_bwd_pre = [mem("unpermute.bwd", Phase.B, before)] if before else []
    in_bwd_post = [mem("permute.bwd", Phase.B, before)] if before else []
    in_post: Ops = []
    out_pre: Ops = []
    out_bwd_post: Ops = []
    in_bwd_pre: Ops = []
    if after is not None:
        sort_name, unsort_name, fwd_bytes, nbytes = after
        in_post, out_pre = [mem(sort_name, Phase.F, fwd_bytes)], [mem(unsort_name, Phase.F, nbytes)]
        out_bwd_post = [mem(unsort_name + ".bwd", Phase.B, nbytes)]
        in_bwd_pre = [mem(sort_name + ".bwd", Phase.B, nbytes)]
    gathered = BF16_BYTES * h * rows
    return (
        [*in_pre, *cast_in, _a2a("a2a_dispatch", Phase.F, one * ex.dispatch_bytes / BF16_BYTES,
                                 m, ex),
         _etp_collective("etp_gather", Phase.F, gathered, ex), *in_post],
        [*out_pre, _etp_collective("etp_scatter", Phase.F, gathered, ex),
         _a2a("a2a_combine", Phase.F, one, m, ex), *out_post],
        [*out_bwd_pre, _a2a("a2a_combine.bwd", Phase.B, one, m, ex),
         _etp_collective("etp_scatter.bwd", Phase.B, gathered, ex), *out_bwd_post],
        [*in_bwd_pre, _etp_collective("etp_gather.bwd", Phase.B, gathered, ex),
         _a2a("a2a_dispatch.bwd", Phase.B, one, m, ex), *in_bwd_post],
    )
