"""Megatron-LM's context-parallel and FP8 flags, read and checked by its own rules.

Names, choices and defaults follow Megatron-LM core_r0.16 / megatron-core 0.16.1:
``--cp-comm-type`` (megatron/training/arguments.py, ``nargs="+"``, default
``p2p``; one type for every layer or one per layer) takes the values
megatron-core's TransformerConfig documents for ``cp_comm_type``: ``p2p``
(the ring of K/V sends), ``all_gather``, ``a2a`` (Ulysses) and ``a2a+p2p``
(hierarchical, with ``--hierarchical-context-parallel-sizes``);
``--fp8-format`` e4m3 | hybrid and ``--fp8-recipe`` delayed (the default) |
tensorwise | blockwise | mxfp8 | custom (TransformerConfig ``fp8`` /
``fp8_recipe``); ``--fp8-param-gather`` (TransformerConfig ``fp8_param``); ``--fp4-format``
e2m1, ``--fp4-recipe`` nvfp4 (the default) | custom and ``--fp4-param-gather``
(TransformerConfig ``fp4``, ``fp4_recipe``, ``fp4_param``, Megatron-LM main at d98e8a6).

What Megatron-LM refuses is an error finding citing the source line; what
pptune does not model (a per-layer mix of exchanges, a custom recipe) is a
warning naming it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from pptune.costmodel import context
from pptune.costmodel.keys import Precision
from pptune.costmodel.layout import Dim, Layout
from pptune.costmodel.precision import BLOCKWISE_RATE_NOTE
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import DP_INNER, PP_INNER, Plan
from pptune.frameworks.common import express as ex
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.megatron.flags import FlagReader
from pptune.options import CostOptions

# --cp-comm-type value -> pptune's CpComm name ("allgather" is how the flag's help spells it)
CP_COMM = {"p2p": "p2p", "all_gather": "all-gather", "allgather": "all-gather", "a2a": "a2a",
           "a2a+p2p": "a2a+p2p"}
# pptune's CpComm name -> the value the writer states
CP_COMM_FLAG = {"p2p": "p2p", "all-gather": "all_gather", "a2a": "a2a", "a2a+p2p": "a2a+p2p"}
# the exchanges Transformer Engine refuses for multi-head latent attention (context.py)
MLA_REFUSED = {c.value for c in context.MLA_REFUSED}
FP8_FORMATS = ("e4m3", "hybrid")
FP8_RECIPES = ("tensorwise", "delayed", "mxfp8", "blockwise", "custom")
FP4_RECIPES = ("nvfp4", "custom")
_ARGS = "(megatron/training/arguments.py validate_args)"
_CONFIG = "(megatron/core/transformer/transformer_config.py)"


def read_cp_fp8(r: FlagReader, fields: dict[str, Any]) -> None:
    """Fill cp_comm, precision (fp8 / mxfp8 / nvfp4), fp8_recipe and fp8_param_gather."""
    _cp(r, fields)
    _sequence_parallel(r, fields)
    _fp8(r, fields)
    _fp4(r, fields)


def _sequence_parallel(r: FlagReader, fields: dict[str, Any]) -> None:
    """--sequence-parallel scatters each context-parallel rank's ``s / cp`` tokens over
    the tensor-parallel ranks (the embedding's output, language_model_embedding.py);
    megatron-core asserts tp divides them (megatron/core/tensor_parallel/mappings.py
    ``_split_along_first_dim``, ``_reduce_scatter_along_first_dim``; a group of one
    skips the split)."""
    seq, tp, cp = fields.get("seq_len"), fields.get("tp") or 1, fields.get("cp") or 1
    if not fields.get("sequence_parallel") or seq is None or tp == 1:
        return
    if cp > 1 and seq % (2 * cp):
        return  # megatron-cp-seq says why
    if (seq // cp) % tp:
        need = math.lcm(2 * cp if cp > 1 else 1, cp * tp)
        r.ctx.refuse("megatron-sp-seq",
                     f"--seq-length {seq} with --context-parallel-size {cp}, "
                     f"--tensor-model-parallel-size {tp} and --sequence-parallel: each "
                     f"context-parallel rank's {seq // cp} tokens are split over the {tp} "
                     "tensor-parallel ranks and megatron-core asserts 'First dimension of the "
                     "tensor should be divisible by tensor parallel size' "
                     "(megatron/core/tensor_parallel/mappings.py _split_along_first_dim); use a "
                     f"--seq-length that is a multiple of {need}")


def _cp(r: FlagReader, fields: dict[str, Any]) -> None:
    ctx, cp = r.ctx, fields.get("cp") or 1
    text = r.text("--cp-comm-type")
    types = text.split() if text else ["p2p"]  # Megatron-LM's default
    unknown = [t for t in dict.fromkeys(types) if t not in CP_COMM]
    if unknown:
        ctx.refuse("megatron-cp-comm-type",
                   f"--cp-comm-type {unknown[0][:40]}: megatron-core takes p2p, all_gather, a2a "
                   f"or a2a+p2p per layer (TransformerConfig.cp_comm_type {_CONFIG})")
        types = [t for t in types if t in CP_COMM] or ["p2p"]
    if "allgather" in types:
        ctx.note("--cp-comm-type allgather read as all_gather (megatron-core's TransformerConfig "
                 "spells it all_gather; Transformer Engine takes that value)")
    layers = fields.get("num_layers")
    if cp > 1 and len(types) > 1 and layers is not None and len(types) != layers:
        ctx.refuse("megatron-cp-comm-type",
                   f"--cp-comm-type lists {len(types)} types for {layers} layers: megatron-core "
                   "asserts 'Length of cp_comm_type ... should equal to the total number of "
                   f"transformer layers' {_CONFIG}")
    counts = Counter(CP_COMM[t] for t in types)
    comm = counts.most_common(1)[0][0]
    if cp > 1 and len(counts) > 1:
        ctx.unmodelled("megatron-unmodelled-flag",
                       f"--cp-comm-type mixes {', '.join(sorted(counts))} over the layers; "
                       f"pptune prices every layer with the most common, {comm}")
    hierarchical = r.text("--hierarchical-context-parallel-sizes")
    sizes = _sizes(r, hierarchical)
    if "a2a+p2p" in types and sizes is None:
        ctx.refuse("megatron-cp-hierarchical",
                   "--cp-comm-type a2a+p2p without --hierarchical-context-parallel-sizes: "
                   "Megatron-LM asserts '--hierarchical-context-parallel-sizes must be set when "
                   f"a2a+p2p is used in cp comm' {_ARGS}")
    if sizes is not None and _product(sizes) != cp:
        ctx.refuse("megatron-cp-hierarchical",
                   f"--hierarchical-context-parallel-sizes {hierarchical} multiply to "
                   f"{_product(sizes)}, not --context-parallel-size {cp}: Megatron-LM asserts "
                   f"context_parallel_size == prod(hierarchical_context_parallel_sizes) {_ARGS}")
    if cp == 1:
        return
    fields["cp_comm"] = comm
    pp, tp = fields.get("pp") or 1, fields.get("tp") or 1
    # the expert groups hold no cp: their dp, world / (etp x pp) at ep 1, is the dense
    # one, world / (tp x cp x pp), only where --expert-tensor-parallel-size (tp unless
    # given) is tp x cp
    etp = r.number("--expert-tensor-parallel-size") if r.flags.has(
        "--expert-tensor-parallel-size") else tp
    if r.flags.has("--use-tp-pp-dp-mapping") and pp > 1 and not r.flags.has(
            "--expert-model-parallel-size") and etp is not None and etp != tp * cp:
        ctx.refuse("megatron-cp-rank-order",
                   f"--use-tp-pp-dp-mapping with --context-parallel-size {cp} and pp {pp}: "
                   "megatron-core asserts 'When not using pp-last rank ordering, the data "
                   "parallel size of the attention and moe layers must be the same' "
                   "(megatron/core/parallel_state.py initialize_model_parallel: the expert "
                   "groups hold no cp, so their data-parallel size is the dense one's x tp x "
                   f"cp / --expert-tensor-parallel-size = {tp * cp}/{etp}); drop "
                   f"--use-tp-pp-dp-mapping, or set --expert-tensor-parallel-size {tp * cp}")
    seq = fields.get("seq_len")
    if seq is not None and seq % (2 * cp):
        ctx.refuse("megatron-cp-seq",
                   f"--seq-length {seq} with --context-parallel-size {cp}: Megatron-LM asserts "
                   "'seq-length should be a multiple of 2 * context-parallel-size if "
                   f"context-parallel-size > 1' {_ARGS}; use a --seq-length that is a multiple of "
                   f"{2 * cp}")
    if (r.text("--transformer-impl") or "transformer_engine") == "local":
        ctx.refuse("megatron-cp-attention",
                   f"--context-parallel-size {cp} with --transformer-impl local: megatron-core's "
                   "DotProductAttention asserts 'Context parallelism is only supported by "
                   "TEDotProductAttention!' (megatron/core/transformer/dot_product_attention.py)")
    refused = [t for t in dict.fromkeys(types) if CP_COMM[t] in MLA_REFUSED]
    if r.flags.has("--multi-latent-attention") and refused:
        ctx.refuse("megatron-cp-mla-comm",
                   f"--cp-comm-type {' '.join(refused)} with --multi-latent-attention and "
                   f"--context-parallel-size {cp}: Transformer Engine 2.5 to 2.14 (megatron-core "
                   "0.16.1 pins transformer-engine >=2.9,<2.12) asserts 'Context parallelism "
                   "does not support MLA with cp_comm_type' (transformer_engine/pytorch/"
                   "attention/dot_product_attention/context_parallel.py "
                   "attn_forward_func_with_cp: keys and values of different widths run p2p or "
                   "a2a+p2p only); use --cp-comm-type p2p")
    split = {"a2a": cp, "a2a+p2p": sizes[0] if sizes else None}.get(comm)
    heads, kv, tp = fields.get("num_heads"), fields.get("num_kv_heads"), fields.get("tp") or 1
    for what, n in (("attention heads", heads), ("query groups", kv or heads)):
        if split and n is not None and n % tp == 0 and (n // tp) % split:
            ctx.refuse("megatron-cp-a2a-heads",
                       f"--cp-comm-type {CP_COMM_FLAG[comm]} splits the heads over {split} "
                       f"context-parallel ranks: {n // tp} {what} per tensor-parallel rank "
                       f"({n} / tp {tp}) are not divisible by {split}; use p2p or a cp "
                       "dividing them")


def _sizes(r: FlagReader, text: str | None) -> list[int] | None:
    if text is None:
        return None
    sizes = []
    for word in text.split():
        if not (word.isascii() and word.isdigit()) or int(word) < 1:
            raise r.ctx.bad(f"--hierarchical-context-parallel-sizes {text[:40]}: expected "
                            "whole numbers >= 1 (inner first)")
        sizes.append(int(word))
    return sizes


def _product(sizes: list[int]) -> int:
    out = 1
    for n in sizes:
        out *= n
    return out


def _taken(r: FlagReader, flag: str, value: str | None, allowed: tuple[str, ...],
           said: str, field: str) -> None:
    """BadInput where ``flag``'s ``value`` is none of the ``allowed`` (``said``: them in
    words) that TransformerConfig's ``field`` takes."""
    if value is not None and value not in allowed:
        raise r.ctx.bad(f"{flag} {value[:40]!r}: Megatron-LM takes {said} "
                        f"(TransformerConfig.{field} {_CONFIG})")


def _fp8(r: FlagReader, fields: dict[str, Any]) -> None:
    ctx, flags = r.ctx, r.flags
    fmt, recipe = r.text("--fp8-format"), r.text("--fp8-recipe")
    gather = flags.has("--fp8-param-gather")
    _taken(r, "--fp8-format", fmt, FP8_FORMATS, "e4m3 or hybrid", "fp8")
    _taken(r, "--fp8-recipe", recipe, FP8_RECIPES, ", ".join(FP8_RECIPES), "fp8_recipe")
    if fmt is None:
        if recipe is not None:
            ctx.note(f"--fp8-recipe {recipe} has no effect without --fp8-format (Megatron-LM "
                     "trains without FP8)")
        if gather:
            ctx.refuse("megatron-fp8-param-gather",
                       "--fp8-param-gather without --fp8-format: megatron-core raises "
                       f"'fp8_param must be used together with fp8 mode.' {_CONFIG}")
        return
    recipe = recipe or "delayed"  # TransformerConfig's default
    fields["precision"] = "mxfp8" if recipe == "mxfp8" else "fp8"
    fields["fp8_recipe"] = recipe
    if recipe == "custom":
        ctx.unmodelled("megatron-unmodelled-flag",
                       "--fp8-recipe custom (a quantizer factory) is priced as per-tensor FP8")
    if recipe == "blockwise":
        ctx.note(f"--fp8-recipe blockwise: {BLOCKWISE_RATE_NOTE}")
    if (r.text("--transformer-impl") or "transformer_engine") == "local":
        ctx.refuse("megatron-fp8-te",
                   f"--fp8-format {fmt} with --transformer-impl local: FP8 runs through "
                   "Transformer Engine's modules (megatron/core/models/gpt/gpt_layer_specs.py: "
                   "'Transformer Engine modules (required for fp8 training)'); drop "
                   "--transformer-impl local")
    if not gather:
        fields["fp8_param_gather"] = False
        return
    if not any(flags.has(f) for f in ("--use-distributed-optimizer", "--use-torch-fsdp2",
                                      "--use-megatron-fsdp")):
        ctx.refuse("megatron-fp8-param-gather",
                   "--fp8-param-gather without --use-distributed-optimizer, --use-torch-fsdp2 or "
                   "--use-megatron-fsdp: Megatron-LM asserts "
                   "'--fp8-param-gather only supported with distributed optimizer, torch fsdp2, "
                   f"megatron fsdp, or inference mode' {_ARGS}")
    if flags.has("--use-torch-fsdp2"):
        ctx.unmodelled("megatron-unmodelled-flag",
                       "--fp8-param-gather with --use-torch-fsdp2: Megatron-LM turns it off with "
                       "Transformer Engine >= 2.0 and gathers BF16 weights (validate_args); "
                       "priced without FP8 parameters")
        fields["fp8_param_gather"] = False
        return
    fields["fp8_param_gather"] = True


def hierarchical_sizes(cp: int, tp: int, gpus_per_node: int,
                       shape: ModelShape | None) -> tuple[int, int]:
    """(a2a ranks, p2p ranks) of an a2a+p2p exchange as pptune prices it
    (costmodel/context.py ``hierarchical_sizes``): the all-to-all over the cp group's
    members on one node that divide the heads of a tensor-parallel rank (the rule
    ``megatron-cp-a2a-heads`` checks), the ring over the rest; Megatron-LM lists the
    inner size first. Without a model shape (measured costs) the heads do not bound it."""
    group = Layout(pp=1, dp=1, tp=tp, cp=cp, gpus_per_node=gpus_per_node).group(Dim.CP)
    heads = cp if shape is None else shape.heads // tp
    kv = cp if shape is None else max(1, shape.kv_heads // tp)
    return context.hierarchical_sizes(cp, group, heads, kv)


def cp_fp8_args(cp: int, tp: int, precision: Precision, costs: CostOptions | None,
                gpus_per_node: int, sharded: bool, notes: list[str],
                shape: ModelShape | None = None) -> list[str]:
    """The flags stating a plan's context-parallel exchange and FP8 GEMMs as priced
    (``costs``: the options its costs were built with; ``sharded``: the distributed
    optimizer or FSDP, which --fp8-param-gather needs; ``shape``: the model, whose
    heads bound the hierarchical exchange's all-to-all)."""
    c = costs or CostOptions()
    args = []
    if cp > 1:
        comm = c.cp_comm.value
        args.append(f"--cp-comm-type {CP_COMM_FLAG[comm]}")
        if comm == "a2a+p2p":
            inner, outer = hierarchical_sizes(cp, tp, gpus_per_node, shape)
            args.append(f"--hierarchical-context-parallel-sizes {inner} {outer}")
    if precision in (Precision.FP8, Precision.MXFP8):
        # hybrid: E4M3 forward, E5M2 gradients (TransformerConfig.fp8); the recipe the plan
        # was priced with (--fp8-recipe, delayed by default as in megatron-core), mxfp8
        # its Blackwell microscaling one
        recipe = "mxfp8" if precision is Precision.MXFP8 else c.recipe.value
        args += ["--fp8-format hybrid", f"--fp8-recipe {recipe}"]
        if c.fp8_params and sharded:
            args.append("--fp8-param-gather")
        elif c.fp8_params:
            notes.append("the plan was priced with FP8 parameters but runs without the "
                         "distributed optimizer, which Megatron-LM's --fp8-param-gather needs: "
                         "written without it")
    if precision is Precision.NVFP4:  # TransformerConfig fp4 / fp4_recipe (nvfp4.py)
        args += ["--fp4-format e2m1", "--fp4-recipe nvfp4"]
        if c.fp8_params and sharded:
            args.append("--fp4-param-gather")
        elif c.fp8_params:
            notes.append("the plan was priced with NVFP4 parameters but runs without the "
                         "distributed optimizer: written without --fp4-param-gather")
    return args


def _fp4(r: FlagReader, fields: dict[str, Any]) -> None:
    """--fp4-format e2m1 with --fp4-recipe nvfp4 (its default; TransformerConfig ``fp4`` /
    ``fp4_recipe``): NVFP4 GEMMs (costmodel/nvfp4.py); --fp4-param-gather
    (``fp4_param``) keeps and gathers the weights in NVFP4, priced as FP8 parameters are."""
    ctx, flags = r.ctx, r.flags
    fmt, recipe = r.text("--fp4-format"), r.text("--fp4-recipe")
    gather = flags.has("--fp4-param-gather")
    _taken(r, "--fp4-format", fmt, ("e2m1",), "e2m1", "fp4")
    _taken(r, "--fp4-recipe", recipe, FP4_RECIPES, ", ".join(FP4_RECIPES), "fp4_recipe")
    if fmt is None:
        if gather:
            ctx.refuse("megatron-fp4-param-gather",
                       "--fp4-param-gather without --fp4-format: Megatron-LM raises "
                       f"'--fp4-param-gather must be used together with --fp4-format.' {_ARGS}")
        return
    if r.text("--fp8-format") is not None:
        ctx.refuse("megatron-fp4-fp8", "--fp4-format with --fp8-format: Megatron-LM raises "
                   "'--fp4-format and --fp8-format cannot be used simultaneously. Please "
                   f"choose one.' {_ARGS}")
        return
    fields["precision"] = "nvfp4"
    if recipe == "custom":
        ctx.unmodelled("megatron-unmodelled-flag",
                       "--fp4-recipe custom (a quantizer factory) is priced as nvfp4")
    if (r.text("--transformer-impl") or "transformer_engine") == "local":
        ctx.refuse("megatron-fp8-te", f"--fp4-format {fmt} with --transformer-impl local: NVFP4 "
                   "runs through Transformer Engine's modules (megatron/core/fp4_utils.py); "
                   "drop --transformer-impl local")
    fields["fp8_param_gather"] = gather
    if gather and not any(flags.has(f) for f in ("--use-distributed-optimizer",
                                                 "--use-torch-fsdp2", "--use-megatron-fsdp")):
        ctx.refuse("megatron-fp8-param-gather",
                   "--fp4-param-gather without --use-distributed-optimizer or FSDP: pptune "
                   "prices NVFP4 parameters as FP8 ones, gathered by the distributed optimizer "
                   "or FSDP; add --use-distributed-optimizer")


RANK_ORDER_REFUSED = "megatron-core refuses --use-tp-pp-dp-mapping with context parallelism and pp > 1"


def refuses_rank_order(job: Job, plan: Plan) -> bool:
    """Whether megatron-core refuses the plan's rank order as the script states it: cp > 1
    in tp-pp-dp with pp > 1, the script of a dense model (one of a MoE model states
    --expert-model-parallel-size, writer.py), as the reader's megatron-cp-rank-order rule
    has it (the dense and expert data-parallel sizes differ; parallel_state.py)."""
    moe = plan.ep > 1 or (job.shape is not None and job.shape.moe)
    return plan.cp > 1 and plan.pp > 1 and plan.rank_order == PP_INNER and not moe


def pp_last_with_cp(job: Job, plan: Plan, *, rank: int, notes: list[str]) -> Plan:
    """The plan in the tp-cp-dp-pp order where megatron-core refuses its own
    (``refuses_rank_order``): the script states the pp-last order."""
    if not refuses_rank_order(job, plan):
        return plan
    return ex.closest_or_refuse(
        job, plan, [(plan.schedule, plan.virtual_stages, list(plan.stage_layers))],
        name="megatron", rank=rank, notes=notes, rank_order=DP_INNER,
        why=RANK_ORDER_REFUSED)
