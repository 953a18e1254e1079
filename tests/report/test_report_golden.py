"""Rendered output at 80 columns, colour off, against files in tests/golden/.

Regenerate after an intended change with ``PPTUNE_UPDATE_GOLDEN=1 pytest tests/report``
and review the diff before committing.
"""

import os
from pathlib import Path

import pytest

from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.render import render_plain
from pptune.report.tables import sim_summary_table
from pptune.report.timeline import plain_timeline, timeline_text

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
GIB = 2**30


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PPTUNE_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"missing {path}; create it with PPTUNE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


CASES = {
    "timeline_1f1b_p4_m8.txt": lambda: simulate("1f1b", 4, 8, uniform_stages(4, 1.0, 2.0)),
    "timeline_zbv_p2_m4.txt": lambda: simulate("zbv", 2, 4, uniform_stages(4, 1.0, 1.0, 1.0)),
    "timeline_gpipe_p4_m8.txt": lambda: simulate("gpipe", 4, 8, uniform_stages(4, 1e-3, 2e-3)),
    "timeline_interleaved_p4_m8_v2.txt": lambda: simulate(
        "interleaved-1f1b", 4, 8, uniform_stages(8, 0.5e-3, 1e-3), v=2
    ),
    "timeline_zb-h1_p4_m8.txt": lambda: simulate(
        "zb-h1", 4, 8, uniform_stages(4, 10e-6, 10e-6, 10e-6)
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_timeline_golden(name: str) -> None:
    result = CASES[name]()
    text = plain_timeline(result, width=80)
    # the plain function and a colourless 80-column console agree
    assert render_plain(timeline_text(result), width=80) == text
    check_golden(name, text)


def test_summary_golden() -> None:
    r = simulate("1f1b", 4, 8, uniform_stages(4, 1e-3, 2e-3, act_bytes=1.5 * GIB))
    check_golden("summary_1f1b_p4_m8.txt", render_plain(sim_summary_table(r), width=80))


def test_summary_golden_zbv() -> None:
    r = simulate("zbv", 2, 4, uniform_stages(4, 1e-3, 1e-3, 1e-3, act_bytes=300 * 2**20))
    check_golden("summary_zbv_p2_m4.txt", render_plain(sim_summary_table(r), width=80))
