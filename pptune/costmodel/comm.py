"""Alpha-beta communication costs.

Point-to-point: ``latency_s + bytes / bytes_per_s`` (Hockney's model).

All-reduce over n ranks, ring algorithm: each rank sends and receives
``2 (n-1)/n * bytes``, in ``2 (n-1)`` steps (Patarasuk & Yuan 2009).
nccl-tests reports *bus bandwidth* exactly so that this holds:
``busbw = algbw * 2 (n-1) / n`` (nccl-tests doc/PERFORMANCE.md), hence
``time = latency + 2 (n-1)/n * bytes / busbw``, where the latency is the
whole operation's small-message time (what a probe or nccl-tests measures
at small sizes).

Reduce-scatter and all-gather move half of that: ``(n-1)/n * bytes``
(nccl-tests PERFORMANCE.md, ``busbw = algbw * (n-1)/n``), ``bytes`` being
the whole array.

Data-parallel gradient reduction overlaps the backward pass in buckets
(PyTorch DDP: 25 MiB buckets, ``kDefaultBucketBytesCap`` in
torch/csrc/distributed/c10d/reducer.hpp; Megatron-LM ``--overlap-grad-reduce``:
``max(40M, 1M * dp)`` parameters a bucket, megatron/core/distributed/
distributed_data_parallel_config.py). Under gradient accumulation only the
last micro-batch's backward launches them (``DpReduction.bucket_params``
picks the bucket; Megatron-LM's by default). A bucket is ready when the
backward has produced its share of the gradients; buckets are reduced one
after another on the communication stream; what is left when the backward
ends is exposed. The distributed optimizer (ZeRO-1) reduce-scatters the
gradients the same way and all-gathers the updated bf16 parameters,
overlapped with the next step's first forward (``--overlap-param-gather``).

Where the group sits (layout.py's ``Group``) sets its bandwidth. Inside one
node a collective runs at the node's bus bandwidth. Across nodes NCCL runs
one ring channel through each member's NIC, so a group with q members on
every node moves q NICs' worth of traffic at once: its bus bandwidth is q
times one member's cross-node figure, up to the node's own (``group_link``;
e.g. 8 x 48 GB/s = 384 GB/s for a full DGX H100 node, where nccl-tests
maintainers quote 46-48 GB/s per 400 Gb/s NIC, NVIDIA/nccl-tests issue 290;
8 x 24 = 192 GB/s measured on a DGX A100's eight 200 Gb/s NICs, NVIDIA/nccl
issue 812). An all-to-all (expert dispatch and combine) sends each member's
share to every other member: the shares for members on its own node go over
NVLink, the others through its NIC, both at once (``all_to_all_s``).

A node without a switch (8 x AMD MI300X: every GPU has 7 direct xGMI links, one to
each other GPU, ROCm docs "AMD Instinct MI300 Series microarchitecture") has no
node-wide figure: what a group reaches inside it depends on how many direct links
its members hold. A copy to one peer runs over one link; a ring over ``m`` members
on the node runs RCCL's channels over the ``m - 1`` links each member has to the
others, ``(m - 1)`` links' worth of bus bandwidth up to the full node's measured
figure (``mesh_ring_busbw``); an all-to-all sends each peer's share down its own
link, all at once (``mesh_a2a_bytes_per_s``). presets_amd.py cites the figures.

Gradient compression changes the bytes: fp16/bf16 halves fp32 gradients;
top-k keeps a fraction k of the values plus an int32 index each
(Lin et al. 2018, "Deep Gradient Compression"; Aji & Heafield 2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class AllReduceLink:
    latency_s: float
    busbw_bytes_per_s: float


def allreduce_s(nbytes: float, n: int, link: AllReduceLink) -> float:
    """Ring all-reduce time of ``nbytes`` over ``n`` ranks."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return link.latency_s + 2 * (n - 1) / n * nbytes / link.busbw_bytes_per_s


def compression_factor(spec: str | None, grad_dtype_bytes: int = 4) -> float:
    """Bytes on the wire per gradient byte for ``--grad-compression``.

    ``None`` or ``"none"``: 1. ``"fp16"``/``"bf16"``: 2 / grad_dtype_bytes.
    ``"topk:F"``: F * (value + 4-byte index) / grad_dtype_bytes.
    """
    if spec is None or spec == "none":
        return 1.0
    if spec in ("fp16", "bf16"):
        return min(1.0, 2 / grad_dtype_bytes)
    if spec.startswith("topk:"):
        try:
            frac = float(spec.split(":", 1)[1])
        except ValueError:
            frac = math.nan
        if not 0 < frac <= 1:
            raise ValueError(
                f"--grad-compression topk:F needs 0 < F <= 1 (got {spec!r}), e.g. topk:0.01"
            )
        return min(1.0, frac * (grad_dtype_bytes + 4) / grad_dtype_bytes)
    raise ValueError(
        f"unknown --grad-compression {spec!r}; use none, fp16, bf16 or topk:FRACTION"
    )


def reduce_scatter_s(nbytes: float, n: int, link: AllReduceLink) -> float:
    """Ring reduce-scatter (or all-gather) of a ``nbytes`` array over ``n`` ranks."""
    if n <= 1 or nbytes <= 0:
        return 0.0
    return link.latency_s + (n - 1) / n * nbytes / link.busbw_bytes_per_s


all_gather_s = reduce_scatter_s


class Placement(Protocol):
    """Where a group's ranks sit (layout.Group)."""

    @property
    def size(self) -> int: ...
    @property
    def per_node(self) -> int: ...
    @property
    def intra(self) -> bool: ...


class PointLink(Protocol):
    """Alpha-beta point-to-point link (simulate.Link)."""

    @property
    def latency_s(self) -> float: ...
    @property
    def bytes_per_s(self) -> float: ...


def group_link(group: Placement, intra: AllReduceLink, inter: AllReduceLink) -> AllReduceLink:
    """The link a group's collectives run at: the node's inside one node; across
    nodes ``per_node`` NICs at once (``inter`` is one member per node), up to the
    node's own bus bandwidth."""
    if group.intra:
        return intra
    return AllReduceLink(inter.latency_s,
                         min(intra.busbw_bytes_per_s, group.per_node * inter.busbw_bytes_per_s))


def mesh_ring_busbw(members: int, node_busbw: float, link_bytes_per_s: float | None) -> float:
    """The bus bandwidth of a ring over ``members`` GPUs of one node: the node's on a
    switched node (``link_bytes_per_s`` None) or with one member (no hop inside); on a
    full mesh their ``members - 1`` direct links each, up to the node's."""
    if link_bytes_per_s is None or members < 2:
        return node_busbw
    return min(node_busbw, (members - 1) * link_bytes_per_s)


def mesh_a2a_bytes_per_s(members: int, copy_bytes_per_s: float,
                         link_bytes_per_s: float | None) -> float:
    """What one of ``members`` GPUs of a node sends to the others at once in an
    all-to-all: one copy's rate through a switch, ``members - 1`` links on a full mesh."""
    if link_bytes_per_s is None or members < 2:
        return copy_bytes_per_s
    return (members - 1) * link_bytes_per_s


def all_to_all_s(nbytes: float, group: Placement, intra: PointLink, inter: PointLink) -> float:
    """All-to-all of ``nbytes`` per member, spread evenly over the ``group``: the
    shares for the ``per_node - 1`` others on its node over NVLink (``intra``), the
    rest through its NIC (``inter``), concurrently."""
    n = group.size
    if n <= 1 or nbytes <= 0:
        return 0.0
    near = (group.per_node - 1) / n * nbytes
    far = (n - group.per_node) / n * nbytes
    if far <= 0:
        return intra.latency_s + near / intra.bytes_per_s
    return inter.latency_s + max(near / intra.bytes_per_s, far / inter.bytes_per_s)


def torch_ddp_bucket_params(grad_bytes: float) -> float:
    """PyTorch DDP's bucket: 25 MiB of gradients (``bucket_cap_mb``)."""
    return 25 * 2**20 / grad_bytes


def megatron_bucket_params(dp: int) -> int:
    """Megatron-LM's default DDP bucket: max(40M, 1M * dp) parameters."""
    return max(40_000_000, 1_000_000 * dp)


def buckets(total: float, bucket: float) -> list[float]:
    """``total`` split into full buckets of ``bucket`` and one remainder."""
    if total <= 0:
        return []
    full = int(total // bucket)
    rest = total - full * bucket
    return [float(bucket)] * full + ([rest] if rest > 0 else [])


def overlapped_tail_s(comm_s: Sequence[float], sizes: Sequence[float], window_s: float) -> float:
    """Time the bucketed communication runs past the end of a compute window.

    Bucket i (``sizes[i]`` of the total) becomes ready when that share of the
    window has passed; ``comm_s[i]`` is its transfer; one bucket at a time."""
    total = sum(sizes)
    if not comm_s or total <= 0:
        return 0.0
    end = done = 0.0
    for c, size in zip(comm_s, sizes, strict=True):
        done += size
        end = max(end, window_s * done / total) + c
    return max(0.0, end - window_s)


@dataclass(frozen=True)
class DpReduction:
    """One stage's data-parallel gradient traffic, as a framework runs it."""

    params: float
    dp: int
    link: AllReduceLink
    grad_bytes: float = 4.0  # per parameter on the wire (fp32, or compressed)
    param_bytes: float = 2.0  # bf16 parameters all-gathered by the distributed optimizer
    sharded: bool = False  # distributed optimizer: reduce-scatter + all-gather
    overlap: bool = True  # bucketed, during the last backward (and next forward)
    bucket_params: float | None = None  # None: Megatron-LM's default (megatron_bucket_params)
    overlap_gather: bool | None = None  # the parameter all-gather's own switch; None: overlap


def dp_exposed_s(red: DpReduction, bwd_window_s: float, fwd_window_s: float) -> float:
    """Exposed data-parallel communication of one stage per step.

    ``bwd_window_s``: the stage's backward of its last micro-batch, which the
    gradient buckets overlap; ``fwd_window_s``: its first forward, which the
    parameter all-gather overlaps (distributed optimizer)."""
    if red.dp <= 1 or red.params <= 0:
        return 0.0
    grad_op = reduce_scatter_s if red.sharded else allreduce_s
    gather_overlap = red.overlap if red.overlap_gather is None else red.overlap_gather
    bucket = red.bucket_params or megatron_bucket_params(red.dp)
    sizes = buckets(red.params, bucket)
    # full buckets all cost the same: each distinct size priced once
    if red.overlap:
        grad_of = {n: grad_op(n * red.grad_bytes, red.dp, red.link) for n in set(sizes)}
        grads = [grad_of[n] for n in sizes]
        exposed = overlapped_tail_s(grads, sizes, bwd_window_s)
    else:
        exposed = grad_op(red.params * red.grad_bytes, red.dp, red.link)
    if red.sharded and gather_overlap:
        gather_of = {n: all_gather_s(n * red.param_bytes, red.dp, red.link) for n in set(sizes)}
        gathers = [gather_of[n] for n in sizes]
        exposed += prefetch_stall_s(gathers, sizes, fwd_window_s)
    elif red.sharded:
        exposed += all_gather_s(red.params * red.param_bytes, red.dp, red.link)
    return exposed


def prefetch_stall_s(comm_s: Sequence[float], sizes: Sequence[float], window_s: float) -> float:
    """Stall of a compute window that consumes buckets in order while they
    arrive one after another from time 0 (parameter all-gather ahead of the
    forward): bucket i is needed once the share of the window before it has
    run; the window waits for the latest bucket the most."""
    total = sum(sizes)
    if not comm_s or total <= 0:
        return 0.0
    stall = arrived = before = 0.0
    for c, size in zip(comm_s, sizes, strict=True):
        arrived += c
        stall = max(stall, arrived - window_s * before / total)
        before += size
    return stall
