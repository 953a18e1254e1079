"""`pptune tune`'s stdout at 80 columns (COLUMNS=80): the trials table and the lines
under it keep every number with its unit, the title whole. The trials run on a fake
runner at seconds per step, as on a GPU (no torch)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from test_loop import FakeRunner
from tune_helpers import candidate, profile

from pptune.cli.tune import _render
from pptune.report.fmt import fmt_seconds
from pptune.tune import loop
from tests.report.columns import check_columns

SIX = profile([1.0] * 6, [2.0] * 6)  # six layers: F 1 ms, B 2 ms each
OTHERS = [("1f1b", 8, [3, 3], 1), ("gpipe", 4, [4, 2], 1), ("zb-h1", 12, [2, 4], 1)]


# interleaved v3 m2 at 3430x the profile measures 20.580 s: rich ended the winner line
# with "measured 20.580" and began the next with "s per step"
@pytest.mark.parametrize("m", [2, 4, 16])
@pytest.mark.parametrize("speed", [343.0, 3430.0])
def test_tune_at_80_columns_keeps_numbers_with_their_units(
        m: int, speed: float, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    plans = [("interleaved-1f1b", m, [1] * 6, 3), *OTHERS]
    cands = [candidate(n + 1, schedule, 2, mb, split, v=v)
             for n, (schedule, mb, split, v) in enumerate(plans)]
    out = loop.run(SIX, cands, FakeRunner(speed), loop.Limits(3, 1e9), None)
    monkeypatch.setenv("COLUMNS", "80")
    _render(SimpleNamespace(outcome=out), as_json=False)
    text = capsys.readouterr().out
    measured = [r.measured_s for r in out.rows if r.measured_s is not None]
    assert min(measured) >= 1.0  # seconds: "20.580 s", the unit one letter
    check_columns(text, 80, [fmt_seconds(s) for s in measured])
    assert text.splitlines()[0] == ("pptune tune: candidates, predicted and measured "
                                    "(one pipeline each)")
