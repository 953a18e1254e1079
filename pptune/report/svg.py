"""Standalone SVG picture of a timeline (no dependencies; opens in any browser).

One row per device, time to the right: forward green, backward red,
weight-gradient blue, a whole backward beside split ones (BW) purple, on a
light grey row background that shows as idle. Every op is one ``<rect
class="op op-F">`` (``op-B``, ``op-W``, ``op-BW``) with a ``<title>``
tooltip; an overlapped F&B pair (DualPipe) is one ``<rect class="op
op-FB">`` drawn as its two halves, the forward's green over the backward's
red. The micro-batch is written inside blocks wide enough to hold it. A time
axis with round ticks and a legend sit below the rows.
"""

from __future__ import annotations

import html
from pathlib import Path

from pptune.files import SVG_MARKER, Written
from pptune.report import axis
from pptune.report.fmt import fmt_pct, fmt_seconds
from pptune.report.protocol import (
    KIND_NAMES,
    Timeline,
    kind_of,
    legend_kinds,
    n_rows,
    op_label,
    span_s,
)
from pptune.schemas import write_atomic

COLORS: dict[str, str] = {"F": "#43a047", "B": "#e53935", "W": "#1e88e5", "BW": "#8e24aa"}
PAIR = "F&B"
CSS_KIND = {PAIR: "FB"}  # kind -> the class suffix (op-FB)
IDLE_COLOR = "#e6e6e6"
CHUNK_OPACITY = (1.0, 0.6, 0.8, 0.45)  # chunk 0 full colour; later chunks lighter
TEXT_COLOR = "#222222"
FONT = "font-family=\"ui-monospace, Menlo, Consolas, monospace\""

ROW_H = 18
ROW_GAP = 4
TOP = 30
RIGHT = 16
CHAR_W = 6.2  # approximate advance of the 10 px monospace font


def escape(text: str) -> str:
    """Text for an SVG element (&, < and > escaped; the html module is lighter to import
    than xml.sax.saxutils, which pulls in urllib)."""
    return html.escape(text, quote=False)


def _attr(value: str) -> str:
    """A double-quoted SVG attribute value."""
    return '"' + html.escape(value, quote=True) + '"'



def _n(x: float) -> str:
    """Compact SVG number: at most 2 decimals, no trailing zeros."""
    text = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("", "-0") else text


def _title(result: Timeline) -> str:
    parts = []
    schedule = getattr(result, "schedule", None)
    if schedule is not None:
        parts.append(str(getattr(schedule, "value", schedule)))
    parts.append(f"pp={result.p}")
    v = int(getattr(result, "v", 1) or 1)
    if v > 1:
        parts.append(f"v={v}")
    if hasattr(result, "m"):
        parts.append(f"m={result.m}")
    parts.append(f"step {fmt_seconds(result.step_time_s)}")
    bubble = getattr(result, "bubble_rate", None)
    if bubble is not None:
        parts.append(f"bubble {fmt_pct(bubble)}")
    return "  ".join(parts)


def timeline_svg(result: Timeline, width_px: int = 960) -> str:
    """The timeline as SVG text, ``width_px`` wide; the height follows the device count."""
    rows = n_rows(result)
    span = span_s(result)
    left = 12 + CHAR_W * len(f"dev{max(rows - 1, 0)}")
    bar_w = max(1.0, width_px - left - RIGHT)
    scale = bar_w / span if span > 0 else 0.0
    rows_bottom = TOP + rows * (ROW_H + ROW_GAP)
    axis_y = rows_bottom + 2
    legend_y = axis_y + 36
    height = legend_y + 18

    out: list[str] = []
    out.append(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width_px}" height="{_n(height)}" '
        f'viewBox="0 0 {width_px} {_n(height)}" font-size="10" {FONT}>'
    )
    out.append(SVG_MARKER.decode())  # what lets a later --svg replace this file (files.Kind)
    out.append(
        f'<rect class="background" x="0" y="0" width="{width_px}" height="{_n(height)}" '
        'fill="#ffffff"/>'
    )
    out.append(
        f'<text x="{_n(left)}" y="18" font-size="12" fill="{TEXT_COLOR}">'
        f"{escape(_title(result))}</text>"
    )
    for d in range(rows):
        y = TOP + d * (ROW_H + ROW_GAP)
        out.append(
            f'<text x="6" y="{_n(y + ROW_H - 5)}" fill="{TEXT_COLOR}">dev{d}</text>'
        )
        out.append(
            f'<rect class="idle" x="{_n(left)}" y="{y}" width="{_n(bar_w)}" height="{ROW_H}" '
            f'fill="{IDLE_COLOR}"/>'
        )
    labels: list[str] = []
    for e in result.events:
        kind = kind_of(e.op)
        x = left + e.start_s * scale
        w = max(0.0, (e.end_s - e.start_s) * scale)
        y = TOP + e.device * (ROW_H + ROW_GAP)
        # interleaved and zbv: a device's later chunks (stage // p) are drawn lighter
        chunk = e.op.stage // result.p if result.p else 0
        what = (f"{op_label(e.op)} stages {e.op.stage}&{getattr(e.op, 'b_stage', '?')}"
                if kind == PAIR else f"{kind}{e.op.mb} stage {e.op.stage}")
        tip = (
            f"dev{e.device} {what}"
            + (f" (chunk {chunk})" if chunk else "")
            + f" ({KIND_NAMES.get(kind, kind)}): {fmt_seconds(e.start_s)} - {fmt_seconds(e.end_s)}"
        )
        shade = f' fill-opacity="{_n(CHUNK_OPACITY[chunk % len(CHUNK_OPACITY)])}"' if chunk else ""
        css = f"op op-{CSS_KIND.get(kind, kind)}" + (f" chunk-{chunk}" if chunk else "")
        if kind == PAIR:  # the forward half over the backward half
            out.append(
                f'<g class={_attr(css)}><title>{escape(tip)}</title>'
                f'<rect x="{_n(x)}" y="{y}" width="{_n(w)}" height="{_n(ROW_H / 2)}" '
                f'fill="{COLORS["F"]}" stroke="#ffffff" stroke-width="0.5"/>'
                f'<rect x="{_n(x)}" y="{_n(y + ROW_H / 2)}" width="{_n(w)}" '
                f'height="{_n(ROW_H / 2)}" fill="{COLORS["B"]}" stroke="#ffffff" '
                f'stroke-width="0.5"/></g>'
            )
        else:
            out.append(
                f'<rect class={_attr(css)} x="{_n(x)}" y="{y}" width="{_n(w)}" '
                f'height="{ROW_H}" fill="{COLORS.get(kind, "#888888")}"{shade} stroke="#ffffff" '
                f'stroke-width="0.5"><title>{escape(tip)}</title></rect>'
            )
        label = op_label(e.op)
        if w >= CHAR_W * len(label) + 4:
            labels.append(
                f'<text x="{_n(x + w / 2)}" y="{_n(y + ROW_H - 5)}" text-anchor="middle" '
                f'fill="#ffffff">{escape(label)}</text>'
            )
    out.extend(labels)
    # time axis
    out.append(
        f'<line x1="{_n(left)}" y1="{_n(axis_y)}" x2="{_n(left + bar_w)}" y2="{_n(axis_y)}" '
        f'stroke="{TEXT_COLOR}" stroke-width="1"/>'
    )
    factor, unit, values = axis.ticks(span, max(1, int(bar_w // 80)))
    end_label = fmt_seconds(span)
    end_room = CHAR_W * (len(end_label) + 2)
    for v in values:
        x = left + (v * factor) * scale
        if v > 0 and x > left + bar_w - end_room:
            continue
        text = f"{axis.fmt_tick(v)} {unit}" if v > 0 else "0"
        anchor = "start" if v == 0 else "middle"
        out.append(_tick(x, axis_y, text, anchor))
    if span > 0:
        out.append(_tick(left + bar_w, axis_y, end_label, "end"))
    # legend
    x = left
    for kind, name in [*legend_kinds(result), ("idle", "idle")]:
        if kind == PAIR:
            out.append(
                f'<rect class="legend" x="{_n(x)}" y="{_n(legend_y - 10)}" width="12" '
                f'height="6" fill="{COLORS["F"]}"/><rect class="legend" x="{_n(x)}" '
                f'y="{_n(legend_y - 4)}" width="12" height="6" fill="{COLORS["B"]}"/>'
            )
        else:
            out.append(
                f'<rect class="legend" x="{_n(x)}" y="{_n(legend_y - 10)}" width="12" '
                f'height="12" fill="{COLORS.get(kind, IDLE_COLOR)}"/>'
            )
        out.append(
            f'<text x="{_n(x + 16)}" y="{_n(legend_y)}" fill="{TEXT_COLOR}">{escape(name)}</text>'
        )
        x += 16 + CHAR_W * len(name) + 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _tick(x: float, axis_y: float, text: str, anchor: str) -> str:
    return (
        f'<line x1="{_n(x)}" y1="{_n(axis_y)}" x2="{_n(x)}" y2="{_n(axis_y + 4)}" '
        f'stroke="{TEXT_COLOR}"/>'
        f'<text x="{_n(x)}" y="{_n(axis_y + 16)}" text-anchor="{anchor}" '
        f'fill="{TEXT_COLOR}">{escape(text)}</text>'
    )


def write_svg(path: Path | str, result: Timeline, width_px: int = 960) -> Written:
    """Write ``timeline_svg`` to ``path`` atomically."""
    return write_atomic(Path(path), timeline_svg(result, width_px))
