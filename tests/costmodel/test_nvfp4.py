"""NVFP4: one GEMM, the casts, the memory terms and the refusal, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import nvfp4, presets
from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops, gemm
from pptune.costmodel.precision import (
    cast_bytes_per_element,
    gemm_input_bytes,
    gemm_peak,
    param_gather_bytes,
    problems,
    weight_cache_bytes_per_param,
)
from tests.costmodel import test_precision

# test_precision's toy GPU (100 TFLOP/s BF16, 200 FP8; 1 TB/s; 4 SMs) with 400 FP4
GPU = dataclasses.replace(test_precision.GPU, fp4_peak_flops=400e12)


def test_the_fraction_is_te_s_b300_layer_on_the_fp8_fraction_s_footing() -> None:
    # 6 x 15872 x 4096 x 49152 = 19.17 TFLOP; NVFP4 3.764 ms, MXFP8 7.161 ms: 1.9025x;
    # 0.763 x 1.9025 x 4.5 / 13.5 = 0.48387
    assert nvfp4.LAYER_FLOPS == pytest.approx(19.17e12, rel=1e-3)
    assert nvfp4.FP8_FRACTION == presets.GPUS["b300"].fp8_gemm_fraction
    assert nvfp4.GEMM_FRACTION == 0.484
    assert gemm_peak(Precision.NVFP4, presets.GPUS["b200"]) == (9000e12, 0.484)
    assert gemm_peak(Precision.NVFP4, presets.GPUS["gb300"]) == (15000e12, 0.484)


def test_one_nvfp4_gemm() -> None:
    # 512 x 512 output: 2 x 4 tiles of 256 x 128 on 4 SMs, 2 full waves, so 0.484 of the
    # 400 TFLOP/s FP4 peak; inputs 1/2 + 1/16 bytes, output 2; the last wave's quarter of
    # the output written after its mainloop (as test_precision.test_one_fp8_gemm)
    rates = Rates.of(GPU, gemm_precision=Precision.NVFP4)
    m = n = k = 512
    op = gemm("x", Phase.F, m, n, k, rates, fp8=True)
    flops = 2.0 * m * n * k
    assert op.hbm_bytes == 0.5625 * (m * k + k * n) + 2.0 * m * n
    last_wave = 2.0 * m * n / 4 / 1e12
    assert op.time_s == pytest.approx(flops / (400e12 * 0.484) + last_wave)
    # the FP8 rates of the same GPU are untouched
    fp8 = gemm("x", Phase.F, m, n, k, Rates.of(GPU), fp8=True)
    assert fp8.time_s == pytest.approx(flops / (200e12 * 0.5) + last_wave)


def test_nvfp4_casts_of_a_block() -> None:
    # every linear's input forward (4 tensors), every output gradient backward (4): 5.125
    # bytes an element each (amax read 2, cast read 2, two copies of 1/2 + 1/16), 2 kernels
    # a tensor, 64 RHT FLOPs an element
    m = presets.MODELS["llama3-8b"]
    tokens = m.seq_len
    rates = Rates.of(GPU, gemm_precision=Precision.NVFP4)
    ops = block_ops(m, 1, rates, Parallel(precision=Precision.NVFP4))
    casts = [o for o in ops if o.name.startswith("fp4_cast")]
    h, q, kv, f = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn
    fwd = tokens * (h + q + h + f)  # QKV and out inputs, up (gate and up) and down inputs
    bwd = tokens * (q + 2 * kv + h + 2 * f + h)
    assert sum(o.hbm_bytes for o in casts if o.phase is Phase.F) == 5.125 * fwd
    assert sum(o.hbm_bytes for o in casts if o.phase is Phase.B) == 5.125 * bwd
    assert sum(o.flops for o in casts) == 64 * (fwd + bwd)
    assert sum(o.kernels for o in casts) == 2 * 8
    assert not [o for o in ops if o.name.startswith("fp8_cast")]
    assert cast_bytes_per_element(precision=Precision.NVFP4) == 5.125


def test_nvfp4_weight_copies_and_saved_inputs() -> None:
    # row- and column-wise copies, each 1/2 byte and one E4M3 scale a 16-element block
    assert weight_cache_bytes_per_param(Precision.NVFP4) == 2 * (0.5 + 1 / 16)
    # --fp4-param-gather: the copies replace the BF16 weight (the saving is not counted)
    assert weight_cache_bytes_per_param(Precision.NVFP4, fp8_params=True) < 0
    assert gemm_input_bytes(Precision.NVFP4) == 0.5625
    assert param_gather_bytes(Precision.NVFP4, True) == 0.5625
    assert param_gather_bytes(Precision.NVFP4, False) == 2.0


def test_nvfp4_needs_an_fp4_peak() -> None:
    msg = problems(Precision.NVFP4, presets.GPUS["h100-sxm"])
    assert len(msg) == 1 and "nvfp4" in msg[0] and "h100-sxm" in msg[0]
    assert problems(Precision.NVFP4, presets.GPUS["mi300x"])  # FP8 (FNUZ), no FP4
    for gpu in ("b200", "gb200", "b300", "gb300"):
        assert problems(Precision.NVFP4, presets.GPUS[gpu]) == []
    assert gemm_peak(Precision.NVFP4, presets.GPUS["b300"]) == (13500e12, 0.484)
    with pytest.raises(ValueError, match="nvfp4"):
        gemm_peak(Precision.NVFP4, presets.GPUS["h100-sxm"])
