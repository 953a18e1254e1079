"""Alpha-beta communication costs.

Point-to-point: ``latency_s + bytes / bytes_per_s`` (Hockney's model).

All-reduce over n ranks, ring algorithm: each rank sends and receives
``2 (n-1)/n * bytes``, in ``2 (n-1)`` steps (Patarasuk & Yuan 2009).
nccl-tests reports *bus bandwidth* exactly so that this holds:
``busbw = algbw * 2 (n-1) / n`` (nccl-tests doc/PERFORMANCE.md), hence
``time = latency + 2 (n-1)/n * bytes / busbw``, where the latency is the
whole operation's small-message time (what a probe or nccl-tests measures
at small sizes).

Gradient compression changes the bytes: fp16/bf16 halves fp32 gradients;
top-k keeps a fraction k of the values plus an int32 index each
(Lin et al. 2018, "Deep Gradient Compression"; Aji & Heafield 2017).
"""

from __future__ import annotations

import math
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
