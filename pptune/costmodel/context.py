"""Context parallelism: the sequence split over ``cp`` ranks, attention per rank,
and the K/V exchange each algorithm runs.

Causal load balancing (Megatron-core / Transformer Engine): the sequence is cut
into ``2 cp`` chunks and rank ``r`` holds chunks ``r`` and ``2 cp - 1 - r``, so
every rank computes the same share of the causal attention: ``1 / cp`` of it.
Everything outside attention (GEMMs, norms, activations, the pipeline sends)
sees ``s / cp`` tokens per rank, and so do the saved activations.

Attention of one layer per rank, with ``c = s / (2 cp)`` tokens a chunk, head
dims ``d_k`` (queries and keys) and ``d_v`` (values), ``a_l`` local query heads,
``g_l`` local KV heads, ``b`` sequences (2 bytes an element):

- forward FLOPs ``2 s^2 (d_k + d_v) a_l b / 2 / cp`` (scores and the weighted
  sum; causal: half the score tiles, Dao 2023), backward 2.5x forward
  (FlashAttention-2, sec. 4.1); ``4 s^2 d a_l b / 2 / cp`` when ``d_k = d_v = d``;
- K and V of one rank: ``kv = b (s / cp) g_l (d_k + d_v) x 2`` bytes; Q and dQ
  are ``a_l d_k`` wide a token, the output ``a_l d_v``.

``d_k = d_v`` but for multi-head latent attention (attention.py), whose keys
after the up-projection are ``qk_nope_head_dim + qk_rope_head_dim`` wide a head
and its values ``v_head_dim`` (megatron-core 0.16.1
megatron/core/transformer/multi_latent_attention.py ``MLASelfAttention``:
``k_channels=self.q_head_dim, v_channels=self.config.v_head_dim`` into
``TEDotProductAttention``). Transformer Engine's ring sends them flattened into
one buffer, K then V (v2.10 ``AttnFuncWithCPAndKVP2P.forward``:
``torch.cat((k.view(-1), v.view(-1)))``), so a hop carries exactly ``kv``; it
runs MLA under ``p2p`` and ``a2a+p2p`` only (v2.5 to v2.14
``attn_forward_func_with_cp``: "Context parallelism does not support MLA with
cp_comm_type"; costs/dims.py and the Megatron-LM rule refuse the others).

The algorithms (Megatron-LM ``--cp-comm-type``; Transformer Engine
``attention.py`` ``AttnFuncWithCPAndKVP2P`` / ``...KVAllGather`` /
``...QKVOA2A``):

``p2p``       a ring of ``cp`` steps: in each, the rank computes against the
              K/V block it holds while sending that block on and receiving the
              next (overlapped). Step 0 is the diagonal (causal) block pair,
              steps 1..cp-1 are two unmasked chunk blocks each (exactly 1/cp of
              the rank's work per step). A step's transfer is ``kv`` bytes; only
              what outlasts the step's compute is exposed. Backward passes K/V
              and their gradients (2 kv a hop) around the ring again and
              returns the gradients to their owner (one more kv hop).
              Around the kernels (Transformer Engine v1.13 ``AttnFuncWithCPAndKVP2P``,
              BF16): forward concatenates K and V into the send buffer (read
              and write kv), zeroes the output (o bytes, the rank's output)
              and merges every step's partial output into it by its softmax
              statistics (``flash_attn_fwd_out_correction``: read both, write
              one, 3 o a step); backward adds every step's dQ into dQ (3 q a
              step, q the rank's Q bytes) and
              concatenates dK, dV (2 kv) and adds them into the travelling
              gradient buffer (3 kv) a step. The slowest rank merges whole
              blocks every step, so ``cp`` steps of each are priced.
``all-gather``  all-gather K/V (``(cp - 1) kv`` bytes in, Llama 3's method,
              Dubey et al. 2024 sec. 3.3.2) before attention, exposed; backward
              gathers again and reduce-scatters dK/dV.
``a2a``       Ulysses (Jacobs et al. 2023): all-to-all Q, K, V from sequence to
              head shards, attention over the whole sequence for ``a_l / cp``
              heads, all-to-all the output back; backward the mirror image.
              Needs ``a_l`` and ``g_l`` divisible by ``cp``. Exposed.
``a2a+p2p``   hierarchical (Megatron-LM ``--hierarchical-context-parallel-
              sizes``): all-to-all inside each node's share of the group, a p2p
              ring across them. The all-to-all splits the heads as ``a2a``
              does, so its size is the largest that divides the node's share,
              ``cp``, ``a_l`` and ``g_l`` (``hierarchical_sizes``; 1: the ring
              alone); megatron-core's inner group is ``cp`` consecutive ranks
              (parallel_state.py ``create_hierarchical_groups``), so it stays
              on a node and the ring's slowest hop is the group's.

Transfers run on the group's link (layout.py places cp just outside tp): a
pairwise NVLink copy inside a node, one NIC a hop across nodes (collectives.py
figures); on a switchless mesh (MI300X) a hop is one direct link and an
all-to-all's shares for the node's other members leave over their direct links
at once (``CpLinks.near``). Attention kernels run at the GPU's measured flash-attention rate for
their length (presets.py curves): ``s / cp`` tokens for p2p and all-gather,
``s`` for a2a.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel.collectives import Collective, Fabric, collective_s
from pptune.costmodel.comm import all_to_all_s
from pptune.costmodel.layout import Dim, Group, Layout
from pptune.costmodel.simulate import Link

BF16_BYTES = 2
BWD_OVER_FWD = 2.5  # FlashAttention-2 sec. 4.1: five matmuls against two


class CpComm(str, Enum):
    """How the context-parallel ranks exchange K/V (Megatron-LM ``--cp-comm-type``)."""

    P2P = "p2p"
    ALL_GATHER = "all-gather"
    A2A = "a2a"
    A2A_P2P = "a2a+p2p"


# the exchanges Transformer Engine refuses for keys and values of different widths
# (multi-head latent attention): v2.5 to v2.14 attn_forward_func_with_cp asserts
# ``not enable_mla or cp_comm_type in ["p2p", "a2a+p2p"]`` ("Context parallelism does not
# support MLA with cp_comm_type=..."); megatron-core 0.16.1 pins transformer-engine
# >=2.9,<2.12 (its pyproject.toml)
MLA_REFUSED = (CpComm.A2A, CpComm.ALL_GATHER)


@dataclass(frozen=True)
class CpLinks:
    """Where the context-parallel group sits and what its transfers run at."""

    group: Group
    fabric: Fabric
    latency_intra_s: float = 10e-6
    latency_inter_s: float = 20e-6

    def hop(self, intra: bool) -> Link:
        """One ring hop: a pairwise NVLink copy, or one NIC across nodes."""
        if intra:
            return Link(self.latency_intra_s, self.fabric.p2p_bytes_per_s)
        return Link(self.latency_inter_s, self.fabric.nic_busbw_bytes_per_s)

    def near(self, group: Group) -> Link:
        """What an all-to-all member sends its node's other members of ``group`` at once:
        one copy's rate through a switch, their direct links on a mesh (Fabric)."""
        return Link(self.latency_intra_s, self.fabric.a2a_bytes_per_s(group.per_node))


def local_links(cp: int, tp: int = 1, gpus_per_node: int = 8, fabric: Fabric | None = None,
                latency_intra_s: float = 10e-6, latency_inter_s: float = 20e-6) -> CpLinks:
    """The cp group of a layout with cp just outside tp (megatron-core's tp-cp-...)."""
    group = Layout(pp=1, dp=1, tp=tp, cp=cp, gpus_per_node=gpus_per_node).group(Dim.CP)
    return CpLinks(group, fabric or Fabric(450e9, 450e9, 50e9), latency_intra_s, latency_inter_s)


def fraction_at(curve: Sequence[tuple[int, float]], seq: float, default: float) -> float:
    """A measured share of peak at kernel length ``seq``: linear in log2(seq)
    between the measured lengths, clamped at the ends; ``default`` without a curve."""
    if not curve:
        return default
    pts = sorted(curve)
    if seq <= pts[0][0]:
        return pts[0][1]
    if seq >= pts[-1][0]:
        return pts[-1][1]
    for (s0, f0), (s1, f1) in itertools.pairwise(pts):
        if s0 <= seq <= s1:
            w = (math.log2(seq) - math.log2(s0)) / (math.log2(s1) - math.log2(s0))
            return f0 + w * (f1 - f0)
    raise AssertionError(seq)  # pragma: no cover - the points cover every seq


@dataclass(frozen=True)
class AttentionRates:
    """What one rank's attention kernels run at."""

    peak_flops: float
    fraction: float  # flat share of peak (no curve)
    causal: tuple[tuple[int, float], ...] = ()
    full: tuple[tuple[int, float], ...] = ()

    def rate(self, seq: float, causal: bool) -> float:
        curve = self.causal if causal else self.full
        return self.peak_flops * fraction_at(curve, seq, self.fraction)


@dataclass(frozen=True)
class CpAttention:
    """One layer's attention on one rank, by phase: FLOPs, compute, exposed traffic."""

    fwd_flops: float
    fwd_compute_s: float
    fwd_comm_s: float  # exposed
    bwd_flops: float
    bwd_compute_s: float
    bwd_comm_s: float  # exposed
    fwd_bytes: float = 0.0  # moved per rank
    bwd_bytes: float = 0.0
    steps: int = 1  # kernels per phase (ring steps)
    # HBM bytes of the elementwise work around the ring's kernels (p2p: merging each
    # step's partial output, accumulating dQ and dK/dV; module docstring)
    fwd_merge_bytes: float = 0.0
    bwd_merge_bytes: float = 0.0


@dataclass(frozen=True)
class CpShape:
    """The attention of one layer as context parallelism sees it."""

    seq_len: int
    head_dim: int  # of the queries and keys (d_k)
    heads: int  # query heads on this tensor-parallel rank
    kv_heads: int  # key/value heads on this tensor-parallel rank
    micro_batch: int
    v_head_dim: int = 0  # of the values (d_v); 0: head_dim (module docstring)

    @property
    def dv(self) -> int:
        return self.v_head_dim or self.head_dim

    def causal_flops(self) -> float:
        """The layer's causal forward FLOPs over the whole sequence (module docstring)."""
        s = self.seq_len
        return 2.0 * s * s * (self.head_dim + self.dv) * self.heads * self.micro_batch / 2

    def kv_bytes(self, tokens: float) -> float:
        """K and V of ``tokens`` tokens, BF16."""
        return tokens * self.kv_heads * (self.head_dim + self.dv) * BF16_BYTES

    def q_bytes(self, tokens: float) -> float:
        """Q (and dQ) of ``tokens`` tokens, BF16."""
        return tokens * self.heads * self.head_dim * BF16_BYTES

    def out_bytes(self, tokens: float) -> float:
        """The attention output of ``tokens`` tokens, BF16."""
        return tokens * self.heads * self.dv * BF16_BYTES


def problems(seq_len: int, heads: int, kv_heads: int, cp: int, comm: CpComm,
             tp: int | None = 1) -> list[str]:
    """What stops ``cp`` from splitting this attention (``heads`` and ``kv_heads``
    are per tensor-parallel rank of ``tp``; None: the model's own, named so, for a
    check before any tensor-parallel size is chosen): every reason, each naming the
    values."""
    out = []
    if cp < 1:
        out.append(f"context-parallel size must be >= 1 (got {cp})")
        return out
    if cp > 1 and seq_len % 2:
        # Megatron-LM's get_batch_on_this_cp_rank views the sequence as 2 x cp chunks
        # (val.view(..., 2 * cp_size, s // (2 * cp_size), ...)): an odd length has no
        # cp > 1 that divides it, so no size to name
        out.append(f"sequence {seq_len} is odd: context parallelism splits it into 2 x cp "
                   "chunks (causal load balancing), which no cp above 1 divides; use an "
                   "even sequence length or cp 1")
    elif cp > 1 and seq_len % (2 * cp):
        out.append(f"sequence {seq_len} is not divisible by 2 x cp = {2 * cp} "
                   "(causal load balancing cuts it into 2 x cp chunks); choose a cp "
                   f"that divides {seq_len // 2}")
    if cp > 1 and comm is CpComm.A2A:
        bad = [(what, n) for what, n in (("query head", heads), ("key/value head", kv_heads))
               if n % cp]
        if bad:  # one reason, the query and key/value heads named together
            nor = "".join(f", nor {'is' if n == 1 else 'are'} {n} {what}{'s' * (n != 1)}"
                          for what, n in bad[1:])
            what, n = bad[0]
            out.append(f"--cp-comm a2a splits heads over cp: {_heads(n, what, tp)} not "
                       f"divisible by cp = {cp}{nor}; use p2p or a2a+p2p")
    return out


def _heads(n: int, what: str, tp: int | None) -> str:
    """``n`` heads as the message names them: per tensor-parallel rank (of how many in
    all), or the model's (``tp`` None), with the verb that agrees."""
    noun = what if n == 1 else f"{what}s"
    verb = "is" if n == 1 else "are"
    if tp is None:
        return f"the model's {n} {noun} {verb}"
    split = f" ({n * tp} / tp {tp})" if tp > 1 else ""
    return f"{n} {noun} per tensor-parallel rank{split} {verb}"


def hierarchical_sizes(cp: int, group: Group, heads: int, kv_heads: int) -> tuple[int, int]:
    """(a2a ranks, p2p ranks) of an a2a+p2p exchange over the cp ``group``: the
    all-to-all over the largest number of the group's members on one node that
    divides ``cp`` and the ``heads`` and ``kv_heads`` of a tensor-parallel rank (it
    splits them as Ulysses does; Megatron-LM lists the inner size first)."""
    inner = math.gcd(cp if group.intra else group.per_node, cp, heads, max(1, kv_heads))
    return inner, cp // inner


def _p2p(shape: CpShape, cp: int, rates: AttentionRates, hop: Link) -> CpAttention:
    s, b = shape.seq_len, shape.micro_batch
    mine = shape.causal_flops() / cp
    step_flops = mine / cp
    seq = s / cp  # the two local chunks
    diag = step_flops / rates.rate(seq, causal=True)
    off = step_flops / rates.rate(seq, causal=False)
    steps_s = [diag] + [off] * (cp - 1)
    kv = shape.kv_bytes(b * s / cp)
    fwd_hop = hop.time_s(kv) if cp > 1 else 0.0
    bwd_hop = hop.time_s(2 * kv) if cp > 1 else 0.0
    fwd_comm = sum(max(0.0, fwd_hop - t) for t in steps_s[:-1])
    bwd_comm = sum(max(0.0, bwd_hop - BWD_OVER_FWD * t) for t in steps_s[:-1])
    if cp > 1:
        bwd_comm += hop.time_s(kv)  # the gradients' last hop home
    fwd_s = sum(steps_s)
    q_bytes = shape.q_bytes(b * s / cp)  # this rank's Q (and dQ)
    o_bytes = shape.out_bytes(b * s / cp)  # and its output
    merge_f = cp * 3 * o_bytes + o_bytes + 2 * kv if cp > 1 else 0.0
    merge_b = cp * (3 * q_bytes + 5 * kv) if cp > 1 else 0.0
    return CpAttention(mine, fwd_s, fwd_comm, BWD_OVER_FWD * mine, BWD_OVER_FWD * fwd_s,
                       bwd_comm, (cp - 1) * kv, (cp - 1) * 2 * kv + (kv if cp > 1 else 0.0),
                       steps=cp, fwd_merge_bytes=merge_f, bwd_merge_bytes=merge_b)


def _all_gather(shape: CpShape, cp: int, rates: AttentionRates, links: CpLinks) -> CpAttention:
    s, b = shape.seq_len, shape.micro_batch
    mine = shape.causal_flops() / cp
    fwd_s = mine / rates.rate(s / cp, causal=True)
    kv = shape.kv_bytes(b * s / cp)
    full = cp * kv  # the gathered array
    gather = collective_s(Collective.ALL_GATHER, full, links.group, links.fabric)
    scatter = collective_s(Collective.REDUCE_SCATTER, full, links.group, links.fabric)
    moved = (cp - 1) * kv
    return CpAttention(mine, fwd_s, gather, BWD_OVER_FWD * mine, BWD_OVER_FWD * fwd_s,
                       gather + scatter, moved, 2 * moved, steps=2)


def _a2a(shape: CpShape, cp: int, rates: AttentionRates, links: CpLinks) -> CpAttention:
    s, b = shape.seq_len, shape.micro_batch
    mine = shape.causal_flops() / cp
    fwd_s = mine / rates.rate(s, causal=True)
    tokens = b * s / cp
    qkv = shape.q_bytes(tokens) + shape.kv_bytes(tokens)
    out = shape.out_bytes(tokens)
    near = links.near(links.group)
    far = links.hop(False)
    t_qkv = all_to_all_s(qkv, links.group, near, far)
    t_out = all_to_all_s(out, links.group, near, far)
    share = (cp - 1) / cp
    return CpAttention(mine, fwd_s, t_qkv + t_out, BWD_OVER_FWD * mine, BWD_OVER_FWD * fwd_s,
                       t_out + t_qkv, share * (qkv + out), share * (qkv + out))


def _hierarchical(shape: CpShape, cp: int, rates: AttentionRates, links: CpLinks) -> CpAttention:
    """a2a over the group's members on one node (as many as the heads allow), a p2p
    ring over the rest, its steps paced by the group's slowest hop."""
    inner, outer = hierarchical_sizes(cp, links.group, shape.heads, shape.kv_heads)
    hop = links.hop(links.group.intra)
    if outer == 1:
        return _a2a(shape, cp, rates, links)
    if inner == 1:
        return _p2p(shape, cp, rates, hop)
    in_group = Group(inner, inner, 1)
    inner_links = CpLinks(in_group, links.fabric, links.latency_intra_s, links.latency_inter_s)
    heads = CpShape(shape.seq_len, shape.head_dim, shape.heads // inner,
                    max(1, shape.kv_heads // inner), shape.micro_batch, shape.v_head_dim)
    ring = _p2p(heads, outer, rates, hop)
    tokens = shape.micro_batch * shape.seq_len / cp
    qkv = shape.q_bytes(tokens) + shape.kv_bytes(tokens)
    out = shape.out_bytes(tokens)
    near, far = inner_links.near(in_group), inner_links.hop(False)
    a2a = all_to_all_s(qkv, in_group, near, far) + all_to_all_s(out, in_group, near, far)
    share = (inner - 1) / inner * (qkv + out)
    return CpAttention(ring.fwd_flops, ring.fwd_compute_s, ring.fwd_comm_s + a2a,
                       ring.bwd_flops, ring.bwd_compute_s, ring.bwd_comm_s + a2a,
                       ring.fwd_bytes + share, ring.bwd_bytes + share, ring.steps)


def attention(shape: CpShape, cp: int, comm: CpComm, rates: AttentionRates,
              links: CpLinks | None) -> CpAttention:
    """One rank's attention of one layer under ``cp``-way context parallelism."""
    if cp == 1 or links is None:  # nothing moves (cp = 1), or nothing is priced
        return _p2p(shape, cp, rates, Link())
    if comm is CpComm.P2P:
        return _p2p(shape, cp, rates, links.hop(links.group.intra))
    if comm is CpComm.ALL_GATHER:
        return _all_gather(shape, cp, rates, links)
    if comm is CpComm.A2A:
        return _a2a(shape, cp, rates, links)
    return _hierarchical(shape, cp, rates, links)
