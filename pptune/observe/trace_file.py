"""Read torch.profiler traces into ``TraceFile`` records (trace-report's input).

Reads Chrome traces as ``torch.profiler.profile.export_chrome_trace`` writes
them (``{"traceEvents": [...], "distributedInfo": {"rank": r, ...},
"baseTimeNanoseconds": ...}`` or a bare list of events, optionally gzipped as
``tensorboard_trace_handler(use_gzip=True)`` writes them). Only complete
events count (``"ph": "X"``, ``ts`` and ``dur`` in microseconds); the
profiler's own span (``cat`` ``"Trace"``) is skipped.

A file that is not such a trace, or is too large, is a ``BadInput`` naming
the file.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pptune.errors import BadInput
from pptune.files import loads_json, read_limited


@dataclass(frozen=True)
class TraceFile:
    """One parsed trace: its complete events and what identifies its rank."""

    label: str
    events: list[dict[str, Any]]
    rank: int | None = None
    base_ns: int | None = None


# |ts| and dur in microseconds: 1e18 us is 31,700 years, so an end (ts + dur) and a
# rank's sums stay finite; a larger (or NaN, Infinity) time is not a trace's
MAX_TRACE_US = 1e18


def _is_number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _bad_time(e: object) -> str | None:
    """The key of a complete event whose time is a number no trace holds (None: none)."""
    if not isinstance(e, dict) or e.get("ph") != "X":
        return None
    for key in ("ts", "dur"):
        x = e.get(key)
        if isinstance(x, (int, float)) and not isinstance(x, bool) and not (
                math.isfinite(x) and abs(x) <= MAX_TRACE_US):
            return key
    return None


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
    for i, e in enumerate(raw):
        key = _bad_time(e)
        if key is not None:
            raise BadInput(f"{label}: event {i} has {key!r} {e[key]!r}: not a finite time a "
                           f"trace holds (up to {MAX_TRACE_US:g} us)")
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
        except (ValueError, RecursionError):  # metadata only: a bad one is ignored
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
        obj = loads_json(text, label, "a Chrome trace")
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{label}: not JSON ({exc.msg.removesuffix(' at')} at line {exc.lineno} column "
            f"{exc.colno}); "
            "expected a Chrome trace"
        ) from None
    return parse_trace(obj, label)
