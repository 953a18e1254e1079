"""Any table at any width: kept, narrowed only in its text columns, or stacked; no cut cell."""

from __future__ import annotations

import re

import pytest

from pptune.costmodel.schedules import Schedule
from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.fit import fit, split_long, wrap_items
from pptune.report.presets import presets_tables
from pptune.report.render import render_plain
from pptune.report.tables import sim_summary_table


@pytest.mark.parametrize("width", [40, 60, 80, 120, 200])
def test_summary_and_presets_never_cut_a_cell(width: int) -> None:
    sim = simulate(Schedule.ONE_F_ONE_B, 4, 8, uniform_stages(4, 1e-3, 2e-3, 0.0, 3 * 2**30, 1.0))
    for table, numbers in [(sim_summary_table(sim), ["24.0 ms", "9.0 ms", "72.7%"]),
                           *((t, ["50257"]) for t in presets_tables())]:
        text = render_plain(fit(table, width), width=width)
        assert "…" not in text and max(map(len, text.splitlines())) <= width
        flat = re.sub(r"\s+", " ", text)
        for number in numbers:
            if number in render_plain(table, width=400):
                assert number in flat


def test_wrap_items_breaks_between_items_only() -> None:
    items = ["busy 24.0 ms", "idle 9.0 ms", "busy % 72.7%"]
    assert wrap_items("dev0:", items, 20) == ["dev0: busy 24.0 ms,", "  idle 9.0 ms,", "  busy % 72.7%"]
    assert split_long("layers 5x4,4,5,4,1", 9) == ["layers", "5x4,4,5,", "4,1"]


def test_a_stacked_row_that_continues_the_one_above_is_indented_under_it() -> None:
    from rich.table import Table

    t = Table("layer", "mb", "fwd ms", "B ms", "W ms", "act", "out", "spread")
    t.add_row("block.0", "1", "5.278", "5.122", "3.266", "2.25 MiB", "128.00 KiB", "0.08")
    t.add_row("", "2", "9.193", "9.359", "6.592", "4.51 MiB", "256.00 KiB", "0.10")
    text = render_plain(fit(t, 40))
    assert "layer :" not in text
    assert text.splitlines()[0].startswith("layer block.0: mb 1,")
    assert any(line.startswith("  mb 2,") for line in text.splitlines())
