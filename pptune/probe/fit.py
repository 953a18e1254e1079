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

A fit tells latency from bandwidth only when the sweep spans both regimes:
small messages whose time is the latency, and large ones whose transfer
takes at least as long again (``unresolved``: the largest message's median
time at least ``RESOLVED_RATIO`` times the smallest's, over at least
``MIN_FIT_SIZES`` sizes). A sweep that stops short of that (``probe
--max-bytes 64K`` on a CPU, whose loopback latency is some 100-300 us against
65 us for 64 KiB at 1 GB/s) fits its noise: its bandwidth is not measured.
The probe's own sweep doubles from 1 KiB and needs ``MIN_SIZES`` sizes (up to
8 KiB) before it can span both on any link; where the bandwidth shows depends
on the link (a few MiB on a CPU's loopback, tens of MiB on NVLink).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# sizes the probe's doubling sweep needs at least (1 KiB to 8 KiB), and a fit
MIN_SIZES = 4
MIN_FIT_SIZES = 3  # a line through two points checks nothing
# the largest message's time over the smallest's at which the bandwidth shows: the
# transfer term at least equal to the latency
RESOLVED_RATIO = 2.0


def unresolved(points: Sequence[tuple[float, float]]) -> str | None:
    """Why ``points`` (bytes, median seconds) do not resolve latency and bandwidth apart
    (module docstring); None when they do."""
    pts = sorted((float(x), float(t)) for x, t in points if t > 0 and x > 0)
    sizes = sorted({x for x, _ in pts})
    if len(sizes) < MIN_FIT_SIZES:
        return (f"{len(sizes)} message size(s); a latency-and-bandwidth fit needs at least "
                f"{MIN_FIT_SIZES}")
    small = [t for x, t in pts if x == sizes[0]]
    large = [t for x, t in pts if x == sizes[-1]]
    ratio = min(large) / max(small)
    if ratio >= RESOLVED_RATIO:
        return None
    return (f"its largest message took {ratio:.2f}x the smallest's time, under the "
            f"{RESOLVED_RATIO:g}x at which a transfer outlasts the latency: the sweep never "
            "left the latency-bound sizes, so no bandwidth shows")


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
