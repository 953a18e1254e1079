"""Time-axis ticks shared by the text and SVG timelines."""

from __future__ import annotations

import math

from pptune.report.fmt import seconds_unit


def nice_step(span: float, max_ticks: int) -> float:
    """A 1-2-5 x 10^k step giving at most ``max_ticks`` intervals over ``span`` (> 0)."""
    raw = span / max(1, max_ticks)
    mag = 10.0 ** math.floor(math.log10(raw))
    for mult in (1, 2, 5):
        if mult * mag >= raw * (1 - 1e-9):
            return mult * mag
    return 10 * mag


def ticks(span_s: float, max_ticks: int) -> tuple[float, str, list[float]]:
    """``(factor_s, unit, values)``: round tick values in the makespan's unit.

    Values start at 0 and stay strictly below the span (the span itself is
    labelled on its own, with ``fmt_seconds``).
    """
    factor, unit, _dec = seconds_unit(span_s)
    if span_s <= 0 or not math.isfinite(span_s):
        return factor, unit, [0.0]
    span_u = span_s / factor
    step = nice_step(span_u, max_ticks)
    values = []
    k = 0
    while k * step < span_u * (1 - 1e-9):
        values.append(round(k * step, 9))
        k += 1
    return factor, unit, values


def fmt_tick(value: float) -> str:
    """A tick value without float noise: 0.30000000000000004 -> ``0.3``."""
    return f"{round(value, 9):g}"
