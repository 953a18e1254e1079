"""Analytic costs: the cited formulas, exactly."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import (
    analytic_layers,
    block_act_bytes,
    block_flops_per_token,
    block_params,
)
from pptune.costmodel.ops import Parallel, Phase, Rates, block_ops, phase_s

GPT = dataclasses.replace(presets.MODELS["gpt3-1.3b"])  # h=2048, a=16, f=4h, s=2048


@pytest.mark.parametrize("b", [1, 2, 4])
def test_korthikanti_gpt_block_without_parallelism(b: int) -> None:
    s, h, a = GPT.seq_len, GPT.hidden, GPT.heads
    # Korthikanti et al. 2022, eq. 1: s b h (34 + 5 a s / h)
    want = s * b * h * (34 + 5 * a * s / h)
    assert block_act_bytes(GPT, b, tp=1, flash_attention=False) == pytest.approx(want)


@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_korthikanti_gpt_block_with_tensor_parallelism(t: int) -> None:
    s, h, a = GPT.seq_len, GPT.hidden, GPT.heads
    # eq. 2: s b h (10 + 24/t + 5 a s / (h t))
    want = s * h * (10 + 24 / t + 5 * a * s / (h * t))
    assert block_act_bytes(GPT, 1, tp=t, flash_attention=False) == pytest.approx(want)


def test_flash_attention_drops_the_score_term() -> None:
    s, h = GPT.seq_len, GPT.hidden
    assert block_act_bytes(GPT, 1, flash_attention=True) == pytest.approx(34 * s * h)


def test_gpt_block_flops_match_narayanan() -> None:
    # Narayanan et al. 2021: forward of a GPT block is 24 b s h^2 (1 + s / 6h)
    h, s = GPT.hidden, GPT.seq_len
    gemm, attn = block_flops_per_token(GPT)
    assert gemm + attn == pytest.approx(24 * h * h * (1 + s / (6 * h)))


def test_llama3_8b_parameter_count() -> None:
    m = presets.MODELS["llama3-8b"]
    total = m.num_blocks * block_params(m) + 2 * m.vocab * m.hidden + m.hidden
    assert total == pytest.approx(8.03e9, rel=0.01)  # Meta: 8.03B parameters


def test_layers_embedding_blocks_head_with_heavy_ends() -> None:
    m, g = presets.MODELS["llama3-8b"], presets.GPUS["h100-sxm"]
    layers = analytic_layers(m, g, [1, 2])
    assert [x.name for x in layers][:2] == ["embedding", "block0"]
    assert layers[-1].name == "head" and len(layers) == m.num_blocks + 2
    head, block, emb = layers[-1], layers[1], layers[0]
    # the 128k-vocabulary head costs more than a block; its logits dominate memory
    assert head.per_micro_batch[1].fwd_s > block.per_micro_batch[1].fwd_s
    assert head.per_micro_batch[1].act_bytes > block.per_micro_batch[1].act_bytes
    assert emb.param_bytes == 2 * m.vocab * m.hidden
    # twice the micro-batch: twice the activation memory
    assert layers[1].per_micro_batch[2].act_bytes == 2 * layers[1].per_micro_batch[1].act_bytes


def test_block_phases_are_the_sums_of_their_own_ops() -> None:
    m, g = presets.MODELS["llama3-8b"], presets.GPUS["h100-sxm"]
    c = analytic_layers(m, g, [1])[1].per_micro_batch[1]
    rates = Rates.of(g)
    ops = block_ops(m, 1, rates, Parallel())
    assert c.fwd_s == pytest.approx(phase_s(ops, Phase.F, rates))
    assert c.bwd_s == pytest.approx(phase_s(ops, Phase.B, rates))
    assert c.wgrad_s == pytest.approx(phase_s(ops, Phase.W, rates))
    # W is the weight GEMMs only, so it is well below F (Qi et al. 2024, Table 9)
    assert c.wgrad_s < 0.8 * c.fwd_s


def test_efficiency_override_sets_every_gemm() -> None:
    m, g = presets.MODELS["gpt3-1.3b"], presets.GPUS["a100-80gb"]
    fast = analytic_layers(m, g, [1], efficiency=1.0)[1].per_micro_batch[1]
    slow = analytic_layers(m, g, [1], efficiency=0.5)[1].per_micro_batch[1]
    # W is GEMMs only (compute-bound at this shape), so it doubles exactly
    assert slow.wgrad_s - 4 * g.launch_s == pytest.approx(2 * (fast.wgrad_s - 4 * g.launch_s))
    assert fast.fwd_s < slow.fwd_s < 2 * fast.fwd_s  # attention and elementwise unchanged


def test_bad_efficiency_is_refused() -> None:
    with pytest.raises(ValueError, match="efficiency"):
        analytic_layers(GPT, presets.GPUS["h200"], [1], efficiency=0.0)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_sequence_parallel(t: int) -> None:
    s, h, a = GPT.seq_len, GPT.hidden, GPT.heads
    # eq. 4: s b h (34/t + 5 a s / (h t))
    want = s * h * (34 / t + 5 * a * s / (h * t))
    assert block_act_bytes(GPT, 1, tp=t, flash_attention=False, sequence_parallel=True) == (
        pytest.approx(want)
    )


def test_causal_flash_attention_halves_only_the_attention_products() -> None:
    gemm, attn = block_flops_per_token(GPT)
    gemm_c, attn_c = block_flops_per_token(GPT, causal_skip=True)
    assert gemm_c == gemm and attn_c == attn / 2


def test_eager_swiglu_keeps_the_silu_output_too() -> None:
    from pptune.costmodel.rates import Swiglu

    m = presets.MODELS["llama3-8b"]
    s, f = m.seq_len, m.ffn
    for t in (1, 2, 4):
        fused = block_act_bytes(m, 1, tp=t)
        eager = block_act_bytes(m, 1, tp=t, swiglu=Swiglu.EAGER)
        # eager PyTorch keeps silu's input, its output, up's output and the product
        # (8 bytes a token and FFN column); the fused kernel all but the SiLU output
        assert eager - fused == pytest.approx(2 * s * f / t)
    # a GeLU MLP has no SwiGLU to fuse: the same bytes
    assert block_act_bytes(GPT, 1, swiglu=Swiglu.EAGER) == block_act_bytes(GPT, 1)


def test_eager_swiglu_layers_are_heavier_and_slower() -> None:
    from pptune.costmodel.rates import Swiglu

    m, g = presets.MODELS["llama3-8b"], presets.GPUS["h100-sxm"]
    fused = analytic_layers(m, g, [1])[1].per_micro_batch[1]
    eager = analytic_layers(m, g, [1], swiglu=Swiglu.EAGER)[1].per_micro_batch[1]
    assert eager.act_bytes - fused.act_bytes == pytest.approx(2 * m.seq_len * m.ffn)
    assert eager.fwd_s > fused.fwd_s and eager.bwd_s > fused.bwd_s
