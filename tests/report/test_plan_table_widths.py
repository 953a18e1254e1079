"""The ranked-plans table never cuts a number, at any console width (golden files)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pptune.plan.recommend import RecommendSpec, recommend
from pptune.report.fit import wrap_commas as _wrap_commas
from pptune.report.plan_table import compact_split, mfu, plans_table
from pptune.report.render import render_plain

WIDTHS = (60, 80, 100, 120, 200)
GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def check_golden(name: str, text: str) -> None:
    """Regenerate with PPTUNE_UPDATE_GOLDEN=1 and review the diff."""
    path = GOLDEN / name
    if os.environ.get("PPTUNE_UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
        return
    assert text == path.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def run():  # type: ignore[no-untyped-def]
    return recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm"))


@pytest.mark.parametrize("width", WIDTHS)
def test_every_number_is_whole_at_every_width(run, width: int) -> None:  # type: ignore[no-untyped-def]
    table = plans_table(run.result, run.global_batch * run.table.seq_len, width=width,
                        model_flops_per_step=run.model_flops_per_step, peak_flops=run.peak_flops)
    text = render_plain(table, width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    assert "…" not in text
    flat = re.sub(r"\s+", " ", text)
    for plan in run.result.plans:
        # the micro-batch count and step time as whole tokens, the split in order
        assert re.search(rf"(?<![\d.]){plan.num_microbatches}(?![\d.])", flat)
        assert f"{plan.step_time_s:.3f} s" in flat
        for item in compact_split(plan.stage_layers).split(","):
            assert re.search(rf"(?<![\dx]){item}(?![\dx])", flat)
    check_golden(f"recommend_llama3-8b_8xh100_w{width}.txt", text + "\n")


def test_dropped_columns_are_named_once(run) -> None:  # type: ignore[no-untyped-def]
    text = " ".join(render_plain(plans_table(run.result, width=90), width=90).split())
    assert text.count("not shown at 90 columns") == 1 and "free" in text


def test_wrap_commas_breaks_only_after_commas() -> None:
    assert _wrap_commas("5x4,4,5,4,1", 6) == "5x4,4,\n5,4,1"
    assert _wrap_commas("123456789,1", 4) == "123456789,\n1"


def test_mfu_from_model_flops() -> None:
    class P:
        step_time_s, pp, dp, tp, world = 2.0, 2, 2, 1, 4

    # 4e15 FLOPs per step over 2 s on 4 GPUs of 1e15 FLOP/s peak: 50%
    assert mfu(P(), 4e15, 1e15) == pytest.approx(0.5)  # type: ignore[arg-type]
    assert mfu(P(), 4e15, None) is None  # type: ignore[arg-type]
