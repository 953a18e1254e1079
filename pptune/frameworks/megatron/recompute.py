"""Megatron-LM's recomputation flags: --recompute-granularity / -method / -num-layers,
--recompute-activations, --recompute-modules and the deprecated --moe-layer-recompute,
with megatron-core's own refusals as error findings."""

from __future__ import annotations

from pptune.frameworks.megatron.flags import FlagReader


def read_recompute(r: FlagReader) -> tuple[str | None, int | None, int | None]:
    """(granularity, block layers, uniform group): --recompute-granularity full|selective;
    --recompute-activations = selective (validate_args). Selective with
    --recompute-method is refused by Megatron-LM; full needs a method and a
    layer count (megatron-core TransformerConfig.__post_init__). ``block``
    recomputes the first N layers of every stage (transformer_block.py
    ``_checkpointed_forward``); ``uniform`` every layer, in groups of N (the group
    when N > 1: memory.uniform_groups)."""
    granularity = r.text("--recompute-granularity")
    if granularity is None and r.flags.has("--recompute-activations"):
        granularity = "selective"
    if granularity is not None and granularity not in ("full", "selective"):
        raise r.ctx.bad(f"--recompute-granularity is {granularity!r}; expected full or "
                        "selective")
    if r.flags.has("--moe-layer-recompute"):  # deprecated: selective with the moe module
        if granularity == "full":
            r.ctx.refuse("megatron-moe-layer-recompute",
                         "--moe-layer-recompute with --recompute-granularity full: megatron-core "
                         "raises 'Do not set --moe-layer-recompute with full recompute "
                         "granularity' (megatron/core/transformer/transformer_config.py "
                         "__post_init__); drop one")
        else:
            granularity = "selective"
    method = r.text("--recompute-method")
    if method is not None and method not in ("uniform", "block"):
        raise r.ctx.bad(f"--recompute-method is {method[:40]!r}; expected uniform or block")
    # megatron-core checks the count only under full recomputation (a script may leave
    # --recompute-num-layers 0 beside no granularity)
    count = r.number("--recompute-num-layers", minimum=0) or None
    if method is not None and granularity == "selective":
        r.ctx.refuse("megatron-recompute-method",
                     f"--recompute-method {method} with selective recomputation: Megatron-LM "
                     "validate_args asserts 'recompute method is not yet supported for selective "
                     "recomputing granularity' (megatron/training/arguments.py)")
    if granularity == "full" and (method is None or count is None):
        missing = "--recompute-method block|uniform" if method is None else (
            "--recompute-num-layers N")
        r.ctx.refuse("megatron-recompute-full",
                     f"--recompute-granularity full without {missing}: megatron-core "
                     "TransformerConfig raises 'recompute_method must be \"block\" or "
                     "\"uniform\"' / 'recompute_num_layers must be between 1 and "
                     "num_layers_per_pipeline_rank' (transformer_config.py); add it")
    if granularity is None:
        return (None if r.flags.has("--recompute-granularity") else "none"), None, None
    block = count if granularity == "full" and method == "block" else None
    group = count if granularity == "full" and method == "uniform" and count and count > 1 \
        else None
    return granularity, block, group


# megatron-core's --recompute-modules choices (TransformerConfig.__post_init__ asserts them)
RECOMPUTE_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe",
                     "shared_experts")


def read_modules(r: FlagReader, granularity: str | None) -> list[str] | None:
    """--recompute-modules: what selective recomputation reruns (megatron-core's default
    core_attn, which changes nothing under flash attention). check.costs prices
    every module but core_attn; megatron-core's own refusals
    are error findings here (transformer_config.py __post_init__)."""
    text = r.text("--recompute-modules")
    if r.flags.has("--moe-layer-recompute") and granularity == "selective":
        # megatron-core __post_init__: "moe" appended to the modules given (or to none)
        text = " ".join(dict.fromkeys([*(text or "").split(), "moe"]))
        r.ctx.note("--moe-layer-recompute (deprecated) read as --recompute-granularity "
                   f"selective --recompute-modules {text}, as megatron-core does")
    if text is None:
        return None
    modules = text.split()
    if granularity != "selective":
        r.ctx.note(f"--recompute-modules {text[:60]} ignored without --recompute-granularity "
                   "selective (as megatron-core does)")
        return None
    where = "(megatron-core megatron/core/transformer/transformer_config.py __post_init__)"
    invalid = sorted(set(modules) - set(RECOMPUTE_MODULES))
    if invalid:
        r.ctx.refuse("megatron-recompute-modules",
                     f"--recompute-modules {' '.join(invalid)[:60]}: megatron-core asserts "
                     f"'Invalid choices for recompute_modules' {where}; choose from "
                     + ", ".join(RECOMPUTE_MODULES))
    if "moe_act" in modules and not r.flags.has("--moe-grouped-gemm"):
        r.ctx.refuse("megatron-recompute-modules",
                     "--recompute-modules moe_act without --moe-grouped-gemm: megatron-core "
                     f"raises 'moe_act in recompute_modules is only supported with "
                     f"moe_grouped_gemm' {where}; add --moe-grouped-gemm")
    if "mla_up_proj" in modules and not r.flags.has("--multi-latent-attention"):
        r.ctx.refuse("megatron-recompute-modules",
                     "--recompute-modules mla_up_proj without --multi-latent-attention: "
                     "megatron-core raises 'mla_up_proj in recompute_modules is only supported "
                     f"with multi_latent_attention' {where}; drop mla_up_proj")
    if r.flags.has("--fp8-format") and (r.text("--fp8-recipe") or "delayed") == "delayed" and (
            {"moe_act", "layernorm"} & set(modules)):
        r.ctx.refuse("megatron-recompute-modules",
                     "--recompute-modules moe_act/layernorm with the delayed FP8 recipe "
                     "(megatron-core's default --fp8-recipe): megatron-core raises 'Delayed "
                     f"scaling does not support moe_act and layernorm recompute for fp8' {where}; "
                     "use --fp8-recipe tensorwise, blockwise or mxfp8")
    return [m for m in modules if m in RECOMPUTE_MODULES]  # check.costs warns of the rest
