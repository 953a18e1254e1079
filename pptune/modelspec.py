"""Model shapes from what a config states: a preset, a Hugging Face
config.json, or the sizes a Megatron-LM / torchtitan file names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pptune.costmodel.presets import MODELS, ModelShape
from pptune.errors import BadInput

MAX_HF_CONFIG_BYTES = 1 << 20


def from_hf_config(path: Path | str, seq_len: int | None = None) -> ModelShape:
    """A decoder-only shape from a Hugging Face ``config.json``.

    Reads ``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``,
    ``num_key_value_heads`` (default: heads), ``intermediate_size`` (default
    4h), ``vocab_size``, ``max_position_embeddings`` (the sequence length
    unless ``seq_len`` is given); a SiLU activation (Llama, Mistral, Qwen)
    means a gated MLP.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()[: MAX_HF_CONFIG_BYTES + 1]
    except OSError as exc:
        raise BadInput(f"cannot read HF config {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_HF_CONFIG_BYTES:
        raise BadInput(f"HF config {path} is larger than 1 MiB; is it a config.json?")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"HF config {path} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadInput(f"HF config {path}: expected a JSON object")

    def need(key: str, default: Any = None) -> int:
        value = data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BadInput(
                f"HF config {path}: {key} must be a positive integer (got {value!r})"
            )
        return value

    h = need("hidden_size")
    heads = need("num_attention_heads")
    act = str(data.get("hidden_act", data.get("activation_function", "gelu"))).lower()
    return ModelShape(
        name=str(data.get("_name_or_path") or data.get("model_type") or path.stem)[:60],
        num_blocks=need("num_hidden_layers"),
        hidden=h,
        heads=heads,
        kv_heads=need("num_key_value_heads", heads),
        ffn=need("intermediate_size", 4 * h),
        vocab=need("vocab_size"),
        seq_len=seq_len or need("max_position_embeddings", 2048),
        global_batch=512,
        gated_mlp="silu" in act or "swiglu" in act,
        dropout=False,
        source=f"Hugging Face config {path.name}",
    )


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
