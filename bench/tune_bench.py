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

3. the host's drift: the planner's first candidate (the reference) runs
   again before the tune, after it, after every ``DRIFT_EVERY`` candidates
   of the pass over all, and at the end. Its step over the bench's duration
   is how much the host's speed moved; each measurement is also read
   against the reference at its own time (linear between the reference's
   runs), and the winner's miss and the held-out errors are given both ways:
   what remains once the drift is divided out is the method's (and noise),
   the difference is the drift's.

Every row is reported, misses included. The host is shared: the 1-minute
load average is written beside the figures at the start and the end.

Run: ``python -m bench.run`` (calls ``main``), or ``python -m bench.tune_bench``.
"""

from __future__ import annotations

import itertools
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
DRIFT_EVERY = 8  # candidates of the pass over all between two runs of the reference


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

    began = time.perf_counter()
    at: dict[str, float] = {}  # when each candidate's measurement ran (seconds in)

    def run_trial(c: Any) -> Any:
        at.setdefault(c.key, time.perf_counter() - began)
        return measure(c, lambda rank, step: None)

    ref = cands[0]
    reference: list[dict[str, Any]] = []

    def run_reference(label: str) -> None:
        t = time.perf_counter() - began
        reference.append({"label": label, "at_s": round(t, 1),
                          "step_s": measure(ref, lambda rank, step: None).measured_s})

    run_reference("before the tune")
    t0 = time.perf_counter()
    tuned = loop.run(profile, cands, run_trial, loop.Limits(len(cands), float("inf")), None)
    tune_wall = time.perf_counter() - t0
    tune_at = dict(at)
    run_reference("after the tune")
    winner = tuned.winner
    t0 = time.perf_counter()
    every, pass_at = {}, {}
    for i, c in enumerate(cands, 1):
        pass_at[c.key] = time.perf_counter() - began
        every[c.key] = measure(c, lambda rank, step: None)
        if i % DRIFT_EVERY == 0 and i < len(cands):
            run_reference(f"pass over all, after {i}")
    all_wall = time.perf_counter() - t0
    run_reference("end")
    ref_median = statistics.median(r["step_s"] for r in reference)

    def speed(t: float) -> float:
        """The reference's step at time t over its median (linear between its runs)."""
        pts = [(r["at_s"], r["step_s"]) for r in reference]
        if t <= pts[0][0]:
            return pts[0][1] / ref_median
        for (a, x), (b, y) in itertools.pairwise(pts):
            if a <= t <= b:
                return (x + (y - x) * (t - a) / (b - a if b > a else 1.0)) / ref_median
        return pts[-1][1] / ref_median
    cal, calibrated = tuned.calibration, tuned.calibrated
    measured_by_tune = {r.cand.key for r in tuned.rows if r.status == loop.MEASURED}
    rows = []
    for c in cands:
        t = every[c.key]
        tune_row = next(r for r in tuned.rows if r.cand.key == c.key)
        after = (model.predict(calibrated, c.spec, cal.loss_for(c.spec.micro_batch_size),
                               cal.contention)
                 if cal is not None and calibrated is not None else None)
        host = speed(pass_at[c.key])
        tune_speed = statistics.median(speed(x) for x in tune_at.values()) if tune_at else 1.0
        rows.append({
            "candidate": c.key, "planner_rank": c.rank, "tune_status": tune_row.status,
            "host_speed_at_pass": host,
            "measured_step_s_drift_corrected": t.measured_s / host,
            "error_after_drift_corrected": None if after is None else _err(
                after, t.measured_s / host * tune_speed),
            "tune_reason": tune_row.reason, "tune_measured_step_s": tune_row.measured_s,
            "measured_step_s": t.measured_s, "step_times_s": list(t.step_times_s),
            "predicted_before_s": tune_row.before_s, "predicted_after_s": after,
            "error_before": _err(tune_row.before_s, t.measured_s),
            "error_after": None if after is None else _err(after, t.measured_s),
            "held_out": c.key not in measured_by_tune,
        })
    best = min(rows, key=lambda r: r["measured_step_s"])
    best_corr = min(rows, key=lambda r: r["measured_step_s_drift_corrected"])
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
                                       "after": stats("error_after"),
                                       "after_drift_corrected":
                                           stats("error_after_drift_corrected")},
        "drift": {
            "reference": ref.key, "runs": reference,
            "spread": (max(r["step_s"] for r in reference) - min(r["step_s"] for r in reference))
            / ref_median,
            "best_in_all_pass_drift_corrected": best_corr["candidate"],
            "winner_vs_best_drift_corrected": (
                win_row["measured_step_s_drift_corrected"]
                / best_corr["measured_step_s_drift_corrected"] - 1) if win_row else None,
        },
        "calibration_notes": cal.notes if cal else [],
        "rows": rows,
    }
    from bench.write import write_result

    write_result("tune", doc)
    return doc


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
