"""Summary table content (the exact layout is in the golden test)."""

from rich.table import Table

from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.render import render_plain
from pptune.report.tables import sim_summary_table


def test_summary_rows_and_values() -> None:
    r = simulate("gpipe", 3, 4, uniform_stages(3, 1e-3, 2e-3, act_bytes=2**20))
    table = sim_summary_table(r)
    assert isinstance(table, Table)
    assert table.row_count == 3
    text = render_plain(table, width=80)
    # closed form: (p-1)/(m+p-1) = 2/6 idle; step = (m+p-1)*(1+2) ms = 18 ms
    assert "gpipe  pp=3  m=4" in text
    assert "step 18.0 ms  bubble 33.3%" in text
    assert "66.7%" in text  # busy share per device
    assert "4.00 MiB" in text  # GPipe holds all 4 micro-batches' activations
    for d in range(3):
        assert f"dev{d}" in text


def test_interleaved_title_shows_virtual_stages() -> None:
    r = simulate("interleaved-1f1b", 2, 4, uniform_stages(4, 1e-3, 1e-3), v=2)
    assert "v=2" in render_plain(sim_summary_table(r))


def test_zero_step_has_no_division_by_zero() -> None:
    r = simulate("1f1b", 2, 2, uniform_stages(2, 0.0, 0.0))
    text = render_plain(sim_summary_table(r))
    assert "step 0 s  bubble 0.0%" in text and "0.0%" in text
