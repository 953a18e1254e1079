"""Weight gradients accumulated into Megatron-LM's FP32 main_grad (rates.WgradAccum):
fused into the GEMM's epilogue (read and written, 8 bytes an output element), unfused
(a BF16 gradient, then a kernel adding it: 2 + 4 + 4 bytes a weight element), or BF16
alone; into a BF16 main_grad (--grad-reduce-in-bf16) 4 and 2 + 2 + 2. Hand-derived on
the round-number GPU of test_ops.py."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.ends import embedding_ops, head_ops
from pptune.costmodel.kernels import grad_add, linear
from pptune.costmodel.moe import ExpertParallel, moe_part
from pptune.costmodel.ops import Kind, Parallel, Phase, Rates, block_ops, mlp_part, phase_s
from pptune.costmodel.rates import Accumulation, WgradAccum

# peak 100 TFLOP/s, 1 TB/s achieved HBM, 4 SMs, half of peak for large GEMMs, 1 us a kernel
GPU = dataclasses.replace(
    presets.GPUS["a100-80gb"], peak_flops=100e12, hbm_bytes_per_s=1e12, hbm_fraction=1.0,
    sm_count=4, gemm_fraction=0.5, attention_fraction=0.5, launch_s=1e-6,
)
RATES = Rates.of(GPU)
MIB = 1024 * 1024


def _w(how: WgradAccum, tokens: int, rates: Rates = RATES,
       main_grad_bytes: float = 4.0) -> list:  # type: ignore[type-arg]
    """The W ops of a 1024 x 1024 weight over ``tokens`` tokens: its GEMM and any add."""
    accum = Accumulation(how, main_grad_bytes)
    return [linear("fc", tokens, 1024, 1024, rates, accum=accum)[2],
            *grad_add("fc", 1024 * 1024, rates, accum)]


def test_every_member_prices_its_bytes_at_each_main_grad_width() -> None:
    def widths(main_grad_bytes: float) -> dict[WgradAccum, tuple[float, float, bool]]:
        return {a: (acc.out_bytes, acc.add_bytes, acc.main_grad) for a in WgradAccum
                for acc in [Accumulation(a, main_grad_bytes)]}

    # FP32 main_grad: fused reads and writes 4 + 4; unfused reads the BF16 gradient (2)
    # and reads and writes 4 + 4
    assert widths(4.0) == {WgradAccum.FUSED: (8.0, 0.0, True),
                           WgradAccum.UNFUSED: (2.0, 10.0, True),
                           WgradAccum.BF16: (2.0, 0.0, False)}
    # BF16 main_grad (--grad-reduce-in-bf16): 2 + 2, and 2 + 2 + 2
    assert widths(2.0) == {WgradAccum.FUSED: (4.0, 0.0, True),
                           WgradAccum.UNFUSED: (2.0, 6.0, True),
                           WgradAccum.BF16: (2.0, 0.0, False)}
    assert Accumulation() == Accumulation(WgradAccum.BF16, 4.0)
    assert [Accumulation(a, 2.0).unfused() for a in WgradAccum] == [
        Accumulation(WgradAccum.BF16, 2.0), Accumulation(WgradAccum.UNFUSED, 2.0),
        Accumulation(WgradAccum.UNFUSED, 2.0)]


def test_a_memory_bound_weight_gradient_by_hand() -> None:
    # --efficiency 0.4 (40 TFLOP/s, no shape terms); dW = x^T dy, 1024 x 1024 over 64
    # tokens: 134.2 MFLOP = 3.355 us; inputs 2 x 2 x 64 x 1024 = 256 KiB
    rates = dataclasses.replace(RATES, gemm_efficiency=0.4)
    flops_s = 2 * 1024 * 1024 * 64 / 40e12
    inputs = 2 * 2 * 64 * 1024
    bf16, = _w(WgradAccum.BF16, 64, rates)
    assert bf16.hbm_bytes == inputs + 2 * MIB  # 2.36 MB: 2.36 us, under the compute
    assert bf16.time_s == pytest.approx(flops_s)
    fused, = _w(WgradAccum.FUSED, 64, rates)  # main_grad read and written: 8 bytes
    assert fused.hbm_bytes == inputs + 8 * MIB
    assert fused.time_s == pytest.approx((inputs + 8 * MIB) / 1e12)  # 8.65 us, memory-bound
    gemm_op, add = _w(WgradAccum.UNFUSED, 64, rates)  # BF16 out, then its own add kernel
    assert gemm_op.hbm_bytes == inputs + 2 * MIB and gemm_op.time_s == pytest.approx(flops_s)
    assert (add.name, add.phase, add.kind, add.kernels) == (
        "fc.main_grad", Phase.W, Kind.MEMORY, 1)
    assert add.hbm_bytes == 10 * MIB and add.time_s == pytest.approx(10 * MIB / 1e12)
    # W with a launch a kernel: fused 9.65 us, unfused 3.36 + 1 + 10.49 + 1 = 15.84 us
    assert phase_s([fused], Phase.W, rates) == pytest.approx((inputs + 8 * MIB) / 1e12 + 1e-6)
    assert phase_s([gemm_op, add], Phase.W, rates) == pytest.approx(
        flops_s + 1e-6 + 10 * MIB / 1e12 + 1e-6)


def test_a_compute_bound_weight_gradient_writes_8_bytes_in_its_last_wave() -> None:
    # 1024 x 1024 over 1024 tokens: 2.15 GFLOP at 50 TFLOP/s = 42.9 us, then the last of 16
    # waves of 128 x 128 tiles writes its share of the output: 2 bytes an element in BF16,
    # 8 accumulated into main_grad (4 MiB x 2 / 16 = 0.52 us at 1 TB/s)
    compute_s = 2 * 1024**3 / 50e12
    bf16, = _w(WgradAccum.BF16, 1024)
    fused, = _w(WgradAccum.FUSED, 1024)
    assert bf16.time_s == pytest.approx(compute_s + 2 * MIB / 16 / 1e12)
    assert fused.time_s == pytest.approx(compute_s + 8 * MIB / 16 / 1e12)
    assert fused.hbm_bytes == 2 * 2 * 1024 * 1024 + 8 * MIB
    unfused = _w(WgradAccum.UNFUSED, 1024)
    assert [o.time_s for o in unfused] == pytest.approx([bf16.time_s, 10 * MIB / 1e12])


def test_a_blocks_linears_each_add_their_weights_unfused() -> None:
    # GPT block h 1024, FFN 4096 on tp 2: the MLP's up (1024 x 2048) and down (2048 x 1024)
    # on a rank; unfused, one add each of 10 bytes a weight element, in W
    gpt = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 512, 8, False, True, "test")
    par = Parallel(tp=2, wgrad_accum=WgradAccum.UNFUSED)
    part = mlp_part(gpt, 1, RATES, par)
    adds = [(o.name, o.hbm_bytes) for o in part.wgrad if o.kind is Kind.MEMORY]
    assert adds == [("mlp_up.main_grad", 10 * 1024 * 2048),
                    ("mlp_down.main_grad", 10 * 2048 * 1024)]
    ops = block_ops(gpt, 1, RATES, par)
    assert {o.name for o in ops if o.name.endswith(".main_grad")} == {
        "qkv.main_grad", "attn_out.main_grad", "mlp_up.main_grad", "mlp_down.main_grad"}
    assert all(o.phase is Phase.W for o in ops if o.name.endswith(".main_grad"))
    for accum in (WgradAccum.FUSED, WgradAccum.BF16):
        assert not [o for o in block_ops(gpt, 1, RATES, dataclasses.replace(
            par, wgrad_accum=accum)) if o.kind is Kind.MEMORY and o.phase is Phase.W]
    head = head_ops(gpt, 1, RATES, par)  # the LM head's 1024 x 2048 on the rank
    assert [o.hbm_bytes for o in head if o.name == "lm_head.main_grad"] == [
        10 * 1024 * 2048]


def test_the_router_is_added_unfused_under_any_main_grad() -> None:
    # megatron-core's router (router_gating_linear) leaves its BF16 gradient to DDP's hook
    # fused or not; 2 local experts of 1024 x 2 x 512 (gated) and 512 x 1024, one add each
    moe = dataclasses.replace(presets.MODELS["deepseek-v3"], hidden=1024, experts=8, top_k=2,
                              expert_ffn=512, shared_ffn=0, seq_len=256)
    ex = ExpertParallel(ep=4)

    def adds(accum: WgradAccum) -> list[tuple[str, float, int]]:
        part = moe_part(moe, 1, RATES, Parallel(wgrad_accum=accum), ex)
        return [(o.name, o.hbm_bytes, o.kernels) for o in part.wgrad if o.kind is Kind.MEMORY]

    assert adds(WgradAccum.BF16) == []
    assert adds(WgradAccum.FUSED) == [("router.main_grad", 10 * 1024 * 8, 1)]
    assert adds(WgradAccum.UNFUSED) == [("router.main_grad", 10 * 1024 * 8, 1),
                                        ("expert_fc1.main_grad", 10 * 1024 * 1024 * 2, 2),
                                        ("expert_fc2.main_grad", 10 * 512 * 1024 * 2, 2)]


def test_analytic_layers_price_the_weight_gradients_as_asked() -> None:
    # the layers' W is their ops' (block_ops, phase_s) at the accumulation asked
    gpt = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 512, 8, False, True, "test")
    for accum in WgradAccum:
        layers = analytic_layers(gpt, GPU, [1], tp=2, wgrad_accum=accum)
        ops = block_ops(gpt, 1, RATES, Parallel(tp=2, wgrad_accum=accum))
        assert layers[1].per_micro_batch[1].wgrad_s == pytest.approx(
            phase_s(ops, Phase.W, RATES))


def test_a_bf16_main_grad_halves_what_accumulation_moves() -> None:
    # --grad-reduce-in-bf16: the fused epilogue reads and writes 2 + 2 bytes an output
    # element (wgrad_gemm_accum_fp16, TE's out_dtype=main_grad.dtype), the unfused add
    # reads 2 and reads and writes 2 + 2. The memory-bound case of the test above:
    # fused 256 KiB + 4 MiB = 4.46 us (compute 3.36 us), unfused the GEMM's 3.36 us and
    # an add of 6 MiB = 6.29 us
    rates = dataclasses.replace(RATES, gemm_efficiency=0.4)
    flops_s = 2 * 1024 * 1024 * 64 / 40e12
    inputs = 2 * 2 * 64 * 1024
    fused, = _w(WgradAccum.FUSED, 64, rates, main_grad_bytes=2.0)
    assert fused.hbm_bytes == inputs + 4 * MIB
    assert fused.time_s == pytest.approx((inputs + 4 * MIB) / 1e12)
    gemm_op, add = _w(WgradAccum.UNFUSED, 64, rates, main_grad_bytes=2.0)
    assert gemm_op.time_s == pytest.approx(flops_s)
    assert add.hbm_bytes == 6 * MIB and add.time_s == pytest.approx(6 * MIB / 1e12)
    # compute-bound (1024 tokens): the last of 16 waves writes 4 bytes an element,
    # 4 MiB / 16 = 0.26 us at 1 TB/s after the 42.9 us of compute
    fused, = _w(WgradAccum.FUSED, 1024, main_grad_bytes=2.0)
    assert fused.time_s == pytest.approx(2 * 1024**3 / 50e12 + 4 * MIB / 16 / 1e12)
    assert _w(WgradAccum.BF16, 1024, main_grad_bytes=2.0) == _w(WgradAccum.BF16, 1024)


def test_every_linear_router_and_layer_takes_the_main_grad_width() -> None:
    # GPT block h 1024, FFN 4096 on tp 2 into a BF16 main_grad: 6 bytes a weight element
    # for each unfused add (the MLP's, the LM head's), the router's too when fused
    gpt = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 512, 8, False, True, "test")
    par = Parallel(tp=2, wgrad_accum=WgradAccum.UNFUSED, main_grad_bytes=2.0)
    assert par.accumulation == Accumulation(WgradAccum.UNFUSED, 2.0)
    adds = [(o.name, o.hbm_bytes) for o in mlp_part(gpt, 1, RATES, par).wgrad
            if o.kind is Kind.MEMORY]
    assert adds == [("mlp_up.main_grad", 6 * 1024 * 2048),
                    ("mlp_down.main_grad", 6 * 2048 * 1024)]
    head = head_ops(gpt, 1, RATES, par)
    assert [o.hbm_bytes for o in head if o.name == "lm_head.main_grad"] == [6 * 1024 * 2048]
    moe = dataclasses.replace(presets.MODELS["deepseek-v3"], hidden=1024, experts=8, top_k=2,
                              expert_ffn=512, shared_ffn=0, seq_len=256)
    part = moe_part(moe, 1, RATES, Parallel(wgrad_accum=WgradAccum.FUSED, main_grad_bytes=2.0),
                    ExpertParallel(ep=4))
    assert [(o.name, o.hbm_bytes) for o in part.wgrad if o.kind is Kind.MEMORY] == [
        ("router.main_grad", 6 * 1024 * 8)]
    # analytic layers pass the width down: W of a block as its ops price it
    for accum in (WgradAccum.FUSED, WgradAccum.UNFUSED):
        layers = analytic_layers(gpt, GPU, [1], tp=2, wgrad_accum=accum, main_grad_bytes=2.0)
        ops = block_ops(gpt, 1, RATES, Parallel(tp=2, wgrad_accum=accum, main_grad_bytes=2.0))
        assert layers[1].per_micro_batch[1].wgrad_s == pytest.approx(
            phase_s(ops, Phase.W, RATES))
        wider = analytic_layers(gpt, GPU, [1], tp=2, wgrad_accum=accum)
        assert layers[1].per_micro_batch[1].wgrad_s < wider[1].per_micro_batch[1].wgrad_s


def test_the_embedding_adds_its_table_into_main_grad_unfused() -> None:
    # GPT h 1024 on tp 2: the rank's 4096 / 2 token rows and the 512 position rows, a
    # dense BF16 table gradient of (2048 + 512) x 1024 = 2,621,440 elements, zeroed
    # (2 bytes an element, one kernel a table) and, under a main_grad fused or not, added
    # into it by DDP's hook: 2 + 4 + 4 bytes an element (2 + 2 + 2 into a BF16 one)
    gpt = presets.ModelShape("t", 2, 1024, 8, 8, 4096, 4096, 512, 8, False, True, "test")
    table = (2048 + 512) * 1024

    def w(accum: WgradAccum, main_grad_bytes: float = 4.0) -> list[tuple[str, float, int]]:
        par = Parallel(tp=2, wgrad_accum=accum, main_grad_bytes=main_grad_bytes)
        return [(o.name, o.hbm_bytes, o.kernels) for o in embedding_ops(gpt, 1, RATES, par)
                if o.phase is Phase.W]

    scatter = ("embed.wgrad", 15 * 1024 * 512, 2)  # rows summed, dropout's backward
    assert w(WgradAccum.BF16) == [("embed.grad_zero", 2 * table, 2), scatter]
    for accum in (WgradAccum.FUSED, WgradAccum.UNFUSED):
        assert w(accum) == [("embed.grad_zero", 2 * table, 2), scatter,
                            ("embed.main_grad", 10 * table, 2)]
        assert w(accum, 2.0)[-1] == ("embed.main_grad", 6 * table, 2)
    # W at 1 TB/s and 1 us a kernel: 5.24 + 2 + 7.86 + 2 + 26.21 + 2 = 45.32 us
    ops = embedding_ops(gpt, 1, RATES, Parallel(tp=2, wgrad_accum=WgradAccum.FUSED))
    assert phase_s(ops, Phase.W, RATES) == pytest.approx(
        (2 * table + 15 * 1024 * 512 + 10 * table) / 1e12 + 6e-6)
    # Llama-style (no dropout): the token table alone, one kernel each
    llama = dataclasses.replace(gpt, dropout=False)
    par = Parallel(tp=2, wgrad_accum=WgradAccum.UNFUSED)
    assert [(o.name, o.hbm_bytes, o.kernels) for o in embedding_ops(llama, 1, RATES, par)
            if o.phase is Phase.W] == [("embed.grad_zero", 2 * 2048 * 1024, 1),
                                       ("embed.wgrad", 10 * 1024 * 512, 1),
                                       ("embed.main_grad", 10 * 2048 * 1024, 1)]
    layers = analytic_layers(gpt, GPU, [1], tp=2, wgrad_accum=WgradAccum.FUSED)
    assert layers[0].name == "embedding"
    assert layers[0].per_micro_batch[1].wgrad_s == pytest.approx(phase_s(ops, Phase.W, RATES))
