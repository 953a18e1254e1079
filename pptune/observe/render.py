"""Rich tables of measured trace shares and GPU monitoring."""

from __future__ import annotations

from rich.table import Table

from pptune.observe.monitor import MonitorReport
from pptune.observe.trace_report import TraceReport
from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_seconds

BUBBLE_FLAG = "BUBBLE"
LOW_UTIL_FLAG = "LOW UTIL"


def trace_report_table(report: TraceReport) -> Table:
    """Measured shares per rank: busy (compute), comm, exposed comm (comm with no
    compute beside it, part of idle), idle, busy %, and a flag on ranks under the
    ``min_busy`` threshold."""
    head = f"measured over {fmt_seconds(report.window_s)}"
    if report.steps:
        first, last = report.steps[0], report.steps[-1]
        head += f" (ProfilerStep #{first})" if first == last else f" (ProfilerStep #{first}-#{last})"
    table = Table(
        title=f"{head}\nbusy = {' + '.join(report.sources)} (comm apart), "
        f"flag < {fmt_pct(report.min_busy)}\n"
        "exposed comm = comm with no compute beside it (part of idle)",
    )
    table.add_column("device")
    table.add_column("busy", justify="right")
    table.add_column("comm", justify="right")
    table.add_column("exposed", justify="right")
    table.add_column("idle", justify="right")
    table.add_column("busy %", justify="right")
    table.add_column("flag")
    for d in report.devices:
        table.add_row(
            f"rank{d.rank}",
            fmt_seconds(d.busy_s),
            fmt_seconds(d.comm_s),
            fmt_seconds(d.exposed_comm_s),
            fmt_seconds(d.idle_s),
            fmt_pct(d.busy_share),
            BUBBLE_FLAG if d.flagged else "",
        )
    return table


def monitor_table(report: MonitorReport) -> Table:
    """Per GPU: mean and lowest utilisation, peak memory used, and a flag on GPUs
    averaging under the ``min_util`` threshold."""
    n = max((g.samples for g in report.gpus), default=0)
    head = f"{n} samples every {fmt_seconds(report.interval_s)} over {fmt_seconds(report.elapsed_s)}"
    if report.stopped_early:
        head += " (stopped early)"
    table = Table(title=f"{head}\nflag under {fmt_pct(report.min_util)} average utilisation")
    table.add_column("gpu")
    table.add_column("name")
    table.add_column("avg util", justify="right")
    table.add_column("min util", justify="right")
    table.add_column("peak mem", justify="right")
    table.add_column("flag")
    for g in report.gpus:
        mem = fmt_bytes(g.peak_mem_bytes)
        if g.mem_total_bytes:
            mem += f" / {fmt_bytes(g.mem_total_bytes)}"
        table.add_row(
            str(g.index),
            g.name,
            fmt_pct(g.avg_util_share),
            fmt_pct(g.min_util_share),
            mem,
            LOW_UTIL_FLAG if g.flagged else "",
        )
    return table
