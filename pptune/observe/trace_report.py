"""Measured busy, communication and idle share per rank from torch.profiler traces.

The traces are read by ``pptune.observe.trace_file``; which events belong to
which rank, and which count as compute or communication, is decided in
``pptune.observe.trace_ranks`` (the rules are in its module doc).

Each share is a union of intervals clipped to the window, so overlapping
streams or threads never count twice. ``idle = window - busy``: exposed
communication is part of idle, overlapped communication is not.

Exposed communication (``exposed_comm_s``) is the time the rank's communication
runs while none of its compute does: the union of its communication intervals
less their overlap with the union of its compute intervals, clipped to the
window (``trace_ranks.difference_length``). It is part of idle, never more than
comm or idle. pptune's simulator counts the communication a device's compute
waits on as busy, not as bubble (docs/models.md), so its predicted bubble
compares with ``idle - exposed comm``; a receive kernel that waits on its sender
also runs as communication, so a pipeline's measured bubble lies between that
and idle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pptune.errors import BadInput
from pptune.observe.trace_file import TraceFile, load_trace
from pptune.observe.trace_ranks import (
    SOURCE_CPU,
    SOURCE_GPU,
    align_clocks,
    clip,
    difference_length,
    gpu_of,
    profiler_steps,
    rank_intervals,
    split_ranks,
    union_length,
)

# load_trace and the SOURCE_* labels stay importable from here, where the CLI
# and its tests take them.
__all__ = [
    "DEFAULT_MIN_BUSY",
    "SOURCE_CPU",
    "SOURCE_GPU",
    "DeviceShare",
    "TraceReport",
    "analyze",
    "load_trace",
]

DEFAULT_MIN_BUSY = 0.6  # rule of thumb: a GPU busy under ~60% of a step loses it to the bubble


@dataclass(frozen=True)
class DeviceShare:
    """One rank's measured shares of the window (seconds)."""

    rank: int
    label: str
    source: str  # SOURCE_GPU or SOURCE_CPU
    busy_s: float
    comm_s: float
    idle_s: float
    busy_share: float
    flagged: bool
    exposed_comm_s: float = 0.0  # of idle_s: comm with no compute beside it
    device: int | None = None  # the GPU its kernels ran on (trace_ranks.gpu_of)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "busy_s": round(self.busy_s, 9),
            "comm_s": round(self.comm_s, 9),
            "idle_s": round(self.idle_s, 9),
            "busy_share": self.busy_share,
            "source": self.source,
            "label": self.label,
            "exposed_comm_s": round(self.exposed_comm_s, 9),
            "device": self.device,
        }


@dataclass(frozen=True)
class TraceReport:
    devices: list[DeviceShare]
    window_s: float
    window_start_us: float  # from the earliest event in the traces
    min_busy: float
    steps: list[int] = field(default_factory=list)  # ProfilerStep numbers when --steps chose the window
    notes: list[str] = field(default_factory=list)  # how the rows were found (split_ranks)

    @property
    def flagged(self) -> list[int]:
        return [d.rank for d in self.devices if d.flagged]

    @property
    def sources(self) -> list[str]:
        return sorted({d.source for d in self.devices})

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": [d.to_json() for d in self.devices],
            "window_s": round(self.window_s, 9),
            "window_start_us": round(self.window_start_us, 3),
            "steps": self.steps,
            "min_busy": self.min_busy,
            "flagged": self.flagged,
        }


def _window(
    events: Sequence[dict[str, Any]],
    t0: float,
    t_end: float,
    window_start_us: float | None,
    window_end_us: float | None,
    steps: int | None,
) -> tuple[float, float, list[int]]:
    """The absolute ``(start_us, end_us)`` to measure over, and the steps it spans."""
    if steps is not None:
        if window_start_us is not None or window_end_us is not None:
            raise BadInput("give either --steps or --window-start-us/--window-end-us, not both")
        if steps < 1:
            raise BadInput(f"--steps must be at least 1 (got {steps})")
        found = profiler_steps(events)
        if not found:
            raise BadInput(
                f"--steps {steps}: the traces hold no ProfilerStep#k annotations (they come "
                "from torch.profiler.profile(schedule=...) with prof.step()); "
                "use --window-start-us/--window-end-us instead"
            )
        ks = sorted(found)
        if steps > len(ks):
            raise BadInput(
                f"--steps {steps}: the traces hold only {len(ks)} ProfilerStep annotations "
                f"(#{ks[0]}..#{ks[-1]}); ask for at most {len(ks)}"
            )
        chosen = ks[-steps:]
        return (
            min(found[k][0] for k in chosen),
            max(found[k][1] for k in chosen),
            chosen,
        )
    start = t0 + (window_start_us if window_start_us is not None else 0.0)
    end = t0 + window_end_us if window_end_us is not None else t_end
    span_us = t_end - t0
    if window_start_us is not None and window_end_us is not None and end <= start:
        raise BadInput(
            f"the window is empty: --window-start-us {start - t0:g} >= --window-end-us "
            f"{end - t0:g} (microseconds from the first event)"
        )
    lo, hi = max(start, t0), min(end, t_end)
    if hi <= lo:
        raise BadInput(
            f"the window [{start - t0:g}, {end - t0:g}] us misses the trace, which spans "
            f"[0, {span_us:g}] us from its first event"
        )
    return lo, hi, []


def analyze(
    traces: Sequence[TraceFile],
    *,
    min_busy: float = DEFAULT_MIN_BUSY,
    window_start_us: float | None = None,
    window_end_us: float | None = None,
    steps: int | None = None,
) -> TraceReport:
    """Busy, comm, exposed comm and idle time per rank over the window; ranks under
    ``min_busy`` flagged.

    The window defaults to the span from the earliest to the latest event in
    all traces. ``window_start_us`` / ``window_end_us`` are microseconds from
    that earliest event (as trace viewers show them) and are clipped to the
    trace; ``steps`` takes the last ``steps`` ``ProfilerStep#k`` annotations.
    """
    if not 0.0 <= min_busy <= 1.0:
        raise BadInput(f"--min-busy must be a fraction in [0, 1] (got {min_busy:g})")
    aligned = align_clocks(traces)
    ranks = split_ranks(aligned)
    all_events = [e for t in aligned for e in t.events]
    t0 = min(e["ts"] for e in all_events)
    t_end = max(e["ts"] + e["dur"] for e in all_events)
    lo, hi, chosen = _window(all_events, t0, t_end, window_start_us, window_end_us, steps)
    window_us = hi - lo
    if window_us <= 0:
        raise BadInput(
            "the traces span no time (every event has zero duration at one instant)"
        )
    found = [(r, *rank_intervals(r.events)) for r in ranks.rows]
    if not any(compute or comm for _r, _s, compute, comm in found):
        raise BadInput("no GPU kernels, CPU ops or pptune ops in the traces: not a "
                       "torch.profiler (or pptune simulate/validate) trace")
    devices = []
    for r, source, compute, comm in found:
        in_compute = clip(compute, lo, hi)
        in_comm = clip(comm, lo, hi)
        busy_us = union_length(in_compute)
        comm_us = union_length(in_comm)
        # part of idle: the clamp only keeps float rounding from saying otherwise
        exposed_us = max(0.0, min(difference_length(in_comm, in_compute), window_us - busy_us))
        share = busy_us / window_us
        devices.append(
            DeviceShare(
                rank=r.rank,
                label=r.label,
                source=source,
                busy_s=busy_us * 1e-6,
                comm_s=comm_us * 1e-6,
                idle_s=(window_us - busy_us) * 1e-6,
                busy_share=share,
                flagged=share < min_busy,
                exposed_comm_s=exposed_us * 1e-6,
                device=gpu_of(r.events),
            )
        )
    return TraceReport(
        devices=devices,
        window_s=window_us * 1e-6,
        window_start_us=lo - t0,
        min_busy=min_busy,
        steps=chosen,
        notes=ranks.notes,
    )
