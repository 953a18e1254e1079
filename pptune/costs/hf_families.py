"""Which Hugging Face model types pptune reads, and what it refuses.

Each family is read under the key names of its configuration class in Hugging Face
transformers (``src/transformers/models/<model_type>/configuration_<model_type>.py``)
or, for the types transformers does not ship, of the model's own configuration code
(named where it is read, pptune/costs/hf_moe.py). A config whose layers are not all
attention (Mamba, linear attention), a family pptune cannot read, and a config that
states experts or latent attention under a model type pptune does not read them for
are refused in one line rather than planned as a smaller dense model.
"""

from __future__ import annotations

from pathlib import Path

from pptune.costs.hf_keys import Config, layer_list, period, read_int
from pptune.errors import BadInput

# Families whose MLP is gated (gate, up and down projections: SwiGLU, or GeGLU for
# Gemma), RMSNorm, no dropout: each configuration class's default hidden_act is "silu"
# (Gemma's hidden_activation "gelu_pytorch_tanh" through gate_proj / up_proj / down_proj).
LLAMA_TYPES = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3",
               "gemma3_text", "phi3", "qwen3_moe", "deepseek_v3", "gpt_oss", "llama4",
               "llama4_text", "phimoe", "olmoe", "qwen2_moe", "minicpm", "deepseek",
               "deepseek_v2", "deepseek_v32", "kimi_k2", "glm4_moe"}
# Dense families whose configs use Llama's or GPT-2's key names (transformers'
# configuration classes): read without a note; any other model_type is read by the same
# names with one.
DENSE_TYPES = {"gpt2", "gpt_neox", "gptj", "gpt_bigcode", "opt", "bloom", "falcon", "phi",
               "starcoder2", "stablelm", "olmo", "olmo2", "cohere", "granite", "nemotron",
               "internlm2", "baichuan", "yi"}
# The mixture-of-experts families read with their own key names (hf_moe.moe_fields).
MOE_TYPES = ("mixtral", "phimoe", "olmoe", "minicpm", "qwen2_moe", "qwen3_moe", "deepseek",
             "deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "gpt_oss",
             "llama4", "llama4_text")
# ... of them, those with DeepSeek's multi-head latent attention (kv_lora_rank, ...)
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")
# Families whose embedding and LM head share one matrix unless the config says otherwise
# (tie_word_embeddings defaults to True in GemmaConfig, Gemma2Config, Gemma3TextConfig).
TIED_BY_DEFAULT = {"gemma", "gemma2", "gemma3", "gemma3_text"}
# Sliding-window families read here: the period of their full-attention layers when the
# config has no layer_types (Gemma2Config: sliding when (i + 1) % 2; Gemma3TextConfig:
# when (i + 1) % sliding_window_pattern, default 6).
WINDOW_PERIODS = {"gemma2": 2, "gemma3": 6, "gemma3_text": 6}

# Hybrids: layers that are not attention, which pptune does not price (it prices every
# block as attention and an MLP). transformers' configuration classes of each type.
HYBRID_TYPES = {
    "jamba": "Jamba's Mamba layers (attention is one layer in attn_layer_period)",
    "qwen3_next": "Qwen3-Next's Gated DeltaNet linear-attention layers (full attention is one "
                  "layer in full_attention_interval)",
    "kimi_linear": "Kimi Linear's KDA (Kimi Delta Attention) linear-attention layers "
                   "(linear_attn_config's kda_layers)",
    "minimax": "MiniMax-01's lightning (linear) attention layers",
    "lfm2": "LFM2's short-convolution layers",
    "recurrent_gemma": "RecurrentGemma's RG-LRU recurrent layers",
    "rwkv": "RWKV's recurrent time-mixing layers",
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
                    "Qwen3.5's Gated DeltaNet linear-attention layers (layer_types "
                    "'linear_attention')"),
    **dict.fromkeys(("mamba", "mamba2", "falcon_mamba"), "its Mamba (state-space) layers"),
    **dict.fromkeys(("bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "zamba",
                     "zamba2"), "its Mamba-2 (state-space) layers"),
}
# Layer kinds of a layer_types list that are attention pptune prices (chunked: as full).
ATTENTION_LAYERS = ("full_attention", "sliding_attention", "chunked_attention")
# Keys that state experts or latent attention, with what they mean.
EXPERT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
NOT_READ = {
    "dbrx": "DBRX nests its sizes under d_model, n_layers, n_heads, attn_config and ffn_config",
}


def refuse_unread(cfg: Config, model_type: str, path: Path) -> None:
    """BadInput, in one line, for a config pptune would otherwise price as something
    it is not: a hybrid, a family it cannot read, or experts or latent attention under
    a model type it does not read them for."""
    if model_type in HYBRID_TYPES:
        raise BadInput(f"--hf-config {path}: model_type {model_type!r} is a hybrid: "
                       f"{HYBRID_TYPES[model_type]} are not attention, and pptune prices every "
                       "layer as attention and an MLP; it does not plan this model")
    if model_type in NOT_READ:
        raise BadInput(f"--hf-config {path}: model_type {model_type!r} is not read "
                       f"({NOT_READ[model_type]}); pptune reads decoders under Llama's or "
                       f"GPT-2's key names, with the experts of {', '.join(MOE_TYPES)}")
    kinds = cfg.get("layer_types")
    other = sorted({k for k in kinds if k not in ATTENTION_LAYERS}, key=str) if isinstance(
        kinds, list) else []
    if other:
        raise BadInput(f"--hf-config {path}: layer_types names {other[0]!r} layers "
                       f"(model_type {model_type!r}); pptune prices every layer as attention "
                       f"({', '.join(ATTENTION_LAYERS)}) and an MLP, and does not plan this model")
    if model_type in MOE_TYPES:
        return
    stated = [f"{key} {cfg[key]}" for key in EXPERT_KEYS
              if isinstance(cfg.get(key), int) and not isinstance(cfg[key], bool) and cfg[key] > 1]
    if stated:
        raise BadInput(f"--hf-config {path}: model_type {model_type!r} states experts "
                       f"({', '.join(stated)}) that pptune does not read for it (a dense plan "
                       "would leave out their parameters, memory and all-to-all); it reads the "
                       f"experts of {', '.join(MOE_TYPES)}")
    rank = cfg.get("kv_lora_rank")
    if isinstance(rank, int) and not isinstance(rank, bool) and rank > 0:
        raise BadInput(f"--hf-config {path}: model_type {model_type!r} states kv_lora_rank "
                       f"{rank} (multi-head latent attention), which pptune reads for "
                       f"{', '.join(MLA_TYPES)} only")


def window_fields(cfg: Config, path: Path, layers: int, seq_len: int,
                  default_every: int, pattern_key: str | None = None) -> dict[str, int]:
    """ModelShape's sliding_window and full_attention_every from ``sliding_window`` and
    ``layer_types`` ('sliding_attention' / 'full_attention'), or, without layer_types,
    full attention every ``pattern_key`` (when given and stated) or ``default_every``
    layers, the last of each period (transformers' default layer_types for GPT-OSS and
    Gemma: sliding when (i + 1) % N). Empty when the window is at least the sequence."""
    window = read_int(cfg, ("sliding_window",), path, default=0, minimum=0)
    if not window or window >= seq_len:
        return {}
    types = layer_list(cfg, "layer_types", path)
    if types is None:
        every = (read_int(cfg, (pattern_key,), path, default=default_every) if pattern_key
                 else default_every)
        return {"sliding_window": window, "full_attention_every": every}
    if any(t not in ("sliding_attention", "full_attention") for t in types):
        raise BadInput(f"--hf-config {path}: layer_types entries must be "
                       "'sliding_attention' or 'full_attention'")
    every, offset = period([t == "full_attention" for t in types[:layers]], "layer_types",
                           path, "full-attention layers")
    if every and offset != every - 1:
        raise BadInput(f"--hf-config {path}: layer_types must end each period with "
                       "its full-attention layer (as GPT-OSS and Gemma do)")
    return {"sliding_window": window, "full_attention_every": every}
