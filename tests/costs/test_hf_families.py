"""Hugging Face families read under their own keys (pptune/costs/hf_moe.py): shapes field
by field, parameter counts hand-derived and against the model cards, the sequence length
a config gives, and the configs refused in one line (hybrids, experts of unread
families). The configs are real ones: tests/data/hf/README.md says where each is from."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pptune.costmodel.analytic import model_params
from pptune.costmodel.models import ModelShape
from pptune.costs.flops import attention_flops_per_token
from pptune.costs.modelspec import read_hf_config
from pptune.errors import BadInput

HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def shape_of(name: str, seq_len: int | None = 4096) -> ModelShape:
    return read_hf_config(HF / name, seq_len=seq_len).shape


# ---------------------------------------------------------------- DeepSeek's expert keys


def test_deepseek_v2_lite_reads_mla_without_a_query_latent() -> None:
    s = shape_of("deepseek-v2-lite-config.json")
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn) == (64, 6, 1408, 2 * 1408)
    assert (s.first_dense, s.moe_every, s.ffn, s.mtp_layers) == (1, 1, 10944, 0)
    # "q_lora_rank": null: the query is projected directly (DeepseekV2Config)
    assert (s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim, s.qk_nope_head_dim,
            s.v_head_dim) == (0, 512, 64, 128, 128)
    assert s.mla and s.gated_mlp and (s.route_groups, s.route_group_topk) == (0, 0)
    assert not s.moe_block(0) and s.moe_block(1) and s.moe_block(26)


def test_deepseek_v2_lite_parameters_by_hand() -> None:
    s = shape_of("deepseek-v2-lite-config.json")
    h, heads, vocab = 2048, 16, 102400
    # MLA (attention.mla_params): kv down projection with the rotary key, its norm; the
    # query straight from h; the kv up projection (nope keys and values); the output
    mla = h * (512 + 64) + 512 + h * heads * 192 + 512 * heads * (128 + 128) + heads * 128 * h
    assert mla == 13_763_072
    norms = 2 * h
    dense_mlp = 3 * h * 10944
    router, shared, routed = h * 64, 3 * h * 2 * 1408, 64 * 3 * h * 1408
    total = 27 * (mla + norms) + dense_mlp + 26 * (router + shared + routed) + 2 * vocab * h
    assert total == 15_706_482_176
    assert model_params(s) == total
    active = total - 26 * routed * (64 - 6) / 64
    assert model_params(s, active=True) == pytest.approx(active)


def test_deepseek_v2_reads_the_query_latent_and_group_limited_routing() -> None:
    s = shape_of("deepseek-v2-config.json")
    assert (s.num_blocks, s.hidden, s.heads, s.experts, s.top_k) == (60, 5120, 128, 160, 6)
    assert (s.expert_ffn, s.shared_ffn, s.first_dense, s.q_lora_rank) == (1536, 3072, 1, 1536)
    assert (s.route_groups, s.route_group_topk) == (8, 3)  # group_limited_greedy


def test_kimi_k2_is_read_as_deepseek_v3() -> None:
    kimi = read_hf_config(HF / "kimi-k2-config.json", seq_len=4096)
    s = kimi.shape
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn) == (384, 8, 2048, 2048)
    assert (s.num_blocks, s.heads, s.first_dense, s.mtp_layers) == (61, 64, 1, 0)
    assert (s.q_lora_rank, s.kv_lora_rank, s.vocab) == (1536, 512, 163840)
    doc = json.loads((HF / "kimi-k2-config.json").read_text())
    assert doc["model_type"] == "kimi_k2"
    assert kimi.notes == []


def test_deepseek_v32_is_priced_as_v3_with_a_note_on_the_indexer(tmp_path: Path) -> None:
    v32 = read_hf_config(HF / "deepseek-v3.2-config.json", seq_len=4096)
    v3 = shape_of("deepseek-v3-config.json")
    assert dataclasses.replace(v32.shape, name="", source="") == dataclasses.replace(
        v3, name="", source="")
    assert len(v32.notes) == 1 and "indexer" in v32.notes[0]
    assert "not modelled" in v32.notes[0]
    # transformers' own spelling of the dense layers: mlp_layer_types, dense ones first
    doc = json.loads((HF / "deepseek-v3.2-config.json").read_text())
    del doc["first_k_dense_replace"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**doc, "mlp_layer_types": ["dense"] * 2 + ["sparse"] * 59}))
    assert read_hf_config(path, seq_len=4096).shape.first_dense == 2
    path.write_text(json.dumps({**doc, "mlp_layer_types": ["sparse", "dense"] + ["sparse"] * 59}))
    with pytest.raises(BadInput, match="mlp_layer_types places dense layers after other"):
        read_hf_config(path, seq_len=4096)


def test_deepseek_moe_v1_has_experts_and_standard_attention() -> None:
    s = shape_of("deepseek-moe-16b-config.json")
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn, s.first_dense) == (
        64, 6, 1408, 2 * 1408, 1)
    assert not s.mla and (s.heads, s.kv_heads, s.head_dim) == (16, 16, 128)


def test_glm4_moe_has_deepseek_experts_and_grouped_query_attention() -> None:
    s = shape_of("glm-4.5-config.json")
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn) == (160, 8, 1536, 1536)
    assert (s.first_dense, s.mtp_layers, s.ffn) == (3, 1, 12288)
    # 96 heads of 128 (head_dim, not 5120 / 96), 8 KV heads, use_qk_norm; no MLA
    assert (s.heads, s.kv_heads, s.head_dim, s.qk_norm, s.mla) == (96, 8, 128, True, False)
    air = shape_of("glm-4.5-air-config.json")
    assert (air.experts, air.expert_ffn, air.first_dense, air.qk_norm) == (128, 1408, 1, False)


# ---------------------------------------------------------------- other MoE families


def test_olmoe_experts_are_intermediate_size_wide() -> None:
    s = shape_of("olmoe-1b-7b-config.json")
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn, s.qk_norm) == (64, 8, 1024, 0, True)
    h = 2048
    # every block: attention 4h^2, norms, router h E, 64 experts of 3 h f; plus q and k norms
    block = 4 * h * h + 2 * h + h * 64 + 64 * 3 * h * 1024 + 2 * 128
    assert model_params(s) == 16 * block + 2 * 50304 * h


def test_qwen2_moe_has_a_shared_expert_of_its_own_width() -> None:
    s = shape_of("qwen1.5-moe-a2.7b-config.json")
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn) == (60, 4, 1408, 5632)
    assert (s.moe_every, s.moe_offset, s.first_dense, s.qk_norm) == (1, 0, 0, False)


def test_phimoe_and_minicpm_read_mixtral_like_experts(tmp_path: Path) -> None:
    phi = shape_of("phi-3.5-moe-config.json")
    assert (phi.experts, phi.top_k, phi.expert_ffn, phi.kv_heads, phi.gated_mlp) == (
        16, 2, 6400, 8, True)  # no hidden_act in the file: PhimoeConfig's "silu"
    cpm = shape_of("minicpm-moe-8x2b-config.json")
    assert (cpm.experts, cpm.top_k, cpm.expert_ffn) == (8, 2, 5760)
    doc = json.loads((HF / "minicpm-moe-8x2b-config.json").read_text())
    del doc["num_experts"], doc["num_experts_per_tok"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))  # a dense MiniCPM
    assert not read_hf_config(path, seq_len=4096).shape.moe


# Model cards: totals and activated parameters. Publishers count the activated ones
# differently: ``excluded`` embedding-sized matrices (V x h) are left out of them (1: the
# input embedding, a lookup; 2: the LM head too), and round them to two digits (V2-Lite's
# "2.4B" is 2.45B). The MTP modules are not counted.
@pytest.mark.parametrize(("name", "total_b", "active_b", "excluded"), [
    # DeepSeek-V2 report (arXiv 2405.04434): 236B total, 21B activated; V2-Lite 15.7B, 2.4B
    ("deepseek-v2-config.json", 236, 21, 1),
    ("deepseek-v2-lite-config.json", 15.7, 2.4, 1),
    # deepseek-ai/deepseek-moe-16b-base model card: 16.4B, 2.8B activated
    ("deepseek-moe-16b-config.json", 16.4, 2.8, 0),
    # Kimi K2 model card: 1.04T total (pptune: 1.026T), 32B activated
    ("kimi-k2-config.json", 1040, 32, 1),
    # GLM-4.5 model card: 355B total, 32B active; GLM-4.5-Air 106B, 12B
    ("glm-4.5-config.json", 355, 32, 2),
    ("glm-4.5-air-config.json", 106, 12, 2),
    # OLMoE paper (arXiv 2409.02060): 6.9B total, 1.3B active
    ("olmoe-1b-7b-config.json", 6.9, 1.3, 0),
    # Qwen1.5-MoE-A2.7B model card: 14.3B total, 2.7B activated
    ("qwen1.5-moe-a2.7b-config.json", 14.3, 2.7, 0),
    # Phi-3.5-MoE model card: 41.9B total, 6.6B active
    ("phi-3.5-moe-config.json", 41.9, 6.6, 0),
])
def test_moe_configs_match_their_model_cards(name: str, total_b: float, active_b: float,
                                             excluded: int) -> None:
    s = dataclasses.replace(shape_of(name), mtp_layers=0)
    assert model_params(s) / 1e9 == pytest.approx(total_b, rel=0.015)
    active = model_params(s, active=True) - excluded * s.vocab * s.hidden
    assert active / 1e9 == pytest.approx(active_b, rel=0.025)


# ---------------------------------------------------------------- Gemma


def test_gemma3_is_gated_with_qk_norm_windows_and_a_tied_head() -> None:
    hf = read_hf_config(HF / "gemma3-1b-config.json", seq_len=4096)
    s = hf.shape
    assert s.gated_mlp and s.qk_norm  # gate_proj, up_proj, down_proj; q_norm, k_norm
    assert (s.head_dim, s.kv_heads, s.ffn) == (256, 1, 6912)
    # sliding_window 512, sliding_window_pattern 6: full attention on blocks 5, 11, ...
    assert (s.sliding_window, s.full_attention_every) == (512, 6)
    assert [s.sliding_block(i) for i in range(7)] == [True] * 5 + [False, True]
    assert len(hf.notes) == 1 and hf.notes[0].startswith("tie_word_embeddings")
    # tied: the model card's 1B is pptune's count less the head pptune prices untied
    assert (model_params(s) - s.vocab * s.hidden) / 1e9 == pytest.approx(1.0, rel=0.01)
    # a window no shorter than the sequence is full attention
    assert shape_of("gemma3-1b-config.json", seq_len=512).sliding_window == 0


def test_gemma2_windows_every_other_layer_and_gemma3_multimodal_text_config() -> None:
    g2 = read_hf_config(HF / "gemma2-27b-config.json")  # no tie_word_embeddings: tied
    s = g2.shape
    assert s.gated_mlp and not s.qk_norm and s.seq_len == 8192
    assert (s.sliding_window, s.full_attention_every) == (4096, 2)
    assert any(n.startswith("tie_word_embeddings") and "1.18B" in n for n in g2.notes)
    assert (model_params(s) - s.vocab * s.hidden) / 1e9 == pytest.approx(27.2, rel=0.01)
    g3 = shape_of("gemma3-27b-config.json", seq_len=8192)
    assert (g3.num_blocks, g3.hidden, g3.head_dim, g3.sliding_window, g3.full_attention_every,
            g3.gated_mlp) == (62, 5376, 128, 1024, 6, True)


def test_gemma2_softcapping_is_said_not_priced() -> None:
    notes = read_hf_config(HF / "gemma2-27b-config.json", seq_len=4096).notes
    attn = [n for n in notes if n.startswith("attn_logit_softcapping 50.0:")]
    final = [n for n in notes if n.startswith("final_logit_softcapping 30.0:")]
    assert len(attn) == 1 and len(final) == 1
    assert "not priced" in attn[0] and "--attention" in attn[0] and "not priced" in final[0]
    # Gemma 3 states both null: nothing to say
    assert not any("softcapping" in n for n in read_hf_config(
        HF / "gemma3-1b-config.json", seq_len=4096).notes)


# ---------------------------------------------------------------- windows on every layer


def test_mistral_windows_every_layer_past_its_window(tmp_path: Path) -> None:
    s = shape_of("mistral-7b-v0.1-config.json", seq_len=8192)
    assert (s.sliding_window, s.full_attention_every) == (4096, 0)
    assert all(s.sliding_block(i) for i in range(32))
    # keys a query sees at s 8192: w - w^2 / 2s = 4096 - 1024 = 3072 (full causal: 4096);
    # 6 x 32 heads x (128 + 128) x keys a layer, 32 layers
    assert attention_flops_per_token(s, 8192) == 6 * 32 * 256 * 3072 * 32 == 4_831_838_208
    full = dataclasses.replace(s, sliding_window=0)
    assert attention_flops_per_token(full, 8192) == 6 * 32 * 256 * 4096 * 32
    # a window no shorter than the sequence is full attention; so is a null one
    assert shape_of("mistral-7b-v0.1-config.json", seq_len=4096).sliding_window == 0
    doc = json.loads((HF / "mistral-7b-v0.1-config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**doc, "sliding_window": None}))
    assert read_hf_config(path, seq_len=8192).shape.sliding_window == 0
    # absent: MistralConfig's default, 4096
    path.write_text(json.dumps({k: v for k, v in doc.items() if k != "sliding_window"}))
    assert read_hf_config(path, seq_len=8192).shape.sliding_window == 4096
    # use_sliding_window is not MistralConfig's: the window stays, and the reader says so
    path.write_text(json.dumps({**doc, "use_sliding_window": False}))
    hf = read_hf_config(path, seq_len=8192)
    assert hf.shape.sliding_window == 4096
    assert [n for n in hf.notes if n.startswith("use_sliding_window false")] != []


def qwen2(tmp_path: Path, **keys: object) -> ModelShape | str:
    """Qwen2-7B (28 layers) with ``keys`` at sequence 8192: the shape, or its notes'
    window line when the reader says one."""
    doc = json.loads((HF / "qwen2-7b-config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**doc, **keys}))
    hf = read_hf_config(path, seq_len=8192)
    said = [n for n in hf.notes if "max_window_layers" in n or "layer_types" in n]
    return said[0] if said else hf.shape


def test_qwen2_windows_from_max_window_layers_when_use_sliding_window(tmp_path: Path) -> None:
    def window(**keys: object) -> tuple[int, int]:
        s = qwen2(tmp_path, **keys)
        assert isinstance(s, ModelShape)
        return s.sliding_window, s.full_attention_every

    # Qwen2Config: use_sliding_window false (its default) or a null window: no window
    assert window() == (0, 0)
    assert window(use_sliding_window=False, sliding_window=4096, max_window_layers=0) == (0, 0)
    assert window(use_sliding_window=True, sliding_window=None, max_window_layers=0) == (0, 0)
    # layers i >= max_window_layers window: from 0, every layer; from 28 (its default,
    # the window 4096 by default too), none of the 28
    assert window(use_sliding_window=True, sliding_window=4096, max_window_layers=0) == (4096, 0)
    assert window(use_sliding_window=True, max_window_layers=0) == (4096, 0)
    assert window(use_sliding_window=True, sliding_window=4096) == (0, 0)
    # a layer_types list takes the place of max_window_layers
    assert window(use_sliding_window=True, sliding_window=4096, max_window_layers=0,
                  layer_types=["sliding_attention", "full_attention"] * 14) == (4096, 2)
    assert window(use_sliding_window=True, sliding_window=4096,
                  layer_types=["full_attention"] * 28) == (0, 0)
    # full layers first, windowed ones after: priced in full, said
    said = qwen2(tmp_path, use_sliding_window=True, sliding_window=4096, max_window_layers=20)
    assert isinstance(said, str)
    assert "layers 20-27 of 28" in said and "in full" in said
    doc = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 4, "head_dim": 16,
           "num_attention_heads": 4, "vocab_size": 8, "use_sliding_window": True,
           "sliding_window": 256, "max_window_layers": 0}
    path = tmp_path / "qwen3.json"
    path.write_text(json.dumps(doc))  # Qwen3Config: the same keys, the same rule
    assert read_hf_config(path, seq_len=1024).shape.sliding_window == 256


def test_a_window_of_a_family_not_read_is_said(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "mystery", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "vocab_size": 8,
                                "sliding_window": 512}))
    hf = read_hf_config(path, seq_len=2048)
    assert hf.shape.sliding_window == 0
    assert any(n.startswith("sliding_window 512 (model_type 'mystery')") for n in hf.notes)
    assert not any("sliding_window" in n for n in read_hf_config(path, seq_len=512).notes)


# ---------------------------------------------------------------- the sequence length


@pytest.mark.parametrize(("name", "seq_len", "key"), [
    ("qwen3-235b-a22b-2507-config.json", 262144, "max_position_embeddings"),
    ("glm-4.5-air-config.json", 131072, "max_position_embeddings"),
    ("deepseek-v2-config.json", 4096, "rope_scaling.original_max_position_embeddings"),
    ("phi-3.5-mini-config.json", 4096, "original_max_position_embeddings"),  # longrope
])
def test_a_sequence_length_from_the_config_is_said_naming_the_key(
        name: str, seq_len: int, key: str) -> None:
    hf = read_hf_config(HF / name)
    assert hf.shape.seq_len == seq_len
    said = [n for n in hf.notes if n.startswith(f"sequence length {seq_len} from {key},")]
    assert len(said) == 1 and "pass --seq-len" in said[0]
    assert not any(n.startswith("sequence length") for n in read_hf_config(
        HF / name, seq_len=2048).notes)


def test_rope_parameters_of_transformers_v5_give_the_pretraining_length(tmp_path: Path) -> None:
    doc = json.loads((HF / "deepseek-v2-lite-config.json").read_text())
    doc["rope_parameters"] = doc.pop("rope_scaling")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    hf = read_hf_config(path)
    assert hf.shape.seq_len == 4096
    assert hf.notes[0].startswith("sequence length 4096 from "
                                  "rope_parameters.original_max_position_embeddings")


# ---------------------------------------------------------------- refused in one line


@pytest.mark.parametrize(("name", "needles"), [
    ("jamba-1.5-mini-config.json", ("model_type 'jamba' is a hybrid", "Mamba")),
    ("qwen3-next-80b-a3b-config.json", ("model_type 'qwen3_next' is a hybrid",
                                        "Gated DeltaNet")),
    ("kimi-linear-48b-config.json", ("model_type 'kimi_linear' is a hybrid", "KDA")),
    ("qwen3.5-35b-a3b-config.json", ("model_type 'qwen3_5_moe_text' is a hybrid",
                                     "Gated DeltaNet")),
    ("dbrx-base-config.json", ("model_type 'dbrx' is not read", "ffn_config",
                               "glm4_moe")),
])
def test_configs_pptune_cannot_price_are_refused_in_one_line(name: str,
                                                             needles: tuple[str, ...]) -> None:
    with pytest.raises(BadInput) as err:
        read_hf_config(HF / name, seq_len=4096)
    message = str(err.value)
    assert all(n in message for n in needles) and "\n" not in message


@pytest.mark.parametrize(("changes", "needle"), [
    ({"model_type": "mystery_moe", "num_local_experts": 8},
     "model_type 'mystery_moe' states experts (num_local_experts 8)"),
    ({"model_type": "mystery", "n_routed_experts": 64}, "it reads the experts of mixtral"),
    ({"model_type": "mystery", "kv_lora_rank": 512}, "kv_lora_rank 512"),
    ({"model_type": "llama", "layer_types": ["full_attention", "mamba"]},
     "layer_types names 'mamba' layers"),
    # transformers' validate_layer_type: one entry a layer
    ({"model_type": "llama", "layer_types": ["full_attention"] * 3},
     "layer_types has 3 entries for num_hidden_layers 2"),
    ({"model_type": "mamba"}, "model_type 'mamba' is a state-space model"),
    ({"model_type": "mamba2"}, "with no attention; pptune plans transformer decoders"),
])
def test_experts_or_layers_pptune_does_not_read_are_refused(
        tmp_path: Path, changes: dict[str, object], needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "vocab_size": 8, **changes}))
    with pytest.raises(BadInput) as err:
        read_hf_config(path, seq_len=128)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_an_unknown_dense_family_is_still_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"  # OLMo 2: no experts, SiLU: a gated dense decoder
    path.write_text(json.dumps({"model_type": "olmo2", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "vocab_size": 8, "hidden_act": "silu",
                                "num_experts": None}))
    s = read_hf_config(path, seq_len=128).shape
    assert s.gated_mlp and not s.moe


def test_an_unknown_family_note_gives_the_parameter_count_to_check(tmp_path: Path) -> None:
    # Llama 3 8B's sizes under a family pptune does not know; a block by hand: attention
    # 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040 (GQA: 8 KV heads of 128), gated
    # MLP 3 x 4096 x 14,336 = 176,160,768, two RMSNorms 2 x 4096; 32 blocks, and the
    # untied embedding and LM head 2 x 128,256 x 4096
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "exaone4", "hidden_size": 4096, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
        "vocab_size": 128256, "hidden_act": "silu", "max_position_embeddings": 8192}))
    note = next(n for n in read_hf_config(path).notes if "not a family" in n)
    blocks = 32 * (41_943_040 + 176_160_768 + 2 * 4096)
    assert f"{(blocks + 2 * 128_256 * 4096) / 1e9:.2f}B as read" in note  # 8.03B
