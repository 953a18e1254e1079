"""The model and attention of a torchtitan main dump (dump.py): ``model_spec.name`` and
``flavor`` name it, ``model_spec.model`` holds its sizes.

Main's model configs (torchtitan/models/common/decoder.py ``Decoder.Config``, the
models' own in torchtitan/models/<name>/) serialise as ``dim``, ``vocab_size``,
``enable_weight_tying`` and ``layers``, one mapping per block: ``attention``
(``n_heads``, ``n_kv_heads``, ``head_dim`` or its ``qkv_linear``'s, ``qk_norm``; the
deepseek_v3 family's MLA ``q_lora_rank``, ``kv_lora_rank``, ``qk_nope_head_dim``,
``qk_rope_head_dim``, ``v_head_dim``), ``feed_forward`` (``w1`` / ``w2`` / ``w3``: a gated
MLP) or null, and ``moe`` (``num_experts``, ``router.top_k``,
``routed_experts.inner_experts.hidden_dim``, ``shared_experts``) or null; deepseek_v3 adds
``mtp_layers``, a list. A name and flavor pptune has a preset for (reader.py FLAVORS: main
keeps 0.2.2's names for them) is priced as the preset where the sizes are the preset's;
otherwise as the sizes, the way check-config prices a Megatron-LM script's
(check/shape.py); without sizes pptune can read (another model type) the model is unknown,
as for a TOML flavor without a preset.

The attention kernel is the ``inner_attention`` config's (torchtitan/models/common/
attention.py): ``FlexAttention.Config`` (``block_size``, ``kernel_options``; main's
default for language models, whose masks are block-causal: each token attends within its
own document, documents cut at ``max_context_length``), ``VarlenAttention.Config``
(``window_size``) or ``ScaledDotProductAttention.Config`` (no field;
models/common/config_utils.py ``get_attention_config`` refuses "sdpa" for language
models). Every decoder refuses context parallelism with varlen or SDPA
(models/common/decoder.py ``Decoder.Config.update_from_config``, which qwen3's own check
follows). A block that attends within a sliding window (gpt_oss's
``attention.sliding_window_size``, or a varlen ``window_size`` (left, 0)) is priced as
--hf-config prices GPT-OSS's windows: one window, full attention every Nth block.
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.presets import MODELS, ModelShape
from pptune.frameworks.common.fields import Ctx, show, whole
from pptune.frameworks.torchtitan.main_rules import dispatcher_without_ep

# TrainingConfig size key -> ModelShape field, compared with a preset's
COMPARED = {"num_layers": "num_blocks", "hidden_size": "hidden", "num_heads": "heads",
            "num_kv_heads": "kv_heads", "ffn_hidden_size": "ffn", "vocab_size": "vocab",
            "num_experts": "experts", "moe_top_k": "top_k",
            "moe_ffn_hidden_size": "expert_ffn", "moe_first_dense_layers": "first_dense",
            "sliding_window": "sliding_window", "full_attention_every": "full_attention_every"}
KINDS = {frozenset({"block_size", "kernel_options"}): "flex",
         frozenset({"window_size"}): "varlen", frozenset(): "sdpa"}
# fields every Configurable's to_dict() writes beside its own (config/configurable.py):
# not the attention's
COMMON = frozenset({"param_init", "sharding_config"})
PATH = "model_spec.model"


def main_model(ctx: Ctx, name: str, flavor: str, model: dict[str, Any],
               presets: dict[tuple[str, str], str]) -> tuple[str | None, dict[str, Any], int]:
    """(pptune preset or None, TrainingConfig's model fields, the block count)."""
    layers = model.get("layers")
    if not (isinstance(layers, list) and layers and all(isinstance(x, dict) for x in layers)):
        raise ctx.bad(f"{PATH}.layers is {show(layers)}; expected the blocks' configs (a "
                      "list of mappings)")
    sizes = _sizes(ctx, model, layers)
    preset = presets.get((name.lower(), flavor.lower()))
    if preset is not None and sizes is not None:
        differ = _differ(MODELS[preset], sizes)
        if not differ:
            return preset, {"mtp_layers": sizes.get("mtp_layers", 0)}, len(layers)
        ctx.note(f"{name} {flavor} is pptune's {preset} but {PATH} states "
                 f"{', '.join(differ[:4])}: priced as the dump's sizes")
        preset = None
    if sizes is not None:
        return None, sizes, len(layers)
    if preset is not None:
        return preset, {}, len(layers)
    ctx.semantics.unknown_model = ctx.note(
        f"model {name[:40]} flavor {flavor[:40]}: neither a pptune preset nor sizes pptune "
        f"reads in {PATH}; give --model, --hf-config (its Hugging Face config.json) or a "
        "profile for the cost model")
    return None, {"num_layers": len(layers)}, len(layers)


def attention_kind(ctx: Ctx, model: dict[str, Any]) -> str:
    """flex, varlen or sdpa by the first block's inner_attention fields (module
    docstring); another config is priced as flex (a note says so)."""
    layers = model.get("layers") or [{}]
    inner = _dig(layers[0], "attention", "inner_attention")
    fields = frozenset(inner) - COMMON if isinstance(inner, dict) else None
    kind = KINDS.get(fields) if fields is not None else None
    if kind is None:
        said = (", ".join(f"{k} {show(inner[k])[:24]}" for k in sorted(fields)[:6])
                if fields else show(inner)[:40])
        ctx.note(f"{PATH}.layers.0.attention.inner_attention ({said}) is none of main's "
                 "attention configs pptune knows (FlexAttention: block_size, "
                 "kernel_options; varlen: window_size; SDPA: no field): priced as flash "
                 "attention")
        return "flex"
    return kind


def _dig(node: Any, *path: str) -> Any:
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node


def _int(ctx: Ctx, node: Any, where: str, *path: str) -> int | None:
    """A size at ``path`` under ``node`` (None when absent), BadInput naming it when not
    a whole number."""
    value = _dig(node, *path)
    if value is None:
        return None
    return whole(ctx, ".".join((where, *path)), value, maximum=1 << 40)


def _sizes(ctx: Ctx, model: dict[str, Any], layers: list[dict[str, Any]]
           ) -> dict[str, Any] | None:
    """TrainingConfig's size fields of a decoder with GQA or MLA attention; None for a
    model whose blocks are laid out otherwise."""
    block = f"{PATH}.layers.0"
    dim, vocab = _int(ctx, model, PATH, "dim"), _int(ctx, model, PATH, "vocab_size")
    heads = _int(ctx, layers[0], block, "attention", "n_heads")
    if dim is None or vocab is None or heads is None:
        return None
    sizes: dict[str, Any] = {"num_layers": len(layers), "hidden_size": dim,
                             "num_heads": heads, "vocab_size": vocab}
    att = layers[0]["attention"]
    if "kv_lora_rank" in att:  # deepseek_v3's multi-head latent attention
        for key in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                    "v_head_dim"):
            if _dig(att, key) not in (None, 0):  # 0 / null: no such latent (unset here)
                sizes[key] = _int(ctx, att, f"{block}.attention", key)
    else:
        sizes["num_kv_heads"] = _int(ctx, att, f"{block}.attention", "n_kv_heads") or heads
        head_dim = (_int(ctx, att, f"{block}.attention", "head_dim")
                    or _int(ctx, att, f"{block}.attention", "qkv_linear", "head_dim"))
        if head_dim is not None and head_dim * heads != dim:
            sizes["kv_channels"] = head_dim
        if isinstance(att.get("qk_norm"), dict):
            sizes["qk_norm"] = True
        if _dig(att, "qkv_linear", "wqkv", "bias") is True:
            sizes["qkv_bias"] = True
        if _dig(att, "wo", "bias") is True:
            sizes["attn_out_bias"] = True
    dense = next((i for i, x in enumerate(layers) if isinstance(x.get("feed_forward"), dict)),
                 None)
    if dense is not None:
        ff = layers[dense]["feed_forward"]
        ffn = _int(ctx, ff, f"{PATH}.layers.{dense}.feed_forward", "w1", "out_features")
        if ffn is None:
            return None
        sizes.update(ffn_hidden_size=ffn, gated_mlp="w3" in ff)
    if not _experts(ctx, layers, sizes) and dense is None:
        return None
    _windows(ctx, layers, sizes)
    mtp = model.get("mtp_layers")
    sizes["mtp_layers"] = len(mtp) if isinstance(mtp, list) else 0
    if model.get("enable_weight_tying") is True:
        sizes["tied_embeddings"] = True
    return sizes


def _experts(ctx: Ctx, layers: list[dict[str, Any]], sizes: dict[str, Any]) -> bool:
    """The routed experts into ``sizes`` (False: a dense model); a pattern other than
    leading dense blocks then MoE blocks is a warning (priced as that pattern)."""
    moe = [i for i, x in enumerate(layers) if isinstance(x.get("moe"), dict)]
    if not moe:
        return False
    first, where = moe[0], f"{PATH}.layers.{moe[0]}.moe"
    if moe != list(range(first, len(layers))):
        ctx.unmodelled("torchtitan-unmodelled",
                       f"{PATH}: MoE blocks {', '.join(map(str, moe[:8]))}... are not the "
                       f"dense blocks first then MoE blocks: priced as {first} dense blocks "
                       "then MoE blocks")
    block = layers[first]["moe"]
    sizes.update(num_experts=_int(ctx, block, where, "num_experts"),
                 moe_top_k=_int(ctx, block, where, "router", "top_k"),
                 moe_ffn_hidden_size=_int(ctx, block, where, "routed_experts",
                                          "inner_experts", "hidden_dim"),
                 moe_first_dense_layers=first)
    sizes.setdefault("gated_mlp", True)  # main's GroupedExperts: w1, w2, w3 (SwiGLU)
    shared = _int(ctx, block, where, "shared_experts", "w1", "out_features")
    if shared is not None:
        sizes["moe_shared_ffn_hidden_size"] = shared
    groups = _int(ctx, block, where, "router", "num_expert_groups")
    limited = _int(ctx, block, where, "router", "num_limited_groups")
    if groups and limited:
        sizes.update(moe_router_num_groups=groups, moe_router_group_topk=limited)
    return True


def _windows(ctx: Ctx, layers: list[dict[str, Any]], sizes: dict[str, Any]) -> None:
    """Sliding-window blocks (gpt_oss's ``sliding_window_size``: the block attends to the
    last that many tokens, null for full attention; models/gpt_oss; or a varlen window,
    ``_window``) into ``sizes`` as
    --hf-config carries GPT-OSS's (costs/hf_families.py window_fields): one window, full
    attention on every Nth block, the last of each period (ModelShape.sliding_block).
    Another pattern is a warning, priced as full causal attention."""
    windows = [_window(ctx, x, i) for i, x in enumerate(layers)]
    sliding = [i for i, w in enumerate(windows) if w]
    if not sliding:
        return
    full = [i for i, w in enumerate(windows) if not w]
    every = full[0] + 1 if full else 0  # the first full block ends the first period
    if len({windows[i] for i in sliding}) == 1 and every != 1 and all(
            bool(w) != (every > 0 and (i + 1) % every == 0) for i, w in enumerate(windows)):
        sizes["sliding_window"] = windows[sliding[0]]
        if every:  # else every block windowed (TrainingConfig's unset)
            sizes["full_attention_every"] = every
        return
    ctx.unmodelled("torchtitan-unmodelled",
                   f"{PATH}: blocks {', '.join(map(str, sliding[:6]))}"
                   f"{'...' * (len(sliding) > 6)} attend within a sliding window "
                   "(sliding_window_size or varlen window_size) in a pattern pptune does not state "
                   "(one window, full attention every Nth block): priced as full causal "
                   "attention")


def _window(ctx: Ctx, layer: dict[str, Any], i: int) -> int:
    """A block's window: its ``sliding_window_size``, else its VarlenAttention's
    ``window_size`` (left, 0), left + 1 keys (gpt_oss sets (sliding_window_size - 1, 0);
    -1 is unbounded); 0 for full causal attention."""
    stated = _int(ctx, layer, f"{PATH}.layers.{i}", "attention", "sliding_window_size")
    if stated:
        return stated
    pair = _dig(layer, "attention", "inner_attention", "window_size")
    if (isinstance(pair, list) and len(pair) == 2 and all(type(x) is int for x in pair)
            and pair[0] >= 0 and pair[1] == 0):
        return int(pair[0]) + 1
    return 0


def _differ(shape: ModelShape, sizes: dict[str, Any]) -> list[str]:
    return [f"{key} {sizes[key]} (pptune's: {getattr(shape, attr)})"
            for key, attr in COMPARED.items()
            if key in sizes and sizes[key] != getattr(shape, attr)]


def converters_unseen(ctx: Ctx, model: dict[str, Any]) -> None:
    """A dump records no quantization converter: main's Float8, MXFP8 and NVFP4 linear
    converters swap ``Linear.Config`` for a subclass whose fields ``to_dict()`` writes
    alike (components/quantization/float8.py, mx.py, nvfp4.py; a real llama3_8b_mxfp8 dump
    differs from llama3_8b's only in ``compile``); dump.py's opening note says the run is
    priced at ``mixed_precision_param``. The experts' converters leave a trace: they swap
    the token dispatcher for one padding each expert's tokens to ``pad_multiple`` (16 for
    FP8, float8.py Float8GroupedExpertsConverter.PAD_MULTIPLE; 32 for MXFP8, mx.py), which
    is a warning."""
    pads = {_dig(x, "moe", "routed_experts", "token_dispatcher", "pad_multiple")
            for x in model.get("layers") or [] if isinstance(x, dict)} - {None}
    if pads:
        ctx.unmodelled("torchtitan-converter-unseen",
                       f"{PATH}: the experts' token dispatcher pads to pad_multiple "
                       f"{', '.join(map(str, sorted(map(str, pads))))}, which torchtitan's "
                       "FP8 (16) and MXFP8 (32) grouped-experts converters set "
                       "(components/quantization/utils.py swap_token_dispatcher): the "
                       "experts likely run quantized; priced at mixed_precision_param, as "
                       "the dump names no converter")


# main's token dispatchers by the fields their configs add to num_experts and top_k
# (models/common/config_utils.py make_token_dispatcher_config, torchtitan b5bcd76)
DISPATCHERS = {
    frozenset({"hidden_dim", "num_max_tokens_per_rank", "cudagraphable"}): "DeepEP",
    frozenset({"hidden_dim", "num_max_tokens_per_rank", "non_blocking_capacity_factor"}):
        "HybridEP",
    frozenset({"num_max_tokens_per_rank"}): "MinimalAsyncEP",
}
# what every dispatcher config holds, or a converter's padding one (converters_unseen)
_COMMON = {"num_experts", "top_k", "pad_multiple", "param_init", "sharding_config"}


def dump_dispatcher(ctx: Ctx, model: dict[str, Any], ep: int = 1) -> str | None:
    """The experts' dispatcher a dump states, as --moe-dispatcher names it (None: the
    standard all-to-all, or no experts): DeepEP's; HybridEP's priced as DeepEP's and
    MinimalAsyncEP's as the standard all-to-all, each with a warning; main's refusal of
    each without expert parallelism (``ep`` 1: main_rules.py dispatcher_without_ep)."""
    found = {frozenset(set(d) - _COMMON) for x in model.get("layers") or []
             if isinstance(x, dict) and isinstance(
                 d := _dig(x, "moe", "routed_experts", "token_dispatcher"), dict)} - {frozenset()}
    if not found:
        return None
    name = DISPATCHERS.get(min(found, key=sorted))
    dispatcher_without_ep(ctx, name, ep)
    where = f"{PATH}'s token_dispatcher"
    if name == "DeepEP":
        return "deepep"
    if name == "HybridEP":
        ctx.unmodelled("torchtitan-unmodelled", f"{where}: HybridEP (non_blocking_capacity_"
                       "factor), priced as DeepEP's dispatch, its closest modelled kernels")
        return "deepep"
    what = name or f"fields {', '.join(sorted(min(found, key=sorted)))[:80]}"
    ctx.unmodelled("torchtitan-unmodelled", f"{where}: {what} (no dispatcher pptune "
                   "models), priced as the standard all-to-all")
    return None


def dump_precision(ctx: Ctx, fields: dict[str, Any], moe: bool) -> None:
    """--precision for a dump, which cannot state it (``converters_unseen``): the linears
    as torchtitan's converters run them, torchao's kernels (converters.py): fp8 main's
    Float8LinearConverter's rowwise recipe (its default: main has no tensorwise one,
    components/quantization/float8.py; no float8 all-gather),
    mxfp8 MXFP8LinearConverter's mxfp8_cublas; an MoE model's routed experts BF16 (their
    grouped-GEMM converters are separate, a note says so)."""
    given = ctx.flags.precision
    if given is None:
        return
    ctx.semantics.precision_filled = True
    if given == "bf16":
        return
    fields.update(precision=given, fp8_recipe="rowwise" if given == "fp8" else "mxfp8_cublas",
                  fp8_kernels="torchao", fp8_param_gather=False)
    if moe:
        fields["expert_precision"] = "bf16"
        ctx.note(f"--precision {given}: the linears priced {given.upper()}, the routed "
                 "experts BF16 (torchtitan converts their grouped GEMMs with a converter of "
                 "their own, which a dump does not record either)")

