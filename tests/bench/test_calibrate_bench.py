"""bench/calibrate.py: leave one out, by hand on rows whose steps scale as 1 / factor."""

from __future__ import annotations

import pytest

from bench.calibrate import Row, leave_one_out, megatron_family
from pptune.costmodel.calibration import Factors


def _row(label: str, work_s: float, true_factor: float) -> Row:
    return Row(label, work_s / true_factor, lambda f, w=work_s: w / f.compute)


def test_each_row_calibrates_once_and_predicts_the_others() -> None:
    # rows of 2 s and 4 s of work that ran at 0.8 and 0.5 of the model's rates
    res = leave_one_out("toy", "by hand", [_row("a", 2.0, 0.8), _row("b", 4.0, 0.5)])
    assert res["rows"] == 2 and res["predictions"] == 2
    a, b = res["rounds"]
    assert a["factor"] == pytest.approx(0.8) and b["factor"] == pytest.approx(0.5)
    # calibrated on a (0.8), b is predicted 4 / 0.8 = 5 s against 8 s published: -37.5%
    assert a["predictions"][0]["error"] == pytest.approx(5 / 8 - 1)
    # calibrated on b (0.5), a is predicted 2 / 0.5 = 4 s against 2.5 s: +60%
    assert b["predictions"][0]["error"] == pytest.approx(4 / 2.5 - 1)
    assert res["worst_abs_error"] == pytest.approx(0.6)
    assert res["within"] == {"median": False, "worst": False}


def test_rows_that_ran_alike_predict_each_other_exactly() -> None:
    rows = [_row(str(w), w, 0.7) for w in (1.0, 3.0, 9.0)]
    res = leave_one_out("toy", "by hand", rows)
    assert res["worst_abs_error"] == pytest.approx(0.0, abs=1e-6)


def test_the_megatron_family_is_every_table_1_row() -> None:
    name, _, rows = megatron_family()
    assert name == "megatron_sc21_table1" and len(rows) == 10
    first = rows[0]  # 1.7B on 32 GPUs at 137 TFLOP/s: eq. 3's FLOPs over that rate
    assert first.published_step_s == pytest.approx(3.528, rel=1e-3)
    assert first.step_at(Factors.common(0.5)) > first.step_at(Factors())


def test_the_modern_families_are_each_dgxc_series_and_the_models_across() -> None:
    from bench.calibrate import modern_families

    fams = {name: rows for name, _, rows in modern_families()}
    weak = [n for n in fams if n.startswith("weak scaling: dgxc")]
    assert len(weak) == 12  # 6 models with several GPU counts x BF16, FP8
    assert sorted(n for n in fams if n.startswith("across")) == [
        "across models: dgxc bf16", "across models: dgxc fp8"]
    rows = fams["weak scaling: dgxc llama3.1-8b bf16"]
    assert rows[0].label == "llama3-8b bf16 8 h100-sxm"
    # 8 H100 at 10,254 tokens/s each, global batch 128 of 8192 tokens
    assert rows[0].published_step_s == pytest.approx(128 * 8192 / (10254 * 8), rel=1e-3)
