"""The config's framework judges it: check-config asks the adapter that read the
config (pptune.frameworks.registry) for the rules that framework enforces.

A rule there is the framework's own: when it fires, the framework refuses
the run (an error finding citing its source). What only costs speed (few
micro-batches, a large bubble) is left to the predictions. Each adapter's
rules are per release (``--framework-version``).
"""

from __future__ import annotations

from collections.abc import Sequence

from pptune.costmodel.search import PlanRequest, Sharding
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.registry import adapter_of
from pptune.schemas import TrainingConfig


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    """Error findings for micro-batch counts the config's framework refuses."""
    adapter_of(cfg.source_format).microbatch_rules(cfg, m, semantics, add)


def config_rules(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """Error findings for other settings the config's framework refuses."""
    adapter_of(cfg.source_format).config_rules(cfg, semantics, add)


def framework_split(cfg: TrainingConfig, param_counts: Sequence[float],
                    num_stages: int) -> list[int] | None:
    """Layers per stage the config's framework builds when the config states no split
    (DeepSpeed's partition_method); None: an even split."""
    return adapter_of(cfg.source_format).stage_split(cfg, param_counts, num_stages)


def memory_fixes(cfg: TrainingConfig) -> str:
    """What to change when a stage overflows, in the config's framework's own words."""
    return adapter_of(cfg.source_format).memory_fixes


def stateable_request(cfg: TrainingConfig, req: PlanRequest) -> PlanRequest:
    """``req`` narrowed to the plans the config's framework states (Adapter.stateable)."""
    return adapter_of(cfg.source_format).stateable(req, cfg.model)


ZERO_STAGES = (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3)


def config_sharding(cfg: TrainingConfig) -> Sharding:
    """The config's sharding: stated, else its ZeRO stage, else the sharded-optimizer flag."""
    if cfg.sharding is not None:
        return Sharding(cfg.sharding)
    if cfg.zero_stage:
        return ZERO_STAGES[min(cfg.zero_stage, 3)]
    return Sharding.ZERO1 if cfg.sharded_optimizer else Sharding.NONE
