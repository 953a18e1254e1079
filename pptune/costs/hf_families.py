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

from pptune.costs.hf_keys import Config, layer_list, period, read_int, regular_period
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
# Families whose every layer attends in ``sliding_window`` when it is set, with their
# configuration class's default for a config that leaves the key out (MistralConfig 4096;
# Phi3Config, Starcoder2Config None). Their attention reads the window alone: MistralConfig
# has no use_sliding_window (transformers' MistralAttention passes config.sliding_window).
EVERY_LAYER_WINDOWS = {"mistral": 4096, "phi3": 0, "starcoder2": 0}
# Qwen2Config and Qwen3Config: sliding_window (default 4096) only with use_sliding_window
# (default false; __post_init__ sets the window None without it), on the layers their
# layer_types names 'sliding_attention', by default those with i >= max_window_layers
# (default 28).
QWEN_WINDOWS = ("qwen2", "qwen3")

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
    **dict.fromkeys(("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
                    "Qwen3.5's Gated DeltaNet linear-attention layers (layer_types "
                    "'linear_attention')"),
    **dict.fromkeys(("bamba", "falcon_h1", "granitemoehybrid", "nemotron_h", "zamba",
                     "zamba2"), "its Mamba-2 (state-space) layers"),
}
# Models with no attention layer at all (MambaConfig, Mamba2Config, FalconMambaConfig:
# a stack of Mamba mixers; RwkvConfig: time-mixing and channel-mixing blocks).
NO_ATTENTION_TYPES = {
    **dict.fromkeys(("mamba", "falcon_mamba"), "a state-space model (Mamba layers)"),
    "mamba2": "a state-space model (Mamba-2 layers)",
    "rwkv": "a recurrent model (RWKV's time-mixing layers)",
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
    it is not: a model without attention, a hybrid, a family it cannot read, or experts
    or latent attention under a model type it does not read them for."""
    if model_type in NO_ATTENTION_TYPES:
        raise BadInput(f"--hf-config {path}: model_type {model_type!r} is "
                       f"{NO_ATTENTION_TYPES[model_type]} with no attention; pptune plans "
                       "transformer decoders (attention and an MLP in every layer) and does not "
                       "plan this model")
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


def check_layer_types(cfg: Config, layers: int, path: Path) -> None:
    """BadInput unless a stated ``layer_types`` has one entry a layer (transformers'
    PreTrainedConfig.validate_layer_type refuses the config otherwise)."""
    types = layer_list(cfg, "layer_types", path)
    if types is not None and len(types) != layers:
        raise BadInput(f"--hf-config {path}: layer_types has {len(types)} entries for "
                       f"num_hidden_layers {layers}; transformers takes one entry a layer "
                       "(fix either so they agree)")


def _stated_window(cfg: Config, path: Path, default: int) -> int:
    """``sliding_window``: ``default`` when the key is absent, 0 when it is null."""
    if "sliding_window" not in cfg:
        return default
    return read_int(cfg, ("sliding_window",), path, default=0, minimum=0)


def dense_window_fields(cfg: Config, model_type: str, path: Path, layers: int, seq_len: int,
                        notes: list[str]) -> dict[str, int]:
    """ModelShape's sliding_window and full_attention_every for the dense families outside
    WINDOW_PERIODS: every layer of EVERY_LAYER_WINDOWS, Qwen's windowed layers
    (``_qwen_window``); a window another family states is said, not priced. Empty when
    the window is at least the sequence."""
    if model_type in EVERY_LAYER_WINDOWS:
        window = _stated_window(cfg, path, EVERY_LAYER_WINDOWS[model_type])
        if window and window < seq_len and cfg.get("use_sliding_window") is False:
            notes.append(f"use_sliding_window false: transformers' {model_type} config does "
                         f"not read it, and its attention keeps the sliding_window {window} "
                         "on every layer; priced so (a null sliding_window is full attention)")
        return {"sliding_window": window} if window and window < seq_len else {}
    if model_type in QWEN_WINDOWS:
        return _qwen_window(cfg, path, layers, seq_len, notes)
    window = _stated_window(cfg, path, 0)
    if window and window < seq_len and cfg.get("use_sliding_window") is not False:
        notes.append(f"sliding_window {window} (model_type {model_type[:40]!r}) is not read "
                     "for this family: every layer's attention is priced in full over the "
                     f"sequence of {seq_len}, more than the windowed layers cost")
    return {}


def _qwen_window(cfg: Config, path: Path, layers: int, seq_len: int,
                 notes: list[str]) -> dict[str, int]:
    window = _stated_window(cfg, path, 4096) if cfg.get("use_sliding_window") is True else 0
    if not window or window >= seq_len:
        return {}
    types = layer_list(cfg, "layer_types", path)
    if types is not None:
        key, sliding = "layer_types", [t == "sliding_attention" for t in types]
    else:
        first = read_int(cfg, ("max_window_layers",), path, default=28, minimum=0)
        key, sliding = f"max_window_layers {first}", [i >= first for i in range(layers)]
    if not any(sliding):
        return {}
    found = regular_period([not s for s in sliding])
    if found is not None and (not found[0] or found[1] == found[0] - 1):
        return {"sliding_window": window, "full_attention_every": found[0]}
    first_windowed = sliding.index(True)
    which = (f"layers {first_windowed}-{layers - 1} of {layers}"
             if all(sliding[first_windowed:]) else f"{sum(sliding)} of the {layers} layers")
    notes.append(f"use_sliding_window with {key}: transformers windows {which} at "
                 f"sliding_window {window}; pptune models a window on every layer or on all "
                 "but every N-th, and prices every layer's attention in full (more than the "
                 "windowed layers cost)")
    return {}


# Logit soft-capping, cap x tanh(logits / cap) (Gemma 2: attention scores capped at 50,
# final logits at 30; Gemma2Config's attn_logit_softcapping, final_logit_softcapping).
# FlashAttention-2 applies the attention cap inside its kernel from flash-attn 2.6
# (Dao-AILab/flash-attention README, changelog "2.6: Softcapping"); Transformer Engine
# takes it on FlashAttention-2 and rules out cuDNN's fused attention when it is set
# (NVIDIA/TransformerEngine pull request 3391). pptune prices neither cap's elementwise work.
SOFTCAP_NOTES = {
    "attn_logit_softcapping": "attention is priced as the --attention kernel runs without "
    "it; the cap's tanh on every attention score is not priced (FlashAttention-2 applies it "
    "in its kernel from flash-attn 2.6; cuDNN's fused attention in Transformer Engine does "
    "not take it, nor does torch's scaled_dot_product_attention, the default sdpa: "
    "--attention flash prices the kernel a capped model runs)",
    "final_logit_softcapping": "the cap's tanh over the LM head's logits is not priced",
}


def softcap_notes(cfg: Config) -> list[str]:
    """One note for each logit soft-cap the config states (null: none)."""
    return [f"{key} {cfg[key]}: {said}" for key, said in SOFTCAP_NOTES.items()
            if isinstance(cfg.get(key), int | float) and not isinstance(cfg[key], bool)
            and cfg[key] > 0]
