"""Alpha-beta fit of a transfer-time sweep: ``t = latency_s + bytes / bytes_per_s``.

Hockney's model, as nccl-tests' performance notes read their own tables (time
is overhead plus size over bandwidth; doc/PERFORMANCE.md). The fit runs on the
per-size medians, never on raw samples, so one slow repeat cannot drag it.

Sweeps span six decades of size, so an ordinary least-squares fit on time
would be decided by the largest messages alone and its intercept would be
noise. We minimise the *relative* error instead (weights ``1 / t**2``), which
gives small and large messages an equal say. When noise in the small
messages tilts that fit to a non-positive slope, the ordinary fit (led by
the largest messages) is used instead. A negative intercept is clamped to 0
and the bandwidth refitted through the origin with relative weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class AlphaBeta:
    latency_s: float
    bytes_per_s: float

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


def fit_alpha_beta(points: Sequence[tuple[float, float]]) -> AlphaBeta:
    """Fit (bytes, seconds) medians; raises ValueError when no bandwidth can be fitted."""
    pts = [(float(x), float(t)) for x, t in points if t > 0 and x >= 0]
    if not pts or max(x for x, _ in pts) <= 0:
        raise ValueError("need at least one message of more than 0 bytes with a positive time")
    scale = max(x for x, _ in pts)  # work in units of the largest message: conditioning
    xs = [x / scale for x, _ in pts]
    ts = [t for _, t in pts]
    ws = [1.0 / (t * t) for t in ts]
    s = sum(ws)
    sx = sum(w * x for w, x in zip(ws, xs, strict=True))
    sxx = sum(w * x * x for w, x in zip(ws, xs, strict=True))
    st = sum(w * t for w, t in zip(ws, ts, strict=True))
    sxt = sum(w * x * t for w, x, t in zip(ws, xs, ts, strict=True))
    det = s * sxx - sx * sx
    if det <= 1e-12 * s * sxx:
        # a single size (or all alike): no intercept can be told apart
        return AlphaBeta(latency_s=0.0, bytes_per_s=scale / (sxt / sxx))
    alpha = (sxx * st - sx * sxt) / det
    slope = (s * sxt - sx * st) / det
    if slope <= 0.0:
        # noisy small messages can tilt the relative fit; the plain fit listens
        # to the largest messages, where the bandwidth shows
        alpha, slope = _ordinary(xs, ts)
    if slope <= 0.0:
        raise ValueError("transfer time does not grow with message size; no bandwidth to fit")
    if alpha < 0.0:
        alpha = 0.0
        slope = sxt / sxx
    return AlphaBeta(latency_s=alpha, bytes_per_s=scale / slope)


def _ordinary(xs: list[float], ts: list[float]) -> tuple[float, float]:
    """Unweighted least squares (intercept, slope)."""
    n = len(xs)
    mx, mt = sum(xs) / n, sum(ts) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0.0:
        return mt, 0.0
    slope = sum((x - mx) * (t - mt) for x, t in zip(xs, ts, strict=True)) / sxx
    return mt - slope * mx, slope
