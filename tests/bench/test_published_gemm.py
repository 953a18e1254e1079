"""The GEMM kernel benchmark: XLA's H100 table as transcribed, and one row by hand."""

from __future__ import annotations

import itertools

import pytest

from bench.published_gemm import _rates, main, predicted_s
from bench.published_gemm_data import XLA_H100
from pptune.costmodel import presets

SIZES = (256, 512, 1024, 2048, 4096)


def test_the_table_is_the_whole_cube_once() -> None:
    shapes = [(m, n, k) for m, n, k, _ in XLA_H100]
    assert sorted(shapes) == list(itertools.product(SIZES, SIZES, SIZES))
    # under the BF16 dense peak of 989 TFLOP/s everywhere; the largest reaches 79% of it
    assert all(0 < t < 989 for *_, t in XLA_H100)
    assert dict(((m, n, k), t) for m, n, k, t in XLA_H100)[(4096, 4096, 4096)] == 786.05


def test_the_largest_shape_by_hand() -> None:
    # 4096^3 on 132 SMs: 1024 tiles of 128 x 128 in 8 waves (or 512 of 256 x 128 in 4),
    # 1024 / 1056 useful either way; at the preset's large-GEMM share of the 989 TFLOP/s
    # peak; the last of 8 waves writes an eighth of the 32 MiB output after its mainloop;
    # split-K only adds FP32 partials here; one launch
    gpu = presets.GPUS["h100-sxm"]
    hbm = gpu.hbm_bytes_per_s * gpu.hbm_fraction
    flops = 2 * 4096**3
    want = (flops / (gpu.peak_flops * gpu.gemm_fraction * 1024 / 1056)
            + 2 * 4096 * 4096 / 8 / hbm + gpu.launch_s)
    assert predicted_s(4096, 4096, 4096, _rates()) == pytest.approx(want)


def test_the_ablations_price_every_row_and_nothing_else() -> None:
    doc = main()
    assert len(doc["rows"]) == len(XLA_H100) == 125
    assert {s["of"] for s in doc["summary"].values()} == {125}
    assert set(doc["summary"]) == {"model", "without_split_k", "without_last_wave_epilogue",
                                   "tiles_and_waves_only"}
    r = next(r for r in doc["rows"] if (r["m"], r["n"], r["k"]) == (4096, 4096, 4096))
    assert r["measured_us"] == pytest.approx(2 * 4096**3 / 786.05e12 * 1e6, abs=0.01)
