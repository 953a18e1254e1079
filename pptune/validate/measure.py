"""Measured steps -> step time, per-device busy and idle, bubble (pure Python).

Input: for every timed step and every pipeline rank, the step window on that
rank (``start_ns``, ``end_ns``: ``time.perf_counter_ns()`` after the barrier
and after ``schedule.step`` returned) and the compute ops it ran (``OpStamp``:
kind, micro-batch, global stage, start and end). Processes on one host share
``perf_counter_ns``'s clock (CLOCK_MONOTONIC on Linux; docs/measured.md),
so the stamps of all ranks line up without any offset.

Definitions (the same as the simulator's, ``pptune.costmodel.simulate``):

- a step runs from the earliest rank's start to the latest rank's end;
- a device's busy time is the *union* of its compute op intervals inside
  the step window (ops never overlap on one rank, but the union makes the
  figure robust to a stamp that does): time spent waiting to receive is idle,
  even when a framework marker (torch.profiler) covers it;
- idle = step - busy; bubble rate = 1 - total busy / (p * step), the idle
  share of the step (Huang et al. 2019);
- measured step time = median over the timed steps (CPU step times carry
  2-10% noise with rare +35-50% bursts, docs/measured.md: the median, never the
  mean); per-device busy = median over the same steps; the timeline kept for
  pictures is the step whose time is the (lower) median.

Op kinds: ``F`` forward, ``B`` backward (the whole backward where the
schedule does not split it; input-gradient only where it does), ``W``
weight-gradient, and ``L``, the loss on the last stage, which the timeline
folds into the forward it follows (the simulator's ``F`` of the last stage
includes it once ``compare`` adds the loss cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pptune.costmodel.schedules import Op, OpKind
from pptune.launch.stats import median

NS_PER_S = 1e9


class OpStamp(NamedTuple):
    """One compute op as a rank ran it (nanoseconds on the shared clock)."""

    kind: str  # "F", "B", "W" or "L" (loss)
    mb: int
    stage: int
    start_ns: int
    end_ns: int


@dataclass(frozen=True)
class RankStep:
    """One rank's record of one step."""

    rank: int
    start_ns: int
    end_ns: int
    ops: tuple[OpStamp, ...] = ()


class MeasuredEvent(NamedTuple):
    """An op of the measured timeline, shaped like the simulator's ``Event``."""

    device: int
    op: Op
    start_s: float
    end_s: float


@dataclass
class DeviceMeasure:
    busy_s: float
    idle_s: float


@dataclass
class StepMeasure:
    step_time_s: float
    busy_s: list[float]  # per device
    events: list[MeasuredEvent] = field(repr=False)


@dataclass
class Measured:
    """The timed steps, summarised. Satisfies ``pptune.report.protocol.Timeline``."""

    p: int
    step_time_s: float
    bubble_rate: float
    devices: list[DeviceMeasure]
    events: list[MeasuredEvent] = field(repr=False)  # the median step, from its start
    step_times_s: list[float] = field(default_factory=list)
    op_medians_s: dict[tuple[str, int], float] = field(default_factory=dict)

    @property
    def spread(self) -> float:
        """(max - min) / median of the timed step times: the run's own noise."""
        if len(self.step_times_s) < 2 or self.step_time_s <= 0:
            return 0.0
        return (max(self.step_times_s) - min(self.step_times_s)) / self.step_time_s


def union_s(intervals: Iterable[tuple[float, float]], lo: float, hi: float) -> float:
    """Length of the union of ``[start, end)`` intervals, clipped to ``[lo, hi]``.

    >>> union_s([(0, 2), (1, 3), (5, 6)], 0, 10)
    4.0
    """
    clipped = sorted((max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo))
    total = 0.0
    cur_a = cur_b = None
    for a, b in clipped:
        if cur_b is None or a > cur_b:
            if cur_b is not None and cur_a is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        elif b > cur_b:
            cur_b = b
    if cur_b is not None and cur_a is not None:
        total += cur_b - cur_a
    return total


def fold_loss(ops: Sequence[OpStamp]) -> list[OpStamp]:
    """Fold each loss op (``L``) into the forward of the same micro-batch and stage.

    The forward is extended to cover the loss; a loss with no such forward
    on the rank is kept as a forward of its own.
    """
    out = [o for o in ops if o.kind != "L"]
    fwd = {(o.mb, o.stage): i for i, o in enumerate(out) if o.kind == "F"}
    for o in ops:
        if o.kind != "L":
            continue
        k = fwd.get((o.mb, o.stage))
        if k is None:
            out.append(o._replace(kind="F"))
            continue
        cur = out[k]
        out[k] = cur._replace(
            start_ns=min(cur.start_ns, o.start_ns), end_ns=max(cur.end_ns, o.end_ns)
        )
    return out


def measure_step(ranks: Sequence[RankStep], p: int, shared_clock: bool = True) -> StepMeasure:
    """Step time, per-device busy and the events of one step.

    ``shared_clock``: all ranks stamp one clock (one host); the step runs
    from the earliest start to the latest end. Otherwise (ranks on several
    hosts) each rank is placed relative to its own start, which the barrier
    before the step aligns to within the barrier's skew.
    """
    if not ranks:
        raise ValueError("no ranks recorded for this step")
    if shared_clock:
        t0 = min(r.start_ns for r in ranks)
        t1 = max(r.end_ns for r in ranks)
        offsets = {r.rank: t0 for r in ranks}
        step_ns = t1 - t0
    else:
        offsets = {r.rank: r.start_ns for r in ranks}
        step_ns = max(r.end_ns - r.start_ns for r in ranks)
    busy = [0.0] * p
    events: list[MeasuredEvent] = []
    for r in ranks:
        base = offsets[r.rank]
        ops = fold_loss(r.ops)
        if r.rank < p:
            busy[r.rank] = union_s(
                ((o.start_ns - base, o.end_ns - base) for o in ops), 0, step_ns
            ) / NS_PER_S
        for o in ops:
            events.append(
                MeasuredEvent(
                    r.rank,
                    Op(OpKind(o.kind), o.mb, o.stage),
                    (o.start_ns - base) / NS_PER_S,
                    (o.end_ns - base) / NS_PER_S,
                )
            )
    events.sort(key=lambda e: (e.device, e.start_s))
    return StepMeasure(step_ns / NS_PER_S, busy, events)


def op_medians(steps: Sequence[Sequence[RankStep]]) -> dict[tuple[str, int], float]:
    """Median duration (s) of each (kind, stage) over all timed steps; the loss kept apart."""
    samples: dict[tuple[str, int], list[float]] = {}
    for ranks in steps:
        for r in ranks:
            for o in r.ops:
                samples.setdefault((o.kind, o.stage), []).append((o.end_ns - o.start_ns) / NS_PER_S)
    return {key: median(xs) for key, xs in sorted(samples.items())}


def summarize(steps: Sequence[Sequence[RankStep]], p: int, shared_clock: bool = True) -> Measured:
    """Medians over the timed steps (see the module docstring)."""
    if not steps:
        raise ValueError("no timed steps to summarise")
    measured = [measure_step(ranks, p, shared_clock) for ranks in steps]
    times = [s.step_time_s for s in measured]
    step = median(times)
    busy = [median([s.busy_s[d] for s in measured]) for d in range(p)]
    devices = [DeviceMeasure(busy_s=b, idle_s=max(0.0, step - b)) for b in busy]
    bubble = 1.0 - sum(busy) / (p * step) if step > 0 else 0.0
    order = sorted(range(len(times)), key=lambda i: times[i])
    kept = measured[order[(len(order) - 1) // 2]]
    return Measured(
        p=p,
        step_time_s=step,
        bubble_rate=bubble,
        devices=devices,
        events=kept.events,
        step_times_s=times,
        op_medians_s=op_medians(steps),
    )
