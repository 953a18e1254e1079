"""Text timeline: layout, cell assignment, edge cases, duck-typed input."""

import itertools
import re
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.text import Text

from pptune.costmodel.schedules import DEFAULT_SCHEDULES
from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.render import render_plain
from pptune.report.timeline import ALT_STYLES, STYLES, plain_timeline, timeline_text

LEGEND = "F forward  B backward  . idle"
LEGEND_W = "F forward  B backward  W weight-grad  . idle"


def rows_of(text: str) -> dict[int, str]:
    """Device rows -> their bar (label stripped)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"dev(\d+) +(.*)$", line)
        if m:
            out[int(m.group(1))] = m.group(2)
    return out


def labels(bar: str) -> list[str]:
    return re.findall(r"[FBW]\d+", bar)


def one_f_one_b():
    return simulate("1f1b", 4, 8, uniform_stages(4, 1.0, 2.0))


def test_1f1b_rows_read_like_the_schedule() -> None:
    text = plain_timeline(one_f_one_b())
    rows = rows_of(text)
    assert sorted(rows) == [0, 1, 2, 3]
    # device 0: four warm-up forwards, then it waits for the first backward
    assert labels(rows[0])[:5] == ["F0", "F1", "F2", "F3", "B0"]
    assert rows[0].startswith("F0F1")
    # device 3 (last stage): strict F/B alternation, F_i then B_i
    expected = [f"{k}{i}" for i in range(8) for k in "FB"]
    assert labels(rows[3]) == expected
    assert rows[3].startswith(".......F0B0")
    # every device ends in backward then idle cool-down (or none for dev0)
    assert rows[0].endswith("B7BBB")
    assert rows[3].endswith("B7BB" + "." * 14)


def test_every_line_fits_the_width() -> None:
    for width in (40, 80, 120):
        text = plain_timeline(one_f_one_b(), width=width)
        lines = text.rstrip("\n").split("\n")
        assert all(len(line) <= width for line in lines), width
        assert all(len(line) == width for line in lines[:4])  # the device rows


def test_idle_cells_track_idle_share() -> None:
    r = one_f_one_b()
    rows = rows_of(plain_timeline(r))
    bar_w = 80 - len("dev0 ")
    for d, dev in enumerate(r.devices):
        idle_cells = rows[d].count(".")
        expected = dev.idle_s / r.step_time_s * bar_w  # 9/33 of 75 = 20.5
        assert abs(idle_cells - expected) <= 2, (d, idle_cells, expected)


def test_axis_and_legend() -> None:
    lines = plain_timeline(one_f_one_b()).rstrip("\n").split("\n")
    assert lines[-1] == LEGEND
    ticks, labels_line = lines[-3], lines[-2]
    assert ticks.startswith("     +") and ticks.endswith("+")
    assert set(ticks.strip()) == {"+", "-"}
    assert labels_line.startswith("     0 ")
    assert labels_line.endswith("33.000 s")  # the makespan, in seconds
    assert " 10 " in labels_line and " 20 " in labels_line


def test_legend_lists_weight_grad_only_when_present() -> None:
    zb = simulate("zb-h1", 4, 8, uniform_stages(4, 1.0, 1.0, 1.0))
    assert plain_timeline(zb).rstrip("\n").split("\n")[-1] == LEGEND_W
    assert "weight-grad" not in plain_timeline(one_f_one_b())


def test_axis_units_follow_the_makespan() -> None:
    r = simulate("1f1b", 4, 8, uniform_stages(4, 1e-3, 2e-3))
    assert plain_timeline(r).rstrip("\n").split("\n")[-2].endswith("33.0 ms")
    r = simulate("1f1b", 2, 4, uniform_stages(2, 10e-6, 20e-6))
    assert plain_timeline(r).rstrip("\n").split("\n")[-2].endswith("150.0 us")


def test_styles_colour_each_kind_and_idle() -> None:
    r = simulate("zb-h1", 4, 8, uniform_stages(4, 1.0, 1.0, 1.0))
    text = timeline_text(r)
    assert isinstance(text, Text)
    styled = {str(span.style) for span in text.spans}
    for kind in ("F", "B", "W", "."):
        assert STYLES[kind] in styled
    assert "green" in STYLES["F"] and "red" in STYLES["B"] and "blue" in STYLES["W"]
    # every span styled as a kind holds only that kind's letter and digits
    plain = text.plain
    checked = 0
    for span in text.spans:
        for kind in "FBW":
            if str(span.style) in (STYLES[kind], ALT_STYLES[kind]):
                assert set(plain[span.start:span.end]) <= set(kind + "0123456789")
                checked += 1
    assert checked > 3 * 4  # many blocks on 4 rows, plus the legend


def test_no_colour_console_matches_plain() -> None:
    r = one_f_one_b()
    assert render_plain(timeline_text(r), width=80) == plain_timeline(r)


def test_zero_length_result() -> None:
    r = simulate("1f1b", 4, 8, uniform_stages(4, 0.0, 0.0))
    assert r.step_time_s == 0
    text = plain_timeline(r)
    rows = rows_of(text)
    assert all(set(bar) == {"."} for bar in rows.values())
    assert "0 s" in text


@dataclass
class FakeOp:
    kind: str
    mb: int
    stage: int


@dataclass
class FakeEvent:
    device: int
    op: FakeOp
    start_s: float
    end_s: float


@dataclass
class Measured:
    p: int
    step_time_s: float
    events: list[FakeEvent] = field(default_factory=list)


def test_duck_typed_measured_timeline() -> None:
    # string kinds, a step longer than the events, and no transfers/devices
    m = Measured(2, 10.0, [
        FakeEvent(0, FakeOp("F", 0, 0), 0.0, 5.0),
        FakeEvent(1, FakeOp("B", 3, 1), 5.0, 10.0),
    ])
    rows = rows_of(plain_timeline(m, width=25))  # 20 cells of 0.5 s
    assert rows[0] == "F0" + "F" * 8 + "." * 10
    assert rows[1] == "." * 10 + "B3" + "B" * 8


def test_event_beyond_p_gets_a_row_and_span_covers_late_events() -> None:
    m = Measured(1, 1.0, [FakeEvent(2, FakeOp("W", 1, 2), 1.0, 2.0)])
    rows = rows_of(plain_timeline(m, width=25))
    assert sorted(rows) == [0, 1, 2]
    assert rows[2] == "." * 10 + "W1" + "W" * 8


def test_cell_shows_the_op_covering_most_of_it() -> None:
    # 4 cells of 1 s. Cell 0: F0 0.3 s, F1 0.6 s -> F1 wins (F1 spans 0.4..1.0).
    # Cell 1: B2 0.4 s, idle 0.6 -> idle. Cell 2: B2 0.5 s, idle 0.5 -> op (tie).
    # Cell 3: W3 0.3 s and W4 0.3 s, idle 0.4: busy majority, first op wins.
    m = Measured(1, 4.0, [
        FakeEvent(0, FakeOp("F", 0, 0), 0.0, 0.3),
        FakeEvent(0, FakeOp("F", 1, 0), 0.4, 1.0),
        FakeEvent(0, FakeOp("B", 2, 0), 1.6, 2.5),
        FakeEvent(0, FakeOp("W", 3, 0), 3.0, 3.3),
        FakeEvent(0, FakeOp("W", 4, 0), 3.5, 3.8),
    ])
    assert rows_of(plain_timeline(m, width=9))[0] == "F.BW"
    # the same events in another order give the same picture
    m.events.reverse()
    assert rows_of(plain_timeline(m, width=9))[0] == "F.BW"


def test_large_pipeline_stays_one_row_per_device() -> None:
    r = simulate("1f1b", 64, 512, uniform_stages(64, 1e-3, 2e-3))
    text = plain_timeline(r)
    rows = rows_of(text)
    assert sorted(rows) == list(range(64))
    assert all(len(f"dev{d}".ljust(6) + bar) == 80 for d, bar in rows.items())
    # the first stage starts with forwards, the last ends idle (cool-down of others)
    assert rows[0][0] == "F" and rows[63][-1] == "."


@settings(max_examples=40, deadline=None)
@given(
    schedule=st.sampled_from([s.value for s in DEFAULT_SCHEDULES]),
    p=st.integers(1, 6),
    m_mult=st.integers(1, 4),
    fwd=st.floats(0.1, 3.0),
    bwd=st.floats(0.1, 3.0),
    wgrad=st.floats(0.0, 2.0),
    width=st.integers(20, 140),
)
def test_rows_hold_only_known_cells(
    schedule: str, p: int, m_mult: int, fwd: float, bwd: float, wgrad: float, width: int
) -> None:
    v = 2 if schedule == "interleaved-1f1b" else 1
    if schedule == "dualpipe":
        p += p % 2  # an even depth, and an even m of at least 2 p (DeepSeek's asserts)
    m = p * m_mult * (2 if schedule in ("dualpipe", "dualpipev") else 1)
    n_stages = p * (2 if schedule in ("interleaved-1f1b", "zbv", "dualpipe", "dualpipev") else 1)
    r = simulate(schedule, p, m, uniform_stages(n_stages, fwd, bwd, wgrad), v=v)
    rows = rows_of(plain_timeline(r, width=width))
    assert sorted(rows) == list(range(p))
    bar_w = width - len(f"dev{p - 1} ")
    for d, bar in rows.items():
        assert len(bar) == bar_w
        assert set(bar) <= set("FBW&.0123456789")
        # a digit only ever follows a kind letter or another digit
        assert not re.search(r"(^|\.)\d", bar)
        # idle cells within one cell per idle gap of the true idle share
        dev_events = [e for e in r.events if e.device == d]
        gaps = 1 + sum(
            1 for a, b in itertools.pairwise(dev_events) if b.start_s > a.end_s
        )
        expected = r.devices[d].idle_s / r.step_time_s * bar_w
        assert abs(bar.count(".") - expected) <= gaps + 1


def test_a_window_of_a_step_reads_in_step_time() -> None:
    """The cool-down window of a 10 s step, 8 s to 10 s: the axis says so."""
    from pptune.report.plans import Window
    from pptune.report.timeline import _axis

    ticks, labels = _axis(2.0, 0, 60, start_s=8.0)
    assert labels.split() == ["8", "8.5", "9", "9.5", "10.000", "s"]
    assert ticks.startswith("+") and ticks.endswith("+")
    assert Window(1, 2.0, [], 8.0).start_s == 8.0


def test_windows_without_a_pipeline_show_the_first_three_micro_batches() -> None:
    from pptune.costmodel.schedules import Schedule
    from pptune.report.plans import timeline_windows

    m = 12
    sim = simulate(Schedule.ONE_F_ONE_B, 1, m, uniform_stages(1, 1.0, 2.0))
    (label, window), = timeline_windows(sim, 1, m)
    assert label.startswith(f"first 3 of {m} micro-batches")
    # one forward and one backward a micro-batch: 3 s each, the first three in 9 s
    assert window.step_time_s == sim.step_time_s * 3 / m == 9.0
    assert {e.op.mb for e in window.events} == {0, 1, 2}
    # a pipeline keeps its warm-up and cool-down windows; a short run is shown whole
    assert [lbl.split(",")[0] for lbl, _ in timeline_windows(
        simulate(Schedule.ONE_F_ONE_B, 2, m, uniform_stages(2, 1.0, 2.0)), 2, m)] == [
        "warm-up", "cool-down"]
    assert timeline_windows(simulate(Schedule.ONE_F_ONE_B, 1, 3, uniform_stages(1, 1.0, 2.0)),
                            1, 3)[0][0] == ""


NAME = re.compile(r"F\d+&B\d+|BW\d+|[FBW]\d+")


def test_every_op_is_named_or_none_is() -> None:
    """dualpipev pp 4, m 8, every chunk F = B = W = 0.5 s: at 80 columns a pair's
    name (F4&B0, five letters) is wider than its block, so no row names any op and the
    last line gives a width that names them all; there every op of a device starts with
    its name, as many names as the device has events."""
    r = simulate("dualpipev", 4, 8, uniform_stages(8, 0.5, 0.5, 0.5))
    text = plain_timeline(r)
    assert not any(NAME.search(bar) for bar in rows_of(text).values())
    note = " ".join(text.split("idle", 1)[1].split())
    found = re.fullmatch(r"op names left out: at 80 columns some ops' bars are shorter "
                         r"than their names; --width (\d+) names every op", note)
    assert found, note
    wide = plain_timeline(r, width=int(found[1]))
    assert "op names left out" not in wide
    for d, bar in rows_of(wide).items():
        assert len(NAME.findall(bar)) == sum(e.device == d for e in r.events)


def test_ops_no_width_can_name_are_said_so() -> None:
    """1f1b pp 64, m 512, F 1 s, B 2 s: a 1,725 s step, so at 1,000 columns a forward
    touches at most 994 / 1725 + 2 < 3 cells, short of F100's four letters."""
    text = plain_timeline(simulate("1f1b", 64, 512, uniform_stages(64, 1.0, 2.0)))
    assert not any(NAME.search(bar) for bar in rows_of(text).values())
    assert " ".join(text.split("idle", 1)[1].split()) == (
        "op names left out: some ops' bars are shorter than their names at any --width up to 1,000")
