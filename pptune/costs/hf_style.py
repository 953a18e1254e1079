"""A Hugging Face config's block style: its norm, linear biases and tied embeddings.

Read per family under the key names and defaults of transformers' own configuration
and modeling classes (transformers 5.2.0, ``models/<model_type>/``):

- ``attention_bias`` (default False) puts a bias on q, k, v and o (LlamaAttention,
  Qwen3, Qwen3-MoE, OLMoE, Gemma 1-3, Phimoe); Glm4MoeAttention on q, k and v only
  (its o_proj ``bias=False``); GptOssConfig sets it True whatever the file says.
- ``mlp_bias`` (LlamaConfig, default False): biases on gate, up and down.
- Qwen2Attention's q, k and v always have a bias (``bias=True``), o none;
  Qwen2MoeConfig's ``qkv_bias`` (default True) says the same for Qwen2-MoE.
- GPT-OSS's experts carry ``gate_up_proj_bias`` and ``down_proj_bias``.
- Phimoe's blocks and final norm are ``nn.LayerNorm``; the other gated families'
  are RMSNorm. Families outside hf_families.LLAMA_TYPES keep the style their
  dropout implies (ModelShape.norm None).
- ``tie_word_embeddings``: stated, else True for the families of
  hf_families.TIED_BY_DEFAULT.

Latent attention (hf_families.MLA_TYPES) is priced without biases (attention.py).
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.models import Norm
from pptune.costs.hf_families import LLAMA_TYPES, MLA_TYPES, TIED_BY_DEFAULT
from pptune.costs.hf_keys import Config

# families whose attention_bias key biases q, k, v and o
ATTENTION_BIAS_TYPES = {"llama", "qwen3", "qwen3_moe", "olmoe", "gemma", "gemma2", "gemma3",
                        "gemma3_text", "phimoe"}
LAYERNORM_TYPES = {"phimoe"}


def _flag(cfg: Config, key: str, default: bool) -> bool:
    value = cfg.get(key)
    return value if isinstance(value, bool) else default


def style_fields(cfg: Config, model_type: str) -> dict[str, Any]:
    """ModelShape's norm, qkv_bias, attn_out_bias, mlp_bias and tied_embeddings of a
    config (module docstring); only the fields that differ from ModelShape's defaults
    or that the family fixes."""
    out: dict[str, Any] = {}
    if model_type in LLAMA_TYPES:
        out["norm"] = Norm.LAYERNORM if model_type in LAYERNORM_TYPES else Norm.RMSNORM
    qkv = out_bias = mlp = False
    if model_type in ATTENTION_BIAS_TYPES:
        qkv = out_bias = _flag(cfg, "attention_bias", False)
    elif model_type == "glm4_moe":
        qkv = _flag(cfg, "attention_bias", False)
    elif model_type == "qwen2":
        qkv = True
    elif model_type == "qwen2_moe":
        qkv = _flag(cfg, "qkv_bias", True)
    elif model_type == "gpt_oss":
        qkv = out_bias = mlp = True
    if model_type == "llama":
        mlp = _flag(cfg, "mlp_bias", False)
    if model_type not in MLA_TYPES:
        out.update({k: True for k, v in (("qkv_bias", qkv), ("attn_out_bias", out_bias),
                                         ("mlp_bias", mlp)) if v})
    tied = cfg.get("tie_word_embeddings")
    if tied is True or (tied is None and model_type in TIED_BY_DEFAULT):
        out["tied_embeddings"] = True
    return out
