"""The per-layer costs check-config predicts with, by the one resolver's table
(``pptune.costs.resolve``, its CHECK column); findings say what was assumed.

1. a profile: ``--profile`` (relative to the working folder), else the config's
   ``profile:`` (relative to the config's folder);
2. analytic costs of the config's model: ``--model`` (overrides the file), else its
   ``model``, ``hf_config`` or layer sizes, on ``--gpu`` or its ``gpu`` (h100-sxm
   assumed, with a warning);
3. ``./pptune-profile.json`` (what ``pptune probe`` writes), when the config names no model;
4. none: a ``model-unknown`` warning, and memory, bubble and step time are not checked.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from pptune.check import profile_match
from pptune.check.experts import cost_key, dropout_unpriced, placement
from pptune.check.job import ConfigCosts
from pptune.check.shape import config_shape
from pptune.costmodel import context, presets
from pptune.costmodel.analytic import RECOMPUTE_MODULES
from pptune.costmodel.context import CpComm
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.op_sac import OP_SAC, unpriced
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, Fp8Recipe, TorchaoRecipe, problems
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import Accumulation, Swiglu, WgradAccum
from pptune.costmodel.search import CostTable
from pptune.costmodel.sharding import STATE_DTYPE_BYTES
from pptune.costs import calibrated
from pptune.costs.dims import kv_problem
from pptune.costs.measured import tp_heads_problem
from pptune.costs.resolve import Costs, Mode, find
from pptune.errors import BadInput, PptuneError
from pptune.frameworks.registry import adapter_of
from pptune.options import CostOptions
from pptune.report.fmt import fmt_seconds
from pptune.schemas import Profile, TrainingConfig, load_profile


def costs(cfg: TrainingConfig, base_dir: Path, flags: CostOptions, add: Any,
          given: Profile | None = None, *, refused: bool = False, gpus: int = 1
          ) -> ConfigCosts:
    """The config's per-layer costs, where they came from ("none" when there are none),
    the layout the table prices, the memory reserve a calibrated profile measured (None:
    none) and, for analytic or calibrated costs, what they were priced with and the tables
    of other layouts (the best-plan comparison's, check/layouts.py).

    ``flags``: the command line's ``--profile`` (already resolved by the CLI),
    ``--model`` and ``--gpu``; ``given``: a profile object that beats them all
    (pptune calibrate prices its jobs so). The key is the layout the table prices: a
    measured profile's (tp x cp folded into its per-layer costs, linearly), or the
    config's tensor and context parallelism priced analytically (a calibrated profile
    too). ``refused``: the config already has error findings; a context-parallel
    layout the model cannot take then adds none of its own (the framework's rule said it).
    ``gpus``: the job's GPUs, whose slowest sets the analytic compute rates.
    """
    folded = CostKey(tp=cfg.tp)
    kv = adapter_of(cfg.source_format).kv_heads  # the tp its attention takes
    path = flags.profile or (Path(cfg.profile) if cfg.profile else None)
    if path is not None and not path.is_absolute():
        path = base_dir / path
    try:
        profile = given if given is not None else (
            load_profile(path) if path is not None else None)
        if given is None and profile is not None:  # the config's profile: its model's
            why = profile_match.problem(cfg, stated_model(cfg, base_dir, flags), flags, profile,
                                        f"--profile {flags.profile}" if flags.profile
                                        else f"the config's profile {cfg.profile}")
            if why:
                raise BadInput(why)
        shape = None if profile is not None else config_shape(cfg, base_dir, flags.model, add,
                                                                flags.hf_config)
        attention = Attention(cfg.attention or "sdpa")  # not stated: the per-op model's default
        if cfg.cp > 1 and not attention.fused:
            add("cp-attention", "warning",
                f"context parallelism {cfg.cp} with {attention.value} attention: pptune prices "
                "context-parallel attention with fused (flash) kernels only; predicted so")
            attention = Attention.FLASH
        opts, sizes = CostOptions(tp=(cfg.tp,)), None  # a profile: the sizes it measured
        # tp 1 prices no sequence parallelism: the other tp of the best-plan comparison
        # split the sequence as the framework runs them (Adapter.tp_splits_sequence)
        seq_split = (cfg.sequence_parallel if cfg.tp > 1
                     else adapter_of(cfg.source_format).tp_splits_sequence)
        if profile is not None and profile.calibration is not None:
            # calibrated (pptune calibrate --run): the model priced for this config's settings
            opts = CostOptions(tp=(cfg.tp,), cp=(cfg.cp,), seq_len=cfg.seq_len,
                               gpu_spread=flags.gpu_spread,
                               sequence_parallel=seq_split,
                               attention=Attention(cfg.attention) if cfg.attention else None,
                               **layout_options(cfg))
            sizes = tuple(sorted({1, 2, 4, 8, cfg.micro_batch_size}))
        if shape is not None:
            opts = CostOptions(tp=(cfg.tp,), cp=(cfg.cp,), gpu=_gpu(flags, cfg, add),
                               gpu_spread=flags.gpu_spread,
                               sequence_parallel=seq_split, attention=attention,
                               **layout_options(cfg))
            sizes = tuple(sorted({1, 2, 4, 8, cfg.micro_batch_size}))
            if shape.heads % cfg.tp:
                add("tp-heads", "error",
                    f"tp {cfg.tp} does not divide the {shape.heads} attention heads", tp=cfg.tp)
                return ConfigCosts(None, "none", folded)
            why = None if shape.mla else kv_problem(shape.kv_heads, cfg.tp, kv, shape.name)
            if why:  # the framework's own rule (costs/dims.py KvHeads)
                add("tp-kv-heads", "error", f"tp {cfg.tp} {why}", tp=cfg.tp)
                return ConfigCosts(None, "none", folded)
            why = _precision_problem(cfg, str(opts.gpu))
            if why:
                add("precision-gpu", "error", why, precision=cfg.precision, gpu=opts.gpu)
                return ConfigCosts(None, "none", folded)
            if cfg.precision == "fp32":
                add("precision-fp32", "warning",
                    "the config trains in FP32 (no bf16 or fp16 stated): pptune prices BF16 "
                    "GEMMs and 2-byte activations, so its step and memory are a BF16 run's; "
                    f"state bf16 ({adapter_of(cfg.source_format).bf16_setting}) if that is what "
                    "runs", precision="fp32")
            split = context.problems(shape.seq_len, shape.heads // cfg.tp,
                                     max(1, shape.kv_heads // cfg.tp), cfg.cp, opts.cp_comm,
                                     tp=cfg.tp)
            if split:
                if not refused:
                    add("cp-layout", "error", f"context parallelism {cfg.cp}: "
                        + "; ".join(split).replace("--cp-comm", "cp_comm"), cp=cfg.cp)
                return ConfigCosts(None, "none", folded)
        experts = None
        # the model whose experts the config places: its own, or a calibrated profile's
        moe = shape if shape is not None or profile is None or profile.calibration is None \
            else calibrated.shape(profile.calibration, cfg.seq_len)
        if shape is None and moe is not None:  # a calibrated profile's model
            dropout_unpriced(cfg, moe, add)
        if moe is not None and moe.moe and moe.top_k > moe.experts:
            return ConfigCosts(None, "none", folded)  # no model: the moe-topk finding says why
        if moe is not None and moe.moe:
            experts = placement(cfg)  # routing and grouped GEMMs; ep and etp go in the key
            key = cost_key(cfg, moe)
            if moe.experts % key.ep or moe.expert_ffn % key.etp:
                key = replace(key, ep=1, etp=1)  # an error finding says why (check.experts)
            opts = replace(opts, ep=(key.ep,), etp=(key.etp,),  # the dispatcher: as priced
                           moe_imbalance=experts.imbalance, moe_dispatcher=experts.dispatcher,
                           expert_precision=experts.precision)
        modules = priced_modules(cfg, add, moe)
        found = find(opts, Mode.CHECK, sizes=sizes, table_tp=cfg.tp * cfg.cp,
                     profile=given if given is not None else path, shape=shape,
                     experts=experts, recompute_modules=modules, gpus=gpus,
                     gpus_per_node=cfg.gpus_per_node)
    except PptuneError as exc:
        if not (refused and cfg.cp > 1 and "context parallelism" in str(exc)):
            add("costs-unavailable", "error", f"cannot build costs: {exc}")
        return ConfigCosts(None, "none", folded)
    if found is None:
        add("model-unknown", "warning",
            "no model (preset, hf_config, profile, or layer/hidden/head/seq sizes) in the "
            "config and no ./pptune-profile.json: memory, bubble and step time are not "
            "checked; pass --model, --hf-config or --profile")
        return ConfigCosts(None, "none", folded)
    why = tp_heads_problem(found.profile, cfg.tp, found.origin, kv) if found.measured else None
    if why:  # the measured model's key/value heads, by the framework's rule
        add("tp-kv-heads", "error", why.replace("--tp", "tp"), tp=cfg.tp)
        return ConfigCosts(None, "none", folded)
    if found.measured:  # "profile PATH (probe)": check-config names the file alone
        if cfg.ep > 1 or cfg.etp > 1:
            add("moe-measured-local", "warning",
                f"ep {cfg.ep} / etp {cfg.etp}: the profile measured every expert on one rank; "
                "its costs are used as measured, without the all-to-all or the expert split "
                "(use analytic costs, --model or the config's sizes, to price them)",
                ep=cfg.ep, etp=cfg.etp)
        origin = found.origin.rsplit(" (", 1)[0]
        if path is None:
            profile_match.found_here(add)
        if flags.gpu is not None:
            add("gpu-unused", "info",
                f"costs measured ({origin}): --gpu {flags.gpu} does not apply to them; pass "
                "--model (or a file that names its model) to price the config on it",
                gpu=flags.gpu)
        return ConfigCosts(found.table, origin, folded, found.reserve_bytes)
    cal = profile.calibration if profile is not None and given is None else None
    if cal is not None:  # a calibrated file: what was fitted, and its doubts (info only)
        add("calibrated-costs", "info",
            f"costs calibrated for {cal.model.get('name')} on {cal.gpu}: "
            f"{calibrated.fitted_text(cal)}", gpu=cal.gpu, factors=cal.factors)
        for doubt in cal.warnings:
            add("calibration-doubt", "info", f"the calibration's fitted factors: {doubt}")
    if opts.wgrad is WgradAccum.UNFUSED:
        _unfused_cost(cfg, found.table, find(
            replace(opts, wgrad_accum=WgradAccum.FUSED), Mode.CHECK,
            sizes=(cfg.micro_batch_size,), table_tp=cfg.tp * cfg.cp,
            profile=given if given is not None else path, shape=shape, experts=experts,
            recompute_modules=modules, gpus=gpus, gpus_per_node=cfg.gpus_per_node), add)
    fit = profile.calibration if profile is not None else None  # calibrate's too
    return ConfigCosts(
        found.table, found.described, found.key,
        found.reserve_bytes, options=opts, shape=found.shape, modules=modules,
        tables=found.tables, kv_heads=kv,
        gpu=fit.gpu if fit else opts.gpu, factors=calibrated.factors(fit) if fit else None,
        attention=opts.attention.value if opts.attention else fit.attention if fit else None)


def stated_model(cfg: TrainingConfig, base_dir: Path, flags: CostOptions) -> ModelShape | None:
    """The model the config states (--model and --hf-config first), without its findings;
    None when it states none or it cannot be read (the costs report that)."""
    try:
        return config_shape(cfg, base_dir, flags.model, lambda *_a, **_k: None, flags.hf_config)
    except PptuneError:
        return None


def model_of(cfg: TrainingConfig, base_dir: Path, flags: CostOptions,
             given: Profile | None = None) -> ModelShape | None:
    """The model check-config prices for ``cfg``: the config's, a calibrated profile's
    (``given``, or the file named), None for a measured profile or none (a bad model
    or profile is reported when the costs are built)."""
    try:
        given = profile_match.named_profile(cfg, base_dir, flags, given)
    except PptuneError:
        return None
    if given is not None:
        return None if (cal := given.calibration) is None else calibrated.shape(cal, cfg.seq_len)
    return stated_model(cfg, base_dir, flags)


# the config's precision -> the GEMM precision priced (fp32: pptune prices BF16 GEMMs)
PRECISIONS = {p.value: p for p in (Precision.FP16, Precision.FP8, Precision.MXFP8, Precision.NVFP4)}


def priced_modules(cfg: TrainingConfig, add: Any,
                   shape: ModelShape | None = None) -> frozenset[str]:
    """The config's selective-recomputation modules the analytic costs price
    (costmodel/analytic.py RECOMPUTE_MODULES: all but core attention, which keeps
    nothing to recompute under flash attention); a warning says where torchtitan's
    per-op policy is not priced (costmodel/op_sac.py ``unpriced``)."""
    if not cfg.recompute_modules:
        return frozenset()
    why = unpriced(shape) if OP_SAC in cfg.recompute_modules and shape is not None else None
    if why:
        add("recompute-op-unmodelled", "warning",
            "per-op selective checkpointing (selective_ac_option \"op\") is not priced on "
            f"{why}: this model's blocks are priced keeping their activations, "
            "without the rerun")
    if cfg.recompute not in ("selective", "modules"):
        add("recompute-modules-ignored", "warning",
            f"recompute_modules {', '.join(cfg.recompute_modules)} without selective "
            "recomputation: ignored, as megatron-core ignores them; set recompute: selective")
        return frozenset()
    # every module the config schema takes is priced but core_attn, which keeps
    # nothing to recompute under flash attention
    return frozenset(cfg.recompute_modules) & RECOMPUTE_MODULES


def layout_options(cfg: TrainingConfig) -> dict[str, Any]:
    """The cost options of the layout the config states beyond tp and cp: its GEMM
    precision, its context-parallel exchange, FP8 parameters, loss and SwiGLU kernels,
    weight-gradient accumulation and the width of the main_grad it goes into (a BF16
    gradient buffer, ``main_grads_dtype: bf16``: rates.Accumulation), tensor-parallel
    overlap (defaults when unsaid)."""
    out: dict[str, Any] = {"precision": (PRECISIONS.get(cfg.precision or "", Precision.BF16),)}
    if cfg.cp_comm is not None:
        out["cp_comm"] = CpComm(cfg.cp_comm)
    if cfg.fp8_param_gather and cfg.precision in ("fp8", "mxfp8", "nvfp4"):
        out["fp8_param_gather"] = True
    if cfg.cross_entropy is not None:
        out["cross_entropy"] = CrossEntropy(cfg.cross_entropy)
    if cfg.swiglu is not None:
        out["swiglu"] = Swiglu(cfg.swiglu)
    if cfg.wgrad_accum is not None:
        out["wgrad_accum"] = WgradAccum(cfg.wgrad_accum)
    if cfg.main_grads_dtype is not None:
        out["main_grad_bytes"] = STATE_DTYPE_BYTES[cfg.main_grads_dtype]
    if cfg.fp8_kernels is not None:
        out["fp8_kernels"] = Fp8Kernels(cfg.fp8_kernels)
    if cfg.fp8_casts is not None:
        out["fp8_casts"] = Fp8Casts(cfg.fp8_casts)  # torchao's, the model not compiled
    if cfg.fp8_kernels == "torchao" and cfg.fp8_recipe in {r.value for r in TorchaoRecipe}:
        out["torchao_recipe"] = TorchaoRecipe(cfg.fp8_recipe)  # torchtitan's recipe_name
    elif cfg.fp8_kernels != "torchao" and cfg.fp8_recipe in {r.value for r in Fp8Recipe}:
        out["fp8_recipe"] = Fp8Recipe(cfg.fp8_recipe)  # Transformer Engine's (Megatron-LM)
    if cfg.tp_comm_overlap:
        out["tp_comm_overlap"] = True
    return out


def _unfused_cost(cfg: TrainingConfig, table: CostTable, fused: Costs | None,
                  add: Any) -> None:
    """An info finding: what the config's unfused weight-gradient accumulation costs a
    micro-batch over the fused default (``fused``: the costs priced so), summed over the
    model's layers (each pipeline stage pays its own layers' share)."""
    b = cfg.micro_batch_size
    if fused is None:
        return
    extra_s = sum(table.by_mb[b].wgrad_s) - sum(fused.table.by_mb[b].wgrad_s)
    width = cfg.main_grads_dtype or "fp32"
    unfused, into = (Accumulation(how, STATE_DTYPE_BYTES[width])
                     for how in (WgradAccum.UNFUSED, WgradAccum.FUSED))
    add("wgrad-accumulation-unfused", "info",
        f"weight gradients accumulated unfused: +{fmt_seconds(extra_s)} a micro-batch over "
        "the model's layers (each stage its own layers' share) against the fused default: "
        f"each weight GEMM writes a BF16 gradient and a kernel adds it into the "
        f"{width.upper()} main_grad ({unfused.add_bytes:g} bytes a weight element, not the "
        f"GEMM's {into.out_bytes:g} an output element); drop "
        "--no-gradient-accumulation-fusion (wgrad_accum: fused) where the job can",
        extra_s=extra_s, micro_batch_size=b)


def _precision_problem(cfg: TrainingConfig, gpu: str) -> str | None:
    """Why the config's GPU cannot run its FP8 GEMMs, the linears' or the routed experts'
    (``expert_precision``), or None: it can, or none are asked."""
    spec = presets.GPUS.get(gpu)
    for name, stated, experts in (("precision", cfg.precision, False),
                                  ("expert_precision", cfg.expert_precision, True)):
        precision = PRECISIONS.get(stated or "")
        found = problems(precision, spec) if precision is not None and spec else []
        if precision is None or not found:
            continue
        own = adapter_of(cfg.source_format).precision_refusal(precision, gpu, experts=experts)
        return own or (f"{name} {stated} on {gpu}: "
                       + "; ".join(found).removeprefix(f"--precision {precision.value}: ")
                       + f" (the config's {name} or gpu)")
    return None


# a named model's sizes against those a file states (TrainingConfig field, ModelShape's)
def _gpu(flags: CostOptions, cfg: TrainingConfig, add: Any) -> str:
    gpu = flags.gpu or cfg.gpu
    if gpu is None:
        gpu = presets.DEFAULT_GPU
        add("gpu-assumed", "warning",
            f"no GPU named; predictions assume {gpu} (set gpu: or pass --gpu)", gpu=gpu)
    return gpu
