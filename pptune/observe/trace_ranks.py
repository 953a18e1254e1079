"""Which events of the traces belong to which rank, and which of them are
compute or communication: the intervals trace-report measures.

Which events belong to which rank:

- a file whose ``distributedInfo`` names a rank is that rank;
- several files without it are ranks 0, 1, ... in the order given;
- one file without it is a merged trace: each distinct ``pid`` that runs GPU
  kernels is a rank (torch gives a GPU's events its device index as pid), or,
  when there are no kernels, each ``pid`` with CPU ops; ranks are numbered in
  pid order;
- a rank's file whose kernels ran on several GPUs (a single-process pipeline
  over several cards, or traces merged by hand under one ``distributedInfo``)
  is split the same way, one rank per GPU pid: busy time is a device's, and
  the union over two GPUs would count either one's work as both's. The rows
  are then numbered 0, 1, ... in rank (or file) order, then pid order, and a
  note says which file was split.

A GPU row's device is its kernels' ``args.device`` (Kineto writes the CUDA
device index there and as the GPU events' ``pid``).

What counts as busy (compute) on a rank:

- GPU kernels (``cat`` ``"kernel"``) on any of its streams when it has any,
  which is what ``nvmlDeviceGetUtilizationRates().gpu`` counts too;
- otherwise top-level CPU ops (``cpu_op`` not nested in another ``cpu_op``
  on the same thread);
- otherwise, in the traces pptune itself writes (``simulate --trace``,
  ``validate --trace``: one ``pid`` a device), its ``compute`` events, its
  ``p2p`` sends as communication. User annotations do not count as compute:
  ``torch.distributed.pipelining`` wraps each step in ``Forward i`` /
  ``Backward i`` / ``PP:...`` markers that include the time spent waiting to
  receive, and ``ProfilerStep#k`` spans the whole step (measured 2026-11-29,
  docs/measured.md: busy time is the union of the compute ops).

Communication is reported apart, never as compute: kernels or ops whose name
contains ``nccl`` or ``gloo`` (``ncclDevKernel_SendRecv``,
``ncclKernel_AllReduce_RING_LL_Sum_float``, the ``gloo:all_reduce``
annotation), DeepEP's expert-parallel all-to-all kernels, which move tokens
over NVLink and RDMA themselves instead of through NCCL (``deep_ep::intranode``,
``deep_ep::internode``, ``deep_ep::internode_ll`` in deepseek-ai/DeepEP's
csrc/kernels; ``dpsk::ep::internode::dispatch`` / ``combine`` in DeepSeek's
own training trace, deepseek-ai/profile-data train.json: names containing
``deep_ep``, ``deepep`` or ``dpsk::ep::``), and CPU ops ``c10d::*`` and
``record_param_comms``. Memory copies (``gpu_memcpy``, ``gpu_memset``) are
neither.

Files from different processes are put on one clock through their
``baseTimeNanoseconds`` (Kineto writes ``ts`` relative to it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pptune.errors import BadInput
from pptune.observe.trace_file import TraceFile

Interval = tuple[float, float]  # (start_us, end_us)

PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")
COMM_SUBSTRINGS = ("nccl", "gloo", "deep_ep", "deepep", "dpsk::ep::")  # module docstring
COMM_PREFIXES = ("c10d::", "record_param_comms")
SOURCE_GPU = "gpu kernels"
SOURCE_CPU = "cpu ops"
SOURCE_PPTUNE = "pptune ops"
PPTUNE_CATS = ("compute", "p2p")  # report/trace.py's categories


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


def difference_length(intervals: Iterable[Interval], minus: Iterable[Interval]) -> float:
    """Time covered by ``intervals`` and by none of ``minus``:
    ``[(0, 10)]`` less ``[(2, 3), (8, 20)]`` -> 7. One pass over both, merged."""
    cut = merge_intervals(minus)
    total = 0.0
    j = 0
    for start, end in merge_intervals(intervals):
        while j < len(cut) and cut[j][1] <= start:
            j += 1  # cuts wholly before this interval
        k = j
        while start < end:
            if k == len(cut) or cut[k][0] >= end:
                total += end - start
                break
            if cut[k][0] > start:
                total += cut[k][0] - start
            start = max(start, cut[k][1])
            k += 1
    return total


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    """The parts of ``intervals`` inside ``[lo, hi]``."""
    out = []
    for start, end in intervals:
        a, b = max(start, lo), min(end, hi)
        if b > a:
            out.append((a, b))
    return out


def is_comm(name: str) -> bool:
    """True for communication kernels and ops (NCCL, gloo, DeepEP, c10d collectives)."""
    low = name.lower()
    return any(s in low for s in COMM_SUBSTRINGS) or name.startswith(COMM_PREFIXES)


# ---------------------------------------------------------------- ranks


@dataclass(frozen=True)
class RankEvents:
    rank: int
    label: str  # where the rank came from: a file, or a pid in a merged file
    events: list[dict[str, Any]]  # on the common clock (align_clocks), in us


@dataclass(frozen=True)
class Ranks:
    """The rows trace-report measures, and what the split said (``split_ranks``)."""

    rows: list[RankEvents]
    notes: list[str]


def kernel_pids(events: Iterable[dict[str, Any]]) -> list[object]:
    """The pids GPU kernels ran under (one per device in torch's traces), in order."""
    return sorted({e.get("pid") for e in events if e.get("cat") == "kernel"}, key=_pid_key)


def gpu_of(events: Iterable[dict[str, Any]]) -> int | None:
    """The GPU index a row's kernels ran on (their ``args.device``, else their pid);
    None without kernels or when they name several."""
    found = set()
    for e in events:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args")
        device = args.get("device") if isinstance(args, dict) else None
        found.add(device if isinstance(device, int) and not isinstance(device, bool)
                  else e.get("pid"))
    (only,) = found if len(found) == 1 else (None,)
    return only if isinstance(only, int) and not isinstance(only, bool) and only >= 0 else None


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


def _by_pid(t: TraceFile, pids: Iterable[object]) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(f"{t.label} pid {pid}", [e for e in t.events if e.get("pid") == pid])
            for pid in pids]


def split_ranks(traces: Sequence[TraceFile]) -> Ranks:
    """Events per rank, sorted by rank (see the module doc for the rules).

    Give traces already on one clock (``align_clocks``)."""
    if not traces:
        raise BadInput("no trace files given")
    if len(traces) == 1 and traces[0].rank is None:
        t = traces[0]
        pids: Iterable[object] = kernel_pids(t.events) or sorted(
            {e.get("pid") for e in t.events if e.get("cat") in ("cpu_op", "user_annotation")}
            or {e.get("pid") for e in t.events if e.get("cat") in PPTUNE_CATS}, key=_pid_key)
        parts = _by_pid(t, pids)
        if len(parts) <= 1:
            return Ranks([RankEvents(0, t.label, t.events)], [])
        return Ranks([RankEvents(r, label, evs) for r, (label, evs) in enumerate(parts)], [])

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
    files = [(r, ts[0], kernel_pids(ts[0].events)) for r, ts in sorted(by_rank.items())]
    if all(len(gpus) <= 1 for _r, _t, gpus in files):
        return Ranks([RankEvents(r, t.label, t.events) for r, t, _gpus in files], [])
    rows: list[RankEvents] = []
    notes = []
    for r, t, gpus in files:
        if len(gpus) <= 1:
            rows.append(RankEvents(len(rows), t.label, t.events))
            continue
        first = len(rows)
        rows += [RankEvents(first + i, label, evs)
                 for i, (label, evs) in enumerate(_by_pid(t, gpus))]
        whose = f"rank {r} (its distributedInfo)" if t.rank is not None else "one rank"
        notes.append(f"{t.label} is {whose} but its kernels ran on {len(gpus)} GPUs (pids "
                     f"{', '.join(map(str, gpus))}); a rank runs on one GPU, so each is "
                     f"reported apart, as ranks {first}-{len(rows) - 1} (rows are numbered "
                     "in rank, then pid order)")
    return Ranks(rows, notes)


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
    if not ops and any(e.get("cat") in PPTUNE_CATS for e in events):
        return (SOURCE_PPTUNE,
                merge_intervals([iv(e) for e in events if e.get("cat") == "compute"]),
                merge_intervals([iv(e) for e in events if e.get("cat") == "p2p"]))
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
