"""pptune.validate.measure: exact answers worked by hand (pure Python, no torch)."""

from __future__ import annotations

import json

import pytest

from pptune.costmodel.schedules import Op, OpKind, Schedule
from pptune.report.timeline import plain_timeline
from pptune.report.trace import chrome_trace
from pptune.validate.measure import (
    OpStamp,
    RankStep,
    fold_loss,
    measure_step,
    op_medians,
    summarize,
    union_s,
)

MS = 1_000_000  # nanoseconds per millisecond


def test_union_of_disjoint_overlapping_and_nested_intervals() -> None:
    assert union_s([], 0, 10) == 0
    assert union_s([(0, 2), (5, 6)], 0, 10) == 3
    assert union_s([(0, 2), (1, 3)], 0, 10) == 3  # overlap counted once
    assert union_s([(0, 10), (2, 3)], 0, 10) == 10  # nested
    assert union_s([(4, 5), (0, 1), (0.5, 2)], 0, 10) == 3  # unsorted input
    assert union_s([(2, 3), (3, 4)], 0, 10) == 2  # touching


def test_union_is_clipped_to_the_window() -> None:
    assert union_s([(-5, 2), (8, 20)], 0, 10) == 4
    assert union_s([(11, 12), (-3, -1)], 0, 10) == 0


def test_fold_loss_extends_the_forward_it_follows() -> None:
    ops = [
        OpStamp("F", 0, 1, 10, 20),
        OpStamp("L", 0, 1, 20, 23),
        OpStamp("B", 0, 1, 23, 40),
    ]
    assert fold_loss(ops) == [OpStamp("F", 0, 1, 10, 23), OpStamp("B", 0, 1, 23, 40)]
    # a loss without its forward on this rank stays, as a forward
    assert fold_loss([OpStamp("L", 2, 3, 5, 6)]) == [OpStamp("F", 2, 3, 5, 6)]


def two_rank_step(offset_ns: int = 0) -> list[RankStep]:
    """gpipe, pp=2, m=2, F=10 ms, B=20 ms, 1 ms hops, loss 2 ms on the last stage.

    rank 0: F0 0-10, F1 10-20, waits, B0 56-76, B1 76-96 (step end 96)
    rank 1 (starts 1 ms late): F0 11-21 + loss 21-23, F1 23-33 + loss 33-35,
            B0 35-55, B1 55-75 (end 76); rank 0's B0 waits for B0 on rank 1
            (55) plus the 1 ms hop.
    Busy: rank 0 60 ms, rank 1 64 ms (losses included).
    """
    o = offset_ns
    r0 = RankStep(0, o + 0, o + 96 * MS, (
        OpStamp("F", 0, 0, o + 0, o + 10 * MS),
        OpStamp("F", 1, 0, o + 10 * MS, o + 20 * MS),
        OpStamp("B", 0, 0, o + 56 * MS, o + 76 * MS),
        OpStamp("B", 1, 0, o + 76 * MS, o + 96 * MS),
    ))
    r1 = RankStep(1, o + 1 * MS, o + 76 * MS, (
        OpStamp("F", 0, 1, o + 11 * MS, o + 21 * MS),
        OpStamp("L", 0, 1, o + 21 * MS, o + 23 * MS),
        OpStamp("F", 1, 1, o + 23 * MS, o + 33 * MS),
        OpStamp("L", 1, 1, o + 33 * MS, o + 35 * MS),
        OpStamp("B", 0, 1, o + 35 * MS, o + 55 * MS),
        OpStamp("B", 1, 1, o + 55 * MS, o + 75 * MS),
    ))
    return [r0, r1]


def test_one_step_by_hand() -> None:
    step = measure_step(two_rank_step(offset_ns=123_456_789), p=2)
    assert step.step_time_s == pytest.approx(0.096)
    assert step.busy_s == pytest.approx([0.060, 0.064])  # rank 1: 2 x (10 + 2) + 2 x 20
    # the events: loss folded into F, times from the step start
    dev1 = [e for e in step.events if e.device == 1]
    assert [str(e.op) for e in dev1] == ["F0@1", "F1@1", "B0@1", "B1@1"]
    assert (dev1[0].start_s, dev1[0].end_s) == pytest.approx((0.011, 0.023))
    assert dev1[0].op == Op(OpKind.F, 0, 1)


def test_without_a_shared_clock_each_rank_starts_at_zero() -> None:
    steps = two_rank_step()
    step = measure_step(steps, p=2, shared_clock=False)
    assert step.step_time_s == pytest.approx(0.096)  # the longest rank window
    first = next(e for e in step.events if e.device == 1)
    assert first.start_s == pytest.approx(0.010)  # 11 ms - rank 1's own start (1 ms)


def scaled(ranks: list[RankStep], factor: float) -> list[RankStep]:
    def s(t: int) -> int:
        return int(t * factor)

    return [
        RankStep(r.rank, s(r.start_ns), s(r.end_ns),
                 tuple(o._replace(start_ns=s(o.start_ns), end_ns=s(o.end_ns)) for o in r.ops))
        for r in ranks
    ]


def test_summary_takes_medians_and_keeps_the_median_step() -> None:
    base = two_rank_step()
    steps = [scaled(base, 1.5), base, scaled(base, 1.1)]  # 144, 96, 105.6 ms
    m = summarize(steps, p=2)
    assert m.step_times_s == pytest.approx([0.144, 0.096, 0.1056])
    assert m.step_time_s == pytest.approx(0.1056)
    assert [d.busy_s for d in m.devices] == pytest.approx([0.066, 0.0704])
    assert [d.idle_s for d in m.devices] == pytest.approx([0.0396, 0.0352])
    assert m.bubble_rate == pytest.approx(1 - (0.066 + 0.0704) / (2 * 0.1056))
    assert m.spread == pytest.approx((0.144 - 0.096) / 0.1056)
    # the timeline is the median step's (x1.1): rank 0's last B ends at 96 x 1.1 ms
    assert max(e.end_s for e in m.events) == pytest.approx(0.1056)
    assert m.p == 2


def test_even_step_count_takes_the_lower_median_timeline() -> None:
    base = two_rank_step()
    m = summarize([scaled(base, 2.0), base], p=2)
    assert m.step_time_s == pytest.approx((0.192 + 0.096) / 2)
    assert max(e.end_s for e in m.events) == pytest.approx(0.096)


def test_op_medians_per_kind_and_stage() -> None:
    base = two_rank_step()
    med = op_medians([base, scaled(base, 2.0), scaled(base, 3.0)])
    assert med[("F", 0)] == pytest.approx(0.020)  # 10, 10, 20, 20, 30, 30 ms
    assert med[("L", 1)] == pytest.approx(0.004)
    assert med[("B", 1)] == pytest.approx(0.040)


def test_no_steps_is_an_error() -> None:
    with pytest.raises(ValueError):
        summarize([], p=2)
    with pytest.raises(ValueError):
        measure_step([], p=2)


def test_measured_renders_as_a_timeline_and_a_trace() -> None:
    m = summarize([two_rank_step()], p=2)
    text = plain_timeline(m, width=60)
    assert text.splitlines()[0].startswith("dev0 F0")
    assert "96.0 ms" in text
    trace = json.loads(json.dumps(chrome_trace(m, name="pptune validate (measured)")))
    ops = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(ops) == 8
    assert trace["otherData"]["name"] == "pptune validate (measured)"
    assert trace["otherData"]["bubble_rate"] == pytest.approx(m.bubble_rate)


def test_contention_is_the_median_ratio_over_ranks() -> None:
    from pptune.validate.runner import RankResult, RunData
    from pptune.validate.spec import RunSpec

    def rank(r: int, alone: float | None, together: float | None) -> RankResult:
        return RankResult(r, "host", [], ref_alone_s=alone, ref_together_s=together)

    spec = RunSpec(Schedule.GPIPE, 3, 4, 1, 1, (1, 1, 1))
    data = RunData(spec, [rank(0, 1.0, 1.5), rank(1, 2.0, 2.2), rank(2, 1.0, 3.0)], "2.13", "gloo")
    assert data.contention == pytest.approx(1.5)
    assert RunData(spec, [rank(0, None, None)], "2.13", "gloo").contention is None
    rounds = [RankResult(0, "h", [], ref_ratios=[1.0, 1.2, 5.0]), RankResult(1, "h", [], ref_ratios=[1.1])]
    assert RunData(spec, rounds, "2.13", "gloo").contention == pytest.approx(1.15)
    assert data.shared_clock


def test_an_op_priced_at_nothing_shows_no_error_percentage() -> None:
    from rich.console import Console

    from pptune.validate.render import ops_table

    doc = {"ops": [
        {"kind": "B", "stage": 0, "predicted_s": 0.0, "measured_s": 38.7e-6, "error": -1.0},
        {"kind": "F", "stage": 0, "predicted_s": 1e-3, "measured_s": 1.25e-3, "error": -0.2},
    ]}
    console = Console(width=100, record=True)
    console.print(ops_table(doc))
    text = console.export_text()
    assert "no work priced" in text and "-100" not in text
    assert "-20.0%" in text  # an op with work keeps its error
