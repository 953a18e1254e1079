"""Rich tables of a validate outcome: predicted vs measured. Returned, never printed."""

from __future__ import annotations

import math
from typing import Any

from rich.table import Table

from pptune.report.fmt import fmt_pct, fmt_seconds


def fmt_rel(x: float) -> str:
    """A signed relative error: ``+4.2%``; ``n/a`` when undefined."""
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 100:+.1f}%"


def fmt_points(x: float) -> str:
    """A signed difference of two rates in percentage points: ``-2.1 pts``."""
    if not math.isfinite(x):
        return "n/a"
    return f"{x * 100:+.1f} pts"


def _err(pred: float, meas: float) -> str:
    return fmt_rel((pred - meas) / meas) if meas > 0 else "n/a"


def comparison_table(doc: dict[str, Any]) -> Table:
    """Step time, bubble rate, busy and idle per device: predicted, measured, error."""
    pred, meas = doc["predicted"], doc["measured"]
    head = f"{doc['schedule']}  pp={doc['pp']}  m={doc['num_microbatches']}"
    if doc["virtual_stages"] > 1:
        head += f"  chunks/device={doc['virtual_stages']}"
    head += f"  b={doc['micro_batch_size']}  split={','.join(map(str, doc['stage_layers']))}"
    table = Table(
        title=f"{head}\npredicted vs measured ({doc['torch_schedule']}, {doc['backend']}, "
        f"median of {doc['timed_steps']} steps)",
    )
    table.add_column("")
    table.add_column("predicted", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("error", justify="right")
    table.add_row(
        "step time", fmt_seconds(pred["step_time_s"]), fmt_seconds(meas["step_time_s"]),
        fmt_rel(doc["step_time_error"]),
    )
    table.add_row(
        "bubble rate", fmt_pct(pred["bubble_rate"]), fmt_pct(meas["bubble_rate"]),
        fmt_points(doc["bubble_rate_error"]),
    )
    for p_dev, m_dev in zip(pred["devices"], meas["devices"], strict=True):
        d = p_dev["device"]
        table.add_row(
            f"dev{d} busy", fmt_seconds(p_dev["busy_s"]), fmt_seconds(m_dev["busy_s"]),
            _err(p_dev["busy_s"], m_dev["busy_s"]),
        )
        table.add_row(
            f"dev{d} idle", fmt_seconds(p_dev["idle_s"]), fmt_seconds(m_dev["idle_s"]),
            _err(p_dev["idle_s"], m_dev["idle_s"]),
        )
    return table


def ops_table(doc: dict[str, Any]) -> Table:
    """Each (kind, stage) op: predicted cost vs measured median duration.

    Where these agree and the step does not, the error is in the schedule
    (waits, communication); where they differ, it is in the compute costs.
    """
    table = Table(title="ops: predicted vs measured median time")
    table.add_column("op")
    table.add_column("stage", justify="right")
    table.add_column("predicted", justify="right")
    table.add_column("measured", justify="right")
    table.add_column("error", justify="right")
    for row in sorted(doc["ops"], key=lambda r: (r["stage"], "FBW".index(r["kind"]))):
        # an op priced at nothing (the embedding's input gradient: no input to take it
        # to) measures only its launch: no error to give
        error = "no work priced" if row["predicted_s"] == 0 else fmt_rel(row["error"])
        table.add_row(
            row["kind"], str(row["stage"]), fmt_seconds(row["predicted_s"]),
            fmt_seconds(row["measured_s"]), error,
        )
    return table


def summary_lines(doc: dict[str, Any]) -> list[str]:
    meas = doc["measured"]
    times = meas.get("step_times_s") or []
    lines = [f"costs: {doc['cost_source']}"]
    if times:
        lines.append(
            f"measured: {len(times)} timed steps after {doc['warmup_steps']} warm-up, "
            f"{fmt_seconds(min(times))} .. {fmt_seconds(max(times))} "
            f"(spread {fmt_pct(meas.get('spread', 0.0))} of the median)"
        )
    plain = doc.get("predicted_without_contention")
    if plain is not None:
        lines.append(
            f"contention: ranks computing at once ran {doc['contention']:.2f}x as long as alone "
            f"(reference workload); without this the prediction is "
            f"{fmt_seconds(plain['step_time_s'])} ({fmt_rel(plain['step_time_error'])})"
        )
    lines.append(
        f"total busy time: predicted {fmt_rel(doc['busy_error'])} vs measured "
        "(compute costs); the rest of the step error is waiting and communication"
    )
    return lines
