"""The published-runs benchmark's exact part: Zero Bubble's Table 5 bubble
rates from its Table 9 profiled times, through pptune's simulator."""

from __future__ import annotations

import pytest

from bench.published import megatron_model_flops, zb_bubbles
from bench.published_data import MEGATRON_TABLE1


def test_zero_bubble_table5_from_table9_profiled_times() -> None:
    rows = zb_bubbles()
    assert len(rows) == 36  # 12 runs x (1F1B, ZB-H1, 1F1B-I)
    exact = [r for r in rows if r["schedule"] in ("1F1B", "ZB-H1")]
    assert all(abs(r["predicted"] - r["published"]) <= 0.0005 for r in exact), exact
    first = next(r for r in rows if (r["model"], r["microbatches"], r["schedule"])
                 == ("1.5B", 24, "1F1B"))
    assert first["predicted"] == pytest.approx(0.2431, abs=5e-5)


def test_megatron_eq3_flops_of_the_1t_row() -> None:
    # 96 B s l h^2 (1 + s/6h + V/16lh) = 5.14e19 FLOPs; at the published 163
    # TFLOP/s on 3072 GPUs that is a 102.6 s step (and 502 PFLOP/s aggregate)
    row = next(r for r in MEGATRON_TABLE1 if r.params_billion == 1008.0)
    flops = megatron_model_flops(row)
    s, h, n, v = 2048, 25600, 128, 51200
    assert flops == pytest.approx(96 * 3072 * s * n * h**2 * (1 + s / (6 * h) + v / (16 * n * h)))
    assert flops / (3072 * 163e12) == pytest.approx(102.63, abs=0.01)
    assert flops / 102.63 / 1e15 == pytest.approx(row.aggregate_pflops, rel=0.005)
