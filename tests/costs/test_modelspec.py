"""Model shapes read from a Hugging Face config.json: exact fields, defaults, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptune.costs.modelspec import from_sizes, read_hf_config, with_seq_len
from pptune.errors import BadInput

QWEN2 = Path(__file__).resolve().parent.parent / "data" / "hf" / "qwen2-7b-config.json"


def test_qwen2_config_is_read_field_by_field() -> None:
    hf = read_hf_config(QWEN2, seq_cap=8192)
    s = hf.shape
    assert (s.num_blocks, s.hidden, s.heads, s.kv_heads, s.ffn, s.vocab) == (
        28, 3584, 28, 4, 18944, 152064
    )
    assert s.head_dim == 128  # 3584 / 28
    assert s.gated_mlp and not s.dropout and hf.dropout_p == 0.0
    # max_position_embeddings 32768 is capped at 8192, with a note saying so
    assert s.seq_len == 8192
    assert hf.notes == [
        "max_position_embeddings is 32768; measured at sequence length 8192 (set --seq-len to change)"
    ]
    assert read_hf_config(QWEN2, seq_len=1024).shape.seq_len == 1024


def test_gpt2_names_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257,
        "n_positions": 1024, "activation_function": "gelu_new", "resid_pdrop": 0.1,
    }))
    hf = read_hf_config(path)
    s = hf.shape
    assert (s.hidden, s.num_blocks, s.heads, s.kv_heads, s.ffn, s.seq_len) == (
        768, 12, 12, 12, 4 * 768, 1024
    )
    assert not s.gated_mlp and s.dropout and hf.dropout_p == 0.1
    # the sequence length came from the config: said, naming the key
    assert hf.notes == ["sequence length 1024 from n_positions, the longest context the model "
                        "takes; pre-training runs far shorter sequences: pass --seq-len to plan "
                        "at your run's length"]


DEEPSEEK_V3 = QWEN2.parent / "deepseek-v3-config.json"


def test_rope_scaled_context_is_planned_at_its_pretraining_length(tmp_path: Path) -> None:
    # DeepSeek-V3: YaRN stretches 4,096 to 163,840; the model trained at 4,096
    hf = read_hf_config(DEEPSEEK_V3)
    assert hf.shape.seq_len == 4096
    assert ("sequence length 4096 from rope_scaling.original_max_position_embeddings, the length "
            "the model was pre-trained at, which yarn scaling stretches to "
            "max_position_embeddings 163840: pass --seq-len to plan at your run's length"
            in hf.notes)
    assert read_hf_config(DEEPSEEK_V3, seq_len=32768).shape.seq_len == 32768
    assert read_hf_config(DEEPSEEK_V3, seq_len=32768).notes == []
    # a rope_scaling without the original length, or one not below the maximum: the
    # maximum, said as such
    doc = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "vocab_size": 8, "max_position_embeddings": 2048,
           "intermediate_size": 256}
    for scaling in (None, {"type": "linear", "factor": 2.0},
                    {"rope_type": "llama3", "original_max_position_embeddings": 2048}):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**doc, "rope_scaling": scaling}))
        assert read_hf_config(path).shape.seq_len == 2048
        [note] = read_hf_config(path).notes
        assert note.startswith("sequence length 2048 from max_position_embeddings, the longest")
    # with a probe's cap below the pre-training length, the cap, said in one note
    path.write_text(json.dumps({**doc, "max_position_embeddings": 131072, "rope_scaling": {
        "rope_type": "llama3", "original_max_position_embeddings": 8192}}))
    hf = read_hf_config(path, seq_cap=4096)
    assert hf.shape.seq_len == 4096 and hf.notes == [
        "rope_scaling.original_max_position_embeddings is 8192; measured at sequence length "
        "4096 (set --seq-len to change)"]


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3, "vocab_size": 8},
         "hidden_size (100) must be divisible by num_attention_heads (3)"),
        ({"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 3, "vocab_size": 8}, "must be divisible by num_key_value_heads (3)"),
        ({"hidden_size": 64, "num_hidden_layers": True, "num_attention_heads": 4, "vocab_size": 8},
         "num_hidden_layers must be a positive integer, got True"),
        ({"hidden_size": 64, "num_attention_heads": 4, "vocab_size": 8}, "missing num_hidden_layers"),
        ([1, 2], "expected a JSON object, got list"),
    ],
)
def test_bad_configs_are_refused_in_one_line(tmp_path: Path, doc: object, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as err:
        read_hf_config(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_sizes_fill_the_rest_from_a_preset_or_gpt_defaults() -> None:
    s = from_sizes(4, 256, 8, 512)
    assert (s.kv_heads, s.ffn, s.vocab, s.gated_mlp, s.dropout) == (8, 1024, 50257, False, True)
    assert s.name == "custom-4L-256h"
    assert with_seq_len(s, None) is s and with_seq_len(s, 512) is s
    assert with_seq_len(s, 128).seq_len == 128


HF = QWEN2.parent


def test_mixtral_config_reads_its_experts() -> None:
    s = read_hf_config(HF / "mixtral-8x7b-config.json", seq_len=4096).shape
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn, s.first_dense) == (8, 2, 14336, 0, 0)
    assert (s.num_blocks, s.hidden, s.heads, s.kv_heads, s.vocab) == (32, 4096, 32, 8, 32000)
    assert s.sliding_window == 0  # "sliding_window": null
    assert all(s.moe_block(i) for i in range(32))


def test_qwen3_moe_config_reads_head_dim_qk_norm_and_sparse_step() -> None:
    s = read_hf_config(HF / "qwen3-30b-a3b-config.json", seq_len=4096).shape
    assert (s.experts, s.top_k, s.expert_ffn, s.ffn) == (128, 8, 768, 6144)
    assert (s.head_dim, s.kv_heads, s.qk_norm) == (128, 4, True)  # head_dim 128, not 2048 / 32
    assert (s.moe_every, s.moe_offset, s.first_dense) == (1, 0, 0)


def test_deepseek_v3_config_reads_mla_shared_experts_dense_layers_and_mtp() -> None:
    s = read_hf_config(HF / "deepseek-v3-config.json", seq_len=4096).shape
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn) == (256, 8, 2048, 2048)
    assert (s.first_dense, s.moe_every, s.mtp_layers, s.ffn) == (3, 1, 1, 18432)
    assert (s.q_lora_rank, s.kv_lora_rank, s.qk_rope_head_dim, s.qk_nope_head_dim,
            s.v_head_dim) == (1536, 512, 64, 128, 128)
    assert s.mla and not s.moe_block(2) and s.moe_block(3)


def test_gpt_oss_config_reads_alternating_sliding_windows() -> None:
    s = read_hf_config(HF / "gpt-oss-120b-config.json", seq_len=4096).shape
    assert (s.experts, s.top_k, s.expert_ffn, s.head_dim) == (128, 4, 2880, 64)
    assert (s.sliding_window, s.full_attention_every) == (128, 2)
    assert [s.sliding_block(i) for i in range(4)] == [True, False, True, False]


def test_llama4_text_config_reads_experts_shared_expert_and_dense_width() -> None:
    s = read_hf_config(HF / "llama4-scout-17b-16e-config.json", seq_len=8192).shape
    assert (s.experts, s.top_k, s.expert_ffn, s.shared_ffn, s.ffn) == (16, 1, 8192, 8192, 16384)
    assert (s.num_blocks, s.hidden, s.heads, s.kv_heads, s.vocab) == (48, 5120, 40, 8, 202048)
    assert (s.moe_every, s.moe_offset) == (1, 0)


def _moe_doc(**changes: object) -> dict[str, object]:
    doc = json.loads((HF / "deepseek-v3-config.json").read_text())
    doc.update(changes)
    return {k: v for k, v in doc.items() if v is not None}


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (_moe_doc(n_routed_experts=8.5), "n_routed_experts must be a positive integer, got 8.5"),
        (_moe_doc(n_routed_experts="256"), "n_routed_experts must be a positive integer"),
        (_moe_doc(num_experts_per_tok=300),
         "num_experts_per_tok (300) must not exceed n_routed_experts (256)"),
        (_moe_doc(moe_intermediate_size=None), "missing moe_intermediate_size"),
        (_moe_doc(kv_lora_rank=None), "missing kv_lora_rank"),
        (_moe_doc(first_k_dense_replace=-1), "first_k_dense_replace must be an integer >= 0"),
        ({"model_type": "gpt_oss", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "vocab_size": 8, "num_local_experts": 4,
          "num_experts_per_tok": 2, "intermediate_size": 64, "sliding_window": 16,
          "layer_types": ["sliding_attention", "full_attention", "full_attention",
                          "sliding_attention"]},
         "layer_types places full-attention layers irregularly"),
        ({"model_type": "qwen3_moe", "hidden_size": 64, "num_hidden_layers": 4,
          "num_attention_heads": 4, "vocab_size": 8, "num_experts": 4, "num_experts_per_tok": 2,
          "moe_intermediate_size": 32, "mlp_only_layers": [2]},
         "mlp_only_layers [2] are not the first layers"),
    ],
)
def test_bad_moe_configs_are_refused_naming_the_key(tmp_path: Path, doc: object,
                                                    needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as err:
        read_hf_config(path, seq_len=4096)
    assert needle in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_moe_family_is_refused_naming_the_families_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "arctic", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "vocab_size": 8, "num_local_experts": 8}))
    with pytest.raises(BadInput) as err:
        read_hf_config(path, seq_len=128)
    assert "model_type 'arctic' states experts (num_local_experts 8)" in str(err.value)
    assert "mixtral, phimoe, olmoe" in str(err.value)


def test_a_binary_hf_config_is_named_not_utf8(tmp_path: Path) -> None:
    """A file that is not text says so, with the byte, as a binary profile does; not the
    codec's own words."""
    path = tmp_path / "config.json"
    path.write_bytes(b'{"a": 1}\x9c\xff')
    with pytest.raises(BadInput) as err:
        read_hf_config(path)
    assert str(err.value) == (f"--hf-config {path} is not UTF-8 text (byte 0x9c at offset 8); "
                              "expected a Hugging Face config.json")
