"""Robust summaries of repeated timings (pure Python), for probe and validate.

CPU timings carry 5-15% noise with bursts past 100% (docs/measured.md), so
both commands report the median and the interquartile range relative to it,
never the mean. ``median`` is the one median of the package.
"""

from __future__ import annotations

from collections.abc import Sequence

# A layer whose IQR exceeds a quarter of its median is flagged in the summary:
# its median may move between runs (docs/measured.md: the mean moved ~15%).
HIGH_SPREAD = 0.25


def quantile(values: Sequence[float], q: float) -> float:
    """Quantile with linear interpolation between order statistics (numpy's default)."""
    if not values:
        raise ValueError("quantile of an empty sequence")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile q must be in [0, 1], got {q}")
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    """The middle value, or the mean of the two middle ones (``statistics.median``)."""
    if not values:
        raise ValueError("median of an empty sequence")
    xs = sorted(values)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def spread(values: Sequence[float]) -> float:
    """Interquartile range over the median; 0.0 when the median is 0."""
    mid = median(values)
    if mid <= 0.0:
        return 0.0
    return (quantile(values, 0.75) - quantile(values, 0.25)) / mid
