"""Per-op costs: hand-derived values for one GPT block on a round-number GPU."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.ends import embedding_ops, head_ops
from pptune.costmodel.ops import (
    Attention,
    Kind,
    Parallel,
    Phase,
    Rates,
    attention_ops,
    block_ops,
    gemm,
    phase_s,
    wave_utilisation,
)

# peak 100 TFLOP/s, 1 TB/s achieved HBM, 4 SMs, half of peak for large GEMMs
# and for attention, 1 us a kernel: numbers that make the arithmetic visible
GPU = dataclasses.replace(
    presets.GPUS["a100-80gb"], peak_flops=100e12, hbm_bytes_per_s=1e12, hbm_fraction=1.0,
    sm_count=4, gemm_fraction=0.5, attention_fraction=0.5, launch_s=1e-6,
)
RATES = Rates.of(GPU)
# GPT block: h=1024, 8 heads of 128, FFN 4096, sequence 512, vocabulary 4096
GPT = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 512, 8, False, True, "test")
H, S, F_ = 1024, 512, 4096


def _op(ops: list, name: str):  # type: ignore[no-untyped-def]
    (op,) = [o for o in ops if o.name == name]
    return op


def test_wave_quantization_example_of_nvidia_guide() -> None:
    # 1792 x 1792 output, 256 x 128 tiles: 7 x 14 = 98 tiles in one wave of 108 SMs
    assert wave_utilisation(1792, 1792, 108) == pytest.approx(98 / 108)


def test_tile_quantization_picks_the_best_tile() -> None:
    # 300 x 128: 256x128 and 128x256 tiles waste 70%; three 128x128 tiles on 4 SMs
    assert wave_utilisation(300, 128, 4) == pytest.approx(300 * 128 / (4 * 128 * 128))
    # 512 x 3072: 2 x 24 tiles of 256x128 fill 12 waves of 4 SMs exactly
    assert wave_utilisation(512, 3072, 4) == 1.0


def test_qkv_gemm_is_compute_bound_at_the_large_gemm_rate() -> None:
    op = _op(block_ops(GPT, 1, RATES, Parallel()), "qkv")
    flops = 2 * S * 3 * H * H  # 3.22e9
    assert op.flops == flops and op.kind is Kind.GEMM
    assert op.hbm_bytes == 2 * (S * H + H * 3 * H + S * 3 * H)  # 10.5 MB: 10.5 us < 64 us
    # 2 x 24 tiles of 256 x 128 fill 12 waves of 4 SMs, 4 x 24 of 128 x 128 fill 24: as
    # fast, and the last of 24 waves writes a 24th of the output after its mainloop
    assert op.time_s == pytest.approx(flops / 50e12 + 2 * S * 3 * H / 24 / 1e12)


def test_gemm_roofline_takes_the_memory_time_when_it_is_longer() -> None:
    # 4096 x 4096 output, k = 8: 0.27 GFLOP (5.4 us at 50 TFLOP/s), 33.8 MB (33.8 us), and
    # the last of 256 waves (1024 tiles of 128 x 128 on 4 SMs) writes its outputs after
    op = gemm("thin", Phase.F, 4096, 4096, 8, RATES)
    assert op.time_s == pytest.approx(2 * (4096 * 8 * 2 + 4096 * 4096) / 1e12
                                      + 2 * 4096 * 4096 / 256 / 1e12)


def test_elementwise_ops_move_their_bytes_over_hbm() -> None:
    ops = block_ops(GPT, 1, RATES, Parallel())
    assert _op(ops, "norm1").time_s == pytest.approx(4 * H * S / 1e12)  # read x, write y
    assert _op(ops, "residual1").hbm_bytes == 7 * H * S  # bias-dropout-add with its mask
    assert _op(ops, "activation").hbm_bytes == 4 * F_ * S  # GeLU: read, write
    assert _op(ops, "activation.bwd").hbm_bytes == 6 * F_ * S
    assert _op(ops, "norm2.bwd").hbm_bytes == 6 * H * S


def test_flash_attention_forward_and_backward() -> None:
    fwd, bwd = attention_ops(GPT, 1, RATES, Parallel())
    flops = 4 * S * S * 128 * 8 / 2  # causal: half of 4 s^2 d per head
    assert fwd.flops == flops and fwd.time_s == pytest.approx(flops / 50e12)
    assert bwd.phase is Phase.B and bwd.flops == 2.5 * flops  # FlashAttention-2 convention


def test_eager_attention_is_two_batched_gemms_and_the_softmax() -> None:
    ops = attention_ops(GPT, 1, RATES, Parallel(flash_attention=False))
    fwd = [o.name for o in ops if o.phase is Phase.F]
    assert fwd == ["qk", "softmax", "attn_dropout", "pv"]
    scores = S * S * 8
    assert _op(ops, "softmax").hbm_bytes == 4 * scores
    assert _op(ops, "attn_dropout").hbm_bytes == 5 * scores  # read, write, 1-byte mask
    assert _op(ops, "qk").flops == 2 * S * S * 128 * 8  # the full square, masked or not


def test_w_is_the_weight_gemms_only_and_b_has_no_weight_gradient() -> None:
    ops = block_ops(GPT, 1, RATES, Parallel())
    assert [o.name for o in ops if o.phase is Phase.W] == [
        "qkv.wgrad", "attn_out.wgrad", "mlp_up.wgrad", "mlp_down.wgrad"]
    assert all(o.kind is Kind.GEMM for o in ops if o.phase is Phase.W)
    assert not any(o.name.endswith("wgrad") for o in ops if o.phase is not Phase.W)
    # each weight GEMM's three products cost the same FLOPs: 2 * tokens * k * n
    for name in ("qkv", "attn_out", "mlp_up", "mlp_down"):
        assert {_op(ops, name).flops, _op(ops, name + ".dgrad").flops,
                _op(ops, name + ".wgrad").flops} == {_op(ops, name).flops}


def test_phase_time_adds_one_launch_per_kernel() -> None:
    ops = block_ops(GPT, 1, RATES, Parallel())
    w = [o for o in ops if o.phase is Phase.W]
    assert phase_s(ops, Phase.W, RATES) == pytest.approx(sum(o.time_s for o in w) + 4e-6)


def test_tensor_parallel_splits_gemms_and_adds_two_collectives_each_way() -> None:
    par = Parallel(tp=2, tp_latency_s=10e-6, tp_busbw_bytes_per_s=100e9)
    ops = block_ops(GPT, 1, RATES, par)
    assert _op(ops, "qkv").flops == 2 * S * 3 * H * H / 2
    comm = [o for o in ops if o.kind is Kind.COMM]
    assert [o.phase for o in comm] == [Phase.F, Phase.F, Phase.B, Phase.B]
    # ring all-reduce of the s x h bf16 activations: 2 (t-1)/t bytes / busbw
    assert comm[0].time_s == pytest.approx(10e-6 + 2 * S * H / 100e9)
    # unsplit parts (norms) stay whole without sequence parallelism, split with it
    assert _op(ops, "norm1").hbm_bytes == 4 * H * S
    sp = block_ops(GPT, 1, RATES, dataclasses.replace(par, sequence_parallel=True))
    assert _op(sp, "norm1").hbm_bytes == 4 * H * S / 2


def test_embedding_and_head() -> None:
    emb = embedding_ops(GPT, 1, RATES, Parallel())
    assert _op(emb, "embed").hbm_bytes == 7 * H * S  # gather, add positions, dropout
    # W: the dense BF16 table gradient zeroed, the tokens' rows summed into it; no add
    # into a main_grad under autograd's BF16 gradients (test_wgrad_accum.py has the rest)
    assert [(o.name, o.phase) for o in emb if o.kind is Kind.MEMORY] == [
        ("embed", Phase.F), ("embed.grad_zero", Phase.W), ("embed.wgrad", Phase.W)]
    assert _op(emb, "embed.grad_zero").hbm_bytes == 2 * (4096 + S) * H  # tokens, positions
    head = head_ops(GPT, 1, RATES, Parallel())
    assert _op(head, "lm_head").flops == 2 * S * H * 4096
    assert _op(head, "cross_entropy").hbm_bytes == 6 * S * 4096
    assert [o.name for o in head if o.phase is Phase.W] == ["lm_head.wgrad"]


def test_eager_swiglu_is_silu_then_mul_each_way() -> None:
    from pptune.costmodel.rates import Swiglu

    m = presets.MODELS["llama3-8b"]
    rates = Rates.of(presets.GPUS["h100-sxm"])
    f, s = 14336, 8192
    fused = block_ops(m, 1, rates, Parallel())
    eager = block_ops(m, 1, rates, Parallel(swiglu=Swiglu.EAGER))
    # forward: silu reads the gate and writes (2 + 2), mul reads both and writes (2 + 2 + 2)
    assert _op(eager, "activation").hbm_bytes == 10 * f * s
    assert _op(eager, "activation").kernels == 2
    # backward: mul's two products each read dy and an operand and write (2 x 6), then
    # silu's backward reads its gradient and input and writes (6)
    assert _op(eager, "activation.bwd").hbm_bytes == 18 * f * s
    assert _op(eager, "activation.bwd").kernels == 3
    # the fused kernel: gate and up read once, the product written once
    assert _op(fused, "activation").hbm_bytes == 6 * f * s
    assert (_op(fused, "activation").kernels, _op(fused, "activation.bwd").kernels) == (1, 1)
    others = [o for o in eager if not o.name.startswith("activation")]
    assert others == [o for o in fused if not o.name.startswith("activation")]


def test_llama_block_has_rotary_and_swiglu() -> None:
    m = presets.MODELS["llama3-8b"]
    ops = block_ops(m, 1, Rates.of(presets.GPUS["h100-sxm"]), Parallel())
    h, kv, f, s = 4096, 1024, 14336, 8192
    assert _op(ops, "rotary").hbm_bytes == 4 * s * (h + kv)
    assert _op(ops, "activation").hbm_bytes == 6 * f * s  # read gate and up, write
    assert _op(ops, "mlp_up").flops == 2 * s * h * 2 * f
    assert _op(ops, "residual1").hbm_bytes == 6 * h * s  # plain add, no dropout


@pytest.mark.parametrize("attention", list(Attention))
def test_every_attention_kind_builds_analytic_costs(attention: Attention) -> None:
    from pptune.costs.profiles import analytic_profile

    prof = analytic_profile("gpt3-1.3b", "a100-80gb", [1], attention=attention.value)
    assert f"{attention.value} attention" in prof.notes[0]
    assert prof.layers[1].per_micro_batch["1"].fwd_s > 0


def test_tp_comm_overlap_exposes_only_what_outlasts_the_gemm() -> None:
    par = Parallel(tp=2, tp_latency_s=10e-6, tp_busbw_bytes_per_s=100e9)
    plain = block_ops(GPT, 1, RATES, par)
    hidden = block_ops(GPT, 1, RATES, dataclasses.replace(par, tp_comm_overlap=True))
    # attention output GEMM 512 x 1024 x 512: 0.54 GFLOP at 50 TFLOP/s = 10.7 us, plus the
    # last of 8 waves' outputs (32 tiles of 128 x 128: 1 MiB / 8 at 1 TB/s); its all-reduce
    # of 1 MiB: 10 us + 1 MiB / 100 GB/s = 20.5 us; the rest left over
    proj = _op(plain, "attn_out")
    assert proj.time_s == pytest.approx(2 * 512 * 1024 * 512 / 50e12 + 2 * 512 * 1024 / 8 / 1e12)
    assert _op(plain, "tp_attn").time_s == pytest.approx(10e-6 + S * H * 2 / 100e9)
    assert _op(hidden, "tp_attn").time_s == pytest.approx(
        _op(plain, "tp_attn").time_s - proj.time_s)
    fast = block_ops(GPT, 1, RATES, dataclasses.replace(par, tp_comm_overlap=True,
                                                          tp_busbw_bytes_per_s=1e12))
    assert _op(fast, "tp_mlp").time_s == 0.0  # shorter than the down projection: hidden


def test_split_k_fills_the_sms_a_small_output_leaves_idle() -> None:
    # 128 x 128 output, k = 4096 on 4 SMs: one 128 x 128 tile, a quarter of the wave; split
    # into 4 slices of 1024 the 4 blocks fill it, plus 4 FP32 partials written and read back
    op = gemm("g", Phase.F, 128, 128, 4096, RATES)
    flops = 2 * 128 * 128 * 4096
    partials = 8 * 4 * 128 * 128
    last_wave = 2 * 128 * 128  # one wave: all the output is written after it
    assert op.time_s == pytest.approx(flops / 50e12 + (partials + last_wave) / 1e12)
    # k = 512 allows two slices of 256 only: half the wave, two partials
    shallow = gemm("g", Phase.F, 128, 128, 512, RATES)
    assert shallow.time_s == pytest.approx(2 * 128 * 128 * 512 / (50e12 * 0.5)
                                           + (8 * 2 * 128 * 128 + last_wave) / 1e12)


def test_no_split_k_where_the_tiles_already_fill_the_waves() -> None:
    # 512 x 3072: 96 tiles of 128 x 128 fill 24 waves of 4 SMs; any split only adds traffic
    op = gemm("g", Phase.F, 512, 3072, 4096, RATES)
    assert op.time_s == pytest.approx(2 * 512 * 3072 * 4096 / 50e12 + 2 * 512 * 3072 / 24 / 1e12)


def test_the_last_waves_epilogue_is_one_waves_share_of_the_output() -> None:
    # 1024 x 1024 output, k = 1024: 32 tiles of 256 x 128 (or 128 x 256) in 8 full waves of
    # 4 SMs, 64 of 128 x 128 in 16: both useful throughout, so 2.15 GFLOP at 50 TFLOP/s =
    # 42.9 us; the last wave writes its share of the 2 MiB BF16 output after its mainloop:
    # 2 MiB / 16 at 1 TB/s (the 16-wave tile leaves the smallest share)
    flops = 2 * 1024**3
    op = gemm("g", Phase.F, 1024, 1024, 1024, RATES)
    assert op.time_s == pytest.approx(flops / 50e12 + 2 * 1024 * 1024 / 16 / 1e12)
    # without the term: the roofline alone, as the model stood before it
    bare = gemm("g", Phase.F, 1024, 1024, 1024, RATES, last_wave=False)
    assert bare.time_s == pytest.approx(flops / 50e12)


def test_without_split_k_a_small_output_runs_on_its_tiles_alone() -> None:
    # 128 x 128, k = 4096 on 4 SMs without split-K: one tile, a quarter of the wave useful,
    # and the one wave writes the whole output after its mainloop
    op = gemm("g", Phase.F, 128, 128, 4096, RATES, split_k=False)
    assert op.time_s == pytest.approx(2 * 128 * 128 * 4096 / (50e12 * 0.25)
                                      + 2 * 128 * 128 / 1e12)
    both_off = gemm("g", Phase.F, 128, 128, 4096, RATES, split_k=False, last_wave=False)
    assert both_off.time_s == pytest.approx(2 * 128 * 128 * 4096 / (50e12 * 0.25))


def test_a_single_efficiency_has_no_shape_terms() -> None:
    # --efficiency 0.4: that one fraction of peak, no split-K, no epilogue
    rates = dataclasses.replace(RATES, gemm_efficiency=0.4)
    op = gemm("g", Phase.F, 128, 128, 4096, rates)
    assert op.time_s == pytest.approx(2 * 128 * 128 * 4096 / 40e12)
