"""The attention kernel each torchtitan model flavor runs, and torchtitan's refusals of
context parallelism with it.

torchtitan 0.2.2's model args (torchtitan/models/*/__init__.py) set ``attn_type``:
"sdpa" (the default: torch's scaled_dot_product_attention, priced as pptune's ``sdpa``:
cuDNN's kernel on Hopper and Blackwell in torch 2.13, FlashAttention-2's elsewhere), "flex"
(FlexAttention, with ``attn_mask_type = "block_causal"``: each token attends within
its own document) or "varlen". The deepseek_v3 flavors 16B, 236B and 671B run flex;
gpt_oss runs flex only; llama3 8B_flex and llama4's _irope flavors too; qwen3's run
SDPA. pptune has no FlexAttention rate: flex is priced with its closest modelled
kernel, flash attention over the whole causal sequence, and a warning says so; varlen
(torch's FlashAttention-2-based varlen kernel) as flash attention too.

With ``context_parallel_degree > 1`` each model's ``update_from_config``
(models/<name>/model/args.py) raises for deepseek_v3 and llama4 unless SDPA ("Context
Parallel only supports SDPA attention. Got attn_type='flex'. FlexAttention and varlen
attention are not supported with CP."), for llama3 with varlen, and for gpt_oss always
("CP support for gpt-oss model is still in progress.").
"""

from __future__ import annotations

from pptune.frameworks.common.fields import Ctx

FLEX = {("deepseek_v3", f) for f in ("debugmodel_flex_attn", "16b", "236b", "671b")} | {
    ("llama3", "debugmodel_flex_attn"), ("llama3", "8b_flex"),
    ("llama4", "debugmodel_irope"), ("llama4", "17bx16e_irope"), ("llama4", "17bx128e_irope")}
VARLEN = {("llama3", "debugmodel_varlen_attn"), ("llama3", "8b_varlen")}
SDPA_ONLY_CP = ("deepseek_v3", "llama4")  # their args refuse CP with any other kernel


def attn_type(name: str, flavor: str) -> str:
    """torchtitan 0.2.2's attn_type of a model flavor."""
    key = (name.lower(), flavor.lower())
    if key[0] == "gpt_oss" or key in FLEX:
        return "flex"
    return "varlen" if key in VARLEN else "sdpa"


def priced_kernel(kind: str) -> str:
    """pptune's attention kernel for an ``attn_type``: torch's SDPA as ``sdpa``, flex and
    varlen as FlashAttention-2 (module docstring)."""
    return "sdpa" if kind == "sdpa" else "flash"


def cp_refusal(name: str, flavor: str, cp: int) -> str | None:
    """What torchtitan raises for ``cp``-way context parallelism with the flavor's
    attention (module docstring), or None: it runs."""
    kind = attn_type(name, flavor)
    where = f"(torchtitan/models/{name}/model/args.py update_from_config)"
    if cp > 1 and name == "gpt_oss":
        return (f"context_parallel_degree {cp} with gpt_oss: torchtitan raises 'CP support "
                f"for gpt-oss model is still in progress.' {where}")
    if cp > 1 and kind != "sdpa" and (name in SDPA_ONLY_CP or kind == "varlen"):
        said = ("'Context Parallel only supports SDPA attention. Got attn_type='{k}'. "
                "FlexAttention and varlen attention are not supported with CP.'"
                if name in SDPA_ONLY_CP else
                "'Context Parallel only supports SDPA and FlexAttention.Got "
                "attn_type='{k}'. Varlen attention is not supported with CP.'")
        return (f"context_parallel_degree {cp} with {name} {flavor}, whose attention is "
                f"{kind} (attn_type in torchtitan/models/{name}/__init__.py): torchtitan "
                f"raises {said.format(k=kind)} {where}")
    return None


def read_attention(ctx: Ctx, name: str, flavor: str, cp: int) -> None:
    """torchtitan's refusal of context parallelism with the flavor's attention, and a
    warning where flex attention is priced as flash."""
    kind = attn_type(name, flavor)
    why = cp_refusal(name, flavor, cp)
    if why:
        ctx.refuse("torchtitan-cp-attention", why + (
            "; use cp 1" if name == "gpt_oss" else "; use cp 1 or an SDPA flavor"))
    if kind == "flex":
        ctx.unmodelled("torchtitan-flex-attention",
                       f"{name} {flavor} runs FlexAttention (attn_type \"flex\", "
                       f"torchtitan/models/{name}/__init__.py): pptune has no FlexAttention "
                       "rate and prices it as flash attention (SDPA) over the whole causal "
                       "sequence, its closest modelled kernel (a block_causal mask, attention "
                       "within each document, does less work)")
