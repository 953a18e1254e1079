"""Rich tables of simulation results."""

from __future__ import annotations

from rich.table import Table

from pptune.costmodel.schedules import Schedule, chunks_per_device
from pptune.costmodel.simulate import SimResult
from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_seconds


def sim_summary_table(result: SimResult) -> Table:
    """Step time and bubble rate in the title, then one row per device.

    Columns: busy and idle time, busy share of the step, peak in-flight
    chunk passes (a micro-batch's pass through one of the device's model chunks whose
    activations are held: micro-batches where a device runs one chunk; a caption says
    so where it runs more) and peak activation memory.
    """
    schedule = getattr(result.schedule, "value", result.schedule)
    head = f"{schedule}  pp={result.p}  m={result.m}"
    if result.v > 1:
        head += f"  v={result.v}"
    table = Table(
        title=f"{head}\nstep {fmt_seconds(result.step_time_s)}  "
        f"bubble {fmt_pct(result.bubble_rate)}",
    )
    if chunks_per_device(Schedule(result.schedule), result.v) > 1:
        table.caption = "peak in-flight: chunk passes (micro-batch x chunk)"
        table.caption_justify = "left"
    table.add_column("device")
    table.add_column("busy", justify="right")
    table.add_column("idle", justify="right")
    table.add_column("busy %", justify="right")
    table.add_column("peak in-flight", justify="right")
    # textbook runs carry no activation sizes: leave the column out
    with_bytes = any(dev.peak_activation_bytes > 0 for dev in result.devices)
    if with_bytes:
        table.add_column("peak act", justify="right")
    step = result.step_time_s
    for d, dev in enumerate(result.devices):
        cells = [
            f"dev{d}",
            fmt_seconds(dev.busy_s),
            fmt_seconds(dev.idle_s),
            fmt_pct(dev.busy_s / step if step > 0 else 0.0),
            str(dev.peak_inflight),
        ]
        if with_bytes:
            cells.append(fmt_bytes(dev.peak_activation_bytes))
        table.add_row(*cells)
    return table
