"""Measured busy, communication and idle share per rank from torch.profiler traces.

Reads Chrome traces as ``torch.profiler.profile.export_chrome_trace`` writes
them (``{"traceEvents": [...], "distributedInfo": {"rank": r, ...},
"baseTimeNanoseconds": ...}`` or a bare list of events, optionally gzipped as
``tensorboard_trace_handler(use_gzip=True)`` writes them). Only complete
events count (``"ph": "X"``, ``ts`` and ``dur`` in microseconds); the
profiler's own span (``cat`` ``"Trace"``) is skipped.

Which events belong to which rank:

- a file whose ``distributedInfo`` names a rank is that rank;
- several files without it are ranks 0, 1, ... in the order given;
- one file without it is a merged trace: each distinct ``pid`` that runs GPU
  kernels is a rank (torch gives a GPU's events its device index as pid), or,
  when there are no kernels, each ``pid`` with CPU ops; ranks are numbered in
  pid order.

What counts as busy (compute) on a rank:

- GPU kernels (``cat`` ``"kernel"``) on any of its streams when it has any,
  which is what ``nvmlDeviceGetUtilizationRates().gpu`` counts too;
- otherwise top-level CPU ops (``cpu_op`` not nested in another ``cpu_op``
  on the same thread). User annotations do not count as compute:
  ``torch.distributed.pipelining`` wraps each step in ``Forward i`` /
  ``Backward i`` / ``PP:...`` markers that include the time spent waiting to
  receive, and ``ProfilerStep#k`` spans the whole step (measured 2026-11-29,
  docs/measured.md: busy time is the union of the compute ops).

Communication is reported apart, never as compute: kernels or ops whose name
contains ``nccl`` or ``gloo`` (``ncclDevKernel_SendRecv``,
``ncclKernel_AllReduce_RING_LL_Sum_float``, the ``gloo:all_reduce``
annotation), and CPU ops ``c10d::*`` and ``record_param_comms``. Memory
copies (``gpu_memcpy``, ``gpu_memset``) are neither.

Each share is a union of intervals clipped to the window, so overlapping
streams or threads never count twice. ``idle = window - busy``: exposed
communication is part of idle, overlapped communication is not.

Files from different processes are put on one clock through their
``baseTimeNanoseconds`` (Kineto writes ``ts`` relative to it).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pptune.errors import BadInput
from pptune.files import read_limited

Interval = tuple[float, float]  # (start_us, end_us)

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
COMM_SUBSTRINGS = ("nccl", "gloo")
COMM_PREFIXES = ("c10d::", "record_param_comms")
DEFAULT_MIN_BUSY = 0.6  # rule of thumb: a GPU busy under ~60% of a step loses it to the bubble
SOURCE_GPU = "gpu kernels"
SOURCE_CPU = "cpu ops"


# ---------------------------------------------------------------- intervals


def merge_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time; empty ones dropped."""
    out: list[list[float]] = []
    for start, end in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def union_length(intervals: Iterable[Interval]) -> float:
    """Total time covered by at least one interval: ``[(0, 2), (1, 3), (5, 6)]`` -> 4."""
    return sum(end - start for start, end in merge_intervals(intervals))


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``intervals`` inside ``[lo, hi]``."""
    out = []
    for start, end in intervals:
        a, b = max(start, lo), min(end, hi)
        if b > a:
            out.append((a, b))
    return out


def is_comm(name: str) -> bool:
    """True for communication kernels and ops (NCCL, gloo, c10d collectives)."""
    low = name.lower()
    return any(s in low for s in COMM_SUBSTRINGS) or name.startswith(COMM_PREFIXES)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True)
class TraceFile:
    """One parsed trace: its complete events and what identifies its rank."""

    label: str
    events: list[dict[str, Any]]
    rank: int | None = None
    base_ns: int | None = None


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _usable(e: object) -> bool:
    return (
        isinstance(e, dict)
        and e.get("ph") == "X"
        and e.get("cat") != "Trace"
        and _is_number(e.get("ts"))
        and _is_number(e.get("dur"))
        and e["dur"] >= 0
        and all(
            isinstance(e.get(k), (int, float, str, type(None))) for k in ("pid", "tid", "name")
        )
    )


def parse_trace(obj: object, label: str = "trace") -> TraceFile:
    """A ``TraceFile`` from decoded trace JSON; ``BadInput`` when it is not a trace."""
    if isinstance(obj, list):
        raw, meta = obj, {}
    elif isinstance(obj, dict):
        if "traceEvents" not in obj:
            raise BadInput(
                f"{label}: JSON without 'traceEvents': not a Chrome trace "
                "(torch.profiler's export_chrome_trace writes one)"
            )
        raw, meta = obj["traceEvents"], obj
    else:
        raise BadInput(
            f"{label}: JSON {type(obj).__name__} is not a Chrome trace "
            "(expected an object with 'traceEvents' or a list of events)"
        )
    if not isinstance(raw, list):
        raise BadInput(f"{label}: 'traceEvents' is a {type(raw).__name__}, expected a list")
    events = [e for e in raw if _usable(e)]
    if not events:
        raise BadInput(
            f"{label}: no timed events ('ph': 'X' with 'ts' and 'dur') among "
            f"{len(raw)} trace events"
        )
    rank = None
    info = meta.get("distributedInfo")
    if isinstance(info, str):  # some writers keep the metadata JSON-encoded
        try:
            info = json.loads(info)
        except ValueError:
            info = None
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and info["rank"] >= 0:
        rank = int(info["rank"])
    base = meta.get("baseTimeNanoseconds")
    base_ns = int(base) if isinstance(base, int) and not isinstance(base, bool) else None
    return TraceFile(label=label, events=events, rank=rank, base_ns=base_ns)


# A profiler trace of a few steps is tens of MiB; JSON in memory takes about
# ten times its text, so 512 MiB of text is already several GiB resident.
MAX_TRACE_BYTES = 512 << 20


def _gunzip(data: bytes, label: str) -> bytes:
    """Decompress at most MAX_TRACE_BYTES (a small gzip can expand a thousandfold)."""
    inflate = zlib.decompressobj(wbits=31)
    try:
        out = inflate.decompress(data, MAX_TRACE_BYTES + 1)
    except zlib.error as exc:
        raise BadInput(f"{label}: broken gzip file ({exc})") from None
    if len(out) > MAX_TRACE_BYTES:
        raise BadInput(f"{label}: expands to over {MAX_TRACE_BYTES >> 20} MiB; pptune reads "
                       "traces up to that size (trim it to a few steps)")
    if not inflate.eof:
        raise BadInput(f"{label}: broken gzip file (truncated)")
    return out


def load_trace(path: Path | str) -> TraceFile:
    """Read and parse one trace file (``.json`` or gzipped); ``BadInput`` on any problem."""
    p = Path(path)
    label = str(path)
    data = read_limited(p, "trace", MAX_TRACE_BYTES)
    if data[:2] == b"\x1f\x8b":
        data = _gunzip(data, label)
    if not data or data.isspace():
        raise BadInput(f"{label}: empty file, expected a Chrome trace (JSON)")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise BadInput(f"{label}: binary data, expected a Chrome trace (JSON)") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{label}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            "expected a Chrome trace"
        ) from None
    except RecursionError:
        raise BadInput(f"{label}: JSON nested too deeply to be a Chrome trace") from None
    return parse_trace(obj, label)


# ---------------------------------------------------------------- ranks


@dataclass(frozen=True)
class RankEvents:
    rank: int
    label: str  # where the rank came from: a file, or a pid in a merged file
    events: list[dict[str, Any]]  # on the common clock (align_clocks), in us


def _pid_key(pid: object) -> tuple[int, float, str]:
    """Numeric pids first, in numeric order, then named ones."""
    if isinstance(pid, (int, float)):
        return (0, float(pid), "")
    return (1, 0.0, str(pid))


def align_clocks(traces: Sequence[TraceFile]) -> list[TraceFile]:
    """The traces with ``ts`` moved onto the clock of the earliest ``baseTimeNanoseconds``."""
    bases = [t.base_ns for t in traces if t.base_ns is not None]
    base0 = min(bases) if bases else 0
    out = []
    for t in traces:
        off_us = (t.base_ns - base0) / 1000.0 if t.base_ns is not None else 0.0
        events = t.events if off_us == 0 else [{**e, "ts": e["ts"] + off_us} for e in t.events]
        out.append(TraceFile(t.label, events, t.rank, base0 if t.base_ns is not None else None))
    return out


def split_ranks(traces: Sequence[TraceFile]) -> list[RankEvents]:
    """Events per rank, sorted by rank (see the module doc for the rules).

    Give traces already on one clock (``align_clocks``)."""
    if not traces:
        raise BadInput("no trace files given")
    if len(traces) == 1 and traces[0].rank is None:
        t = traces[0]
        kernel_pids = {e.get("pid") for e in t.events if e.get("cat") == "kernel"}
        if kernel_pids:
            pids = kernel_pids
        else:
            pids = {
                e.get("pid") for e in t.events if e.get("cat") in ("cpu_op", "user_annotation")
            }
        if len(pids) <= 1:
            return [RankEvents(0, t.label, t.events)]
        ordered = sorted(pids, key=_pid_key)
        return [
            RankEvents(r, f"{t.label} pid {pid}", [e for e in t.events if e.get("pid") == pid])
            for r, pid in enumerate(ordered)
        ]

    by_rank: dict[int, list[TraceFile]] = {}
    for i, t in enumerate(traces):
        by_rank.setdefault(i if t.rank is None else t.rank, []).append(t)
    clashes = [
        f"rank {r}: {', '.join(t.label for t in ts)}" for r, ts in sorted(by_rank.items())
        if len(ts) > 1
    ]
    if clashes:
        raise BadInput(
            "two trace files claim the same rank (" + "; ".join(clashes) + "); "
            "pass one file per rank (files without distributedInfo take their position)"
        )
    return [RankEvents(r, ts[0].label, ts[0].events) for r, ts in sorted(by_rank.items())]


def _top_level(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events not contained in an earlier event of the same (pid, tid)."""
    out = []
    threads: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for e in events:
        threads.setdefault((str(e.get("pid")), str(e.get("tid"))), []).append(e)
    for evs in threads.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        cur_end = -math.inf
        for e in evs:
            end = e["ts"] + e["dur"]
            if end <= cur_end:  # starts no earlier (sorted) and ends inside: nested
                continue
            out.append(e)
            cur_end = max(cur_end, end)
    return out


def rank_intervals(events: Sequence[dict[str, Any]]) -> tuple[str, list[Interval], list[Interval]]:
    """``(source, compute, comm)`` intervals of one rank's events, merged, in us."""

    def iv(e: dict[str, Any]) -> Interval:
        return (float(e["ts"]), float(e["ts"] + e["dur"]))

    kernels = [e for e in events if e.get("cat") == "kernel"]
    if kernels:
        compute = [iv(e) for e in kernels if not is_comm(str(e.get("name", "")))]
        comm = [iv(e) for e in kernels if is_comm(str(e.get("name", "")))]
        return SOURCE_GPU, merge_intervals(compute), merge_intervals(comm)
    ops = _top_level([e for e in events if e.get("cat") == "cpu_op"])
    compute = [iv(e) for e in ops if not is_comm(str(e.get("name", "")))]
    comm = [iv(e) for e in ops if is_comm(str(e.get("name", "")))]
    comm += [
        iv(e) for e in events
        if e.get("cat") == "user_annotation" and is_comm(str(e.get("name", "")))
    ]
    return SOURCE_CPU, merge_intervals(compute), merge_intervals(comm)


def profiler_steps(events: Iterable[dict[str, Any]]) -> dict[int, Interval]:
    """``ProfilerStep#k`` -> its span over all events (earliest start, latest end), in us.

    Both the CPU annotation and the GPU one (``gpu_user_annotation``) count."""
    steps: dict[int, Interval] = {}
    for e in events:
        m = PROFILER_STEP.match(str(e.get("name", "")))
        if m:
            k = int(m.group(1))
            a, b = float(e["ts"]), float(e["ts"] + e["dur"])
            lo, hi = steps.get(k, (a, b))
            steps[k] = (min(lo, a), max(hi, b))
    return steps


# ---------------------------------------------------------------- report


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

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "busy_s": round(self.busy_s, 9),
            "comm_s": round(self.comm_s, 9),
            "idle_s": round(self.idle_s, 9),
            "busy_share": self.busy_share,
            "source": self.source,
            "label": self.label,
        }


@dataclass(frozen=True)
class TraceReport:
    devices: list[DeviceShare]
    window_s: float
    window_start_us: float  # from the earliest event in the traces
    min_busy: float
    steps: list[int] = field(default_factory=list)  # ProfilerStep numbers when --steps chose the window

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
    """Busy, comm and idle time per rank over the window; ranks under ``min_busy`` flagged.

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
    devices = []
    for r in ranks:
        source, compute, comm = rank_intervals(r.events)
        busy_us = union_length(clip(compute, lo, hi))
        comm_us = union_length(clip(comm, lo, hi))
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
            )
        )
    return TraceReport(
        devices=devices,
        window_s=window_us * 1e-6,
        window_start_us=lo - t0,
        min_busy=min_busy,
        steps=chosen,
    )
