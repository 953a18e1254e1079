"""What a renderer needs from a timeline: simulated or measured.

``pptune.costmodel.simulate.SimResult`` satisfies ``Timeline``; a measured run
(for example a trace read back from a real training step) will too, as long as
it carries:

- ``p``: the number of devices (rows; a device index >= p still gets a row);
- ``step_time_s``: the length of the step in seconds;
- ``events``: items with ``device`` (int), ``op`` (with ``kind`` ``"F"``,
  ``"B"``, ``"W"``, ``"BW"`` (a whole backward where the others are split)
  or ``"F&B"`` (an overlapped pair, which also carries ``b_mb`` and
  ``b_stage``: its backward half), as ``OpKind`` or a plain string, ``mb``
  and ``stage``), ``start_s`` and ``end_s``, in seconds from the start of
  the step.

Only ``chrome_trace`` also reads ``transfers`` (``src``, ``dst``, ``op``,
``start_s``, ``end_s``), and only when the object has them; only
``sim_summary_table`` needs the per-device ``devices`` statistics.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class TimelineOp(Protocol):
    @property
    def kind(self) -> object: ...  # OpKind or "F" / "B" / "W"

    @property
    def mb(self) -> int: ...

    @property
    def stage(self) -> int: ...


class TimelineEvent(Protocol):
    @property
    def device(self) -> int: ...

    @property
    def op(self) -> TimelineOp: ...

    @property
    def start_s(self) -> float: ...

    @property
    def end_s(self) -> float: ...


class Timeline(Protocol):
    @property
    def p(self) -> int: ...

    @property
    def step_time_s(self) -> float: ...

    @property
    def events(self) -> Sequence[TimelineEvent]: ...


KIND_NAMES: dict[str, str] = {
    "F": "forward", "B": "backward", "W": "weight-grad", "BW": "whole backward",
    "F&B": "overlapped forward & backward",
}
# the kinds a legend lists only when the timeline has them (F and B always)
OPTIONAL_KINDS = ("W", "BW", "F&B")


def kind_of(op: TimelineOp) -> str:
    """``"F"``, ``"B"``, ``"W"``, ``"BW"`` or ``"F&B"`` for an op whose kind is an
    enum or a string."""
    kind = op.kind
    return str(getattr(kind, "value", kind))


def legend_kinds(result: Timeline) -> list[tuple[str, str]]:
    """``(kind, name)`` pairs for a legend: F and B always, W, BW and F&B only
    when the timeline holds such ops (zero-bubble and DualPipe schedules), so a
    1F1B picture does not list a colour it never shows."""
    present = {kind_of(e.op) for e in result.events}
    return [(k, name) for k, name in KIND_NAMES.items()
            if k not in OPTIONAL_KINDS or k in present]


def op_label(op: TimelineOp) -> str:
    """Short name of an op: ``F3`` (kind and micro-batch), ``BW3``, and for an
    overlapped pair both halves' micro-batches, ``F3&B1``."""
    kind = kind_of(op)
    if kind == "F&B":
        return f"F{op.mb}&B{getattr(op, 'b_mb', '?')}"
    return f"{kind}{op.mb}"


def span_s(result: Timeline) -> float:
    """Length of the time axis: the step time, or the last event end if later."""
    end = max((e.end_s for e in result.events), default=0.0)
    return max(float(result.step_time_s), float(end), 0.0)


def n_rows(result: Timeline) -> int:
    """Rows to draw: ``p``, or more when an event names a higher device."""
    top = max((e.device for e in result.events), default=-1)
    return max(int(result.p), top + 1)
