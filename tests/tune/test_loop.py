"""The tune loop with a fake runner: pruning, limits, journal, resume (no torch)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from tune_helpers import MS, candidate, profile

from pptune.errors import BadInput
from pptune.tune import artifacts, journal, loop
from pptune.tune import candidates as cands
from pptune.tune.model import Trial

# two layers: F 1 ms, B 2 ms each
BASE = profile([1.0, 1.0], [2.0, 2.0])


class FakeRunner:
    """Measures exactly what the profile says (factor ``speed``), and records who ran."""

    def __init__(self, speed: float = 1.0, fail: set[str] | None = None,
                 steps_ms: tuple[float, ...] | None = None) -> None:
        self.speed = speed
        self.fail = fail or set()
        self.steps_ms = steps_ms
        self.ran: list[str] = []

    def __call__(self, c: cands.Candidate, left_s: float = float("inf")) -> Trial:
        self.ran.append(c.key)
        if c.key in self.fail:
            raise BadInput("validate: rank 1 of 2 exited with code 3 without a result")
        s = c.spec
        f = self.speed * sum(1.0 for _ in range(s.stage_layers[0])) * MS
        b = self.speed * 2.0 * s.stage_layers[0] * MS
        step = (f + b) * s.microbatches
        steps = tuple(x * MS for x in self.steps_ms) if self.steps_ms else (step,)
        return Trial(c.key, s.schedule, s.pp, s.microbatches, s.virtual_stages,
                     s.micro_batch_size, s.stage_layers, steps, {("F", 0): f, ("B", 0): b})


def one_rank(rank: int, schedule: str, m: int) -> cands.Candidate:
    return candidate(rank, schedule, 1, m, [2])


def test_a_candidate_whose_lower_bound_is_slower_is_never_run() -> None:
    # gpipe m=2 on one rank: 2 x (2 + 4) = 12 ms. 1f1b m=2 has the same bound (12 ms, not
    # above 12 ms + 0 noise): it is run. gpipe m=8: bound 48 ms > 12 ms: never run.
    fast, tie, slow = one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2), one_rank(3, "gpipe", 8)
    runner = FakeRunner()
    out = loop.run(BASE, [slow, fast, tie], runner, loop.Limits(10, 1e9), None)
    assert runner.ran == [fast.key, tie.key]
    rows = {r.cand.key: r for r in out.rows}
    assert rows[slow.key].status == loop.PRUNED
    assert rows[slow.key].reason == ("calibrated lower bound 48.0 ms > best measured plan 12.0 ms "
                                     "+ 0.0% noise + 0.0% prediction error: cannot win")
    assert rows[fast.key].measured_s == pytest.approx(12 * MS)
    assert out.winner is not None and out.winner.cand.key == fast.key
    assert out.stopped == "every candidate was measured or ruled out"


def test_prune_keeps_bounds_within_the_noise_and_the_prediction_error() -> None:
    verdicts = {v.key: v.dropped for v in cands.prune({"a": 1.05, "b": 1.11}, 1.0, 0.1)}
    assert verdicts == {"a": False, "b": True}
    # 10% noise + 20% error seen on held-out trials: only a bound past 1.3 goes
    verdicts = {v.key: v.dropped for v in cands.prune({"a": 1.29, "b": 1.31}, 1.0, 0.1, 0.2)}
    assert verdicts == {"a": False, "b": True}


def test_a_held_out_miss_widens_the_margin() -> None:
    # two trials resumed: both measured 13 ms (ops as profiled, 1 ms of overhead), the
    # second predicted at 6.5 ms from the first: a 50% miss. gpipe m=3's bound, 18 ms,
    # is above 13 ms but within 13 ms x (1 + 50%): it is run, not dropped.
    a, b, c = one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2), one_rank(3, "gpipe", 3)
    records = []
    for cand, after in ((a, None), (b, 6.5 * MS)):
        s = cand.spec
        t = Trial(cand.key, s.schedule, 1, 2, 1, 1, (2,), (13 * MS,),
                  {("F", 0): 2 * MS, ("B", 0): 4 * MS})
        records.append(loop.record(loop.Row(cand, 12 * MS, status=loop.MEASURED, after_s=after,
                                             measured_s=13 * MS, trial=t)))
    runner = FakeRunner()
    loop.run(BASE, [a, b, c], runner, loop.Limits(10, 1e9), None, resumed=records)
    assert runner.ran == [c.key]
    # without that miss the same bound is dropped
    records[1]["predicted_after_s"] = 13 * MS
    runner = FakeRunner()
    out = loop.run(BASE, [a, b, c], runner, loop.Limits(10, 1e9), None, resumed=records)
    assert runner.ran == [] and out.rows[2].status == loop.PRUNED


def test_max_trials_stops_and_says_so() -> None:
    cs = [one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2)]
    runner = FakeRunner()
    out = loop.run(BASE, cs, runner, loop.Limits(1, 1e9), None)
    assert len(runner.ran) == 1
    assert out.stopped == "--max-trials 1 reached"
    assert [r.status for r in out.rows].count(loop.NOT_RUN) == 1


def test_budget_stops_before_a_trial_that_would_not_fit() -> None:
    ticks = iter([0.0, 0.0, 0.0, 40.0, 40.0, 40.0, 40.0])  # the first trial takes 40 s
    cs = [one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2)]
    runner = FakeRunner()
    out = loop.run(BASE, cs, runner, loop.Limits(10, 60.0), None, clock=lambda: next(ticks))
    assert len(runner.ran) == 1  # 40 s spent + a 40 s trial > 60 s
    assert out.stopped.startswith("--budget 60 s: 40 s spent")


def test_skipped_candidates_say_why() -> None:
    deep = candidate(1, "1f1b", 4, 4, [1, 1, 1, 1])
    assert deep.skip == "pp=4 needs 4 local devices, one rank each; this machine offers 2"
    tp = candidate(2, "1f1b", 1, 2, [2], tp=2)
    assert tp.skip is not None and tp.skip.startswith("tp=2: tune runs no tensor parallelism")
    bad = candidate(3, "1f1b", 2, 1, [1, 1])
    assert bad.skip is not None and "1f1b needs at least as many micro-batches" in bad.skip
    dp = candidate(4, "1f1b", 1, 2, [2], dp=2)
    assert dp.skip is None and dp.shares_host
    assert dp.note is not None and dp.note.startswith("dp=2: one pipeline measured")
    four = profile([1.0] * 4, [2.0] * 4)
    out = loop.run(four, [deep, tp], FakeRunner(), loop.Limits(10, 1e9), None)
    assert [r.status for r in out.rows] == [loop.SKIPPED, loop.SKIPPED]
    assert out.winner is None


def test_a_plan_torch_cannot_run_is_skipped_with_the_plans_own_step() -> None:
    # dualpipe (pp 2, two model chunks) has no torch runtime: validate's predictor
    # cannot price it, so the skipped row keeps the planner's 0.5 s
    dual = candidate(1, "dualpipe", 2, 4, [1, 1], step_s=0.5)
    assert dual.skip is not None and dual.skip.startswith("torch cannot run it")
    out = loop.run(BASE, [dual, one_rank(2, "1f1b", 2)], FakeRunner(), loop.Limits(10, 1e9), None)
    assert [r.status for r in out.rows] == [loop.SKIPPED, loop.MEASURED]
    assert out.rows[0].before_s == 0.5


def test_noisy_trial_runs_again_and_the_quieter_counts() -> None:
    runner = FakeRunner(steps_ms=(10.0, 14.0))  # spread 40% > 25%
    out = loop.run(BASE, [one_rank(1, "gpipe", 2)], runner, loop.Limits(10, 1e9), None)
    assert len(runner.ran) == 2 and out.rows[0].retried


def test_journal_line_per_trial_and_resume_after_a_failed_trial(tmp_path: Path) -> None:
    path = tmp_path / journal.FILE
    a, b = one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2)
    with pytest.raises(loop.TrialFailed, match="trial '1f1b pp1 dp1 b1 m2 split 2' failed"):
        loop.run(BASE, [a, b], FakeRunner(fail={b.key}), loop.Limits(10, 1e9), path)
    records, _ = journal.load(path)
    assert [(r["key"], r["status"]) for r in records] == [(a.key, "measured"), (b.key, "failed")]
    assert records[1]["reason"].startswith("validate: rank 1 of 2 exited")
    # resume: the measured trial is kept, the failed one runs again
    runner = FakeRunner()
    out = loop.run(BASE, [a, b], runner, loop.Limits(10, 1e9), path, resumed=records)
    assert runner.ran == [b.key]
    assert {r.cand.key: r.resumed for r in out.rows} == {a.key: True, b.key: False}
    assert len(journal.load(path)[0]) == 3


def test_a_torn_last_line_is_ignored_but_a_bad_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / journal.FILE
    good = json.dumps({"key": "k", "status": "failed"})
    path.write_text(good + "\n" + '{"key": "x", "sta')
    records, notes = journal.load(path)
    assert len(records) == 1 and "incomplete (interrupted while writing): ignored" in notes[0]
    path.write_text('{"key": \n' + good + "\n")
    with pytest.raises(BadInput, match="line 1 is not a tune record"):
        journal.load(path)


def test_accounting_counts_held_out_trials_only() -> None:
    a, b = one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2)
    first = loop.Row(a, before_s=10.0, status=loop.MEASURED, measured_s=8.0)
    second = loop.Row(b, before_s=12.0, status=loop.MEASURED, after_s=9.9, measured_s=9.0)
    acc = loop.accounting([first, second])
    assert acc["held_out_trials"] == 1
    assert acc["before"]["median"] == pytest.approx(1 / 3)
    assert acc["after"]["worst"] == pytest.approx(0.1)


def test_dp_plans_add_their_all_reduce_and_host_sharing() -> None:
    dp = candidate(1, "1f1b", 1, 2, [2], dp=2)
    row = loop.Row(dp, before_s=1.0, extra_s=0.25, measured_s=2.0)
    assert loop.plan_step_s(row, None) == 2.25
    assert loop.plan_step_s(row, 1.5) == 3.25  # 2 x 1.5 + 0.25
    assert loop.plan_step_s(row, 1.5, pipeline_s=1.0) == 1.75


def test_the_table_and_the_lines_name_the_winner_and_every_drop() -> None:
    from rich.console import Console

    from pptune.report.tune import accounting_line, trials_table, why_lines

    fast, slow = one_rank(1, "gpipe", 2), one_rank(3, "gpipe", 8)
    out = loop.run(BASE, [fast, slow], FakeRunner(), loop.Limits(10, 1e9), None)
    console = Console(width=200, no_color=True, record=True)
    console.print(trials_table(out.rows, fast.key, lambda r: loop.plan_step_s(r, None)))
    text = console.export_text()
    assert "gpipe pp1 dp1 b1 m2 split 2" in text and "WINNER" in text and "pruned" in text
    assert "(resumed)" not in text
    # the winner kept from an earlier run keeps its mark
    resumed = [replace(r, resumed=r.cand.key == fast.key) for r in out.rows]
    console.print(trials_table(resumed, fast.key, lambda r: loop.plan_step_s(r, None)))
    assert "WINNER (resumed)" in console.export_text()
    lines = why_lines(out.rows, out.winner, out.stopped, lambda r: loop.plan_step_s(r, None))
    assert lines[0].startswith("winner: #1 gpipe pp1 dp1 b1 m2 split 2: measured 12.0 ms")
    assert lines[1].startswith("#3 pruned: calibrated lower bound 48.0 ms")
    assert accounting_line(loop.accounting(out.rows)).startswith(
        "prediction error on held-out trials: none yet")


def test_every_status_is_a_word_the_journal_keeps() -> None:
    assert [str(s) for s in loop.Status] == ["measured", "failed", "pruned", "skipped", "not run"]
    for status in loop.Status:
        assert json.loads(json.dumps({"status": status}))["status"] == status.value


def test_a_calibration_that_predicts_held_out_trials_worse_is_not_kept() -> None:
    """Leave-one-out is the calibration's check: where the held-out trials' median |step
    error| after calibration exceeds the one before (a trial saw 18.1% -> 51.0% on a
    loaded host), the calibration is refused, with the figures; none held out, or as
    good or better, it is kept."""
    a, b, c = one_rank(1, "gpipe", 2), one_rank(2, "1f1b", 2), one_rank(3, "1f1b", 4)
    first = loop.Row(a, before_s=10.0, status=loop.MEASURED, measured_s=8.0)
    assert artifacts.calibration_refusal(loop.accounting([first])) is None
    # before: 12 vs 9 (33.3%); after: 13.5 vs 9 (50.0%)
    worse = loop.Row(b, before_s=12.0, status=loop.MEASURED, after_s=13.5, measured_s=9.0)
    said = artifacts.calibration_refusal(loop.accounting([first, worse]))
    assert said == ("calibration not kept: on 1 held-out trial it predicts the step worse "
                    "than the profile as given (median |step error| 50.0% against 33.3%); "
                    "pptune-profile.json not written")
    better = loop.Row(c, before_s=12.0, status=loop.MEASURED, after_s=9.9, measured_s=9.0)
    assert artifacts.calibration_refusal(loop.accounting([first, better])) is None
