"""Before and during the trials: a candidate this host's memory cannot hold is skipped
(none left: refused before any trial), and --budget bounds each trial's wall time
(no torch; the host's free memory is given, never read or allocated)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_loop import BASE, FakeRunner
from tune_helpers import candidate

from pptune.costmodel.presets import MODELS
from pptune.errors import BadInput, TimeLimit
from pptune.tune import candidates as cands
from pptune.tune import journal, loop, session
from pptune.tune.model import Trial

# the tiny GPT of tests/validate/test_host_fit.py: 1,824 parameters over 4 layers
TINY = replace(MODELS["gpt-small"], name="tiny", num_blocks=2, hidden=8, heads=2, kv_heads=2,
               ffn=32, vocab=16, seq_len=4, kv_channels=0)
# 1f1b pp 2, 4 micro-batches of 1 (split 2, 2): weights and gradients 14,592 B; buffers
# 2 x 4 x (1 x 4 x 8 x 4 = 128) = 1,024; kept 32 + 128; batches 2 x 2 x 4 x 4 x 8 = 512:
# 16,288 B. 1f1b pp 1, 2 micro-batches: 14,592 + 32 + 2 x 2 x 4 x 8 = 14,752 B.
TWO_RANKS, ONE_RANK = 16288, 14752


def candidates() -> list[cands.Candidate]:
    return [candidate(1, "1f1b", 2, 4, [2, 2]), candidate(2, "1f1b", 1, 2, [4])]


def test_a_candidate_over_the_hosts_free_memory_is_skipped_with_the_reason() -> None:
    two, one = session.fit_host(candidates(), TINY, 4, TWO_RANKS - 1)
    assert two.skip is not None and one.skip is None
    assert two.skip.startswith("trial '1f1b pp2 dp1 b1 m4 split 2,2' would hold at least "
                               "15.91 KiB of this host's memory at once")
    assert "more than the 15.91 KiB it has free (MemAvailable); run the tune on a GPU host" in (
        two.skip)
    # enough for both, or unknown (MemAvailable unreadable): nothing skipped
    for available in (TWO_RANKS, None):
        assert [c.skip for c in session.fit_host(candidates(), TINY, 4, available)] == [
            None, None]


def test_tune_refuses_when_no_candidate_fits_before_any_trial() -> None:
    with pytest.raises(BadInput) as err:
        session.fit_host(candidates(), TINY, 4, ONE_RANK - 1)
    line = str(err.value)
    assert line.startswith("tune: none of the candidates fits this host's memory; the "
                           "smallest: trial '1f1b pp1 dp1 b1 m2 split 4' would hold at least "
                           "14.41 KiB")
    assert line.endswith("for a dry run here, a smaller --model (gpt-small is the CPU demo "
                         "size)")
    assert "\n" not in line


class SlowRunner(FakeRunner):
    """A trial of ``took_s`` seconds: stopped (TimeLimit) when the budget left is shorter."""

    def __init__(self, took_s: float) -> None:
        super().__init__()
        self.took_s = took_s
        self.lefts: list[float] = []

    def __call__(self, c: cands.Candidate, left_s: float = float("inf")) -> Trial:
        self.lefts.append(left_s)
        if self.took_s > left_s:
            raise TimeLimit(f"0 of 1 rank(s) done at its limit of {left_s:.0f} s; every rank "
                            "was ended")
        return super().__call__(c, left_s)


def test_the_budget_stops_a_first_trial_that_would_overrun_it(tmp_path: Path) -> None:
    """A 30 s budget and an 80 s trial (the user's, before its OOM): the trial is given
    the 30 s, stopped there, journaled as failed; no other trial starts."""
    path = tmp_path / journal.FILE
    ticks = iter([0.0, 0.0, 0.0, 30.0, 30.0, 30.0, 30.0])
    runner = SlowRunner(80.0)
    out = loop.run(BASE, [candidate(1, "gpipe", 1, 2, [2]), candidate(2, "1f1b", 1, 2, [2])],
                   runner, loop.Limits(8, 30.0), path, clock=lambda: next(ticks))
    assert runner.lefts == [30.0]
    first, second = out.rows
    assert first.status == loop.FAILED and first.wall_s == 30.0
    assert first.reason == ("stopped at the --budget after 30 s, before a result (0 of 1 "
                            "rank(s) done at its limit of 30 s; every rank was ended)")
    assert (second.status, second.reason) == (loop.NOT_RUN, "the --budget was spent")
    assert out.stopped == "--budget 30 s: trial #1 was stopped at it, 30 s spent"
    assert out.winner is None
    [record] = journal.load(path)[0]
    assert record["status"] == "failed" and record["reason"] == first.reason


def test_a_trial_within_the_budget_is_given_what_is_left() -> None:
    ticks = iter([0.0, 0.0, 10.0, 12.0, 12.0, 12.0, 12.0, 12.0, 12.0])
    runner = SlowRunner(1.0)
    out = loop.run(BASE, [candidate(1, "gpipe", 1, 2, [2])], runner, loop.Limits(8, 100.0),
                   None, clock=lambda: next(ticks))
    assert runner.lefts == [90.0]
    assert out.rows[0].status == loop.MEASURED
