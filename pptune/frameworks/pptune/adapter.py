"""pptune's own config (YAML, TOML or JSON): read, judged and written.

Recognised only when no framework recognises the file: its keys are
TrainingConfig's, which a framework's file may share. Its runs go through
torch.distributed.pipelining, so torch's schedule rules judge it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pptune.costmodel.search import Plan
from pptune.frameworks.common import batch_fix, torch_schedules
from pptune.frameworks.common.adapter import Adapter, Add, Job, Stated
from pptune.frameworks.common.fields import Ctx, Semantics
from pptune.frameworks.common.source import (
    Repeated,
    json_like,
    parse_json,
    parse_toml,
    parse_yaml,
)
from pptune.frameworks.deepspeed.partition import ds_split
from pptune.frameworks.pptune import writer
from pptune.frameworks.pptune.reader import read_own
from pptune.schemas import TrainingConfig


class PptuneAdapter(Adapter):
    name = "pptune"
    states_moment_dtypes = True  # exp_avg_dtype, exp_avg_sq_dtype
    states_fp8_param_gather = True  # fp8_param_gather
    states_dims = frozenset({"cp", "ep", "etp", "precision"})
    title = "pptune"
    memory_fixes = ("more pipeline stages (pp)", "a sharded optimizer (sharding: zero1)",
                    "activation recomputation (recompute)", "a smaller micro_batch_size")
    files = (writer.FILE,)
    syntaxes = ("json", "toml", "yaml")
    fallback = True
    states_node_shape = True  # gpus_per_node

    def detect(self, data: Any) -> bool:
        return any(key in TrainingConfig.model_fields for key in data if isinstance(key, str))

    def parse(self, text: str, path: Path,
              repeated: list[Repeated] | None = None) -> Any:
        name = str(path)
        suffix = path.suffix.lower()
        if suffix == ".toml":
            return parse_toml(text, name)
        if suffix == ".json" or json_like(text):
            return parse_json(text, name, repeated)
        return parse_yaml(text, name, repeated)

    def read(self, data: Any, ctx: Ctx) -> TrainingConfig:
        return read_own(data, ctx)

    def count_settings(self, cfg: TrainingConfig, m: int, count: int,
                       semantics: Semantics | None = None) -> str | None:
        return batch_fix.pptune_settings(cfg, m, count)

    def microbatch_rules(self, cfg: TrainingConfig, m: int, semantics: Semantics,
                         add: Add) -> None:
        """torch's schedule classes; pptune's own zb-h1 runs one stage per rank. A fix
        names the count with the global_batch that gives it (batch_fix.py)."""
        torch_schedules.microbatch_rules(cfg, m, semantics, add, zb_h1_rounds=False,
                                         how=lambda n: batch_fix.pptune_count(cfg, m, n))

    def stage_split(self, cfg: TrainingConfig, param_counts: Sequence[float],
                    num_stages: int) -> list[int] | None:
        """A stated partition_method means DeepSpeed's (TrainingConfig.partition_method)."""
        if cfg.partition_method is None:
            return None
        return ds_split(cfg.partition_method, param_counts, num_stages)

    def express(self, job: Job, plan: Plan, rank: int) -> Stated:
        """Every plan: pptune's own runs state them all."""
        return Stated(job, plan, True, ())

    def write(self, stated: Stated) -> dict[str, str]:
        return writer.write(stated)


ADAPTER = PptuneAdapter()
