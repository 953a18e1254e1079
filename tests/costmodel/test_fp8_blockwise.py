"""Block-scaled FP8 (Megatron-LM --fp8-recipe blockwise, Transformer Engine's
Float8BlockScaling): its scales' bytes, by hand. One FP32 scale for each 1 x 128 tile
of an activation or gradient and each 128 x 128 block of a weight; every copy a cast
writes (row- and column-wise) has its own."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import block_act_bytes
from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops
from pptune.costmodel.precision import (
    Fp8Recipe,
    cast_bytes_per_element,
    gemm_input_bytes,
    saved_input_bytes,
    weight_cache_bytes_per_param,
)

BLOCK = Fp8Recipe.BLOCKWISE
GPU = dataclasses.replace(
    presets.GPUS["h100-sxm"], peak_flops=100e12, fp8_peak_flops=200e12, gemm_fraction=0.8,
    fp8_gemm_fraction=0.5, hbm_bytes_per_s=1e12, hbm_fraction=1.0, sm_count=4, launch_s=1e-6,
    causal_attention=(), full_attention=(),
)
RATES = Rates.of(GPU)


def test_an_fp8_input_carries_a_4_byte_scale_every_128_elements() -> None:
    assert gemm_input_bytes(Precision.FP8, BLOCK) == 1 + 4 / 128 == 1.03125
    assert saved_input_bytes(Precision.FP8, recipe=BLOCK) == 1.03125
    for recipe in (Fp8Recipe.DELAYED, Fp8Recipe.TENSORWISE):  # one scale a tensor
        assert gemm_input_bytes(Precision.FP8, recipe) == 1.0
    # the recipe is Transformer Engine's FP8's: BF16 and MXFP8 keep their own widths
    assert gemm_input_bytes(Precision.BF16, BLOCK) == 2.0
    assert gemm_input_bytes(Precision.MXFP8, BLOCK) == 1 + 1 / 32


def test_a_cast_writes_each_copys_scales() -> None:
    # read BF16 (2), write the row-wise and column-wise FP8 copies (1 + 1) and each
    # copy's FP32 scale a 128-element tile (2 x 4 / 128)
    assert cast_bytes_per_element(BLOCK) == 2 + 1 + 1 + 2 * 4 / 128 == 4.0625
    assert cast_bytes_per_element(Fp8Recipe.TENSORWISE) == 4.0


def test_cached_weight_copies_carry_a_scale_every_128_x_128_block() -> None:
    assert weight_cache_bytes_per_param(Precision.FP8, recipe=BLOCK) == 2 + 2 * 4 / 128**2
    assert weight_cache_bytes_per_param(Precision.FP8, True, recipe=BLOCK) == 2 * 4 / 128**2
    assert weight_cache_bytes_per_param(Precision.FP8, recipe=Fp8Recipe.TENSORWISE) == 2.0


def test_a_block_saves_and_casts_the_scales_beside_the_fp8_elements() -> None:
    # Llama 3 8B block, tp 1, one sequence: the four FP8 GEMM inputs (QKV, attention
    # output and first MLP: h wide each; second MLP: f wide) are saved at 1 + 1/32
    m = presets.MODELS["llama3-8b"]
    s, h, f = m.seq_len, m.hidden, m.ffn
    more = (block_act_bytes(m, 1, gemm_input_bytes=1.03125)
            - block_act_bytes(m, 1, gemm_input_bytes=1.0))
    assert more == pytest.approx(s * (3 * h + f) / 32)
    # the casts: forward the attention-output and second-MLP inputs (h + f), backward the
    # four output gradients, each element 4.0625 bytes instead of 4
    tensorwise = Parallel(precision=Precision.FP8, fp8_recipe=Fp8Recipe.TENSORWISE)
    block = Parallel(precision=Precision.FP8, fp8_recipe=BLOCK)

    def casts(par: Parallel, phase: Phase) -> float:
        return sum(o.hbm_bytes for o in block_ops(m, 1, RATES, par)
                   if o.name.startswith("fp8_cast") and o.phase is phase)

    assert casts(block, Phase.F) == 4.0625 * s * (h + f)
    assert casts(block, Phase.F) / casts(tensorwise, Phase.F) == 4.0625 / 4
    assert casts(block, Phase.B) / casts(tensorwise, Phase.B) == 4.0625 / 4
    # the GEMMs themselves: tensorwise's rate (no published block-scaled figure)
    gemms = {o.name: o.time_s for o in block_ops(m, 1, RATES, block) if o.kind.value == "gemm"}
    same = {o.name: o.time_s for o in block_ops(m, 1, RATES, tensorwise)
            if o.kind.value == "gemm"}
    assert gemms == same
