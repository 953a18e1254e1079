"""`pptune tune` against running every candidate: trials, wall time, the winner's rank.

2 CPU ranks (gloo, 1 thread each), gpt-small, global batch 16, pp=2. The
candidates: gpipe, 1f1b, zb-h1 and interleaved-1f1b (v=2) at micro-batch
sizes 1, 2, 4 and 8 (so m = 16, 8, 4, 2), each with the planner's split and
the even split. One fresh quick probe profile (sizes 1, 2, 4, 8) prices them.

1. ``tune``: the loop ``pptune tune`` runs (``pptune.tune.loop``), no trial
   or time limit: how many candidates it measures, and its wall time.
2. every candidate once (for the benchmark only), with the same runner:
   the winner's step in this pass against the best of all, and the error of
   predictions over the tune's final calibration on the candidates it did
   not measure (held out), before and after calibration.

Every row is reported, misses included. The host is shared: the 1-minute
load average is written beside the figures at the start and the end.

Run: ``python -m bench.run`` (calls ``main``), or ``python -m bench.tune_bench``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

GLOBAL_BATCH = 16
SIZES = (1, 2, 4, 8)
SCHEDULES = ("gpipe", "1f1b", "zb-h1", "interleaved-1f1b")


def _probe(path: Path) -> float:
    args = ["probe", "--quick", "--no-comm", "--micro-batch-sizes",
            ",".join(map(str, SIZES)), "-o", str(path)]
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "from pptune.cli.app import main; main()", *args],
                       capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"pptune probe failed: {r.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0


def _candidates(path: Path, warmup: int, steps: int) -> tuple[Any, list[Any]]:
    from pptune.costmodel.partition import even_split
    from pptune.costmodel.schedules import Schedule
    from pptune.costmodel.search import evaluate
    from pptune.plan.recommend import RecommendSpec, recommend
    from pptune.schemas import load_profile
    from pptune.tune import candidates as cands
    from pptune.validate.spec import ModelSource

    profile = load_profile(path)
    run = recommend(RecommendSpec.of(
        gpus=2, pp=[2], global_batch=GLOBAL_BATCH, micro_batch_sizes=list(SIZES),
        schedules=[Schedule(s) for s in SCHEDULES], virtual_stages=[2], profile=path, top=500,
    ))
    plans = list(run.result.plans)
    n = len(profile.layers)
    for p in list(plans):  # the even split of the same plan
        even = even_split(n, len(p.stage_layers))
        if even != list(p.stage_layers):
            plans.append(evaluate(run.table, run.plan_request,
                                  replace(p.spec, stage_layers=tuple(even))))
    settings = cands.RunSettings(ModelSource("gpt-small"), warmup, steps, 300.0, "cpu")
    out = [cands.candidate(p, i, n, 2, settings) for i, p in enumerate(plans, 1)]
    return profile, [c for c in out if c.skip is None]


def _err(pred: float, meas: float) -> float:
    return (pred - meas) / meas


def main(quick: bool = False) -> dict[str, Any]:
    from pptune.tune import loop, model
    from pptune.tune.trial import measure

    warmup, steps = (1, 3) if quick else (2, 5)
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        probe_s = _probe(path)
        profile, cands = _candidates(path, warmup, steps)

    def run_trial(c: Any) -> Any:
        return measure(c, lambda rank, step: None)

    t0 = time.perf_counter()
    tuned = loop.run(profile, cands, run_trial, loop.Limits(len(cands), float("inf")), None)
    tune_wall = time.perf_counter() - t0
    winner = tuned.winner
    t0 = time.perf_counter()
    every = {c.key: run_trial(c) for c in cands}
    all_wall = time.perf_counter() - t0
    cal, calibrated = tuned.calibration, tuned.calibrated
    measured_by_tune = {r.cand.key for r in tuned.rows if r.status == loop.MEASURED}
    rows = []
    for c in cands:
        t = every[c.key]
        tune_row = next(r for r in tuned.rows if r.cand.key == c.key)
        after = (model.predict(calibrated, c.spec, cal.loss_for(c.spec.micro_batch_size),
                               cal.contention)
                 if cal is not None and calibrated is not None else None)
        rows.append({
            "candidate": c.key, "planner_rank": c.rank, "tune_status": tune_row.status,
            "tune_reason": tune_row.reason, "tune_measured_step_s": tune_row.measured_s,
            "measured_step_s": t.measured_s, "step_times_s": list(t.step_times_s),
            "predicted_before_s": tune_row.before_s, "predicted_after_s": after,
            "error_before": _err(tune_row.before_s, t.measured_s),
            "error_after": None if after is None else _err(after, t.measured_s),
            "held_out": c.key not in measured_by_tune,
        })
    best = min(rows, key=lambda r: r["measured_step_s"])
    win_row = next((r for r in rows if winner and r["candidate"] == winner.cand.key), None)
    held = [r for r in rows if r["held_out"] and r["error_after"] is not None]

    def stats(key: str) -> dict[str, float | None]:
        xs = [abs(r[key]) for r in held]
        return {"median": statistics.median(xs) if xs else None, "worst": max(xs) if xs else None}

    doc = {
        "setup": {"model": "gpt-small", "pp": 2, "global_batch": GLOBAL_BATCH,
                  "micro_batch_sizes": list(SIZES), "schedules": list(SCHEDULES),
                  "backend": "gloo", "threads_per_rank": 1, "warmup_steps": warmup,
                  "timed_steps": steps, "profile": f"pptune probe --quick --no-comm ({probe_s:.0f} s)",
                  "quick": quick},
        "load_average_1min": {"start": load_start, "end": os.getloadavg()[0],
                              "cores": os.cpu_count()},
        "candidates": len(cands),
        "trials_run_by_tune": len(measured_by_tune),
        "trials_share": len(measured_by_tune) / len(cands) if cands else None,
        "tune_wall_s": tune_wall,
        "tune_stopped": tuned.stopped,
        "all_candidates_wall_s": all_wall,
        "winner": winner.cand.key if winner else None,
        "winner_measured_in_all_pass_s": win_row["measured_step_s"] if win_row else None,
        "best_in_all_pass": best["candidate"],
        "best_measured_s": best["measured_step_s"],
        "winner_vs_best": (win_row["measured_step_s"] / best["measured_step_s"] - 1)
        if win_row else None,
        "tune_accounting": loop.accounting(tuned.rows),
        "held_out_error_in_all_pass": {"plans": len(held), "before": stats("error_before"),
                                       "after": stats("error_after")},
        "calibration_notes": cal.notes if cal else [],
        "rows": rows,
    }
    from bench.write import write_result

    write_result("tune", doc)
    return doc


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
