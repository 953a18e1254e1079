"""Terminal picture of a pipeline step: one row per device, time to the right.

1f1b, pp=3, m=4, forward 1 ms, backward 2 ms, ``plain_timeline(r, width=60)``::

    dev0 F0FF1FF2F............B0BBBBBF3FB1BBBB...B2BBBB...B3BBBB
    dev1 ...F0FF1F......B0BBBBF2FB1BBBBBF3FB2BBBB...B3BBBB......
    dev2 ......F0FB0BBBBF1FB1BBBBF2FFB2BBBBF3FB3BBBB............
         +--------------+--------------+--------------+--------+
         0              5              10             15 18.0 ms
    F forward  B backward  . idle

Each row is cut into equal cells over ``[0, span]`` (span = the step time, or
the last event end if later). A cell shows the op that covers most of its
time, or idle when idle time covers more of it than all ops together, so a
device that is busy most of a coarse cell never reads idle. Ties go to the
earliest op, so the picture is deterministic. Each op's block starts with
its name (``F0``, ``B12``) where every op owns enough consecutive cells for
its own; the other cells repeat its kind letter, so the picture reads without
colour. Where some op is narrower than its name, no block is named (one
unnamed beside named ones would read as part of them: is the middle ``F`` of
``F0FF2`` its own op?) and a line under the legend says so, with a width that
names every op. The letters: ``F`` forward, ``B`` backward (input-gradient where the schedule splits it;
a whole backward beside split ones, ``BW``, is labelled ``BW3`` and filled
with ``B``), ``W`` weight-gradient, ``&`` an overlapped forward and backward
pair (DualPipe's F&B, labelled ``F3&B1``: forward of micro-batch 3, backward
of 1), ``.`` idle; a BW block without its label starts with ``BW``. With
colour, forward is green, backward red, a whole backward magenta,
weight-gradient blue, a pair yellow and idle grey, and back-to-back blocks of
one kind alternate two shades. Labels name the
micro-batch, not the stage: on multi-chunk schedules (interleaved, zbv, the
DualPipes) the chunk is not shown.

Works for anything that satisfies ``pptune.report.protocol.Timeline``.
"""

from __future__ import annotations

import math

from rich.text import Text

from pptune.limits import MAX_TIMELINE_WIDTH
from pptune.report import axis
from pptune.report.fmt import fmt_seconds, seconds_unit
from pptune.report.protocol import Timeline, kind_of, legend_kinds, n_rows, op_label, span_s
from pptune.report.wrap import wrap_words

IDLE_CHAR = "."
# Owner kind -> style. Back-to-back blocks of the same kind alternate between
# STYLES and ALT_STYLES so their boundary shows in colour too.
STYLES: dict[str, str] = {
    "F": "black on green3",
    "B": "white on red3",
    "W": "white on blue3",
    "BW": "white on magenta3",
    "F&B": "black on yellow3",
    IDLE_CHAR: "grey58 on grey23",
}
ALT_STYLES: dict[str, str] = {
    "F": "black on green4",
    "B": "white on dark_red",
    "W": "white on dodger_blue3",
    "BW": "white on dark_magenta",
    "F&B": "black on gold3",
    IDLE_CHAR: STYLES[IDLE_CHAR],
}
# the character that fills a block of each kind (its own letter otherwise)
FILL = {"BW": "B", "F&B": "&"}
AXIS_STYLE = "dim"


Event = tuple[float, float, str, str]  # start_s, end_s, kind, label


def _row_cells(
    events: list[Event], span: float, n: int, names: bool = True
) -> tuple[list[tuple[str, str, bool]], bool]:
    """``(character, owner kind, alternate)`` for each of one device's ``n`` cells, and
    whether every op that takes time starts with its name (``names``: name those that fit).

    The cells split ``[0, span]`` evenly. ``events`` are ``(start_s, end_s,
    kind, label)`` for this device, sorted; the owner kind is ``"F"``, ``"B"``,
    ``"W"`` or ``IDLE_CHAR``; ``alternate`` flips between back-to-back blocks of
    the same kind.
    """
    if span <= 0 or n <= 0:
        return [(IDLE_CHAR, IDLE_CHAR, False)] * max(n, 0), True
    dt = span / n
    best_ov = [0.0] * n
    best = [-1] * n
    busy = [0.0] * n
    for idx, (start, end, _kind, _label) in enumerate(events):
        if end <= start:
            continue
        c0 = min(n - 1, max(0, int(start / dt)))
        c1 = min(n - 1, max(0, math.ceil(end / dt) - 1))
        for c in range(c0, c1 + 1):
            lo = span * c / n
            hi = span * (c + 1) / n if c < n - 1 else span
            ov = min(end, hi) - max(start, lo)
            if ov <= 0:
                continue
            busy[c] += ov
            if ov > best_ov[c]:
                best_ov[c] = ov
                best[c] = idx
    for c in range(n):
        lo = span * c / n
        hi = span * (c + 1) / n if c < n - 1 else span
        if busy[c] * 2 < (hi - lo):
            best[c] = -1
    cells: list[tuple[str, str, bool]] = []
    named: set[int] = set()
    prev_kind, alt = IDLE_CHAR, False
    c = 0
    while c < n:
        idx = best[c]
        run_end = c
        while run_end + 1 < n and best[run_end + 1] == idx:
            run_end += 1
        width = run_end - c + 1
        if idx < 0:
            cells.extend((IDLE_CHAR, IDLE_CHAR, False) for _ in range(width))
            prev_kind, alt = IDLE_CHAR, False
        else:
            _s, _e, kind, label = events[idx]
            alt = (not alt) if kind == prev_kind else False
            prev_kind = kind
            # too narrow for its label, a whole backward still says BW (its fill
            # letter is B's); a pair's & fill names it
            if len(label) <= width:
                named.add(idx)
            shown = (label if names and len(label) <= width
                     else kind if kind == "BW" and len(kind) <= width else "")
            shown += FILL.get(kind, kind) * (width - len(shown))
            cells.extend((ch, kind, alt) for ch in shown)
        c = run_end + 1
    return cells, all(i in named for i, e in enumerate(events) if e[1] > e[0])


def _named_at(rows: list[list[Event]], span: float, bar_w: int) -> bool:
    """Whether every op of ``rows`` starts with its name ``bar_w`` cells wide."""
    return all(_row_cells(evs, span, bar_w)[1] for evs in rows)


def _names_width(rows: list[list[Event]], span: float, label_w: int) -> int | None:
    """A width at which every op starts with its name, the narrowest or near it; None when
    not even MAX_TIMELINE_WIDTH does. An op d seconds long touches at most d / cell + 2
    cells (so a short one rules every width out at once) and owns at least the
    floor(d / cell) - 1 wholly inside it, so (len(name) + 2) x span / d cells hold its
    name; the narrowest width is searched below that (in halves: a wider grid names
    about as many ops, not strictly more)."""
    timed = [(end - start, len(label)) for evs in rows for start, end, _k, label in evs
             if end > start]
    most = MAX_TIMELINE_WIDTH - label_w
    if any(d / span * most + 2 < n for d, n in timed):  # at most two part-cells more
        return None
    need = max((math.ceil((n + 2) * span / d) for d, n in timed), default=1)
    hi = min(label_w + need, MAX_TIMELINE_WIDTH)
    if not _named_at(rows, span, hi - label_w):
        if hi == MAX_TIMELINE_WIDTH or not _named_at(rows, span,
                                                     MAX_TIMELINE_WIDTH - label_w):
            return None
        hi = MAX_TIMELINE_WIDTH
    lo = label_w + 1  # no op is named in one cell
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _named_at(rows, span, mid - label_w):
            hi = mid
        else:
            lo = mid
    return hi


def _axis(span: float, indent: int, bar_w: int, start_s: float = 0.0) -> tuple[str, str]:
    """Tick line and label line under the bars (labels in the makespan's unit).

    A window of a longer step (``start_s`` > 0) reads in step time: its left
    end is labelled ``start_s`` and the ticks are round times of the step.
    """
    pad = " " * indent
    if span <= 0 or bar_w <= 0:
        return pad + "+", pad + "0 s"
    if start_s > 0:
        factor, _unit, _dec = seconds_unit(start_s + span)
        step = axis.nice_step(span / factor, max(1, bar_w // 12))
        first = math.ceil(start_s / factor / step) * step
        values = [start_s / factor] + [
            first + k * step for k in range(int((start_s + span) / factor / step) + 1)
            if first + k * step < (start_s + span) / factor * (1 - 1e-9)
        ]
    else:
        factor, _unit, values = axis.ticks(span, max(1, bar_w // 12))
    span_u = span / factor
    start_u = start_s / factor

    def col(t_u: float) -> int:
        return min(bar_w - 1, max(0, int((t_u - start_u) / span_u * bar_w)))

    marks = ["-"] * bar_w
    labels = [" "] * bar_w
    taken = [False] * bar_w

    def place(text: str, start: int, tick: int) -> None:
        marks[tick] = "+"
        start = max(0, min(start, bar_w - len(text)))
        end = start + len(text)
        lo, hi = max(0, start - 1), min(bar_w, end + 1)
        if end > bar_w or any(taken[lo:hi]):
            return
        for i, ch in enumerate(text):
            labels[start + i] = ch
            taken[start + i] = True

    end_label = fmt_seconds(start_s + span)
    place(end_label, bar_w - len(end_label), bar_w - 1)
    place(axis.fmt_tick(round(start_u, 3)) if start_s > 0 else "0", 0, 0)
    for t_u in values[1:]:
        text = axis.fmt_tick(t_u)
        c = col(t_u)
        place(text, c - (len(text) - 1) // 2, c)
    return pad + "".join(marks), (pad + "".join(labels)).rstrip()


def _legend(result: Timeline) -> list[tuple[str, str]]:
    return [*legend_kinds(result), (IDLE_CHAR, "idle")]


def timeline_text(result: Timeline, width: int = 80) -> Text:
    """A rich ``Text`` of the timeline, ``width`` columns wide (labels included).

    Rows ``dev0`` .. ``dev{p-1}``, then a time axis (``0`` at the left, the
    makespan in human units at the right), then the legend (``W`` only when
    the timeline has weight-gradient ops), then, where op names are left out,
    the line that says so.
    """
    rows = n_rows(result)
    span = span_s(result)
    label_w = len(f"dev{max(rows - 1, 0)}") + 1
    bar_w = max(1, width - label_w)

    per_dev: list[list[Event]] = [[] for _ in range(rows)]
    for e in result.events:
        per_dev[e.device].append(
            (float(e.start_s), float(e.end_s), kind_of(e.op), op_label(e.op))
        )
    per_dev = [sorted(evs) for evs in per_dev]
    named = _named_at(per_dev, span, bar_w)
    text = Text(no_wrap=True, overflow="crop", end="")
    for d in range(rows):
        cells, _ = _row_cells(per_dev[d], span, bar_w, names=named)
        text.append(f"dev{d}".ljust(label_w))
        # one styled span per run of cells with the same style
        i = 0
        while i < len(cells):
            _ch, kind, alt = cells[i]
            j = i + 1
            while j < len(cells) and cells[j][1:] == (kind, alt):
                j += 1
            style = (ALT_STYLES if alt else STYLES).get(kind, "")
            text.append("".join(cell[0] for cell in cells[i:j]), style=style)
            i = j
        text.append("\n")
    tick_line, labels = _axis(span, label_w, bar_w, float(getattr(result, "start_s", 0.0)))
    text.append(tick_line + "\n", style=AXIS_STYLE)
    text.append(labels + "\n", style=AXIS_STYLE)
    # legend, wrapped onto more lines when narrower than one
    used = 0
    for kind, name in _legend(result):
        item = len(kind) + 1 + len(name)
        if used and used + 2 + item > width:
            text.append("\n")
            used = 0
        elif used:
            text.append("  ")
            used += 2
        text.append(kind, style=STYLES[kind])
        text.append(f" {name}")
        used += item
    if not named:
        wide = _names_width(per_dev, span, label_w)
        # a flag and its value stay on one line (a no-break space while wrapping)
        note = ("op names left out: " + (
            f"at {width} columns some ops' bars are shorter than their names; --width\u00a0{wide} "
            "names every op" if wide is not None else "some ops' bars are shorter than their names "
            f"at any --width up\u00a0to\u00a0{MAX_TIMELINE_WIDTH:,}"))
        for line in wrap_words(note, width):
            text.append("\n" + line.replace("\u00a0", " "))
    return text


def plain_timeline(result: Timeline, width: int = 80) -> str:
    """``timeline_text`` without styles: for NO_COLOR, logs and golden files."""
    return timeline_text(result, width).plain + "\n"
