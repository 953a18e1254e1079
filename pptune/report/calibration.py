"""What ``pptune calibrate --run`` prints: the factors, each run's residual (and, with two
runs or more, its error when the others alone predict it), each step's parts."""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from pptune.costmodel.breakdown import BUBBLE
from pptune.costmodel.step_timers import model_parts
from pptune.report.fmt import fmt_seconds, run_labels
from pptune.schemas import Calibration

SHOWN_PARTS = 8  # the largest parts of a step; the rest summed as "other"


def _pct(x: float) -> str:
    return f"{0.0 if abs(x) < 5e-4 else x:+.1%}"  # no "-0.0%"


def _names(groups: list[str]) -> str:
    return groups[0] if len(groups) == 1 else f"{', '.join(groups[:-1])} and {groups[-1]}"


def calibration_text(cal: Calibration) -> str:
    """Plain text, one line per fact (stdout)."""
    model = cal.model.get("name", "the model")
    f = cal.factors
    shown = [f"{_names(tie)} {f[tie[0]]:.3f}" + (" (one factor)" if len(tie) > 1 else "")
             for tie in cal.fitted]
    fitted = {g for tie in cal.fitted for g in tie}
    shown += [f"{g} {f[g]:.3f} (not fitted)" for g in f if g not in fitted]
    lines = [f"calibrated {model} on {cal.gpu} from {len(cal.runs)} run(s); factors on the "
             f"analytic model's rates: {'; '.join(shown)}"]
    # each run by its file's name (its GPU count where two share one), its step's source
    # on a line of its own: a row fits 80 columns
    names = run_labels([PurePath(r.config).name for r in cal.runs], [r.gpus for r in cal.runs])
    width = max(len(n) for n in (*names, "run"))
    held = any(r.held_out_residual is not None for r in cal.runs)
    lines.append(f"  {'run':<{width}} {'measured':>9} {'predicted':>9} {'residual':>8}"
                 + (f" {'held out':>8}" if held else ""))
    for r, name in zip(cal.runs, names, strict=True):
        out = r.held_out_residual
        lines.append(f"  {name:<{width}} {fmt_seconds(r.measured_step_s):>9} "
                     f"{fmt_seconds(r.predicted_step_s):>9} {_pct(r.residual):>8}"
                     + (f" {'-' if out is None else _pct(out):>8}" if held else ""))
        lines.append(f"    {r.config}: {r.step_source}")
    if held:
        lines.append("  held out: the run's error when the factors of the other runs alone "
                     "predict it (leave one out)")
    for r, name in zip(cal.runs, names, strict=True):
        total = sum(r.parts.values())
        if total <= 0:
            continue
        ranked = sorted(r.parts.items(), key=lambda kv: -kv[1])
        head = [(p, s) for p, s in ranked[:SHOWN_PARTS] if s > 0]
        rest = sum(s for _, s in ranked[SHOWN_PARTS:])
        text = ", ".join(f"{p} {s / total:.1%}" for p, s in head)
        if rest > 0:
            text += f", other {rest / total:.1%}"
        lines.append(f"  {name}: the step at the calibration is {text}")
        if r.parts.get(BUBBLE, 0.0) > 0:
            lines.append(f"  {name}: parts of the busiest pipeline rank's step, whose pipeline "
                         "bubble is that rank's wait (check-config's bubble is the idle share "
                         "of every rank, stage imbalance included)")
        if r.measured_parts:
            lines.append(f"  {name}: {timers_line(r.measured_parts, r.parts, r.measured_step_s)}")
    if cal.reserve_bytes is not None:
        lines.append(f"  reserve: {cal.reserve_bytes / 1024**3:.2f} GiB a GPU beyond pptune's "
                     "tensors, from the logs' peak memory (used instead of --reserve-gib's "
                     "default)")
    for note in cal.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines)


def timers_line(measured: dict[str, float], parts: dict[str, float], step_s: float) -> str:
    """The step as Megatron-LM's timers split it, beside pptune's parts in the same
    groups (costmodel/step_timers.py), each as a share of its own step."""
    ours = model_parts(parts)
    total = sum(ours.values())
    theirs = ", ".join(f"{g} {s / step_s:.1%}" for g, s in measured.items())
    mine = ", ".join(f"{g} {s / total:.1%}" for g, s in ours.items()) if total > 0 else "-"
    return (f"Megatron-LM's timers (slowest rank) make the step {theirs}; pptune at the "
            f"calibration: {mine}")


def calibration_json(cal: Calibration) -> dict[str, Any]:
    return cal.model_dump(mode="json")
