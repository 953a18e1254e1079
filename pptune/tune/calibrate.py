"""Calibration: measured per-op times -> per-layer scale factors and a link latency (pure).

A trial runs one pipeline plan and times every op (``pptune.validate``): the
median forward ``F``, backward ``B`` and weight-gradient ``W`` of each stage.
Each such median is an *observation*: the measured time of a set of profile
cells, a cell being one layer's forward (``fwd``), input-gradient (``bwd``)
or weight-gradient (``wgrad``) cost. Which cells an op covers depends on the
schedule, as torch.distributed.pipelining runs it:

- ``F`` of stage k: the ``fwd`` of its layers (the loss is timed apart);
- ``B`` where backward is not split (gpipe, 1f1b, interleaved): ``bwd`` and
  ``wgrad`` of its layers, one full backward;
- ``B`` and ``W`` where it is split (zb-h1, zbv): ``bwd`` and ``wgrad``
  apart, except on stage 0, where torch 2.13 runs the whole backward in W
  (``stage.py``: "Skip the backward for the first stage"): W covers both.

The fit looks for one factor per cell such that, for every observation,
``sum(factor * base cost)`` over its cells equals the measured time. It
iterates multiplicative updates (each cell's factor times the geometric mean,
weighted by op count, of measured / fitted over the observations that cover
it), the fixed-point form of iterative proportional fitting (Deming and
Stephan 1940): one trial gives every stage's ratio exactly; trials with other
splits refine the factors inside a stage. Cells no trial covered take the
median factor of their part (``fwd``, ``bwd``, ``wgrad``), else of all.

The factors hold what makes a layer run at another speed than when it was
probed (other load then or now, another machine). Contention between ranks
computing at once is kept apart: each trial's op medians are first divided
by the stretch ``pptune validate``'s processor-sharing model gives for the
contention that trial measured (``model.alone_medians``), and predictions
apply the same model with the trials' median contention. So the contention
factor is one calibrated parameter among the others, reported with them.

The link: with compute calibrated, the rest of a trial's measured step is
what each hop adds (gloo's p2p latency, the framework's per-op bookkeeping);
``fit_latency`` finds the per-message latency that makes the simulated step
match the measured one (the step time is non-decreasing in latency, so a
bisection finds it). Per trial; the median over trials is kept. One message
size per model: the bandwidth cannot be told apart from latency, so the
profile's bytes_per_s is kept.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

PARTS = ("fwd", "bwd", "wgrad")
ITERATIONS = 200
TOLERANCE = 1e-9  # stop when no factor moves by more than this (relative)
LATENCY_BISECTIONS = 40

Cell = tuple[int, str]  # (layer index, part)


@dataclass(frozen=True)
class Observation:
    """One measured op median and the profile cells it covers."""

    label: str  # e.g. "trial 1 F1"
    cells: tuple[Cell, ...]
    measured_s: float
    weight: float = 1.0  # how many ops the median stands for


def stage_ranges(stage_layers: Sequence[int]) -> list[range]:
    out, start = [], 0
    for n in stage_layers:
        out.append(range(start, start + n))
        start += n
    return out


def op_cells(kind: str, stage: int, stage_layers: Sequence[int], split_backward: bool) -> tuple[Cell, ...]:
    """The cells op ``kind`` of global ``stage`` covers (module docstring)."""
    layers = stage_ranges(stage_layers)[stage]
    if kind == "F":
        parts: tuple[str, ...] = ("fwd",)
    elif kind == "B":
        parts = ("bwd",) if split_backward and stage > 0 else ("bwd", "wgrad")
        if split_backward and stage == 0:
            parts = ()  # torch's stage-0 B is empty: W holds the whole backward
    elif kind == "W":
        parts = ("wgrad",) if stage > 0 else ("bwd", "wgrad")
    else:
        raise ValueError(f"unknown op kind {kind!r} (F, B or W)")
    return tuple((i, part) for i in layers for part in parts)


def observations(
    label: str,
    stage_layers: Sequence[int],
    split_backward: bool,
    op_medians_s: Mapping[tuple[str, int], float],
    ops_per_kind: int = 1,
) -> list[Observation]:
    """A trial's (kind, stage) medians as observations; the loss (``L``) is left out."""
    out = []
    for (kind, stage), t in sorted(op_medians_s.items()):
        if kind not in ("F", "B", "W") or stage >= len(stage_layers) or not t > 0:
            continue
        cells = op_cells(kind, stage, stage_layers, split_backward)
        if cells:
            out.append(Observation(f"{label} {kind}{stage}", cells, t, float(ops_per_kind)))
    return out


def fit_factors(base: Mapping[Cell, float], obs: Sequence[Observation]) -> dict[Cell, float]:
    """One factor per cell of ``base`` (see the module docstring).

    >>> base = {(0, "fwd"): 1.0, (1, "fwd"): 1.0}
    >>> fit_factors(base, [Observation("F0", ((0, "fwd"), (1, "fwd")), 4.0)])
    {(0, 'fwd'): 2.0, (1, 'fwd'): 2.0}
    """
    usable = [o for o in obs if sum(base.get(c, 0.0) for c in o.cells) > 0]
    factor = {c: 1.0 for c in base}
    covering: dict[Cell, list[Observation]] = {}
    for o in usable:
        for c in o.cells:
            if base.get(c, 0.0) > 0:
                covering.setdefault(c, []).append(o)
    for _ in range(ITERATIONS):
        fitted = {o.label: sum(factor[c] * base[c] for c in o.cells if c in base) for o in usable}
        moved = 0.0
        for c, os_ in covering.items():
            log_r = sum(o.weight * math.log(o.measured_s / fitted[o.label]) for o in os_)
            step = math.exp(log_r / sum(o.weight for o in os_))
            factor[c] *= step
            moved = max(moved, abs(step - 1.0))
        if moved < TOLERANCE:
            break
    return _fill_uncovered(factor, set(covering))


def _fill_uncovered(factor: dict[Cell, float], covered: set[Cell]) -> dict[Cell, float]:
    everyone = [factor[c] for c in covered]
    for part in PARTS:
        own = [factor[c] for c in covered if c[1] == part]
        fill = statistics.median(own) if own else (statistics.median(everyone) if everyone else 1.0)
        for c in factor:
            if c[1] == part and c not in covered:
                factor[c] = fill
    return factor


def fit_residual(obs: Sequence[Observation], base: Mapping[Cell, float],
                 factor: Mapping[Cell, float]) -> float:
    """Largest |fitted - measured| / measured over the observations (0 when they agree)."""
    worst = 0.0
    for o in obs:
        fitted = sum(factor.get(c, 1.0) * base.get(c, 0.0) for c in o.cells)
        if o.measured_s > 0 and fitted > 0:
            worst = max(worst, abs(fitted - o.measured_s) / o.measured_s)
    return worst


def fit_latency(step_at: Callable[[float], float], measured_s: float, hi_s: float) -> float:
    """The latency (in ``[0, hi_s]``) at which ``step_at(latency)`` equals ``measured_s``.

    ``step_at`` must be non-decreasing. 0 when even a free link over-predicts;
    ``hi_s`` when even that under-predicts.
    """
    if step_at(0.0) >= measured_s:
        return 0.0
    if step_at(hi_s) <= measured_s:
        return hi_s
    lo, hi = 0.0, hi_s
    for _ in range(LATENCY_BISECTIONS):
        mid = (lo + hi) / 2
        if step_at(mid) < measured_s:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def part_summary(factor: Mapping[Cell, float], names: Sequence[str]) -> dict[str, dict[str, float]]:
    """Median factor per layer kind (the name without its index: embed, block, head) and part."""
    groups: dict[str, dict[str, list[float]]] = {}
    for (i, part), f in factor.items():
        kind = layer_kind(names[i]) if i < len(names) else "?"
        groups.setdefault(kind, {}).setdefault(part, []).append(f)
    return {k: {p: statistics.median(v) for p, v in parts.items()} for k, parts in groups.items()}


def layer_kind(name: str) -> str:
    """``block3`` -> ``block``; ``embed`` -> ``embed``."""
    return name.rstrip("0123456789.").rstrip("_") or name
