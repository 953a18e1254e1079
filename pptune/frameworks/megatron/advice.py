"""check-config's memory-overflow advice in Megatron-LM's flags, for the script at hand:
only steps it has not taken, and only what megatron-core 0.16.1 allows beside its other
settings (``TransformerConfig.__post_init__``, megatron/core/transformer/
transformer_config.py).

- Sharding: with the distributed optimizer already on, Megatron-FSDP's
  optim_grads_params is the step left (fsdp.py); check.framework drops the clause
  where the script shards that far.
- Recomputation: full recomputation is refused beside --overlap-moe-expert-parallel-comm
  ('disable full recomputation when enabling overlap_moe_expert_parallel_comm'), so there
  only more selective modules are offered; a script that recomputes selectively is
  offered full recomputation and the modules it does not list yet. A module is offered
  where megatron-core accepts it for the model: ``moe_act`` with --moe-grouped-gemm,
  ``mla_up_proj`` with MLA, neither ``moe_act`` nor ``layernorm`` under the delayed FP8
  recipe ('Delayed scaling does not support moe_act and layernorm recompute for fp8');
  ``moe`` and ``shared_experts`` where the model has them, ``mlp`` where it has dense
  MLP blocks, ``core_attn`` under unfused attention only (megatron-core warns that fused
  attention needs no ``core_attn`` recomputation, and pptune prices it as nothing there).
"""

from __future__ import annotations

from pptune.costmodel.search import Sharding
from pptune.frameworks.megatron.fsdp import STRATEGY
from pptune.frameworks.megatron.recompute import RECOMPUTE_MODULES
from pptune.schemas import TrainingConfig

MEGATRON_FSDP = ("Megatron-FSDP (--use-megatron-fsdp --data-parallel-sharding-strategy "
                 f"{STRATEGY[Sharding.FSDP]})")
FULL = ("full recomputation (--recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1)")


def memory_fix_clauses(cfg: TrainingConfig, fixes: tuple[str, str, str, str]
                       ) -> tuple[str, str, str | None, str]:
    """``fixes`` (the adapter's clauses) narrowed to ``cfg``."""
    stages, shard, recompute, micro = fixes
    if cfg.sharded_optimizer:  # the distributed optimizer is on: Megatron-FSDP is left
        shard = MEGATRON_FSDP
    return stages, shard, _recompute(cfg, recompute), micro


def _recompute(cfg: TrainingConfig, clause: str) -> str | None:
    more = unlisted_modules(cfg)
    modules = ("more --recompute-modules (" + ", ".join(more) + ")") if more else None
    if cfg.a2a_overlap:  # megatron-core refuses full recomputation beside the overlap
        if cfg.recompute in ("selective", "modules"):
            return modules
        if not more:
            return None
        return ("selective recomputation (--recompute-granularity selective --recompute-"
                f"modules {' '.join(more)}; full recomputation is refused with "
                "--overlap-moe-expert-parallel-comm)")
    if cfg.recompute in ("selective", "modules"):
        return FULL + (f" or {modules}" if modules else "")
    return clause


def unlisted_modules(cfg: TrainingConfig) -> list[str]:
    """The --recompute-modules megatron-core accepts for the model that the script does
    not list yet (module docstring); megatron-core's default list is core_attn."""
    listed = set(cfg.recompute_modules or (["core_attn"] if cfg.recompute == "selective"
                                           else []))
    experts = bool(cfg.num_experts)
    delayed = cfg.precision == "fp8" and cfg.fp8_recipe in (None, "delayed")
    dense = not experts or bool(cfg.moe_first_dense_layers) or (cfg.moe_layer_freq or 1) > 1
    accepted = {
        "core_attn": cfg.attention == "eager",
        "moe_act": experts and bool(cfg.moe_grouped_gemm) and not delayed,
        "layernorm": not delayed,
        "mla_up_proj": bool(cfg.kv_lora_rank),
        "mlp": dense,
        "moe": experts,
        "shared_experts": experts and bool(cfg.moe_shared_ffn_hidden_size),
    }
    return [m for m in RECOMPUTE_MODULES if accepted[m] and m not in listed]
