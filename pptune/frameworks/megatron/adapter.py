"""Megatron-LM: launch scripts and argument files, read, judged and written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import Plan, PlanRequest, PlanSpec, Sharding
from pptune.frameworks.common import batch_fix
from pptune.frameworks.common.adapter import Adapter, Add, Job, Stated
from pptune.frameworks.common.fields import Ctx, Semantics
from pptune.frameworks.common.joblog import JobLog, LogFlops
from pptune.frameworks.common.source import Repeated
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.megatron import advice, log, rules, writer
from pptune.frameworks.megatron import as_run as running
from pptune.frameworks.megatron.closest import (
    ATTENTION,
    STATED_KERNELS,
    closest_plan,
    stateable_request,
)
from pptune.frameworks.megatron.reader import looks_like_megatron, read_megatron
from pptune.frameworks.megatron.split import MEGATRON
from pptune.schemas import TrainingConfig


class MegatronAdapter(Adapter):
    name = "megatron"
    states_moment_dtypes = True  # --use-precision-aware-optimizer (widths.py)
    states_fp8_param_gather = True  # --fp8-param-gather
    states_dims = frozenset({"cp", "ep", "etp", "precision"})
    size_flags = (("ep", "--expert-model-parallel-size"),
                  ("etp", "--expert-tensor-parallel-size"),
                  ("tp", "--tensor-model-parallel-size"), ("cp", "--context-parallel-size"),
                  ("pp", "--pipeline-model-parallel-size"))
    title = "Megatron-LM"
    grad_compressions = frozenset({"fp16", "bf16"})
    grad_reduce_held = True  # a BF16 gradient buffer / FSDP reduce dtype
    grad_reduce_setting = "--grad-reduce-in-bf16"
    bf16_setting = "--bf16"
    memory_fixes = ("more pipeline stages (--pipeline-model-parallel-size)",
                    "the distributed optimizer (--use-distributed-optimizer) or Megatron-FSDP "
                    "(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params)",
                    "activation recomputation (--recompute-granularity)",
                    "a smaller --micro-batch-size")
    memory_sharding = Sharding.FSDP  # Megatron-FSDP's optim_grads_params (fsdp.py)
    files = (writer.FILE,)
    syntaxes = ("text",)
    versions = (MEGATRON,)
    states_node_shape = True  # torchrun --nnodes N --nproc_per_node K
    runs_microbatch_groups = True  # --microbatch-group-size-per-virtual-pipeline-stage
    runs_attention = ATTENTION  # what its scripts' --attention-backend auto runs
    # the fused cross-entropy its scripts state (writer.py) and gradient_accumulation_fusion,
    # Megatron-LM's default (closest.wgrad_accum: BF16 under Megatron-FSDP, re-priced so)
    runs_loss = STATED_KERNELS["cross_entropy"][0]  # native
    runs_wgrad = STATED_KERNELS["wgrad_accum"][0]  # fused
    # "throughput per GPU (TFLOP/s/GPU)" is num_floating_point_operations(args, batch) /
    # (elapsed time x 10^12 x world size) (megatron/training/training.py, training_log)
    log_flops = (
        LogFlops(True, "Megatron-LM core_r0.12.0 to core_v0.16.1",
                 "megatron/training/training.py num_floating_point_operations"),
        LogFlops(False, "Megatron-LM before core_r0.12.0",
                 "megatron/training/training.py num_floating_point_operations"),
    )

    def states_kernels(self, model: str | None, shape: ModelShape | None,
                       versions: Versions) -> dict[str, tuple[str, ...]]:
        return dict(STATED_KERNELS)

    def detect(self, data: Any) -> bool:
        return isinstance(data, str) and looks_like_megatron(data)

    def parse(self, text: str, path: Path,
              repeated: list[Repeated] | None = None) -> Any:
        return text

    def read(self, data: Any, ctx: Ctx) -> TrainingConfig:
        return read_megatron(data, ctx)

    def count_settings(self, cfg: TrainingConfig, m: int, count: int,
                       semantics: Semantics | None = None) -> str | None:
        return batch_fix.megatron_settings(cfg, m, count)

    def microbatch_rules(self, cfg: TrainingConfig, m: int, semantics: Semantics,
                         add: Add) -> None:
        rules.microbatch_rules(cfg, m, semantics, add)

    def unsimulated_order(self, cfg: TrainingConfig, m: int, semantics: Semantics
                          ) -> str | None:
        return rules.unsimulated_group(cfg, m, semantics)

    def config_rules(self, cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
        rules.interleave_rule(cfg, semantics, add)
        rules.a2a_overlap_rule(cfg, semantics, add)
        rules.overlap_rule(cfg, semantics, add)
        rules.connections_rule(cfg, semantics, add)

    def memory_fix_clauses(self, cfg: TrainingConfig
                           ) -> tuple[str, str, str | None, str]:
        return advice.memory_fix_clauses(cfg, self.memory_fixes)

    def stateable(self, req: PlanRequest, model: str | None,
                  shape: ModelShape | None = None) -> PlanRequest:
        return stateable_request(req, model)

    def as_run(self, job: Job, plan: Plan, *, substitute: bool = True) -> tuple[Job, Plan]:
        return running.as_run(job, plan, substitute)

    def as_run_saving_s(self, job: Job, spec: PlanSpec) -> float:
        return running.as_run_saving_s(job, spec)

    def run_settings(self, job: Job, plan: Plan) -> dict[str, str]:
        return running.run_settings(job, plan)

    def express(self, job: Job, plan: Plan, rank: int) -> Stated:
        return closest_plan(job, plan, rank)

    def write(self, stated: Stated) -> dict[str, str]:
        return writer.write(stated, stated.detail)

    def log_lines(self, text: str) -> bool:
        return log.detect(text)

    def read_log(self, text: str) -> JobLog | None:
        return log.read(text)


ADAPTER = MegatronAdapter()
