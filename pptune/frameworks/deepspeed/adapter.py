"""DeepSpeed: JSON (or YAML) configs, read, judged and written."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from pptune.costmodel.keys import CostKey
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable, Plan, PlanRequest, PlanSpec, Sharding
from pptune.frameworks.common.adapter import Adapter, Add, Job, Stated
from pptune.frameworks.common.fields import Ctx, Semantics
from pptune.frameworks.common.joblog import JobLog
from pptune.frameworks.common.source import Repeated, json_like, parse_json, parse_yaml
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.deepspeed import as_run as running
from pptune.frameworks.deepspeed import log, partition, rules, writer
from pptune.frameworks.deepspeed.closest import closest_plan, stateable_request
from pptune.frameworks.deepspeed.partition import DEEPSPEED, ds_split
from pptune.frameworks.deepspeed.reader import DEEPSPEED_KEYS, read_deepspeed
from pptune.frameworks.deepspeed.rules import autotp_zero3
from pptune.schemas import TrainingConfig


class DeepSpeedAdapter(Adapter):
    name = "deepspeed"
    title = "DeepSpeed"
    grad_compressions = frozenset({"fp16", "bf16"})
    grad_reduce_setting = "communication_data_type"
    bf16_setting = '"bf16": {"enabled": true}'
    memory_fixes = ("more pipeline stages", "ZeRO (zero_optimization.stage)",
                    "activation checkpointing (pipeline.activation_checkpoint_interval, or the "
                    "model code's: state \"pptune\": {\"recompute\": \"full\"} for "
                    "check-config)", "a smaller train_micro_batch_size_per_gpu")
    memory_sharding = Sharding.ZERO3
    memory_sharding_piped = Sharding.ZERO1  # PipelineEngine: ZeRO-2/3 refused
    files = (writer.CONFIG, writer.PARTITION)
    syntaxes = ("json", "yaml")
    versions = (DEEPSPEED,)
    states_dims = frozenset({"ep"})  # AutoEP's expert_parallel; etp beyond 1 it refuses
    states_precisions = frozenset({"fp16"})  # "fp16": {"enabled": true} (writer.py)
    builds_mtp = False  # PipelineModule runs the model code's layers: no MTP module
    # deepspeed --num_nodes N --num_gpus K (ds_partition.txt), and pptune.gpus_per_node
    states_node_shape = True
    tp_splits_sequence = False  # AutoTP splits the weights alone (closest.py)

    def states_kernels(self, model: str | None, shape: ModelShape | None,
                       versions: Versions) -> dict[str, tuple[str, ...]]:
        """Autograd's BF16 weight gradients (closest.kernels); the model code's attention
        and loss, whichever."""
        return {"wgrad_accum": ("bf16",)}

    def detect(self, data: Any) -> bool:
        return any(key in DEEPSPEED_KEYS for key in data if isinstance(key, str))

    def parse(self, text: str, path: Path,
              repeated: list[Repeated] | None = None) -> Any:
        if json_like(text):
            return parse_json(text, str(path), repeated)
        return parse_yaml(text, str(path), repeated)

    def repeated_keys(self, found: Repeated, ctx: Ctx) -> None:
        """DeepSpeedConfig loads a JSON file with ``object_pairs_hook=
        dict_raise_error_on_duplicate_keys``: a ValueError naming the object's repeated keys.
        DeepSpeed parses no YAML: whatever loaded it kept one value (bad input)."""
        if found.syntax != "json":
            super().repeated_keys(found, ctx)
            return
        ctx.refuse("deepspeed-duplicate-key", rules.duplicate_keys(found))

    def read(self, data: Any, ctx: Ctx) -> TrainingConfig:
        return read_deepspeed(data, ctx)

    def config_rules(self, cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
        rules.zero_rule(cfg, add, semantics.versions)

    def memory_fix_clauses(self, cfg: TrainingConfig
                           ) -> tuple[str, str, str | None, str]:
        """The sharding clause as the next ZeRO stage up from the file's (a config at stage
        2 is told stage 3, not to use ZeRO; check.framework.memory_fixes leaves it out at
        the most the engine runs: 1 with a pipeline, 3 without)."""
        stages, _, recompute, micro = self.memory_fixes
        said = {"none": 0, "zero1": 1, "zero2": 2, "zero3": 3, "fsdp": 3}
        stage = said[cfg.sharding] if cfg.sharding is not None else cfg.zero_stage
        most = 1 if cfg.pp > 1 else 3  # PipelineEngine: ZeRO-2/3 refused (closest.py)
        nxt = min(stage + 1, most)
        higher, upto = (" or higher", f" to {most}") if nxt < most else ("", "")
        return (stages, f"ZeRO stage {nxt}{higher} (zero_optimization.stage {nxt}{upto})",
                recompute, micro)

    def stage_split(self, cfg: TrainingConfig, param_counts: Sequence[float],
                    num_stages: int) -> list[int] | None:
        """PipelineModule's partition_method (the reader states it, "parameters" by default)."""
        if cfg.partition_method is None:
            return None
        return ds_split(cfg.partition_method, param_counts, num_stages)

    def stateable(self, req: PlanRequest, model: str | None,
                  shape: ModelShape | None = None) -> PlanRequest:
        return stateable_request(req, model)

    def stateable_groups(self, req: PlanRequest, keys: Sequence[CostKey], model: str | None,
                         shape: ModelShape | None = None, versions: Versions | None = None
                         ) -> list[PlanRequest]:
        """As every framework's, but before 0.19.4 AutoTP (tp > 1) without ZeRO-3
        (rules.autotp_zero3): those keys searched without it, none left where it was all
        that was asked."""
        if autotp_zero3(versions) or Sharding.ZERO3 not in req.shardings:
            return super().stateable_groups(req, keys, model, shape)
        alone = [k for k in keys if k.tp == 1]
        autotp = [k for k in keys if k.tp > 1]
        rest = tuple(s for s in req.shardings if s is not Sharding.ZERO3)
        return [*(super().stateable_groups(req, alone, model, shape) if alone else []),
                *(super().stateable_groups(replace(req, shardings=rest), autotp, model, shape)
                  if autotp and rest else [])]

    def left_by_release(self, req: PlanRequest, keys: Sequence[CostKey],
                        versions: Versions | None = None) -> str | None:
        """ZeRO-3 beside AutoTP, which ``stateable_groups`` leaves out before 0.19.4
        (rules.autotp_zero3) where ZeRO-3 is asked and a key of tp > 1 runs (at pp 1:
        AutoTP has no pipeline); in ``narrowed``'s words, with the release that trains it."""
        tps = sorted({k.tp for k in keys if k.tp > 1})
        if (autotp_zero3(versions) or Sharding.ZERO3 not in req.shardings or not tps
                or (req.pp is not None and 1 not in req.pp)):
            return None
        release = (versions or Versions()).of(DEEPSPEED)
        return (f"{self.title} {release}'s files state no sharding zero3 with AutoTP "
                f"(tp {', '.join(map(str, tps))}): ranked without it (its engine asserts "
                "ZeRO stage <= 2 beside AutoTP up to 0.19.3, deepspeed/runtime/engine.py "
                "_configure_tensor_parallel_states; 0.19.4 is the first release that trains "
                "it, PRs #8167 and #8168: --framework-version deepspeed=0.19.4)")

    def express(self, job: Job, plan: Plan, rank: int) -> Stated:
        return closest_plan(job, plan, rank, job.versions)

    def as_run(self, job: Job, plan: Plan, *, substitute: bool = True) -> tuple[Job, Plan]:
        """As the config written for the plan runs it (as_run.py); never another plan in
        its place: one the config cannot state is refused (BadInput), whatever
        ``substitute`` says."""
        return running.as_run(job, plan)

    def own_splits(self, table: CostTable, key: CostKey, chunks: int
                   ) -> tuple[tuple[int, ...], ...]:
        """partition_method "uniform" and "parameters" (partition.py); a "type:" pattern
        places others by the layers' class names, which pptune's layers have not."""
        return partition.own_splits(table, key, chunks)

    def as_run_saving_s(self, job: Job, spec: PlanSpec) -> float:
        return running.as_run_saving_s(job, spec)

    def as_run_step_saving_s(self, job: Job, spec: PlanSpec) -> float:
        return running.as_run_step_saving_s(job, spec)

    def write(self, stated: Stated) -> dict[str, str]:
        return writer.write(stated, stated.detail)

    def log_lines(self, text: str) -> bool:
        return log.detect(text)

    def read_log(self, text: str) -> JobLog | None:
        return log.read(text)


ADAPTER = DeepSpeedAdapter()
