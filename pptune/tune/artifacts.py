"""What a tune leaves in its folder: the calibrated profile, the plan file, the winner's config.

- ``pptune-profile.json``: the profile the trials priced with, calibrated
  (schema v1; its notes say from which trials and what was fitted), unless the
  calibration predicts the held-out trials worse than the profile as given
  (``calibration_refusal``: said, and not written);
- ``pptune-plans.json``: recommend's plan file, every candidate with its
  measured and calibrated step beside the predicted one and its tune status,
  ranked by measured step, then by calibrated prediction (so
  ``pptune validate --plan 1`` reruns the winner);
- with ``--emit FRAMEWORK``: the winner's config as ``recommend --emit``
  writes it (the plan's full dp / tp layout, not just the pipeline measured).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from pptune.costs.profiles import DEFAULT_PROFILE_FILE
from pptune.files import Written
from pptune.report.fmt import json_safe
from pptune.schemas import PlanFile, write_atomic
from pptune.tune import loop
from pptune.tune.model import Calibration
from pptune.tune.session import PLANS_FILE, TuneRun


def ordered_rows(rows: list[loop.Row], cal: Calibration | None) -> list[loop.Row]:
    """Measured first by measured plan step, then the rest by their latest prediction."""
    f = cal.contention if cal is not None else None

    def key(r: loop.Row) -> tuple[int, float, int]:
        return (0 if r.status == loop.MEASURED else 1, loop.plan_step_s(r, f), r.cand.rank)

    return sorted(rows, key=key)


def plans_doc(run: TuneRun) -> PlanFile:
    from pptune.report.plans import plan_file

    rec = run.recommended
    rows = ordered_rows(run.outcome.rows, run.outcome.calibration)
    result = dataclasses.replace(rec.result, plans=[r.cand.plan for r in rows])
    doc = plan_file(result, rec.names, rec.global_batch, rec.origin, rec.request,
                    cost_notes=rec.costs.notes if rec.costs is not None else ())
    for record, row in zip(doc.plans, rows, strict=True):
        record.measured_step_s = row.measured_s
        record.calibrated_step_s = row.after_s
        record.tune_status = row.status + (f": {row.reason}" if row.reason else "")
    doc.notes.append("pptune tune: ranked by measured step (one pipeline), then by the "
                     "prediction over the calibrated profile")
    return doc


def write(run: TuneRun, folder: Path) -> list[Written]:
    out = []
    if run.outcome.calibrated is not None and calibration_refusal(
            loop.accounting(run.outcome.rows)) is None:
        out.append(write_atomic(folder / DEFAULT_PROFILE_FILE,
                                run.outcome.calibrated.model_dump_json(indent=2) + "\n"))
    out.append(write_atomic(folder / PLANS_FILE, plans_doc(run).model_dump_json(indent=2) + "\n"))
    return out


def emit_winner(run: TuneRun, framework: str) -> Any:
    """The winner's framework config (``pptune.plan.emit``), or None without a winner."""
    from pptune.plan import emit as emit_mod

    winner = run.outcome.winner
    if winner is None:
        return None
    return emit_mod.emit(framework, run.recommended, winner.cand.rank, run.folder)


def summary_json(run: TuneRun) -> dict[str, Any]:
    """``pptune tune --json``: every row, the winner, the accounting, the calibration."""
    o = run.outcome
    w = o.winner
    cal = o.calibration
    doc = {
        "cost_source": run.origin,
        "stopped": o.stopped,
        "elapsed_s": o.elapsed_s,
        "winner": w.cand.key if w else None,
        "trials": [loop.record(r) | {"status": r.status, "reason": r.reason, "resumed": r.resumed}
                   for r in o.rows],
        "accounting": loop.accounting(o.rows),
        "calibration": None if cal is None else {
            "from": list(cal.sources), "micro_batch_sizes": sorted(cal.factors),
            "p2p_latency_s": cal.latency_s,
            "loss_s": {str(b): list(x) for b, x in sorted(cal.losses_s.items())},
            "contention": cal.contention, "worst_op_misfit": cal.residual, "notes": cal.notes,
            "warnings": cal.warnings,
        },
        "notes": run.notes,
    }
    return json_safe(doc)  # type: ignore[no-any-return]


def calibration_refusal(acc: dict[str, Any]) -> str | None:
    """Why the calibration is not kept (``accounting``'s figures), or None: it predicts
    the held-out trials, each from the trials before it, worse than the profile as given
    (the leave-one-out check every fitted factor passes: docs/models.md, calibration)."""
    n, before, after = acc["held_out_trials"], acc["before"]["median"], acc["after"]["median"]
    if not n or before is None or after is None or after <= before:
        return None
    return (f"calibration not kept: on {n} held-out trial{'s' * (n > 1)} it predicts the "
            f"step worse than the profile as given (median |step error| {after:.1%} against "
            f"{before:.1%}); {DEFAULT_PROFILE_FILE} not written")
