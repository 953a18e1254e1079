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
    assert not s.gated_mlp and s.dropout and hf.dropout_p == 0.1 and hf.notes == []


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
