"""`pptune validate`'s stdout at 80 columns (COLUMNS=80): its two tables and the lines
under them keep every number with its unit and break titles between phrases. The
outcome is written by hand in the JSON's shape (no torch)."""

from __future__ import annotations

from typing import Any

import pytest

from pptune.cli.util import out_console
from pptune.cli.validate import show_comparison
from pptune.report.fmt import fmt_seconds
from tests.report.columns import check_columns


def outcome(step_s: float, torch_schedule: str = "Schedule1F1B") -> dict[str, Any]:
    """A 2-rank run whose step takes ``step_s`` measured, 4% less predicted."""
    pred_s, times = step_s * 0.96, [step_s * 0.99, step_s, step_s * 1.13]

    def devices(s: float) -> list[dict[str, Any]]:
        return [{"device": d, "busy_s": s * share, "idle_s": s * (1 - share)}
                for d, share in ((0, 0.55), (1, 0.8))]

    return {
        "schedule": "1f1b", "torch_schedule": torch_schedule, "pp": 2, "num_microbatches": 4,
        "virtual_stages": 1, "micro_batch_size": 1, "stage_layers": [4, 4],
        "backend": "gloo", "timed_steps": len(times), "warmup_steps": 2,
        "cost_source": "profile build/demo-profile.json (probe)",
        "predicted": {"step_time_s": pred_s, "bubble_rate": 0.303, "devices": devices(pred_s)},
        "measured": {"step_time_s": step_s, "bubble_rate": 0.302, "devices": devices(step_s),
                     "step_times_s": times, "spread": 0.14},
        "step_time_error": -0.04, "bubble_rate_error": 0.001, "busy_error": 0.009,
        "contention": 1.07,
        "predicted_without_contention": {"step_time_s": pred_s * 0.98, "step_time_error": -0.06},
        "ops": [{"kind": k, "stage": st, "predicted_s": step_s / 9, "measured_s": step_s / 8,
                 "error": -1 / 9} for st in (0, 1) for k in "FB"],
    }


# At 80 columns rich broke the title "predicted vs measured (Schedule1F1B, gloo, median
# / of 3 steps)" and the ops title before "duration"; at 58 it also ended the measured
# line with "2.037 s .. 2.325" and began the next with "s (spread".
@pytest.mark.parametrize("width", [80, 58])
@pytest.mark.parametrize("step_s", [0.1948, 1.9481, 19.481, 194.81, 2.0573])
def test_validate_at_80_columns_keeps_numbers_with_their_units(
        step_s: float, width: int, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = outcome(step_s)
    monkeypatch.setenv("COLUMNS", str(width))
    show_comparison(out_console(), doc)
    text = capsys.readouterr().out
    times = [*doc["measured"]["step_times_s"], doc["predicted"]["step_time_s"],
             doc["predicted_without_contention"]["step_time_s"]]
    check_columns(text, width, [*(fmt_seconds(s) for s in times), "predicted vs measured",
                             "(Schedule1F1B, gloo, median of 3 steps)",
                             "ops: predicted vs measured median time"])


def test_a_long_torch_schedule_name_breaks_inside_the_parentheses_at_a_comma(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    show_comparison(out_console(), outcome(2.0573, "ScheduleInterleavedZeroBubble"))
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    assert lines[1:4] == ["predicted vs measured", "(ScheduleInterleavedZeroBubble, gloo,",
                          "median of 3 steps)"]
