"""`pptune tune` output: the trials table and the lines under it (renderers only)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rich import box
from rich.console import JustifyMethod
from rich.table import Table

from pptune.report.fmt import fmt_seconds


def _ms(x: float | None) -> str:
    return "-" if x is None else fmt_seconds(x)


def _err(pred: float | None, meas: float | None) -> str:
    if pred is None or meas is None or meas <= 0:
        return "-"
    return f"{(pred - meas) / meas:+.1%}"


def trials_table(rows: Sequence[Any], winner_key: str | None,
                 plan_s: Callable[[Any], float]) -> Table:
    """One row per candidate: before / after calibration, measured, errors, status.

    ``plan_s(row)``: the whole plan's step (what the ranking uses).
    """
    t = Table(title="pptune tune: candidates, predicted and measured (one pipeline each)",
              box=box.SIMPLE_HEAD, title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("#", "right"), ("plan", "left"), ("predicted", "right"), ("calibrated", "right"),
        ("measured", "right"), ("err before", "right"), ("err after", "right"),
        ("plan step", "right"), ("status", "left"),
    )
    for name, just in columns:
        t.add_column(name, justify=just)
    rank = {r.cand.key: r.cand.rank for r in rows}
    for r in rows:
        # a trial kept from an earlier run says so, the winner too, and a pipeline
        # another candidate's trial measured names it
        with_ = getattr(r, "measured_with", None)
        status = ("WINNER" if r.cand.key == winner_key else r.status) + (
            " (resumed)" if r.resumed else ""
        ) + (f" (with #{rank.get(with_, '?')})" if with_ else "")
        t.add_row(str(r.cand.rank), r.cand.key, _ms(r.before_s), _ms(r.after_s), _ms(r.measured_s),
                  _err(r.before_s, r.measured_s), _err(r.after_s, r.measured_s),
                  fmt_seconds(plan_s(r)), status)
    return t


def why_lines(rows: Sequence[Any], winner: Any, stopped: str,
              plan_s: Callable[[Any], float]) -> list[str]:
    """The winner and, for every other candidate, why it is not."""
    lines = []
    if winner is not None:
        lines.append(
            f"winner: #{winner.cand.rank} {winner.cand.key}: measured {fmt_seconds(winner.measured_s)}"
            f" per step (timed steps {_range(winner.trial.step_times_s)}), predicted "
            f"{fmt_seconds(winner.before_s)} before calibration"
        )
        if winner.cand.note:
            lines.append(f"  note: {winner.cand.note}")
        twins = sorted((r for r in rows if r.status == "measured"
                        and r.cand.spec == winner.cand.spec), key=lambda r: r.cand.rank)
        if len(twins) > 1:
            lines.append(
                f"  note: {', '.join(f'#{r.cand.rank}' for r in twins)} run this one pipeline, "
                "measured once; they differ in what the trial does not run (the data-parallel "
                "state's sharding), so they are ranked by its predicted time, not measured")
    rank = {r.cand.key: r.cand.rank for r in rows}
    for r in rows:
        if winner is not None and r.cand.key == winner.cand.key:
            continue
        with_ = getattr(r, "measured_with", None)
        if r.status == "measured" and winner is not None:
            how = (f" with #{rank.get(with_, '?')} (the same pipeline; its sharding "
                   "predicted)" if with_ else "")
            lines.append(f"#{r.cand.rank} measured{how}: plan step {fmt_seconds(plan_s(r))}, "
                         f"{plan_s(r) / plan_s(winner) - 1:+.1%} against the winner")
        elif r.reason:
            lines.append(f"#{r.cand.rank} {r.status}: {r.reason}")
    lines.append(f"stopped: {stopped}")
    return lines


def _range(times: Sequence[float]) -> str:
    return f"{fmt_seconds(min(times))}..{fmt_seconds(max(times))}" if times else "-"


def accounting_line(acc: dict[str, Any]) -> str:
    n = acc["held_out_trials"]
    if not n:
        return ("prediction error on held-out trials: none yet (the first trial calibrates; "
                "measure two or more to see it)")
    b, a = acc["before"], acc["after"]
    return (f"|step error| on {n} held-out trial(s) (each predicted from the trials before it): "
            f"before calibration median {b['median']:.1%}, worst {b['worst']:.1%}; "
            f"after median {a['median']:.1%}, worst {a['worst']:.1%}")
