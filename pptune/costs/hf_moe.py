"""ModelShape's mixture-of-experts, MLA and sliding-window fields from a Hugging Face
config, under each family's own keys (hf_families.MOE_TYPES). Keys and defaults are
those of the family's configuration class in Hugging Face transformers,
``src/transformers/models/<model_type>/configuration_<model_type>.py``, unless
stated otherwise below.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pptune.costs.hf_families import window_fields
from pptune.costs.hf_keys import Config, layer_list, leading_run, period, read_int, read_rank
from pptune.errors import BadInput
from pptune.limits import MAX_LAYERS


@dataclass(frozen=True)
class DeepseekStyle:
    """A family with DeepSeek's expert keys (n_routed_experts, n_shared_experts,
    moe_intermediate_size, first_k_dense_replace, moe_layer_freq) and its defaults."""

    first_dense: int  # first_k_dense_replace when unstated
    shared: int  # n_shared_experts when unstated
    mla: bool  # multi-head latent attention; else the standard (grouped-query) attention


# - deepseek (DeepSeekMoE 16B; not in transformers): its own configuration_deepseek.py
#   (deepseek-ai/deepseek-moe-16b-base), as vLLM's model_executor/models/deepseek.py reads
#   it: first_k_dense_replace 0, n_shared_experts None (0), multi-head attention;
# - deepseek_v2: DeepseekV2Config, first_k_dense_replace 0, n_shared_experts 2;
# - deepseek_v3, deepseek_v32 (DeepseekV32Config: V3's keys and the indexer's): 3 and 1;
# - kimi_k2: Kimi K2's config.json names DeepseekV3ForCausalLM and its own
#   configuration_deepseek.py, DeepseekV3Config with deepseek_v3's keys and defaults;
# - glm4_moe: Glm4MoeConfig, first_k_dense_replace 1, n_shared_experts 1, grouped-query
#   attention (num_key_value_heads, head_dim; use_qk_norm), no moe_layer_freq.
DEEPSEEK_STYLE = {
    "deepseek": DeepseekStyle(0, 0, mla=False),
    "deepseek_v2": DeepseekStyle(0, 2, mla=True),
    "deepseek_v3": DeepseekStyle(3, 1, mla=True),
    "deepseek_v32": DeepseekStyle(3, 1, mla=True),
    "kimi_k2": DeepseekStyle(3, 1, mla=True),
    "glm4_moe": DeepseekStyle(1, 1, mla=False),
}
# DeepseekV2Config / DeepseekV3Config: q_lora_rank defaults to 1536 (null: no query latent)
Q_LORA_RANK = 1536


def experts(cfg: Config, path: Path, experts_key: str, ffn_key: str) -> dict[str, int]:
    """The routed experts under a family's own keys: count, top-k, expert width."""
    count = read_int(cfg, (experts_key,), path)
    top_k = read_int(cfg, ("num_experts_per_tok",), path)
    if top_k > count:
        raise BadInput(f"--hf-config {path}: num_experts_per_tok ({top_k}) must not exceed "
                       f"{experts_key} ({count}): a token picks top-k of the experts")
    return {"experts": count, "top_k": top_k, "expert_ffn": read_int(cfg, (ffn_key,), path)}


def moe_fields(cfg: Config, model_type: str, path: Path, layers: int,
               seq_len: int, notes: list[str]) -> dict[str, Any]:
    """The fields of ``model_type`` (one of hf_families.MOE_TYPES):

    - mixtral, phimoe (PhimoeConfig: Mixtral's keys): num_local_experts,
      num_experts_per_tok, intermediate_size (each expert's width), sliding_window on
      every layer when set;
    - olmoe: num_experts, num_experts_per_tok, intermediate_size (each expert's width),
      QK norm (OlmoeAttention's q_norm and k_norm);
    - minicpm (not in transformers): MiniCPM-MoE's num_experts, num_experts_per_tok and
      intermediate_size (each expert's width), as vLLM's model_executor/models/minicpm.py
      reads them; no num_experts: a dense MiniCPM;
    - qwen2_moe, qwen3_moe: num_experts, num_experts_per_tok, moe_intermediate_size,
      decoder_sparse_step (block i is MoE when (i + 1) % step == 0), mlp_only_layers
      (dense blocks; pptune takes a leading run of them); qwen2_moe's one shared expert of
      shared_expert_intermediate_size (default 5632); qwen3_moe's QK norm;
    - the DeepSeek-style families (DEEPSEEK_STYLE): n_routed_experts,
      num_experts_per_tok, moe_intermediate_size, n_shared_experts (of that width),
      first_k_dense_replace, moe_layer_freq (block i >= first_k_dense_replace is MoE when
      i % freq == 0) or mlp_layer_types ('dense' first, then 'sparse'),
      num_nextn_predict_layers (MTP), n_group and topk_group (group-limited routing: each
      token's experts from topk_group of the n_group expert groups); with MLA
      q_lora_rank (null: no query latent), kv_lora_rank, qk_rope_head_dim,
      qk_nope_head_dim, v_head_dim;
    - gpt_oss: num_local_experts, num_experts_per_tok, intermediate_size,
      sliding_window with layer_types (default: sliding on even layers);
    - llama4 (its text_config): num_local_experts, num_experts_per_tok,
      intermediate_size (each expert and the shared expert), intermediate_size_mlp
      (dense blocks), interleave_moe_layer_step or moe_layers.
    """
    out: dict[str, Any] = {}
    if model_type in ("mixtral", "phimoe"):
        out.update(experts(cfg, path, "num_local_experts", "intermediate_size"))
        out.update(window_fields(cfg, path, layers, seq_len, default_every=0))
    elif model_type == "olmoe":
        out.update(experts(cfg, path, "num_experts", "intermediate_size"), qk_norm=True)
    elif model_type == "minicpm":
        if read_int(cfg, ("num_experts",), path, default=0, minimum=0) > 1:
            out.update(experts(cfg, path, "num_experts", "intermediate_size"))
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        out.update(_qwen_moe(cfg, model_type, path, notes))
    elif model_type in DEEPSEEK_STYLE:
        out.update(_deepseek_style(cfg, model_type, path, layers, notes))
    elif model_type == "gpt_oss":
        out.update(experts(cfg, path, "num_local_experts", "intermediate_size"))
        out.update(window_fields(cfg, path, layers, seq_len, default_every=2))
    else:  # llama4 / llama4_text
        out.update(_llama4(cfg, path, layers, seq_len, notes))
    return out


def _qwen_moe(cfg: Config, model_type: str, path: Path, notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = experts(cfg, path, "num_experts", "moe_intermediate_size")
    step = read_int(cfg, ("decoder_sparse_step",), path, default=1)
    out.update(moe_every=step, moe_offset=step - 1)
    if model_type == "qwen3_moe":
        out["qk_norm"] = True
    else:  # Qwen2MoeSparseMoeBlock: one shared expert (and its sigmoid gate) beside the routed
        out["shared_ffn"] = read_int(cfg, ("shared_expert_intermediate_size",), path,
                                     default=5632, minimum=0)
    dense = layer_list(cfg, "mlp_only_layers", path) or []
    if any(isinstance(i, bool) or not isinstance(i, int) for i in dense):
        raise BadInput(f"--hf-config {path}: mlp_only_layers must list layer indices")
    if sorted(dense) != list(range(len(dense))):
        raise BadInput(f"--hf-config {path}: mlp_only_layers {dense} are not the first "
                       "layers; pptune models dense layers at the start only")
    out["first_dense"] = len(dense)
    if cfg.get("use_sliding_window") is True:
        notes.append("use_sliding_window is set: pptune prices these layers' attention "
                     "in full (Qwen's sliding-window layers are not modelled)")
    return out


def _deepseek_style(cfg: Config, model_type: str, path: Path, layers: int,
                    notes: list[str]) -> dict[str, Any]:
    style = DEEPSEEK_STYLE[model_type]
    out: dict[str, Any] = experts(cfg, path, "n_routed_experts", "moe_intermediate_size")
    shared = read_int(cfg, ("n_shared_experts",), path, default=style.shared, minimum=0)
    out["shared_ffn"] = shared * out["expert_ffn"]
    kinds = layer_list(cfg, "mlp_layer_types", path)
    if kinds is not None:  # DeepseekV32Config: "dense" or "sparse" per layer
        if any(k not in ("dense", "sparse") for k in kinds):
            raise BadInput(f"--hf-config {path}: mlp_layer_types entries must be 'dense' or "
                           "'sparse'")
        out["first_dense"] = leading_run([k == "dense" for k in kinds[:layers]],
                                         "mlp_layer_types", path, "dense layers")
    else:
        out["first_dense"] = read_int(cfg, ("first_k_dense_replace",), path,
                                      default=style.first_dense, minimum=0)
        out["moe_every"] = read_int(cfg, ("moe_layer_freq",), path, default=1)
    out["mtp_layers"] = read_int(cfg, ("num_nextn_predict_layers",), path, default=0,
                                 minimum=0, cap=MAX_LAYERS)
    groups = read_int(cfg, ("n_group",), path, default=1)
    chosen = read_int(cfg, ("topk_group",), path, default=groups)
    if out["experts"] % groups or chosen > groups:
        raise BadInput(f"--hf-config {path}: n_group {groups} must divide the "
                       f"{out['experts']} routed experts and topk_group {chosen} be at most "
                       "n_group")
    if chosen < groups:
        out.update(route_groups=groups, route_group_topk=chosen)
    # the router where the file states it (ModelShape.router_score, router_expert_bias)
    if cfg.get("scoring_func") in ("softmax", "sigmoid"):
        out["router_score"] = cfg["scoring_func"]
    out["router_expert_bias"] = cfg.get("topk_method") == "noaux_tc"
    if style.mla:
        out["q_lora_rank"] = read_rank(cfg, "q_lora_rank", path, default=Q_LORA_RANK)
        for key in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
            out[key] = read_int(cfg, (key,), path)
    elif model_type == "glm4_moe":
        out["qk_norm"] = cfg.get("use_qk_norm") is True
    if model_type == "deepseek_v32":
        notes.append("deepseek_v32: DeepSeek Sparse Attention's indexer (index_n_heads, "
                     "index_head_dim) and its top-index_topk token selection are not modelled: "
                     "attention is priced as DeepSeek-V3's dense MLA over the whole sequence, "
                     "and the indexer's weights are not counted")
    return out


def _llama4(cfg: Config, path: Path, layers: int, seq_len: int,
            notes: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = experts(cfg, path, "num_local_experts", "intermediate_size")
    out["shared_ffn"] = out["expert_ffn"]
    out["ffn"] = read_int(cfg, ("intermediate_size_mlp",), path, default=16384)
    moe_layers = layer_list(cfg, "moe_layers", path)
    if moe_layers is not None:
        flags = [i in set(moe_layers) for i in range(layers)]
        every, offset = period(flags, "moe_layers", path, "MoE layers")
        if not every:
            raise BadInput(f"--hf-config {path}: moe_layers is empty; a MoE config needs "
                           "MoE layers")
    else:
        every = read_int(cfg, ("interleave_moe_layer_step",), path, default=1)
        offset = every - 1
    out.update(moe_every=every, moe_offset=offset)
    chunk = read_int(cfg, ("attention_chunk_size",), path, default=0, minimum=0)
    if chunk and chunk < seq_len:
        notes.append(f"attention_chunk_size {chunk} < sequence {seq_len}: pptune prices "
                     "Llama 4's chunked-attention layers as full attention")
    return out
