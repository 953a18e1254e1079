"""FP8: one GEMM, the memory terms and the checks, by hand."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers, block_act_bytes
from pptune.costmodel.keys import Precision
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops, gemm
from pptune.costmodel.precision import (
    Fp8Kernels,
    gemm_input_bytes,
    gemm_peak,
    param_gather_bytes,
    problems,
    weight_cache_bytes_per_param,
)

# 100 TFLOP/s BF16, 200 FP8 at half of it measured; 1 TB/s; 4 SMs
GPU = dataclasses.replace(
    presets.GPUS["h100-sxm"], peak_flops=100e12, fp8_peak_flops=200e12, gemm_fraction=0.8,
    fp8_gemm_fraction=0.5, hbm_bytes_per_s=1e12, hbm_fraction=1.0, sm_count=4, launch_s=1e-6,
    causal_attention=(), full_attention=(),
)
RATES = Rates.of(GPU)


def test_one_fp8_gemm() -> None:
    # 512 x 512 output: 2 x 4 tiles of 256 x 128 on 4 SMs, 2 full waves: no
    # quantisation loss, so 0.5 of the 200 TFLOP/s FP8 peak; inputs 1 byte, output 2;
    # 16 tiles of 128 x 128 fill 4 waves as well: the last wave's quarter of the output is
    # written after its mainloop
    m = n = k = 512
    op = gemm("x", Phase.F, m, n, k, RATES, fp8=True)
    flops = 2.0 * m * n * k
    last_wave = 2.0 * m * n / 4 / 1e12
    assert op.flops == flops
    assert op.hbm_bytes == 1.0 * (m * k + k * n) + 2.0 * m * n
    assert op.time_s == pytest.approx(max(flops / (200e12 * 0.5), op.hbm_bytes / 1e12)
                                      + last_wave)
    bf16 = gemm("x", Phase.F, m, n, k, RATES)
    assert bf16.time_s == pytest.approx(max(flops / (100e12 * 0.8), bf16.hbm_bytes / 1e12)
                                        + last_wave)
    # 100 x 0.8 vs 200 x 0.5: the compute in the ratio 0.8, the same last wave
    assert (op.time_s - last_wave) / (bf16.time_s - last_wave) == pytest.approx(0.8 / 1.0)


def test_fp8_weight_copies_and_their_transposes() -> None:
    assert weight_cache_bytes_per_param(Precision.BF16) == 0.0
    assert weight_cache_bytes_per_param(Precision.FP8) == 2.0  # FP8 copy + transpose
    assert weight_cache_bytes_per_param(Precision.FP8, fp8_params=True) == 0.0  # replace BF16
    assert weight_cache_bytes_per_param(Precision.MXFP8) == 2.0 + 2 / 32  # + E8M0 scales
    assert param_gather_bytes(Precision.FP8, True) == 1.0
    assert param_gather_bytes(Precision.FP8, False) == 2.0
    assert param_gather_bytes(Precision.BF16, True) == 2.0
    assert gemm_input_bytes(Precision.FP16) == 2.0


def test_fp8_saves_only_the_gemm_inputs_at_one_byte() -> None:
    # Llama 3 8B block, tp1, one sequence: the QKV, attention-output and first MLP
    # inputs (h wide each) and the second MLP input (f wide) go from 2 bytes to 1
    m = presets.MODELS["llama3-8b"]
    s, h, f = m.seq_len, m.hidden, m.ffn
    saved = block_act_bytes(m, 1) - block_act_bytes(m, 1, gemm_input_bytes=1.0)
    assert saved == pytest.approx(s * (3 * h + f))


def test_fp8_block_runs_its_four_linears_in_fp8_and_casts() -> None:
    m = presets.MODELS["llama3-8b"]
    ops = block_ops(m, 1, RATES, Parallel(precision=Precision.FP8))
    gemms = {o.name for o in ops if o.kind.value == "gemm"}
    assert {"qkv", "attn_out", "mlp_up", "mlp_down"} <= gemms
    casts = [o for o in ops if o.name.startswith("fp8_cast")]
    tokens, h, f = m.seq_len, m.hidden, m.ffn
    kv = m.kv_heads * m.head_dim
    # forward: attention-output and second-MLP inputs; backward: the four output grads
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.F) == 4 * tokens * (h + f)
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.B) == \
        4 * tokens * ((h + 2 * kv) + h + 2 * f + h)


@pytest.mark.parametrize("fp8_params", [False, True])
def test_torchao_float8_casts_by_its_own_roofline(fp8_params: bool) -> None:
    # torchao's roofline of a tensorwise float8 linear under torch.compile: the input and
    # the output gradient read once (2) and written in both layouts (1 + 1), their abs-max
    # fused upstream; the weight read for its abs-max (2), cast forward (2 + 1) and again
    # backward (2 + 1). FSDP's float8 all-gather hands the linears FP8 weights: no weight
    # casts in the layer.
    m = presets.MODELS["llama3-8b"]
    par = Parallel(precision=Precision.FP8, fp8_kernels=Fp8Kernels.TORCHAO,
                   fp8_params=fp8_params)
    ops = block_ops(m, 1, RATES, par)
    casts = [o for o in ops if o.name.startswith("fp8_cast")]
    tokens, h, f = m.seq_len, m.hidden, m.ffn
    qkv = h + 2 * m.kv_heads * m.head_dim
    linears = [(h, qkv), (h, h), (h, 2 * f), (f, h)]  # (in, out): qkv, attn_out, up, down
    w = 0 if fp8_params else 1
    fwd = sum(4 * tokens * k + w * 5 * k * n for k, n in linears)
    bwd = sum(4 * tokens * n + w * 3 * k * n for k, n in linears)
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.F) == fwd
    assert sum(c.hbm_bytes for c in casts if c.phase is Phase.B) == bwd
    # a kernel a cast: the input's forward, the weight's two abs-max stages and cast;
    # the output gradient's backward and the weight's second cast
    assert sum(c.kernels for c in casts if c.phase is Phase.F) == (1 + 3 * w) * 4
    assert sum(c.kernels for c in casts if c.phase is Phase.B) == (1 + w) * 4


def test_the_lm_head_stays_bf16() -> None:
    m = presets.MODELS["llama3-8b"]
    bf16 = analytic_layers(m, presets.GPUS["h100-sxm"], [1])
    fp8 = analytic_layers(m, presets.GPUS["h100-sxm"], [1], gemm_precision=Precision.FP8)
    assert fp8[-1].per_micro_batch[1] == bf16[-1].per_micro_batch[1]
    assert fp8[1].per_micro_batch[1].fwd_s < bf16[1].per_micro_batch[1].fwd_s


def test_precision_checks_name_the_gpu_and_the_knob() -> None:
    a100 = presets.GPUS["a100-80gb"]
    (msg,) = problems(Precision.FP8, a100)
    assert "--precision fp8" in msg and "a100-80gb" in msg
    (msg,) = problems(Precision.MXFP8, presets.GPUS["h100-sxm"])
    assert "mxfp8" in msg and "h100-sxm" in msg
    assert problems(Precision.MXFP8, presets.GPUS["b200"]) == []
    assert problems(Precision.FP16, a100) == []
    with pytest.raises(ValueError, match="a100-80gb"):
        gemm_peak(Precision.FP8, a100)
    assert gemm_peak(Precision.FP16, a100) == (312e12, 0.869)  # FP16 at BF16's rate


def test_torchao_float8_caches_nothing_and_saves_bf16_inputs() -> None:
    """torchao's float8 (torchtitan) casts each weight per use and saves the BF16 input and
    weight for the backward (float8_linear.py matmul_with_hp_or_float8_args); Transformer
    Engine caches the FP8 copy and transpose all step and saves the FP8 input."""
    from pptune.costmodel.precision import Fp8Kernels, saved_input_bytes
    assert weight_cache_bytes_per_param(Precision.FP8, kernels=Fp8Kernels.TORCHAO) == 0.0
    assert weight_cache_bytes_per_param(Precision.MXFP8, kernels=Fp8Kernels.TORCHAO) == 0.0
    assert saved_input_bytes(Precision.FP8, Fp8Kernels.TORCHAO) == 2.0
    assert saved_input_bytes(Precision.FP8, Fp8Kernels.TE) == 1.0
    assert saved_input_bytes(Precision.MXFP8, Fp8Kernels.TE) == 1.0 + 1 / 32
    assert Parallel(precision=Precision.FP8, fp8_kernels=Fp8Kernels.TORCHAO).saved_input_bytes \
        == 2.0


def test_torchao_float8_profile_holds_what_bf16_holds() -> None:
    """Llama 3 8B on H100, tp 1: under torchao's float8 a block keeps the BF16 run's bytes
    and no weight cache; under Transformer Engine's the cache is 2 bytes a GEMM weight
    (4h^2 + 2h kv + 3hf = 218,103,808 parameters) and each GEMM input saves a byte an
    element less (s (3h + f) = 8,192 x 26,624 a sequence)."""
    from pptune.costmodel.precision import Fp8Kernels
    from pptune.costs.profiles import analytic_profile
    m = presets.MODELS["llama3-8b"]
    def blocks(**kw: object) -> tuple[float, float]:
        prof = analytic_profile(m, "h100-sxm", [1], **kw)  # type: ignore[arg-type]
        block = next(layer for layer in prof.layers if layer.name.startswith("block"))
        return block.per_micro_batch["1"].act_bytes, block.cache_bytes or 0.0
    bf16 = blocks()
    te = blocks(gemm_precision=Precision.FP8)
    tao = blocks(gemm_precision=Precision.FP8, fp8_kernels=Fp8Kernels.TORCHAO)
    assert tao == (bf16[0], 0.0)
    assert te[1] == 2.0 * 218_103_808
    assert bf16[0] - te[0] == pytest.approx(m.seq_len * (3 * m.hidden + m.ffn))
