"""Model shapes from what a config states: a preset, a Hugging Face
config.json, or the sizes a Megatron-LM / torchtitan file names."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.costmodel.analytic import model_params
from pptune.costmodel.presets import MODELS, ModelShape
from pptune.costs.hf_families import (
    DENSE_TYPES,
    LLAMA_TYPES,
    MOE_TYPES,
    WINDOW_PERIODS,
    check_layer_types,
    dense_window_fields,
    refuse_unread,
    softcap_notes,
    window_fields,
)
from pptune.costs.hf_keys import MAX_HF_SIZE, Config, read_int
from pptune.costs.hf_moe import moe_fields
from pptune.costs.hf_style import style_fields
from pptune.errors import BadInput
from pptune.files import loads_json, read_limited
from pptune.limits import MAX_LAYERS

__all__ = ["LLAMA_TYPES", "MAX_HF_SIZE", "MOE_TYPES", "HfModel", "from_hf_config",
           "from_sizes", "read_hf_config", "with_seq_len"]

MAX_HF_CONFIG_BYTES = 1 << 20
_POSITION_KEYS = ("max_position_embeddings", "n_positions", "n_ctx")
_PLAN_YOURS = "pass --seq-len to plan at your run's length"


@dataclass(frozen=True)
class HfModel:
    """A decoder shape read from a Hugging Face config.json."""

    shape: ModelShape
    dropout_p: float  # the residual dropout probability the config states (0: none)
    notes: list[str] = field(default_factory=list)


def _pretraining_length(cfg: Config, max_pos: int) -> tuple[int, str, str] | None:
    """(length, key, scaling kind) where the rotary embedding is stretched past the length
    the model was pre-trained at: ``original_max_position_embeddings`` in ``rope_scaling``
    (YaRN, Llama 3.1's "llama3"), in transformers v5's ``rope_parameters``, or at the top
    level (Phi-3's longrope configs); None when no such length is below ``max_pos``."""
    for where in ("rope_scaling", "rope_parameters", None):
        holder = cfg.get(where) if where else cfg
        if not isinstance(holder, dict):
            continue
        original = holder.get("original_max_position_embeddings")
        if isinstance(original, int) and not isinstance(original, bool) and 0 < original < max_pos:
            scaling = next((s for s in (cfg.get("rope_scaling"), cfg.get("rope_parameters"))
                            if isinstance(s, dict)), {})
            kind = scaling.get("rope_type", scaling.get("type"))
            key = f"{where}.original_max_position_embeddings" if where else (
                "original_max_position_embeddings")
            return original, key, kind if isinstance(kind, str) else ""
    return None


def _trained_seq_len(cfg: Config, path: Path, seq_cap: int | None, notes: list[str]) -> int:
    """The sequence length a config gives, with one note naming the key it came from
    and --seq-len: ``max_position_embeddings`` (the longest context the model takes, far
    beyond what pre-training runs: Qwen3-235B-A22B-2507 262,144, Llama 4 Maverick
    1,048,576), or the pre-training length the rotary scaling stretches from
    (``_pretraining_length``: DeepSeek-V3 4,096 stretched to 163,840, Llama 3.1 8,192 to
    131,072, Phi-3.5 4,096 to 131,072); at most ``seq_cap`` (a probe's), said instead."""
    key = next((k for k in _POSITION_KEYS if cfg.get(k) is not None), None)
    max_pos = read_int(cfg, _POSITION_KEYS, path, default=2048)
    stretched = _pretraining_length(cfg, max_pos)
    if stretched is not None:
        seq_len, source, kind = stretched
        why = (f"the length the model was pre-trained at, which {kind + ' ' if kind else ''}"
               f"scaling stretches to {key or 'max_position_embeddings'} {max_pos}")
    elif key is not None:
        seq_len, source = max_pos, key
        why = ("the longest context the model takes; pre-training runs far shorter "
               "sequences")
    else:
        seq_len, source, why = max_pos, "pptune's default", "the config states no length"
    if seq_cap is not None and seq_len > seq_cap:
        notes.append(f"{source} is {seq_len}; measured at sequence length {seq_cap} "
                     "(set --seq-len to change)")
        return seq_cap
    notes.append(f"sequence length {seq_len} from {source}, {why}: {_PLAN_YOURS}")
    return seq_len


def read_hf_config(
    path: Path | str, seq_len: int | None = None, seq_cap: int | None = None
) -> HfModel:
    """A decoder-only shape from a Hugging Face ``config.json``.

    Reads the hidden size, layers, heads, KV heads (default: heads), FFN width
    (default 4h) and vocabulary under their Llama or GPT-2 names; the sequence
    length is ``seq_len``, else the config's (``_trained_seq_len``, with a note).
    A gated family (LLAMA_TYPES) or a SiLU activation means a gated MLP; a
    multimodal config's ``text_config`` is the decoder. The families of
    hf_families.MOE_TYPES add their experts, latent attention and windows under
    their own keys (hf_moe.py), Gemma 2 and 3 their sliding windows, Mistral, Phi-3,
    StarCoder2 and Qwen2/3 theirs (hf_families.dense_window_fields); models without
    attention, hybrids and experts of other families are refused
    (hf_families.refuse_unread), as is a layer_types of another length than the layers.
    """
    path = Path(path)
    raw = read_limited(path, "--hf-config file", MAX_HF_CONFIG_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"--hf-config {path} is not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                       f"offset {exc.start}); expected a Hugging Face config.json") from None
    try:
        cfg = loads_json(text, f"--hf-config {path}", "a config.json")
    except json.JSONDecodeError as exc:
        raise BadInput(f"--hf-config {path} is not valid JSON: {exc}") from None
    if not isinstance(cfg, dict):
        raise BadInput(f"--hf-config {path}: expected a JSON object, got {type(cfg).__name__}")
    if isinstance(cfg.get("text_config"), dict):  # multimodal configs nest the decoder
        cfg = {**cfg, **cfg["text_config"]}
    model_type = str(cfg.get("model_type", "")).lower()
    refuse_unread(cfg, model_type, path)
    hidden = read_int(cfg, ("hidden_size", "n_embd", "d_model"), path)
    layers = read_int(cfg, ("num_hidden_layers", "n_layer", "num_layers"), path, cap=MAX_LAYERS)
    check_layer_types(cfg, layers, path)
    heads = read_int(cfg, ("num_attention_heads", "n_head"), path)
    kv_heads = read_int(cfg, ("num_key_value_heads",), path, default=heads)
    ffn = read_int(cfg, ("intermediate_size", "n_inner", "ffn_dim"), path, default=4 * hidden)
    notes: list[str] = _unknown_notes(cfg, model_type, hidden)
    vocab = read_int(cfg, ("vocab_size",), path)
    head_dim = read_int(cfg, ("head_dim",), path, default=0, minimum=0)
    if hidden % heads and not head_dim:
        raise BadInput(
            f"--hf-config {path}: hidden_size ({hidden}) must be divisible by "
            f"num_attention_heads ({heads})"
        )
    if heads % kv_heads:
        raise BadInput(
            f"--hf-config {path}: num_attention_heads ({heads}) must be divisible by "
            f"num_key_value_heads ({kv_heads})"
        )
    if seq_len is None:
        seq_len = _trained_seq_len(cfg, path, seq_cap, notes)
    act = str(cfg.get("hidden_act", cfg.get("hidden_activation",
                                            cfg.get("activation_function", "")))).lower()
    gated = model_type in LLAMA_TYPES or act in ("silu", "swiglu", "swish")
    dropout_p = 0.0
    for key in ("resid_pdrop", "hidden_dropout_prob", "hidden_dropout", "dropout"):
        value = cfg.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            dropout_p = float(value)
            break
    extra: dict[str, Any] = {}
    if model_type in MOE_TYPES:
        extra = moe_fields(cfg, model_type, path, layers, seq_len, notes)
        ffn = extra.pop("ffn", ffn)
    elif model_type in WINDOW_PERIODS:  # Gemma 2 and 3; Gemma3Attention's q_norm and k_norm
        extra = window_fields(cfg, path, layers, seq_len, WINDOW_PERIODS[model_type],
                              None if model_type == "gemma2" else "sliding_window_pattern")
        extra["qk_norm"] = model_type != "gemma2"
    else:  # Mistral's window on every layer, Qwen2's from max_window_layers
        extra = dense_window_fields(cfg, model_type, path, layers, seq_len, notes)
    notes += softcap_notes(cfg)
    if head_dim and head_dim != hidden // heads:
        extra["kv_channels"] = head_dim
    extra.update(style_fields(cfg, model_type))  # norm, biases, tied embeddings (hf_style.py)
    if extra.get("tied_embeddings"):
        notes.append(
            f"tie_word_embeddings: the LM head shares the embedding's {vocab} x {hidden} "
            f"matrix ({vocab * hidden / 1e9:.2f}B parameters): a plan without a pipeline holds "
            "it, its gradients and optimizer state once; a pipeline keeps a copy on its last "
            "stage (Megatron-LM, DeepSpeed), whose gradient all-reduce with the first stage's "
            "each step (megatron-core finalize_model_grads) is not priced")
    shape = ModelShape(
        name=str(cfg.get("_name_or_path") or model_type or path.stem)[:60],
        num_blocks=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
        vocab=vocab, seq_len=seq_len, global_batch=512, gated_mlp=gated,
        dropout=dropout_p > 0, source=f"Hugging Face config {path.name}", **extra,
    )
    return HfModel(shape, dropout_p, [_counted(n, shape) for n in notes])


def _counted(note: str, shape: ModelShape) -> str:
    """The unknown-family note with the count to check: pptune's, of the shape it read
    (a tied LM head counted once, as the model card counts it)."""
    if not note.endswith("check its parameter count against the model card"):
        return note
    total = model_params(shape) - (shape.vocab * shape.hidden if shape.tied_embeddings else 0)
    return note.replace("check its parameter count",
                        f"check its parameter count, {total / 1e9:.2f}B as read,")


def from_hf_config(path: Path | str, seq_len: int | None = None) -> ModelShape:
    """The shape of a Hugging Face config.json, for analytic costs."""
    return read_hf_config(path, seq_len).shape


def from_sizes(
    num_layers: int, hidden: int, heads: int, seq_len: int, *, kv_heads: int | None = None,
    ffn: int | None = None, vocab: int | None = None, gated: bool | None = None,
    like: str | None = None,
) -> ModelShape:
    """A shape from the sizes a launch script names; missing ones from ``like`` or GPT
    defaults; a gated MLP (SwiGLU) is a Llama-style block: RMSNorm, rotary positions, no
    dropout (GPT's learned positions, LayerNorm biases and dropout otherwise)."""
    base = MODELS.get(like or "")
    glu = gated if gated is not None else (base.gated_mlp if base else False)
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
        gated_mlp=glu,
        dropout=base.dropout if base else not glu,
        source="sizes stated in the config",
    )


def with_seq_len(shape: ModelShape, seq_len: int | None) -> ModelShape:
    return shape if seq_len is None or seq_len == shape.seq_len else replace(shape, seq_len=seq_len)


def _unknown_notes(cfg: dict[str, Any], model_type: str, hidden: int) -> list[str]:
    """What the reader assumed of a family it does not know, or of an FFN width the config
    leaves out."""
    notes = []
    if model_type not in LLAMA_TYPES and model_type not in DENSE_TYPES:
        archs = cfg.get("architectures")
        named = f" ({', '.join(map(str, archs))[:80]})" if isinstance(archs, list) and archs else ""
        notes.append(f"model_type {model_type[:40]!r}{named} is not a family pptune knows: read "
                     "as a decoder-only model by Llama's and GPT-2's key names; check its "
                     "parameter count against the model card")
    # GPT-2, GPT-J, BLOOM, Falcon: a null or absent width is their documented 4 x hidden
    if model_type not in DENSE_TYPES and all(
            cfg.get(k) is None for k in ("intermediate_size", "n_inner", "ffn_dim")):
        notes.append(f"no intermediate_size (null or absent): an MLP of 4 x hidden = "
                     f"{4 * hidden} assumed")
    return notes

