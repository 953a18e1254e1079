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

Gradient compression changes the bytes: fp16/bf16 halves fp32 gradients;
top-k keeps a fraction k of the values plus an int32 index each
(Lin et al. 2018, "Deep Gradient Compression"; Aji & Heafield 2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


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


def dp_exposed_s(red: DpReduction, bwd_window_s: float, fwd_window_s: float) -> float:
    """Exposed data-parallel communication of one stage per step.

    ``bwd_window_s``: the stage's backward of its last micro-batch, which the
    gradient buckets overlap; ``fwd_window_s``: its first forward, which the
    parameter all-gather overlaps (distributed optimizer)."""
    if red.dp <= 1 or red.params <= 0:
        return 0.0
    grad_op = reduce_scatter_s if red.sharded else allreduce_s
    if not red.overlap:
        exposed = grad_op(red.params * red.grad_bytes, red.dp, red.link)
        if red.sharded:
            exposed += all_gather_s(red.params * red.param_bytes, red.dp, red.link)
        return exposed
    bucket = red.bucket_params or megatron_bucket_params(red.dp)
    sizes = buckets(red.params, bucket)
    grads = [grad_op(n * red.grad_bytes, red.dp, red.link) for n in sizes]
    exposed = overlapped_tail_s(grads, sizes, bwd_window_s)
    if red.sharded:
        gathers = [all_gather_s(n * red.param_bytes, red.dp, red.link) for n in sizes]
        exposed += prefetch_stall_s(gathers, sizes, fwd_window_s)
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
