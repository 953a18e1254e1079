"""Plans that run one pipeline (they differ in sharding only) are measured once (no torch)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console
from test_loop import BASE, FakeRunner
from tune_helpers import MS, plan, settings

from pptune.report.tune import trials_table, why_lines
from pptune.tune import candidates as cands
from pptune.tune import journal, loop
from pptune.tune.model import Trial


def sharded(rank: int, sharding: str, step_ms: float) -> cands.Candidate:
    """1f1b pp1 dp2 m2 over two layers (F 1 ms, B 2 ms each: 12 ms one pipeline), its
    whole plan priced by the planner at ``step_ms``."""
    p = plan("1f1b", 1, 2, [2], step_s=step_ms * MS, dp=2)
    p.sharding = SimpleNamespace(value=sharding)
    return cands.candidate(p, rank, n_layers=2, local_devices=2, run=settings())


# the planner's steps: the one pipeline's 12 ms plus each sharding's predicted dp time
ZERO2, FSDP, ZERO3 = sharded(1, "zero2", 13.0), sharded(2, "fsdp", 14.0), sharded(3, "zero3", 15.0)


def test_one_pipeline_is_measured_once_and_its_shardings_rank_by_prediction(
        tmp_path: Path) -> None:
    runner = FakeRunner()
    path = tmp_path / journal.FILE
    out = loop.run(BASE, [ZERO3, ZERO2, FSDP], runner, loop.Limits(10, 1e9), path)
    assert runner.ran == [ZERO2.key]  # the fastest predicted; the others run the same
    rows = {r.cand.key: r for r in out.rows}
    assert [rows[c.key].measured_with for c in (ZERO2, FSDP, ZERO3)] == [None, ZERO2.key,
                                                                          ZERO2.key]
    assert all(rows[c.key].measured_s == pytest.approx(12 * MS) for c in (ZERO2, FSDP, ZERO3))
    # the trial's contention is unknown (pp 1): no stretch; 12 ms + 1, 2 and 3 ms
    steps = [loop.plan_step_s(rows[c.key], None) for c in (ZERO2, FSDP, ZERO3)]
    assert steps == pytest.approx([13 * MS, 14 * MS, 15 * MS])
    assert out.winner is not None and out.winner.cand.key == ZERO2.key
    # one trial calibrates, one journal line, none held out
    assert out.calibration is not None and len(out.calibration.sources) == 1
    records, _ = journal.load(path)
    assert [r["key"] for r in records] == [ZERO2.key]
    assert loop.accounting(out.rows)["held_out_trials"] == 0
    shared = loop.record(rows[FSDP.key])
    assert shared["measured_with"] == ZERO2.key and shared["measured_step_s"] == 12 * MS
    assert "ops" not in shared  # the trial is the other candidate's
    lines = why_lines(out.rows, out.winner, out.stopped, lambda r: loop.plan_step_s(r, None))
    assert lines[2] == ("  note: #1, #2, #3 run this one pipeline, measured once; they differ "
                        "in what the trial does not run (the data-parallel state's sharding), "
                        "so they are ranked by its predicted time, not measured")
    assert "#2 measured with #1 (the same pipeline; its sharding predicted): plan step 14.0 ms, "\
           "+7.7% against the winner" in lines
    console = Console(width=200, no_color=True, record=True)
    console.print(trials_table(out.rows, ZERO2.key, lambda r: loop.plan_step_s(r, None)))
    table = console.export_text()
    assert "WINNER" in table and table.count("measured (with #1)") == 2


def test_a_journal_with_one_pipeline_measured_thrice_ranks_by_prediction_on_its_median() -> None:
    # an older tune ran the pipeline three times: 20, 10 and 12 ms. The noise between
    # those launches no longer ranks the shardings: every one is priced at the median
    # 12 ms plus its predicted dp time, and zero2 (the least) wins, not the 10 ms launch
    records = []
    for cand, ms in ((ZERO2, 20.0), (FSDP, 10.0), (ZERO3, 12.0)):
        s = cand.spec
        t = Trial(cand.key, s.schedule, 1, 2, 1, 1, (2,), (ms * MS,),
                  {("F", 0): 2 * MS, ("B", 0): 4 * MS})
        records.append(loop.record(loop.Row(cand, 12 * MS, status=loop.MEASURED,
                                            measured_s=ms * MS, trial=t)))
    runner = FakeRunner()
    out = loop.run(BASE, [ZERO2, FSDP, ZERO3], runner, loop.Limits(10, 1e9), None,
                   resumed=records)
    assert runner.ran == []
    rows = {r.cand.key: r for r in out.rows}
    assert [rows[c.key].measured_s for c in (ZERO2, FSDP, ZERO3)] == pytest.approx(
        [20 * MS, 10 * MS, 12 * MS])  # each trial's own figure stays in its row
    assert [loop.plan_step_s(rows[c.key], None) for c in (ZERO2, FSDP, ZERO3)] == \
        pytest.approx([13 * MS, 14 * MS, 15 * MS])
    assert out.winner is not None and out.winner.cand.key == ZERO2.key


def test_a_drop_is_judged_again_when_the_best_plans_step_moves() -> None:
    # after a pp 1 trial (12 ms, no contention measured) gpipe m=3 (bound 18 ms) and m=8
    # (48 ms) were dropped; a later trial measures a contention of 3: the dp 2 winner's
    # replicas share this host, its plan step is now 12 x 3 = 36 ms, and m=3 may win again
    dp = sharded(1, "zero1", 12.0)
    s = dp.spec
    trial = Trial(dp.key, s.schedule, 1, 2, 1, 1, (2,), (12 * MS,),
                  {("F", 0): 2 * MS, ("B", 0): 4 * MS})
    best = loop.Row(dp, 12 * MS, status=loop.MEASURED, measured_s=12 * MS, trial=trial)
    m3, m8 = (cands.candidate(plan("gpipe", 1, m, [2]), r, n_layers=2, local_devices=2,
                              run=settings()) for r, m in ((2, 3), (3, 8)))
    rows = [best, loop.Row(m3, 18 * MS, status=loop.PRUNED, reason="old"),
            loop.Row(m8, 48 * MS, status=loop.PRUNED, reason="old")]
    cal = SimpleNamespace(contention=3.0, loss_for=lambda b: None)
    loop._reprice_and_prune(rows, BASE, cal)  # type: ignore[arg-type]
    assert (rows[1].status, rows[1].reason) == (loop.NOT_RUN, "")
    assert rows[2].status == loop.PRUNED and rows[2].reason == (
        "calibrated lower bound 48.0 ms > best measured plan 36.0 ms + 0.0% noise + 0.0% "
        "prediction error: cannot win")
