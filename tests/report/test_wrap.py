"""Lines and titles wrapped for the console: a number keeps its unit, a title breaks
between phrases (report.wrap), worked out by hand."""

from __future__ import annotations

from rich.table import Table

from pptune.report.fit import fit
from pptune.report.render import render_plain
from pptune.report.wrap import tokens, wrap_phrases, wrap_words
from tests.report.columns import parted

LINE = ("winner: #1 interleaved-1f1b pp2 dp1 v2 b2 m4 split 2,2,3,1: measured 2.057 s per "
        "step (timed steps 2.031 s..2.102 s), predicted 69.5 ms before calibration")


def test_a_number_and_its_unit_are_one_token() -> None:
    assert tokens("measured 2.057 s per step (timed 318.4 ms..355.9 ms), error -2.1 pts, "
                  "12.00 GiB, dp1 v2") == [
        "measured", "2.057 s", "per", "step", "(timed", "318.4 ms..355.9 ms),", "error",
        "-2.1 pts,", "12.00 GiB,", "dp1", "v2"]


def test_rich_parts_2_057_from_s_where_wrap_words_keeps_them() -> None:
    # "...: measured 2.057" is 74 columns: rich ends the line there, "s per step" next
    assert parted(render_plain(LINE, width=74))
    lines = wrap_words(LINE, 74)
    assert lines[0].endswith("split 2,2,3,1: measured")
    assert lines[1].startswith("2.057 s per step")
    assert all(len(x) <= 74 for x in lines) and " ".join(lines) == LINE


def test_wrap_words_keeps_indent_and_folds_a_word_wider_than_the_line() -> None:
    assert wrap_words("  note: 1.5 s and more", 13) == ["  note: 1.5 s", "and more"]
    assert wrap_words("  note: 1.5 s and more", 12) == ["  note:", "1.5 s and", "more"]
    assert wrap_words("see " + "x" * 10, 4) == ["see", "xxxx", "xxxx", "xx"]


def test_titles_break_between_phrases_outside_parentheses_first() -> None:
    title = "1f1b  pp=2  m=4  b=1  split=4,4\npredicted vs measured (Schedule1F1B, gloo, median of 5 steps)"
    assert wrap_phrases(title, 49) == ["1f1b  pp=2  m=4  b=1  split=4,4", "predicted vs measured",
                                       "(Schedule1F1B, gloo, median of 5 steps)"]
    assert wrap_phrases("predicted vs measured (ScheduleInterleavedZeroBubble, gloo, median "
                        "of 5 steps)", 40) == [
        "predicted vs measured", "(ScheduleInterleavedZeroBubble, gloo,", "median of 5 steps)"]
    assert wrap_phrases("pptune tune: candidates, predicted and measured (one pipeline each)",
                        40) == ["pptune tune: candidates,", "predicted and measured",
                                "(one pipeline each)"]


def test_fit_gives_a_narrow_table_its_title_in_phrases_and_leaves_the_table_as_it_was() -> None:
    t = Table(title="predicted vs measured (Schedule1F1B, gloo, median of 5 steps)")
    for name in ("", "predicted", "measured", "error"):
        t.add_column(name, justify="right")
    t.add_row("step time", "2.057 s", "2.102 s", "-2.1%")  # 46 columns wide
    text = render_plain(fit(t, 80), width=80)
    assert [line.strip() for line in text.splitlines()[:2]] == [
        "predicted vs measured", "(Schedule1F1B, gloo, median of 5 steps)"]
    assert t.title == "predicted vs measured (Schedule1F1B, gloo, median of 5 steps)"


def test_hanging_indents_each_items_continuation_under_it() -> None:
    from pptune.report.wrap import hanging

    text = "head line\n  item: " + "word " * 20 + "end"
    lines = hanging(text, 40)
    assert lines[0] == "head line"
    assert lines[1].startswith("  item: ") and all(
        x.startswith("    ") and not x.startswith("     ") for x in lines[2:])
    assert all(len(x) <= 40 for x in lines)
    assert " ".join(x.strip() for x in lines[1:]) == ("item: " + "word " * 20 + "end")
