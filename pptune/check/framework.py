"""The config's framework judges it: check-config asks the adapter that read the
config (pptune.frameworks.registry) for the rules that framework enforces.

A rule there is the framework's own: when it fires, the framework refuses
the run (an error finding citing its source). What only costs speed (few
micro-batches, a large bubble) is left to the predictions. Each adapter's
rules are per release (``--framework-version``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from pptune.costmodel.search import PlanRequest, Sharding
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.registry import adapter_of
from pptune.schemas import TrainingConfig


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    """Error findings for micro-batch counts the config's framework refuses."""
    adapter_of(cfg.source_format).microbatch_rules(cfg, m, semantics, add)


def unsimulated_order(cfg: TrainingConfig, m: int, semantics: Semantics) -> str | None:
    """Why the config's framework runs its m micro-batches in an order pptune does not
    simulate (None: it runs pptune's)."""
    return adapter_of(cfg.source_format).unsimulated_order(cfg, m, semantics)


def config_rules(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """Error findings for other settings the config's framework refuses."""
    adapter_of(cfg.source_format).config_rules(cfg, semantics, add)


def framework_split(cfg: TrainingConfig, param_counts: Sequence[float],
                    num_stages: int) -> list[int] | None:
    """Layers per stage the config's framework builds when the config states no split
    (DeepSpeed's partition_method); None: an even split."""
    return adapter_of(cfg.source_format).stage_split(cfg, param_counts, num_stages)


# how far each sharding goes: the state it shards (optimizer, gradients, weights)
_SHARDS = {Sharding.NONE: 0, Sharding.ZERO1: 1, Sharding.ZERO2: 2, Sharding.ZERO3: 3,
           Sharding.FSDP: 3}


def memory_fixes(cfg: TrainingConfig,
                 worded: tuple[str, str, str | None, str] | None = None) -> str:
    """What to change when a stage overflows, in the config's framework's own words (or
    ``worded``: the file's, Semantics.memory_fixes), without what the config already does
    (its sharding as far as the framework's clause goes, full recomputation, a micro-batch
    of 1)."""
    adapter = adapter_of(cfg.source_format)
    stages, shard, recompute, micro = worded or adapter.memory_fix_clauses(cfg)
    most = (adapter.memory_sharding_piped if cfg.pp > 1 and adapter.memory_sharding_piped
            else adapter.memory_sharding)
    piped = adapter.memory_sharding_piped  # sharded past it: no pipeline to add stages to
    unpipelined = piped is not None and _SHARDS[config_sharding(cfg)] > _SHARDS[piped]
    kept = [*([] if unpipelined else [stages]),
            *([shard] if most is None or _SHARDS[config_sharding(cfg)] < _SHARDS[most]
              else []),
            *([recompute] if recompute is not None and cfg.recompute != "full" else []),
            *([micro] if cfg.micro_batch_size > 1 else []),
            # each rank keeps seq / cp tokens' activations: a doubled cp that still splits
            # the sequence (tp x 2 x cp, torchtitan's divisor) halves them
            *([adapter.memory_fix_cp] if adapter.memory_fix_cp and cfg.seq_len
              and cfg.seq_len % (cfg.tp * 4 * cfg.cp) == 0 else [])]
    if not kept:  # every clause already applies: only more GPUs shard the state further
        return "use more GPUs"
    return "use " + (", ".join(kept[:-1]) + " or " + kept[-1] if len(kept) > 1 else kept[0])


def stateable_requests(cfg: TrainingConfig, req: PlanRequest, seq_len: int | None = None,
                       versions: Versions | None = None) -> list[PlanRequest]:
    """``req`` narrowed to the plans the config's framework states (Adapter.stateable),
    of the cost keys its files state on a sequence of ``seq_len`` tokens
    (Adapter.cannot_state; the sizes of the config's own key, ``req``'s first, stand:
    its reader read them), each with the shardings its files state at that key
    (Adapter.key_shardings), its pipelines on the splits its files build
    (Adapter.own_splits: DeepSpeed's partition_method; as recommend --framework searches
    them, else as_run refuses every pipelined plan). One request a tensor-parallel size and
    shardings whose narrowing differs (DeepSpeed runs AutoTP without a pipeline), else one.
    ``versions``: the releases followed (DeepSpeed's AutoTP with ZeRO-3 from 0.19.4)."""
    adapter = adapter_of(cfg.source_format)
    own, *others = req.keys()
    keys = [own, *(k for k in others
                   if adapter.cannot_state(k, seq_len, own, model=cfg.model) is None)]
    groups = adapter.stateable_groups(req, keys, cfg.model, versions=versions)
    if adapter.builds_any_split:
        return groups
    return [replace(g, stage_splits=adapter.own_splits) for g in groups]


ZERO_STAGES = (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3)


def config_sharding(cfg: TrainingConfig) -> Sharding:
    """The config's sharding: stated, else its ZeRO stage, else the sharded-optimizer flag."""
    if cfg.sharding is not None:
        return Sharding(cfg.sharding)
    if cfg.zero_stage:
        return ZERO_STAGES[min(cfg.zero_stage, 3)]
    return Sharding.ZERO1 if cfg.sharded_optimizer else Sharding.NONE
