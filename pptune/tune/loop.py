"""The tune loop: measure the candidate that may win, calibrate, drop the ones that cannot.

Order of work (no torch here: ``run_trial`` is given, so tests can pass a
fake one):

1. every candidate is priced over the profile as given ("before");
2. trials already in the journal (``--resume``) are taken as measured;
3. while runnable candidates remain: calibrate from every trial so far,
   price the rest over the calibrated profile ("after"; for a candidate that
   is then run, this is a held-out prediction: no trial of its own went
   into it), drop those the pruning rule rules out (``candidates.prune``;
   every drop is judged again after each trial, since the best measured
   plan's step moves with the calibration: a contention measured by a later
   trial stretches the plans whose replicas share this host),
   stop at ``max_trials`` or when the budget cannot hold another trial
   (elapsed plus the longest trial so far), else run the fastest-predicted
   one (a trial whose steps spread by more than ``RETRY_SPREAD`` runs once
   more, the quieter run counts) and append its line to the journal at once;
4. a trial that fails (a rank dies, hangs, torch refuses) is journaled as
   failed and ends the loop with ``TrialFailed``: the lines written stay.

The budget bounds the trials' wall time: ``run_trial`` is given the seconds
left of it and stops its run there (``TimeLimit``: the trial's processes
ended); that trial is journaled as failed, not measured, and the loop ends as
when the budget is spent (a first trial has no earlier one to size it by, and
a trial may run longer than the longest before it).

Every figure is for one pipeline, as measured; a plan with data
parallelism (dp > 1) adds its predicted all-reduce (``Row.extra_s``, the
planner's step minus its one-pipeline prediction) when plans are ranked,
pruned and the winner chosen: the measured trial with the shortest step.

Plans that differ only in what a trial does not run (the sharding of their
data-parallel state: zero1, zero2, zero3, fsdp) run the same pipeline: it
is measured once (``_share``), and its variants carry that one measurement
(``Row.measured_with``) and rank among themselves by their predicted
data-parallel time alone, never by the noise between launches of one
pipeline. A pipeline measured more than once (a journal from before this
rule) counts the median of its trials.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from pptune.errors import PptuneError, RunFailed, TimeLimit
from pptune.schemas import Profile
from pptune.tune import candidates as cands
from pptune.tune import journal, model
from pptune.tune.model import Calibration, Trial


class Status(StrEnum):
    """What became of a candidate (the journal's and --json's ``status``)."""

    MEASURED = "measured"
    FAILED = "failed"
    PRUNED = "pruned"
    SKIPPED = "skipped"
    NOT_RUN = "not run"


MEASURED, FAILED, PRUNED, SKIPPED, NOT_RUN = tuple(Status)
# A trial whose timed steps spread (max - min) by more than this share of
# their median is run once more and the quieter run kept: CPU step times
# carry 2-10% noise with rare bursts of +35-50% from other load
# (docs/measured.md, run-to-run noise; bench/accuracy.py applies the same
# rule). It looks at the run's noise, never at its error.
RETRY_SPREAD = 0.25


class TrialFailed(RunFailed):
    """A trial's run failed (exit 1); the journal keeps the trials before it."""


@dataclass
class Row:
    """A candidate's figures, all for one pipeline; ``extra_s`` is the rest of its plan."""

    cand: cands.Candidate
    before_s: float  # over the profile as given
    extra_s: float = 0.0  # the plan's predicted step minus one pipeline's (dp all-reduce)
    status: str = NOT_RUN
    after_s: float | None = None  # over the calibrated profile (held out when measured)
    measured_s: float | None = None
    reason: str = ""
    trial: Trial | None = None
    resumed: bool = False
    wall_s: float | None = None
    calibrated_from: tuple[str, ...] = ()
    retried: bool = False
    # the candidate whose trial measured this one's pipeline (None: its own, or none)
    measured_with: str | None = None
    # the pipeline's measured step over every trial of it (None: its own measured_s)
    pipeline_s: float | None = None


@dataclass(frozen=True)
class Limits:
    max_trials: int
    budget_s: float


@dataclass
class Outcome:
    rows: list[Row]
    calibration: Calibration | None
    calibrated: Profile | None
    stopped: str
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def winner(self) -> Row | None:
        done = [r for r in self.rows if r.status == MEASURED and r.measured_s is not None]
        f = self.calibration.contention if self.calibration is not None else None
        return min(done, key=lambda r: plan_step_s(r, f)) if done else None


def plan_step_s(row: Row, contention: float | None, pipeline_s: float | None = None) -> float:
    """The whole plan's step from one pipeline's (measured, else predicted; or given).

    Plus ``extra_s``; where the plan's dp replicas would share this host's
    cores (``Candidate.shares_host``) the pipeline runs ``contention`` times
    as long: every op overlaps another replica's (processor sharing, o = 1).
    """
    if pipeline_s is None:
        pipeline_s = row.pipeline_s if row.pipeline_s is not None else (
            row.measured_s if row.measured_s is not None else (
                row.after_s if row.after_s is not None else row.before_s))
    stretch = max(1.0, contention) if row.cand.shares_host and contention else 1.0
    return pipeline_s * stretch + row.extra_s


class Progress(Protocol):
    """What the loop reports as it goes (the CLI draws a bar)."""

    def trial_started(self, n: int, limit: int, key: str, elapsed_s: float) -> None: ...

    def trial_done(self, n: int, row: Row, elapsed_s: float) -> None: ...


class Silent:
    def trial_started(self, n: int, limit: int, key: str, elapsed_s: float) -> None:
        pass

    def trial_done(self, n: int, row: Row, elapsed_s: float) -> None:
        pass


# run one trial of the candidate within the seconds given (the budget left): TimeLimit
# when it stops there
RunTrial = Callable[[cands.Candidate, float], Trial]


def run(
    profile: Profile,
    candidates: list[cands.Candidate],
    run_trial: RunTrial,
    limits: Limits,
    journal_path: Path | None,
    resumed: list[dict[str, Any]] | None = None,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    progress = progress or Silent()
    rows = []
    for c in candidates:
        # a skipped candidate is never run: its figure is the plan's own (validate's
        # predictor cannot price every plan recommend makes, e.g. dualpipe)
        before = float(c.plan.step_time_s) if c.skip else model.predict(profile, c.spec)
        extra = max(0.0, float(c.plan.step_time_s) - before) if c.plan.dp > 1 else 0.0
        rows.append(Row(c, before, extra))
    by_key = {r.cand.key: r for r in rows}
    notes = _skip_and_resume(rows, by_key, resumed or [])
    _share(rows)
    t0 = clock()
    walls = [r.wall_s for r in rows if r.wall_s]
    stopped = "every candidate was measured or ruled out"
    cal: Calibration | None = None
    calibrated: Profile | None = None
    while True:
        trials = _trials(rows)
        if trials:
            cal, calibrated = _calibrate(profile, trials)
            _reprice_and_prune(rows, calibrated, cal)
        pending = sorted(
            (r for r in rows if r.status == NOT_RUN and not r.reason),
            key=lambda r: (plan_step_s(r, cal.contention if cal else None), r.cand.rank),
        )
        if not pending:
            break
        elapsed = clock() - t0
        if len(trials) >= limits.max_trials:
            stopped = f"--max-trials {limits.max_trials} reached"
            _mark(pending, stopped)
            break
        longest = max(walls, default=0.0)
        if elapsed >= limits.budget_s or elapsed + longest > limits.budget_s:
            stopped = (f"--budget {limits.budget_s:g} s: {elapsed:.0f} s spent, a trial takes "
                       f"up to {longest:.0f} s")
            _mark(pending, "the --budget was spent")
            break
        row = pending[0]
        row.calibrated_from = tuple(t.key for t in trials)
        progress.trial_started(len(trials) + 1, limits.max_trials, row.cand.key, elapsed)
        cut = _run_one(row, run_trial, journal_path, clock, t0 + limits.budget_s)
        _share(rows)
        walls.append(row.wall_s or 0.0)
        progress.trial_done(len(trials) + 1, row, clock() - t0)
        if cut:
            stopped = (f"--budget {limits.budget_s:g} s: trial #{row.cand.rank} was stopped "
                       f"at it, {clock() - t0:.0f} s spent")
            _mark([r for r in rows if r.status == NOT_RUN and not r.reason],
                  "the --budget was spent")
            break
    if cal is None and _trials(rows):
        cal, calibrated = _calibrate(profile, _trials(rows))
    return Outcome(rows, cal, calibrated, stopped, clock() - t0, notes)


def _skip_and_resume(rows: list[Row], by_key: dict[str, Row],
                     resumed: list[dict[str, Any]]) -> list[str]:
    for r in rows:
        if r.cand.skip:
            r.status, r.reason = SKIPPED, r.cand.skip
    notes = []
    for rec in resumed:
        row = by_key.get(str(rec.get("key")))
        if rec.get("status") != MEASURED:
            continue
        if row is None:
            notes.append(f"--resume: trial {rec.get('key')!r} is not among this search's "
                         "candidates; its measurement still calibrates")
            continue
        row.status, row.resumed, row.trial = MEASURED, True, journal.trial_of(rec)
        row.measured_s = row.trial.measured_s
        row.after_s = rec.get("predicted_after_s")
        row.wall_s = rec.get("wall_s")
        row.calibrated_from = tuple(rec.get("calibrated_from") or ())
    return notes


def _share(rows: list[Row]) -> None:
    """Each measured pipeline's step for every candidate that runs it (module docstring):
    the median of its trials, and the candidates not run yet measured with it."""
    groups: dict[Any, list[Row]] = {}
    for r in rows:
        if not r.cand.skip:
            groups.setdefault(r.cand.spec, []).append(r)
    for group in groups.values():
        ran = [r for r in group if _ran(r)]
        if not ran:
            continue
        pipeline = statistics.median(r.measured_s for r in ran if r.measured_s is not None)
        for r in group:
            if _ran(r):
                r.pipeline_s = pipeline if len(ran) > 1 else None
            elif r.status == NOT_RUN and not r.reason:
                first = ran[0]
                r.status, r.measured_s, r.trial = MEASURED, pipeline, first.trial
                r.measured_with, r.pipeline_s = first.cand.key, pipeline
                r.reason = (f"the same pipeline as #{first.cand.rank}, measured once: "
                            "its sharding is predicted, not run")


def _ran(row: Row) -> bool:
    """A trial of the row's own measured it (not another candidate's)."""
    return row.status == MEASURED and row.trial is not None and row.measured_with is None


def _trials(rows: list[Row]) -> list[Trial]:
    return [r.trial for r in rows if _ran(r) and r.trial is not None]


def _calibrate(profile: Profile, trials: list[Trial]) -> tuple[Calibration, Profile]:
    cal = model.calibrate(profile, trials)
    return cal, model.calibrated_profile(profile, cal)


def _reprice_and_prune(rows: list[Row], calibrated: Profile, cal: Calibration) -> None:
    f = cal.contention
    measured = [r for r in rows if _ran(r)]
    best = min((r for r in rows if r.status == MEASURED and r.trial is not None),
               key=lambda r: plan_step_s(r, f))
    bounds = {}
    for r in rows:
        if r.status == PRUNED:  # judged again: the best plan's step moves with the calibration
            r.status, r.reason = NOT_RUN, ""
        if r.status != NOT_RUN or r.reason:
            continue
        loss = cal.loss_for(r.cand.spec.micro_batch_size)
        r.after_s = model.predict(calibrated, r.cand.spec, loss, f)
        lb = cands.lower_bound_s(calibrated, r.cand.spec, loss)
        bounds[r.cand.key] = plan_step_s(r, f, lb)
    by_key = {r.cand.key: r for r in rows}
    noise = best.trial.noise if best.trial is not None else 0.0
    held = [abs(error(r.after_s, r.measured_s) or 0.0) for r in measured if r.after_s is not None]
    seen_error = statistics.median(held) if held else 0.0
    for verdict in cands.prune(bounds, plan_step_s(best, f), noise, seen_error):
        if verdict.dropped:
            row = by_key[verdict.key]
            row.status, row.reason = PRUNED, verdict.reason()


def _mark(rows: list[Row], reason: str) -> None:
    for r in rows:
        r.reason = reason


def _run_one(row: Row, run_trial: RunTrial, journal_path: Path | None,
             clock: Callable[[], float], deadline: float) -> bool:
    """Run the row's trial (and its retry) before ``deadline`` (``clock`` time); True when
    the budget stopped it before a result (module docstring)."""
    start = clock()
    try:
        trial = run_trial(row.cand, deadline - start)
        if 2 * trial.noise > RETRY_SPREAD:
            try:
                again = run_trial(row.cand, deadline - clock())
            except TimeLimit:  # the first run stands
                again = trial
            row.retried = again is not trial
            trial = min(trial, again, key=lambda t: t.noise)
    except TimeLimit as exc:
        row.status, row.wall_s = FAILED, clock() - start
        row.reason = f"stopped at the --budget after {row.wall_s:.0f} s, before a result ({exc})"
        if journal_path is not None:
            journal.append(journal_path, record(row))
        return True
    except PptuneError as exc:
        row.status, row.reason, row.wall_s = FAILED, str(exc), clock() - start
        if journal_path is not None:
            journal.append(journal_path, record(row))
        raise TrialFailed(f"tune: trial {row.cand.key!r} failed: {exc}") from None
    row.status, row.trial, row.measured_s = MEASURED, trial, trial.measured_s
    row.wall_s = clock() - start
    if journal_path is not None:
        journal.append(journal_path, record(row))
    return False


def error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured <= 0:
        return None
    return (predicted - measured) / measured


def record(row: Row) -> dict[str, Any]:
    """The journal line of a trial (measured or failed)."""
    c = row.cand
    rec: dict[str, Any] = {
        "key": c.key, "status": row.status, "planner_rank": c.rank,
        "schedule": c.plan.schedule.value, "pp": c.plan.pp, "dp": c.plan.dp,
        "virtual_stages": c.plan.virtual_stages, "micro_batch_size": c.plan.micro_batch_size,
        "num_microbatches": c.plan.num_microbatches, "stage_layers": list(c.plan.stage_layers),
        "predicted_before_s": row.before_s, "predicted_after_s": row.after_s,
        "plan_extra_s": row.extra_s, "retried": row.retried,
        "calibrated_from": list(row.calibrated_from), "wall_s": row.wall_s, "note": c.note,
    }
    if row.measured_with is not None:  # another candidate's trial measured its pipeline
        rec.update(measured_with=row.measured_with, measured_step_s=row.measured_s,
                   reason=row.reason)
    elif row.trial is not None:
        rec.update(journal.trial_record(row.trial))
        rec["error_before"] = error(row.before_s, row.measured_s)
        rec["error_after"] = error(row.after_s, row.measured_s)
    else:
        rec["reason"] = row.reason
    return rec


def accounting(rows: list[Row]) -> dict[str, Any]:
    """|step error| before and after calibration over the held-out trials.

    A trial counts when it was predicted from a calibration it had no part in
    (every measured trial but the first); the first has only "before".
    """
    held = [r for r in rows if r.status == MEASURED and r.measured_with is None
            and r.after_s is not None]
    before = [abs(error(r.before_s, r.measured_s) or 0.0) for r in held]
    after = [abs(error(r.after_s, r.measured_s) or 0.0) for r in held]

    def stats(xs: list[float]) -> dict[str, float | None]:
        return {"median": statistics.median(xs) if xs else None, "worst": max(xs) if xs else None}

    return {"held_out_trials": len(held), "before": stats(before), "after": stats(after)}
