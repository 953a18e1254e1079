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
LLAMA_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "phi3",
               "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4", "llama4_text"}
# The mixture-of-experts families read with their own key names (``_moe_fields``).
MOE_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4", "llama4_text")


@dataclass(frozen=True)
class HfModel:
    """A decoder shape read from a Hugging Face config.json."""

    shape: ModelShape
    dropout_p: float  # the residual dropout probability the config states (0: none)
    notes: list[str] = field(default_factory=list)


def _int(cfg: dict[str, Any], keys: tuple[str, ...], path: Path, default: int | None = None,
         cap: int = MAX_HF_SIZE, minimum: int = 1) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            kind = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
            raise BadInput(f"--hf-config {path}: {key} must be {kind}, got {value!r}")
        if value > cap:
            raise BadInput(f"--hf-config {path}: {key} is {value:,}; pptune takes up to {cap:,}")
        return value
    if default is not None:
        return default
    raise BadInput(f"--hf-config {path}: missing {keys[0]} (a positive integer)")


def _trained_seq_len(cfg: dict[str, Any], path: Path, seq_cap: int | None,
                     notes: list[str]) -> int:
    """The sequence a config's model was pre-trained at: ``max_position_embeddings``,
    or, where ``rope_scaling`` stretches the rotary embedding past the length it was
    trained at (YaRN, Llama 3.1's "llama3" scaling), its
    ``original_max_position_embeddings`` (DeepSeek-V3: 4,096 stretched to 163,840;
    Llama 3.1: 8,192 to 131,072); capped at ``seq_cap``. Each choice is a note."""
    max_pos = _int(cfg, ("max_position_embeddings", "n_positions", "n_ctx"), path,
                   default=2048)
    seq_len = max_pos
    scaling = cfg.get("rope_scaling")
    scaling = scaling if isinstance(scaling, dict) else {}
    original = scaling.get("original_max_position_embeddings")
    if isinstance(original, int) and not isinstance(original, bool) and 0 < original < max_pos:
        seq_len = original
        kind = scaling.get("rope_type", scaling.get("type"))
        notes.append(
            f"rope_scaling{f' ({kind})' if isinstance(kind, str) else ''} extends the context "
            f"from {original} to max_position_embeddings {max_pos}: planned at the "
            f"pre-training length {original} (set --seq-len to change)")
    if seq_cap is not None and seq_len > seq_cap:
        notes.append(
            f"max_position_embeddings is {max_pos}; measured at sequence length "
            f"{seq_cap} (set --seq-len to change)")
        seq_len = seq_cap
    return seq_len


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
    model_type = str(cfg.get("model_type", "")).lower()
    head_dim = _int(cfg, ("head_dim",), path, default=0, minimum=0)
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
    notes: list[str] = []
    if seq_len is None:
        seq_len = _trained_seq_len(cfg, path, seq_cap, notes)
    act = str(cfg.get("hidden_act", cfg.get("activation_function", ""))).lower()
    gated = model_type in LLAMA_TYPES or act in ("silu", "swiglu", "swish")
    dropout_p = 0.0
    for key in ("resid_pdrop", "hidden_dropout_prob", "hidden_dropout", "dropout"):
        value = cfg.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            dropout_p = float(value)
            break
    extra: dict[str, Any] = {}
    if model_type in MOE_TYPES:
        extra = _moe_fields(cfg, model_type, path, layers, seq_len, notes)
        ffn = extra.pop("ffn", ffn)
    else:
        experts = cfg.get("num_local_experts") or cfg.get("num_experts")
        if experts:
            notes.append(
                f"mixture-of-experts config ({experts} experts) of model_type {model_type!r}: "
                f"pptune reads experts for {', '.join(MOE_TYPES[:5])}; this one is planned "
                "as a dense MLP of intermediate_size (expert parameters, their memory and "
                "the all-to-all not counted)"
            )
    if head_dim and head_dim != hidden // heads:
        extra["kv_channels"] = head_dim
    shape = ModelShape(
        name=str(cfg.get("_name_or_path") or model_type or path.stem)[:60],
        num_blocks=layers, hidden=hidden, heads=heads, kv_heads=kv_heads, ffn=ffn,
        vocab=vocab, seq_len=seq_len, global_batch=512, gated_mlp=gated,
        dropout=dropout_p > 0, source=f"Hugging Face config {path.name}", **extra,
    )
    return HfModel(shape, dropout_p, notes)


def _experts(cfg: dict[str, Any], path: Path, experts_key: str, ffn_key: str) -> dict[str, int]:
    """The routed experts under a family's own keys: count, top-k, expert width."""
    experts = _int(cfg, (experts_key,), path)
    top_k = _int(cfg, ("num_experts_per_tok",), path)
    if top_k > experts:
        raise BadInput(f"--hf-config {path}: num_experts_per_tok ({top_k}) must not exceed "
                       f"{experts_key} ({experts}): a token picks top-k of the experts")
    return {"experts": experts, "top_k": top_k, "expert_ffn": _int(cfg, (ffn_key,), path)}


def _layer_list(cfg: dict[str, Any], key: str, path: Path, layers: int) -> list[Any] | None:
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > 4 * MAX_LAYERS:
        raise BadInput(f"--hf-config {path}: {key} must be a list (one entry per layer), "
                       f"got {type(value).__name__}")
    return value


def _period(flags: list[bool], key: str, path: Path, what: str) -> tuple[int, int]:
    """(every, offset) with flags[i] == (i % every == offset), or BadInput."""
    hits = [i for i, f in enumerate(flags) if f]
    if not hits:
        return 0, 0
    every = hits[1] - hits[0] if len(hits) > 1 else len(flags)
    offset = hits[0] % every
    if any(f != (i % every == offset) for i, f in enumerate(flags)):
        raise BadInput(f"--hf-config {path}: {key} places {what} irregularly; pptune models "
                       f"one every N layers (e.g. every other layer)")
    return every, offset


def _moe_fields(cfg: dict[str, Any], model_type: str, path: Path, layers: int,
                seq_len: int, notes: list[str]) -> dict[str, Any]:
    """ModelShape's MoE, MLA and sliding-window fields from a family's own keys
    (Hugging Face transformers' configuration classes for each model_type):

    - mixtral: num_local_experts, num_experts_per_tok, intermediate_size (each
      expert's width), sliding_window on every layer when set;
    - qwen3_moe: num_experts, num_experts_per_tok, moe_intermediate_size,
      decoder_sparse_step (block i is MoE when (i + 1) % step == 0),
      mlp_only_layers (dense blocks; pptune takes a leading run of them), QK norm;
    - deepseek_v3: n_routed_experts, num_experts_per_tok, moe_intermediate_size,
      n_shared_experts (of that width), first_k_dense_replace, moe_layer_freq
      (block i >= first_k_dense_replace is MoE when i % freq == 0),
      num_nextn_predict_layers (MTP), q_lora_rank (null: no query latent),
      kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim, n_group and
      topk_group (group-limited routing: each token's experts from topk_group of the
      n_group expert groups);
    - gpt_oss: num_local_experts, num_experts_per_tok, intermediate_size,
      sliding_window with layer_types (default: sliding on even layers);
    - llama4 (its text_config): num_local_experts, num_experts_per_tok,
      intermediate_size (each expert and the shared expert), intermediate_size_mlp
      (dense blocks), interleave_moe_layer_step or moe_layers.
    """
    out: dict[str, Any] = {}
    if model_type == "mixtral":
        out.update(_experts(cfg, path, "num_local_experts", "intermediate_size"))
        window = _int(cfg, ("sliding_window",), path, default=0, minimum=0)
        if window and window < seq_len:
            out.update(sliding_window=window, full_attention_every=0)
    elif model_type == "qwen3_moe":
        out.update(_experts(cfg, path, "num_experts", "moe_intermediate_size"))
        step = _int(cfg, ("decoder_sparse_step",), path, default=1)
        out.update(moe_every=step, moe_offset=step - 1, qk_norm=True)
        dense = _layer_list(cfg, "mlp_only_layers", path, layers) or []
        if any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
            raise BadInput(f"--hf-config {path}: mlp_only_layers must list layer indices")
        if sorted(dense) != list(range(len(dense))):
            raise BadInput(f"--hf-config {path}: mlp_only_layers {dense} are not the first "
                           "layers; pptune models dense layers at the start only")
        out["first_dense"] = len(dense)
        if cfg.get("use_sliding_window") is True:
            notes.append("use_sliding_window is set: pptune prices these layers' attention "
                         "in full (Qwen's sliding-window layers are not modelled)")
    elif model_type == "deepseek_v3":
        out.update(_experts(cfg, path, "n_routed_experts", "moe_intermediate_size"))
        shared = _int(cfg, ("n_shared_experts",), path, default=1, minimum=0)
        out["shared_ffn"] = shared * out["expert_ffn"]
        out["first_dense"] = _int(cfg, ("first_k_dense_replace",), path, default=3, minimum=0)
        out["moe_every"] = _int(cfg, ("moe_layer_freq",), path, default=1)
        out["mtp_layers"] = _int(cfg, ("num_nextn_predict_layers",), path, default=0,
                                 minimum=0, cap=MAX_LAYERS)
        out["q_lora_rank"] = _int(cfg, ("q_lora_rank",), path, default=0, minimum=0)
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            out[key] = _int(cfg, (key,), path)
        groups = _int(cfg, ("n_group",), path, default=1)
        chosen = _int(cfg, ("topk_group",), path, default=groups)
        if out["experts"] % groups or chosen > groups:
            raise BadInput(f"--hf-config {path}: n_group {groups} must divide the "
                           f"{out['experts']} routed experts and topk_group {chosen} be at most "
                           "n_group")
        if chosen < groups:
            out.update(route_groups=groups, route_group_topk=chosen)
    elif model_type == "gpt_oss":
        out.update(_experts(cfg, path, "num_local_experts", "intermediate_size"))
        window = _int(cfg, ("sliding_window",), path, default=0, minimum=0)
        types = _layer_list(cfg, "layer_types", path, layers)
        if types is None:  # GptOssConfig: sliding when (i + 1) % 2, i.e. even layers
            types = ["sliding_attention" if (i + 1) % 2 else "full_attention"
                     for i in range(layers)]
        if any(t not in ("sliding_attention", "full_attention") for t in types):
            raise BadInput(f"--hf-config {path}: layer_types entries must be "
                           "'sliding_attention' or 'full_attention'")
        if window and window < seq_len:
            every, offset = _period([t == "full_attention" for t in types[:layers]],
                                    "layer_types", path, "full-attention layers")
            if every and offset != every - 1:
                raise BadInput(f"--hf-config {path}: layer_types must end each period with "
                               "its full-attention layer (as GPT-OSS does)")
            out.update(sliding_window=window, full_attention_every=every)
    else:  # llama4 / llama4_text
        out.update(_experts(cfg, path, "num_local_experts", "intermediate_size"))
        out["shared_ffn"] = out["expert_ffn"]
        out["ffn"] = _int(cfg, ("intermediate_size_mlp",), path, default=16384)
        moe_layers = _layer_list(cfg, "moe_layers", path, layers)
        if moe_layers is not None:
            flags = [i in set(moe_layers) for i in range(layers)]
            every, offset = _period(flags, "moe_layers", path, "MoE layers")
            if not every:
                raise BadInput(f"--hf-config {path}: moe_layers is empty; a MoE config needs "
                               "MoE layers")
        else:
            every = _int(cfg, ("interleave_moe_layer_step",), path, default=1)
            offset = every - 1
        out.update(moe_every=every, moe_offset=offset)
        chunk = _int(cfg, ("attention_chunk_size",), path, default=0, minimum=0)
        if chunk and chunk < seq_len:
            notes.append(f"attention_chunk_size {chunk} < sequence {seq_len}: pptune prices "
                         "Llama 4's chunked-attention layers as full attention")
    return out


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
