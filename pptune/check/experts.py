"""check-config's mixture of experts: the config's model with its experts, how they
are placed, and the placement rules every framework enforces.

A config states its experts as TrainingConfig fields (each framework's reader
maps its own names: Megatron-LM ``--num-experts``, ``--moe-router-topk``, ...)
or through a preset that has them. The placement is ``ep`` ranks for the
experts and ``etp`` for each expert's tensors, inside the ``tp x cp x dp`` ranks
of each pipeline stage; the expert data-parallel size is what is left,
``edp = tp x cp x dp / (ep x etp)`` (megatron-core 0.16.1,
``parallel_state.initialize_model_parallel``: "world_size ... is not divisible by
expert_tensor_model_pipeline_parallel size"). The rules below are the
arithmetic of that placement; they hold in Megatron-LM (moe_layer.py:
``assert self.config.num_moe_experts % ep_size == 0``; validate_args: "Number of
experts should be a multiple of expert model parallel_size") and in torchtitan
(its ``ParallelDims`` builds the same meshes), so they are judged here once; a
framework's own further rules are its adapter's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pptune.costmodel.dispatch import DEEPEP_SMS, Dispatcher
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import Layout, LayoutError, RankOrder
from pptune.costmodel.models import Norm
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.presets import MODELS, ModelShape
from pptune.frameworks.registry import adapter_of
from pptune.schemas import TrainingConfig

# TrainingConfig field -> ModelShape field, for a shape built from the config's sizes
SHAPE_FIELDS = {
    "num_experts": "experts", "moe_top_k": "top_k", "moe_ffn_hidden_size": "expert_ffn",
    "moe_shared_ffn_hidden_size": "shared_ffn", "moe_first_dense_layers": "first_dense",
    "moe_layer_freq": "moe_every", "moe_layer_offset": "moe_offset", "mtp_layers": "mtp_layers",
    "kv_channels": "kv_channels", "qk_norm": "qk_norm", "q_lora_rank": "q_lora_rank",
    "kv_lora_rank": "kv_lora_rank", "qk_nope_head_dim": "qk_nope_head_dim",
    "qk_rope_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim",
    "moe_router_num_groups": "route_groups", "moe_router_group_topk": "route_group_topk",
    "qkv_bias": "qkv_bias", "attn_out_bias": "attn_out_bias", "mlp_bias": "mlp_bias",
    "tied_embeddings": "tied_embeddings",
    "sliding_window": "sliding_window", "full_attention_every": "full_attention_every",
}


def stated_shape(cfg: TrainingConfig, shape: ModelShape) -> ModelShape:
    """``shape`` with the experts, MTP, attention and style fields the config states (a
    routed expert's width defaults to the dense FFN width, as in Megatron-LM)."""
    changes: dict[str, Any] = {}
    for key, attr in SHAPE_FIELDS.items():
        value = getattr(cfg, key)
        unset = TrainingConfig.model_fields[key].default
        if value is not None and (unset is None or key in cfg.model_fields_set):
            changes[attr] = value
    if cfg.normalization is not None and Norm(cfg.normalization) is not shape.normalization:
        changes["norm"] = Norm(cfg.normalization)
    if cfg.num_experts is not None and cfg.moe_ffn_hidden_size is None and not shape.expert_ffn:
        changes["expert_ffn"] = shape.ffn
    return replace(shape, **changes) if changes else shape


def experts_of(cfg: TrainingConfig, shape: ModelShape | None = None) -> tuple[int, int, int]:
    """(routed experts, top-k, expert FFN width) of the config's model (0s: dense):
    the model check-config prices (``shape``), else what the config states."""
    if shape is not None:
        return (shape.experts, shape.top_k, shape.expert_ffn) if shape.moe else (0, 0, 0)
    preset = MODELS.get(cfg.model or "")
    if cfg.num_experts is not None:
        ffn = cfg.moe_ffn_hidden_size or cfg.ffn_hidden_size or (preset.expert_ffn if preset else 0)
        return cfg.num_experts, cfg.moe_top_k or 0, ffn
    if preset is not None and preset.moe:
        return preset.experts, preset.top_k, preset.expert_ffn
    return 0, 0, 0


def placement(cfg: TrainingConfig) -> ExpertParallel:
    """The config's expert placement and routing for the analytic costs."""
    return ExpertParallel(
        ep=cfg.ep, etp=cfg.etp, gpus_per_node=cfg.gpus_per_node,
        imbalance=cfg.moe_routing_imbalance or 1.0,
        grouped_gemm=True if cfg.moe_grouped_gemm is None else cfg.moe_grouped_gemm,
        dispatcher=Dispatcher(cfg.moe_dispatcher or Dispatcher.ALLTOALL.value),
        dispatch_sms=cfg.moe_dispatcher_sms or DEEPEP_SMS,
        precision=Precision(cfg.expert_precision) if cfg.expert_precision else None)


def cost_key(cfg: TrainingConfig, shape: ModelShape | None = None) -> CostKey:
    """The key of the config's analytic cost table: its tensor and context parallelism,
    and for a mixture of experts its ep and etp (a dense model's ep and etp stay 1)."""
    if not experts_of(cfg, shape)[0]:
        return CostKey(tp=cfg.tp, cp=cfg.cp)
    return CostKey(tp=cfg.tp, cp=cfg.cp, ep=cfg.ep, etp=cfg.etp)


def expert_rules(cfg: TrainingConfig, dp: int | None, add: Any,
                 shape: ModelShape | None = None) -> None:
    """Error findings for experts the framework cannot place (module docstring);
    ``shape``: the model check-config prices, when it has one."""
    experts, top_k, ffn = experts_of(cfg, shape)
    ep, etp = cfg.ep, cfg.etp
    if not experts:
        if ep > 1 and (shape is not None or cfg.num_experts is not None):  # else: unknown
            add("moe-ep-dense", "warning",
                f"ep {ep} with a model that has no routed experts: expert parallelism has no "
                "effect on it (priced as ep 1); set num_experts or ep 1", ep=ep)
        return
    if top_k > experts:
        add("moe-topk", "error",
            f"top-k {top_k} exceeds the {experts} routed experts: a token picks top-k of "
            "them (torch.topk in megatron-core's router raises 'selected index k out of "
            f"range'); set the top-k to at most {experts}", top_k=top_k, experts=experts)
    cites = dict(adapter_of(cfg.source_format).expert_cites)  # the framework's own words
    if experts % ep:
        fits = [d for d in range(1, experts + 1) if experts % d == 0]
        placed = [d for d in fits if dp is None or _places(cfg, dp, d)]
        choose = (f"choose ep from {', '.join(map(str, placed[-8:]))}" if placed else
                  f"no ep that divides them places on the {cfg.tp * cfg.cp * (dp or 1)} ranks "
                  f"of a pipeline stage at etp {etp} in this rank order; change etp or the GPUs")
        add("moe-experts-ep", "error",
            f"ep {ep} does not divide the {experts} routed experts: each rank holds experts / "
            "ep of them (" + cites.get("moe-experts-ep", "megatron-core moe_layer.py asserts "
                                       "num_moe_experts % ep_size == 0")
            + f"); {choose}", ep=ep, experts=experts)
    if ffn and ffn % etp:
        add("moe-etp-ffn", "error",
            f"etp {etp} does not divide the expert FFN width {ffn}: each expert's weights are "
            "split etp ways (" + cites.get("moe-etp-ffn", "megatron-core tensor_parallel: 'is "
                                           "not divisible by'")
            + "); choose an etp that divides it", etp=etp, expert_ffn=ffn)
    if dp is None:
        return
    stage = cfg.tp * cfg.cp * dp
    if stage % (ep * etp):
        add("moe-world", "error",
            f"ep x etp = {ep} x {etp} = {ep * etp} does not divide the {stage} ranks of a "
            f"pipeline stage (tp x cp x dp = {cfg.tp} x {cfg.cp} x {dp}): megatron-core raises "
            "'world_size ... is not divisible by expert_tensor_model_pipeline_parallel size' "
            "(parallel_state.initialize_model_parallel); change ep, etp or the GPUs",
            ep=ep, etp=etp, stage_ranks=stage)
        return
    if cfg.pp == 1:  # one stage: both rank orders are the same
        return
    try:
        Layout(pp=cfg.pp, dp=dp, tp=cfg.tp, cp=cfg.cp, ep=ep, etp=etp,
               gpus_per_node=cfg.gpus_per_node, order=RankOrder(cfg.rank_order))
    except LayoutError as exc:
        add("moe-rank-order", "error",
            f"{exc}: megatron-core asserts 'When not using pp-last rank ordering, the data "
            "parallel size of the attention and moe layers must be the same' "
            "(parallel_state.initialize_model_parallel); use the tp-dp-pp rank order or make "
            "ep x etp = tp x cp", ep=ep, etp=etp, rank_order=cfg.rank_order)


def _places(cfg: TrainingConfig, dp: int, ep: int) -> bool:
    """Whether experts placed ``ep`` ways (at the config's etp) pass the placement rules
    that follow the experts' own in ``expert_rules``: ep x etp dividing a stage's tp x cp x
    dp ranks (moe-world) and, under a pipeline, the rank order's (moe-rank-order, judged
    by the same Layout)."""
    if (cfg.tp * cfg.cp * dp) % (ep * cfg.etp):
        return False
    if cfg.pp == 1:
        return True
    try:
        Layout(pp=cfg.pp, dp=dp, tp=cfg.tp, cp=cfg.cp, ep=ep, etp=cfg.etp,
               gpus_per_node=cfg.gpus_per_node, order=RankOrder(cfg.rank_order))
    except LayoutError:
        return False
    return True


def dropout_unpriced(cfg: TrainingConfig, shape: ModelShape, add: Any) -> None:
    """The warning when the file runs dropout in a model pptune prices without it."""
    if cfg.dropout and not shape.dropout:
        add("dropout-unpriced", "warning",
            f"the file runs dropout (Megatron-LM's --hidden-dropout and --attention-dropout are "
            f"0.1 unless set) in {shape.name}, which pptune prices without it (no dropout "
            "masks kept or applied); set both to 0.0, as Llama-style recipes do, or expect "
            "more activation memory and time than predicted")
