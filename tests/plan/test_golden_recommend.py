"""The recommend table and check-config text, rendered without colour, against golden files.

Regenerate after an intended change with ``PPTUNE_UPDATE_GOLDEN=1 pytest tests/cli``
and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

from pptune.plan.recommend import RecommendSpec, recommend
from pptune.report.plans import plans_table, rejected_line, why_lines
from pptune.report.render import render_plain

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("PPTUNE_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
        return
    assert path.exists(), f"missing {path}; create it with PPTUNE_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def test_recommend_table_gpt3_13b_on_32_a100() -> None:
    run = recommend(RecommendSpec.of(gpus=32, model="gpt3-13b", gpu="a100-80gb", tp=2,
                                  sharded_optimizer=True))
    text = render_plain(plans_table(run.result), width=150)
    text += "\n".join([*why_lines(run.result), rejected_line(run.result)]) + "\n"
    check_golden("recommend_gpt3-13b_32xa100.txt", text)
