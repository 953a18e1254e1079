"""A block's style (norm, linear biases, tied embeddings): priced as parameters by hand
(costmodel/block_style.py) and read from Hugging Face configs per family
(costs/hf_style.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import (
    analytic_layers,
    attention_params,
    block_params,
    layer_params,
    model_params,
)
from pptune.costmodel.block_style import bias_params, norm_params
from pptune.costmodel.models import MODELS, ModelShape, Norm, preset_of
from pptune.costmodel.moe import ExpertParallel, moe_params
from pptune.costs.modelspec import read_hf_config

HF = Path(__file__).resolve().parents[1] / "data" / "hf"

# h 64, 4 heads of 16, 2 KV heads, gated FFN 128: QKV columns (4 + 2 x 2) x 16 = 128
TINY = ModelShape("tiny", 2, 64, 4, 2, 128, 1000, 32, 8, True, False, "test")


def test_every_norm_value_is_priced() -> None:
    # RMSNorm keeps a weight vector, LayerNorm a weight and a bias
    assert {n: norm_params(dataclasses.replace(TINY, norm=n)) for n in Norm} == {
        Norm.RMSNORM: 64, Norm.LAYERNORM: 128}


def test_defaults_keep_the_norm_each_preset_was_priced_with() -> None:
    # before the field: 2h per norm with dropout (GPT's LayerNorm), else h
    for m in MODELS.values():
        assert norm_params(m) == m.hidden * (2 if m.dropout else 1), m.name
        assert m.normalization is (Norm.LAYERNORM if m.dropout else Norm.RMSNORM)
    # only GPT-OSS states biases; no preset ties (its head priced as its own matrix)
    assert [m.name for m in MODELS.values() if bias_params(m)] == ["gpt-oss-120b"]
    assert not any(m.tied_embeddings for m in MODELS.values())


def test_bias_parameters_by_hand() -> None:
    qkv = dataclasses.replace(TINY, qkv_bias=True)
    every = dataclasses.replace(TINY, qkv_bias=True, attn_out_bias=True, mlp_bias=True)
    assert every.linear_bias and not qkv.linear_bias
    # tp 1: QKV 128, output 64, gate and up 2 x 128, down 64
    assert block_params(qkv) - block_params(TINY) == 128
    assert block_params(every) - block_params(TINY) == 128 + 64 + 256 + 64 == 512
    # tp 2: the column-parallel biases split (QKV 64, gate and up 128), the row-parallel
    # ones whole on each rank (output 64, down 64)
    assert attention_params(every, 2) - attention_params(TINY, 2) == 64 + 64
    dense = layer_params(every, 0, 2)[0] - layer_params(TINY, 0, 2)[0]
    assert dense == 64 + 64 + 128 + 64 == 320
    assert bias_params(every, 2) == 320
    # LayerNorm: two more vectors of h per block
    assert block_params(dataclasses.replace(TINY, norm=Norm.LAYERNORM)) - block_params(
        TINY) == 2 * 64


def test_bias_bytes_reach_the_analytic_layers() -> None:
    gpu = presets.GPUS["h100-sxm"]
    every = dataclasses.replace(TINY, qkv_bias=True, attn_out_bias=True, mlp_bias=True)
    base, biased = (analytic_layers(m, gpu, [1], tp=2) for m in (TINY, every))
    # the per-rank 320 biases of each block in bf16; the embedding and head untouched
    assert [b.param_bytes - a.param_bytes for a, b in zip(base, biased, strict=True)] == [
        0.0, 640.0, 640.0, 0.0]
    # ... and no time: the bias add and its gradient ride in other kernels
    assert biased[1].per_micro_batch[1] == base[1].per_micro_batch[1]


def test_expert_biases_by_hand() -> None:
    moe = dataclasses.replace(TINY, experts=4, top_k=2, expert_ffn=32, mlp_bias=True)
    plain = dataclasses.replace(moe, mlp_bias=False)
    ex = ExpertParallel(ep=2)
    # each expert: gate and up 2 x 32, down 64 = 128; two experts a rank
    assert moe_params(moe, 1, ex)[1] - moe_params(plain, 1, ex)[1] == 2 * 128
    assert moe_params(moe, 1, ex)[0] == moe_params(plain, 1, ex)[0]  # router: no bias priced


def test_gpt_oss_counts_its_biases_as_the_model_card() -> None:
    # OpenAI's gpt-oss model card: 116.83B parameters in all, 5.13B active
    m = MODELS["gpt-oss-120b"]
    assert model_params(m) / 1e9 == pytest.approx(116.83, abs=0.005)
    # active: the card counts the embedding once (its unembedding is the 0.58B head)
    assert (model_params(m, active=True) - m.vocab * m.hidden) / 1e9 == pytest.approx(
        5.13, abs=0.005)


def _config(tmp_path: Path, base: str | None = None, **keys: Any) -> Path:
    cfg: dict[str, Any] = json.loads((HF / base).read_text()) if base else {
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
        "max_position_embeddings": 32, "hidden_act": "silu"}
    cfg.update(keys)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _style(shape: ModelShape) -> tuple[Norm, bool, bool, bool, bool]:
    return (shape.normalization, shape.qkv_bias, shape.attn_out_bias, shape.mlp_bias,
            shape.tied_embeddings)


def test_llama_reads_attention_bias_mlp_bias_and_tied_embeddings(tmp_path: Path) -> None:
    read = read_hf_config(_config(tmp_path, model_type="llama"))
    assert _style(read.shape) == (Norm.RMSNORM, False, False, False, False) and not read.notes[1:]
    read = read_hf_config(_config(tmp_path, model_type="llama", attention_bias=True,
                                  mlp_bias=True, tie_word_embeddings=True))
    assert _style(read.shape) == (Norm.RMSNORM, True, True, True, True)
    assert read.shape.linear_bias
    assert any(n.startswith("tie_word_embeddings") and "not priced" in n for n in read.notes)


def test_qwen2_has_a_qkv_bias_whatever_the_file_says(tmp_path: Path) -> None:
    shape = read_hf_config(HF / "qwen2-7b-config.json").shape
    assert _style(shape) == (Norm.RMSNORM, True, False, False, False)
    # the fixed bias adds (28 + 2 x 4) x 128 = 4608 parameters a block
    plain = dataclasses.replace(shape, qkv_bias=False)
    assert block_params(shape) - block_params(plain) == (28 + 2 * 4) * 128 == 4608


def test_qwen2_moe_reads_qkv_bias_default_true(tmp_path: Path) -> None:
    assert read_hf_config(HF / "qwen1.5-moe-a2.7b-config.json").shape.qkv_bias
    off = read_hf_config(_config(tmp_path, "qwen1.5-moe-a2.7b-config.json", qkv_bias=False))
    assert not off.shape.qkv_bias


def test_phimoe_is_layernorm(tmp_path: Path) -> None:
    shape = read_hf_config(HF / "phi-3.5-moe-config.json").shape
    assert shape.gated_mlp and _style(shape) == (Norm.LAYERNORM, False, False, False, False)
    biased = read_hf_config(_config(tmp_path, "phi-3.5-moe-config.json",
                                    attention_bias=True)).shape
    assert (biased.qkv_bias, biased.attn_out_bias, biased.mlp_bias) == (True, True, False)


def test_gpt_oss_glm_gemma_and_deepseek(tmp_path: Path) -> None:
    oss = read_hf_config(_config(tmp_path, "gpt-oss-120b-config.json", attention_bias=False))
    assert _style(oss.shape) == (Norm.RMSNORM, True, True, True, False)  # GptOssConfig: True
    assert preset_of(read_hf_config(HF / "gpt-oss-120b-config.json").shape) == "gpt-oss-120b"
    glm = read_hf_config(HF / "glm-4.5-air-config.json").shape  # attention_bias true: QKV
    assert _style(glm) == (Norm.RMSNORM, True, False, False, False)
    assert read_hf_config(HF / "gemma3-1b-config.json").shape.tied_embeddings  # default
    v3 = read_hf_config(_config(tmp_path, "deepseek-v3-config.json", attention_bias=True))
    assert not bias_params(v3.shape)  # latent attention: priced without biases


def test_a_tied_head_is_held_once_by_a_stage_with_the_embedding() -> None:
    """One stage: the embedding's V x h matrix once (its weights, gradients and optimizer
    state); two: the last stage keeps a copy, as megatron-core does."""
    from pptune.costmodel.keys import CostKey
    from pptune.costmodel.search import (
        PlanRequest,
        PlanSpec,
        Recompute,
        Schedule,
        Sharding,
        evaluate,
    )
    from pptune.costmodel.splitting import per_param_bytes
    from pptune.costs.profiles import preset_tables

    tied = dataclasses.replace(TINY, tied_embeddings=True)
    tables = [preset_tables(m, "h100-sxm", [1])(CostKey()) for m in (TINY, tied)]
    assert tables[1].tied_param_bytes == 1000 * 64 * 2 and not tables[0].tied_param_bytes
    assert tables[0].params(0, 4) - tables[1].params(0, 4) == 1000 * 64
    assert tables[0].params(2, 4) == tables[1].params(2, 4)  # the last stage's copy
    for pp, layers in ((1, (4,)), (2, (2, 2))):
        req = PlanRequest(gpus=pp, global_batch=4, shardings=(Sharding.NONE,),
                          recomputes=(Recompute.NONE,), reserve_bytes=0.0)
        spec = PlanSpec(Schedule.ONE_F_ONE_B, pp, 1, 4, layers)
        untied_peak, tied_peak = (evaluate(t, req, spec).peak_memory_bytes for t in tables)
        if pp == 2:
            assert untied_peak == tied_peak
            continue
        # bf16 weight, fp32 gradient and master copy, Adam's two fp32 moments
        assert per_param_bytes(req, spec)[0] == 2 + 4 + 4 + 8
        saved = 1000 * 64 * 18
        assert untied_peak[0] - tied_peak[0] == pytest.approx(saved, rel=1e-9)
