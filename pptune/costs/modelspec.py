"""Model shapes from what a config states: a preset, a Hugging Face
config.json, or the sizes a Megatron-LM / torchtitan file names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.costmodel.presets import MODELS, ModelShape
from pptune.errors import BadInput
from pptune.files import read_limited
from pptune.limits import MAX_LAYERS

MAX_HF_CONFIG_BYTES = 1 << 20
# any one size (hidden, FFN, vocabulary, heads, positions): 2^24 is far above
# every published decoder (vocabularies reach 2^18, FFN widths 2^16)
MAX_HF_SIZE = 1 << 24
# Llama-style families: RMSNorm, SwiGLU MLP, no dropout.
LLAMA_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3"}


@dataclass(frozen=True)
class HfModel:
    """A decoder shape read from a Hugging Face config.json."""

    shape: ModelShape
    dropout_p: float  # the residual dropout probability the config states (0: none)
    notes: list[str] = field(default_factory=list)


def _int(cfg: dict[str, Any], keys: tuple[str, ...], path: Path, default: int | None = None,
         cap: int = MAX_HF_SIZE) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInput(f"--hf-config {path}: {key} must be a positive integer, got {value!r}")
        if value > cap:
            raise BadInput(f"--hf-config {path}: {key} is {value:,}; pptune takes up to {cap:,}")
        return value
    if default is not None:
        return default
    raise BadInput(f"--hf-config {path}: missing {keys[0]} (a positive integer)")


def read_hf_config(
    path: Path | str, seq_len: int | None = None, seq_cap: int | None = None
) -> HfModel:
    """A decoder-only shape from a Hugging Face ``config.json``.

    Reads the hidden size, layers, heads, KV heads (default: heads), FFN width
    (default 4h) and vocabulary under their Llama or GPT-2 names; the sequence
    length is ``seq_len``, else ``max_position_embeddings`` (capped at
    ``seq_cap`` with a note). A Llama-style family or a SiLU activation means a
    gated MLP; a multimodal config's ``text_config`` is the decoder.
    """
    path = Path(path)
    raw = read_limited(path, "--hf-config file", MAX_HF_CONFIG_BYTES)
    try:
        cfg = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"--hf-config {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"--hf-config {path}: JSON nested too deeply to be a config.json") from None
    if not isinstance(cfg, dict):
        raise BadInput(f"--hf-config {path}: expected a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), dict):  # multimodal configs nest the decoder
        cfg = {**cfg, **cfg["text_config"]}
    hidden = _int(cfg, ("hidden_size", "n_embd", "d_model"), path)
    layers = _int(cfg, ("num_hidden_layers", "n_layer", "num_layers"), path, cap=MAX_LAYERS)
    heads = _int(cfg, ("num_attention_heads", "n_head"), path)
    kv_heads = _int(cfg, ("num_key_value_heads",), path, default=heads)
    ffn = _int(cfg, ("intermediate_size", "n_inner", "ffn_dim"), path, default=4 * hidden)
    vocab = _int(cfg, ("vocab_size",), path)
    if hidden % heads:
        raise BadInput(
            f"--hf-config {path}: hidden_size ({hidden}) must be divisible by "
            f"num_attention_heads ({heads})"
        )
    if heads % kv_heads:
        raise BadInput(
            f"--hf-config {path}: num_attention_heads ({heads}) must be divisible by "
            f"num_key_value_heads ({kv_heads})"
        )
    notes: list[str] = []
    if seq_len is None:
        max_pos = _int(cfg, ("max_position_embeddings", "n_positions", "n_ctx"), path,
                       default=2048)
        seq_len = max_pos if seq_cap is None else min(max_pos, seq_cap)
        if seq_len < max_pos:
            notes.append(
                f"max_position_embeddings is {max_pos}; measured at sequence length "
                f"{seq_len} (set --seq-len to change)"
            )
    model_type = str(cfg.get("model_type", "")).lower()
    act = str(cfg.get("hidden_act", cfg.get("activation_function", ""))).lower()
    gated = model_type in LLAMA_TYPES or act in ("silu", "swiglu", "swish")
    dropout_p = 0.0
    for key in ("resid_pdrop", "hidden_dropout_prob", "hidden_dropout", "dropout"):
        value = cfg.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            dropout_p = float(value)
            break
    experts = cfg.get("num_local_experts") or cfg.get("num_experts")
    if experts:
        notes.append(
            f"mixture-of-experts config ({experts} experts): pptune does not model experts yet "
            "and plans it as a dense MLP of intermediate_size; expert parameters, their "
            "memory and the all-to-all are not counted"
        )
    shape = ModelShape(
        name=str(cfg.get("_name_or_path") or model_type or path.stem)[:60],
        num_blocks=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
        vocab=vocab, seq_len=seq_len, global_batch=512, gated_mlp=gated,
        dropout=dropout_p > 0, source=f"Hugging Face config {path.name}",
    )
    return HfModel(shape, dropout_p, notes)


def from_hf_config(path: Path | str, seq_len: int | None = None) -> ModelShape:
    """The shape of a Hugging Face config.json, for analytic costs."""
    return read_hf_config(path, seq_len).shape


def from_sizes(
    num_layers: int, hidden: int, heads: int, seq_len: int, *, kv_heads: int | None = None,
    ffn: int | None = None, vocab: int | None = None, gated: bool | None = None,
    like: str | None = None,
) -> ModelShape:
    """A shape from the sizes a launch script names; missing ones from ``like`` or GPT defaults."""
    base = MODELS.get(like or "")
    return ModelShape(
        name=f"custom-{num_layers}L-{hidden}h",
        num_blocks=num_layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads or (base.kv_heads if base else heads),
        ffn=ffn or (base.ffn if base else 4 * hidden),
        vocab=vocab or (base.vocab if base else 50257),
        seq_len=seq_len,
        global_batch=512,
        gated_mlp=gated if gated is not None else (base.gated_mlp if base else False),
        dropout=base.dropout if base else True,
        source="sizes stated in the config",
    )


def with_seq_len(shape: ModelShape, seq_len: int | None) -> ModelShape:
    return shape if seq_len is None or seq_len == shape.seq_len else replace(shape, seq_len=seq_len)
