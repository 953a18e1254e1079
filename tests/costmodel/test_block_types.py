"""Blocks priced by their type: MLA, sliding-window attention, dense-first and
interleaved MoE layers, MTP modules; the MoE presets' sizes against their model cards."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import AnalyticLayer, analytic_layers, model_params
from pptune.costmodel.attention import mla_act_bytes, mla_core_ops, mla_params, mla_part
from pptune.costmodel.keys import Precision
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.ops import Parallel, Rates, attention_ops
from pptune.costmodel.presets import ModelShape

RATES = Rates(peak_flops=1e12, hbm_bytes_per_s=1e12, sm_count=4, gemm_fraction=1.0,
              attention_fraction=0.5, launch_s=0.0)
# h 256, 4 heads; MLA latents q 64, kv 32, rotary 16, nope 32, value 32; s 128
MLA = ModelShape("mla-small", 2, 256, 4, 4, 1024, 1024, 128, 8, True, False, "test",
                 q_lora_rank=64, kv_lora_rank=32, qk_rope_head_dim=16, qk_nope_head_dim=32,
                 v_head_dim=32)
GQA = ModelShape("gqa-small", 2, 256, 4, 4, 1024, 1024, 128, 8, True, False, "test")


def test_mla_core_attention_flops_use_its_head_dimensions() -> None:
    # causal: 2 s^2 (d_n + d_r + d_v) per head and sample, halved: 2 x 128^2 x 80 x 4 / 2
    fwd, bwd = mla_core_ops(MLA, 1, RATES, Parallel())
    assert fwd.flops == 2 * 128**2 * 80 * 4 / 2 == 5_242_880
    assert fwd.time_s == pytest.approx(5_242_880 / (1e12 * 0.5))
    assert bwd.flops == 2.5 * fwd.flops


def test_mla_projections_and_parameters() -> None:
    part = mla_part(MLA, 1, RATES, Parallel())
    names = [o.name for o in part.fwd]
    assert names[:5] == ["q_down", "q_norm", "kv_down", "kv_norm", "q_up"]
    flops = {o.name: o.flops for o in part.fwd}
    # per token: q down 256 -> 64, kv down 256 -> 48, q up 64 -> 4 x 48, kv up 32 -> 4 x 64,
    # out 4 x 32 -> 256
    assert flops["q_down"] == 2 * 128 * 256 * 64
    assert flops["kv_down"] == 2 * 128 * 256 * 48
    assert flops["q_up"] == 2 * 128 * 64 * 192
    assert flops["kv_up"] == 2 * 128 * 32 * 256
    assert flops["attn_out"] == 2 * 128 * 128 * 256
    # down projections and latent norms whole on every tp rank, the rest split
    assert mla_params(MLA, 1) == 256 * 112 + 96 + 12288 + 8192 + 32768 == 82_016
    assert mla_params(MLA, 2) == 256 * 112 + 96 + (12288 + 8192 + 32768) / 2


def test_mla_saved_bytes_and_up_projection_recompute() -> None:
    # latents (64 + 32 + 16) and their normalised (64 + 32) copies, Q K V (2 x 48 + 32 per
    # head), the attention output (32 per head), 2 bytes each, 128 tokens
    latents, qkv, out = 2 * 128 * (112 + 96), 2 * 128 * 4 * 128, 2 * 128 * 4 * 32
    assert mla_act_bytes(MLA, 1, Parallel()) == latents + qkv + out
    assert mla_act_bytes(MLA, 1, Parallel(), recompute_up=True) == latents + out
    # FP8: the normalised latents (the up projections' inputs) and the attention output
    # (the output projection's input) are saved as their 1-byte casts
    fp8 = Parallel(precision=Precision.FP8)
    latents8, out8 = 2 * 128 * 112 + 1 * 128 * 96, 1 * 128 * 4 * 32
    assert mla_act_bytes(MLA, 1, fp8) == latents8 + qkv + out8
    plain = mla_part(MLA, 1, RATES, Parallel())
    redo = mla_part(MLA, 1, RATES, Parallel(), recompute_up=True)
    extra = sum(o.time_s for o in redo.bwd) - sum(o.time_s for o in plain.bwd)
    up = sum(o.time_s for o in plain.fwd if o.name in ("q_up", "kv_up", "rotary"))
    assert extra == pytest.approx(up)


def test_sliding_window_attention_counts_the_keys_in_the_window() -> None:
    # each query sees at most w = 32 keys: s w - w^2 / 2 pairs instead of s^2 / 2
    full = attention_ops(GQA, 1, RATES, Parallel())[0]
    window = attention_ops(GQA, 1, RATES, Parallel(), window=32)[0]
    assert full.flops == 4 * 128**2 * 64 * 4 / 2
    assert window.flops == 4 * 64 * 4 * (128 * 32 - 32**2 / 2) == 3_670_016
    assert attention_ops(GQA, 1, RATES, Parallel(), window=128)[0].flops == full.flops


def test_block_types_of_the_presets() -> None:
    ds = presets.MODELS["deepseek-v3"]
    assert [ds.moe_block(i) for i in (0, 1, 2, 3, 60, 61)] == [False] * 3 + [True] * 3
    oss = presets.MODELS["gpt-oss-120b"]
    assert [oss.sliding_block(i) for i in range(4)] == [True, False, True, False]
    qwen2 = dataclasses.replace(presets.MODELS["qwen3-30b-a3b"], moe_every=2, moe_offset=1)
    assert [qwen2.moe_block(i) for i in range(4)] == [False, True, False, True]
    assert not any(presets.MODELS["llama3-8b"].moe_block(i) for i in range(32))


def test_a_stage_of_dense_and_moe_blocks_is_priced_as_it_is() -> None:
    ds = dataclasses.replace(presets.MODELS["deepseek-v3"], num_blocks=5, seq_len=512)
    layers = analytic_layers(ds, presets.GPUS["h100-sxm"], [1], experts=ExpertParallel(ep=8))
    names = [layer.name for layer in layers]
    assert names == ["embedding", "block0", "block1", "block2", "block3", "block4", "mtp0",
                     "head"]
    dense, moe = layers[1], layers[4]
    assert dense.expert_param_bytes == 0 and dense.per_micro_batch[1].fwd_a2a_s == 0
    assert moe.expert_param_bytes == 2 * 256 / 8 * 3 * 7168 * 2048  # 32 experts a rank, bf16
    assert moe.per_micro_batch[1].fwd_a2a_s > 0
    assert layers[2].per_micro_batch == dense.per_micro_batch  # same type, same costs
    # the MTP module: an MoE block plus its embedding copy, projection and norms; its LM
    # head and loss run on the head, to which it sends two hidden states (test_mtp_head.py)
    mtp = layers[6]
    assert mtp.expert_param_bytes == moe.expert_param_bytes
    extra = 2 * 7168 * 7168 + 3 * 7168 + 129280 * 7168
    assert mtp.param_bytes == pytest.approx(moe.param_bytes + 2 * extra)
    assert mtp.per_micro_batch[1].fwd_s > moe.per_micro_batch[1].fwd_s
    assert mtp.per_micro_batch[1].out_bytes == 2 * moe.per_micro_batch[1].out_bytes


@pytest.mark.parametrize(("name", "total_b", "active_b", "embedding_active"), [
    # the model cards' totals and activated parameters (experts counted top-k / experts)
    ("mixtral-8x7b", 46.7, 12.9, True),  # mistral-inference README: 46.7B, 12.9B active
    ("mixtral-8x22b", 140.6, 39.1, True),  # same README: 140.6B, 39.1B active
    ("qwen3-30b-a3b", 30.5, 3.3, True),  # Qwen/Qwen3-30B-A3B model card: 30.5B, 3.3B
    ("qwen3-235b-a22b", 235.0, 22.0, True),  # Qwen/Qwen3-235B-A22B model card: 235B, 22B
    # openai/gpt-oss README: 117B with 5.1B active, the embedding table not counted active
    ("gpt-oss-120b", 117.0, 5.1, False),
])
def test_moe_presets_match_their_model_cards(name: str, total_b: float, active_b: float,
                                             embedding_active: bool) -> None:
    m = presets.MODELS[name]
    assert model_params(m) / 1e9 == pytest.approx(total_b, rel=0.01)
    active = model_params(m, active=True) - (0 if embedding_active else m.vocab * m.hidden)
    assert active / 1e9 == pytest.approx(active_b, rel=0.02)


def test_deepseek_v3_main_model_and_mtp_module() -> None:
    # report: 671B parameters, 37B activated per token, without the MTP module
    m = presets.MODELS["deepseek-v3"]
    main = dataclasses.replace(m, mtp_layers=0)
    assert model_params(main) / 1e9 == pytest.approx(671, rel=0.005)
    assert model_params(main, active=True) / 1e9 == pytest.approx(37, rel=0.03)
    assert model_params(m) > model_params(main)


def test_dense_presets_count_as_before() -> None:
    from pptune.costmodel.analytic import block_params

    for m in presets.MODELS.values():
        if not m.moe:
            assert model_params(m) == m.num_blocks * block_params(m) + 2 * m.vocab * m.hidden


# DeepSeek-V3 cut to 4 blocks (3 dense, 1 MoE) of 512 tokens, ep 8, on an H100
DS_SMALL = dataclasses.replace(presets.MODELS["deepseek-v3"], num_blocks=4, seq_len=512,
                               mtp_layers=0)
DS_GPU, DS_EX = presets.GPUS["h100-sxm"], ExpertParallel(ep=8)


def ds_layers(*modules: str) -> list[AnalyticLayer]:
    return analytic_layers(DS_SMALL, DS_GPU, [1], experts=DS_EX,
                           recompute_modules=frozenset(modules))


def test_selective_recompute_of_dense_mlps_and_mla_up_projections() -> None:
    plain = ds_layers()
    mlp = ds_layers("mlp")
    dense0, dense1 = plain[1].per_micro_batch[1], mlp[1].per_micro_batch[1]
    # a dense block keeps only its MLP's input: gate and up (the fused SwiGLU's input)
    # and the product (6 bytes a token x f) go, and its forward reruns before the backward
    assert dense0.act_bytes - dense1.act_bytes == pytest.approx(6 * 18432 * 512)
    assert dense1.bwd_s > dense0.bwd_s and dense1.fwd_s == dense0.fwd_s
    # Megatron-core's "mlp" skips MoE blocks (transformer_layer.py: not self.is_moe_layer)
    assert mlp[4].per_micro_batch == plain[4].per_micro_batch
    up = ds_layers("mla_up_proj")
    # Q, K, V: 128 heads x (2 x 192 + 128) x 2 bytes a token dropped from every block
    for i in (1, 4):
        assert plain[i].per_micro_batch[1].act_bytes - up[i].per_micro_batch[1].act_bytes == (
            pytest.approx(2 * 512 * 128 * 512))
    with pytest.raises(ValueError, match="not modelled"):
        ds_layers("core_attn")  # nothing to drop under flash attention: check-config skips it


def test_selective_recompute_of_the_moe_activation() -> None:
    # megatron-core "moe_act": the routed experts' activation output (fc2's input) is
    # discarded after the forward and recomputed before fc2's backward
    plain, gpu = ds_layers(), DS_GPU
    act = ds_layers("moe_act")
    moe0, moe1 = plain[4].per_micro_batch[1], act[4].per_micro_batch[1]
    # 512 tokens x top-8 rows of the 2,048-wide expert activation, 2 bytes each
    assert moe0.act_bytes - moe1.act_bytes == 2 * 512 * 8 * 2048
    # the SwiGLU forward (6 bytes a row and column) reruns in B at the HBM rate
    rerun = 6 * 2048 * 512 * 8 / (gpu.hbm_bytes_per_s * gpu.hbm_fraction)
    assert moe1.bwd_s - moe0.bwd_s == pytest.approx(rerun + gpu.launch_s)
    assert moe1.fwd_s == moe0.fwd_s and moe1.wgrad_s == moe0.wgrad_s
    # dense blocks have no routed experts: unchanged
    assert act[1].per_micro_batch == plain[1].per_micro_batch
