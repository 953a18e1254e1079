"""Chrome trace-event JSON of a timeline, for Perfetto (ui.perfetto.dev) and chrome://tracing.

Format: the JSON Object Format of the Trace Event Format spec (Google,
"Trace Event Format", docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU):
``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}``.

- one process per device (``pid`` = device index), named ``dev{d}`` by a
  ``process_name`` metadata (``"ph": "M"``) event and ordered by
  ``process_sort_index``;
- thread 0 (``compute``) holds one complete event (``"ph": "X"``) per op, named
  like ``F3 s1`` (kind, micro-batch, stage) with ``args`` ``{mb, stage, kind}``;
  a whole backward beside split ones is ``BW3 s1``, an overlapped pair
  (DualPipe's F&B) ``F3&B1 s0&s3`` with ``b_mb`` and ``b_stage`` in its args;
- thread 1 (``p2p send``) holds the point-to-point transfers the device sends,
  when the timeline has ``transfers``; transfers of zero duration (a free link)
  are left out, and so is idle time;
- ``ts`` and ``dur`` are in microseconds, as the format requires.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pptune.files import Written, dumps_json
from pptune.report.protocol import Timeline, kind_of, n_rows
from pptune.schemas import write_atomic

COMPUTE_TID = 0
SEND_TID = 1
# Reserved colour names of the trace viewer (catapult's color_scheme);
# Perfetto ignores them and picks its own colours.
CNAMES: dict[str, str] = {"F": "good", "B": "bad", "W": "rail_response", "BW": "terrible",
                          "F&B": "yellow"}
SEND_CNAME = "grey"
_US_PER_S = 1e6


def _meta(name: str, pid: int, args: dict[str, Any], tid: int | None = None) -> dict[str, Any]:
    event: dict[str, Any] = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def _span(
    name: str, cat: str, pid: int, tid: int, start_s: float, end_s: float, **extra: Any
) -> dict[str, Any]:
    """A complete ("X") event from ``start_s`` to ``end_s``, in microseconds."""
    return {
        "name": name, "cat": cat, "ph": "X", "pid": pid, "tid": tid,
        "ts": start_s * _US_PER_S, "dur": (end_s - start_s) * _US_PER_S, **extra,
    }


def chrome_trace(result: Timeline, name: str = "pptune simulate") -> dict[str, Any]:
    """The trace as a JSON-ready dict (``json.dumps`` it, or use ``write_trace``)."""
    events: list[dict[str, Any]] = []
    rows = n_rows(result)
    # transfers of zero duration (a free link) carry nothing worth drawing
    transfers = [t for t in getattr(result, "transfers", None) or [] if t.end_s > t.start_s]
    senders = {t.src for t in transfers}
    for d in range(max(rows, max(senders, default=-1) + 1)):
        events.append(_meta("process_name", d, {"name": f"dev{d}"}))
        events.append(_meta("process_sort_index", d, {"sort_index": d}))
        events.append(_meta("thread_name", d, {"name": "compute"}, COMPUTE_TID))
        events.append(_meta("thread_sort_index", d, {"sort_index": COMPUTE_TID}, COMPUTE_TID))
        if d in senders:
            events.append(_meta("thread_name", d, {"name": "p2p send"}, SEND_TID))
            events.append(_meta("thread_sort_index", d, {"sort_index": SEND_TID}, SEND_TID))
    for e in result.events:
        kind = kind_of(e.op)
        args: dict[str, Any] = {"mb": e.op.mb, "stage": e.op.stage, "kind": kind}
        label = f"{kind}{e.op.mb} s{e.op.stage}"
        if kind == "F&B":
            b_mb, b_stage = getattr(e.op, "b_mb", -1), getattr(e.op, "b_stage", -1)
            args.update(b_mb=b_mb, b_stage=b_stage)
            label = f"F{e.op.mb}&B{b_mb} s{e.op.stage}&s{b_stage}"
        event = _span(label, "compute", e.device, COMPUTE_TID, e.start_s, e.end_s, args=args)
        if kind in CNAMES:
            event["cname"] = CNAMES[kind]
        events.append(event)
    for t in transfers:
        kind = kind_of(t.op)
        events.append(_span(
            f"send {kind}{t.op.mb} s{t.op.stage} -> dev{t.dst}", "p2p", t.src, SEND_TID,
            t.start_s, t.end_s, cname=SEND_CNAME,
            args={"src": t.src, "dst": t.dst, "mb": t.op.mb, "stage": t.op.stage, "kind": kind},
        ))
    other: dict[str, Any] = {"name": name, "p": int(result.p), "step_time_s": result.step_time_s}
    for attr in ("m", "v", "bubble_rate"):
        if hasattr(result, attr):
            other[attr] = getattr(result, attr)
    schedule = getattr(result, "schedule", None)
    if schedule is not None:
        other["schedule"] = str(getattr(schedule, "value", schedule))
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def trace_json(result: Timeline, name: str = "pptune simulate") -> str:
    """``chrome_trace`` serialised compactly (no indentation: traces get large)."""
    return dumps_json(chrome_trace(result, name))


def write_trace(path: Path | str, result: Timeline, name: str = "pptune simulate") -> Written:
    """Write the trace to ``path`` atomically (never half a file)."""
    return write_atomic(Path(path), trace_json(result, name) + "\n")
