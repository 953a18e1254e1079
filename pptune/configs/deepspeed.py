"""DeepSpeed JSON config -> TrainingConfig.

DeepSpeed's batch identity (deepspeed/runtime/config.py,
``_batch_assertion``): ``train_batch_size = train_micro_batch_size_per_gpu
* gradient_accumulation_steps * dp``. A JSON config states at most these
three and the ZeRO stage; the pipeline depth lives in the model code
(``PipelineModule(num_stages=...)``) and the GPU count in the launcher, so
``--pp`` and ``--gpus`` usually supply them. ``"auto"`` (filled in by the
Hugging Face Trainer at run time) is noted and left unset.

DeepSpeed's PipelineEngine runs ``TrainSchedule``, a 1F1B schedule
(deepspeed/runtime/pipe/schedule.py), with gradient_accumulation_steps
micro-batches per step: schedule is always 1f1b.
"""

from __future__ import annotations

from typing import Any

from pptune.configs.fields import MAX_DEVICES, Ctx, apply_flags, build, show, whole
from pptune.schemas import TrainingConfig

DEEPSPEED_KEYS = frozenset(
    {
        "train_batch_size",
        "train_micro_batch_size_per_gpu",
        "gradient_accumulation_steps",
        "zero_optimization",
    }
)

_READ = DEEPSPEED_KEYS | {"pipeline", "pipeline_parallel_size", "bf16", "bfloat16", "fp16",
                          "tensor_parallel", "activation_checkpointing"}


def read_deepspeed(data: dict[str, Any], ctx: Ctx) -> TrainingConfig:
    global_batch = _count_or_auto(ctx, data, "train_batch_size")
    micro = _count_or_auto(ctx, data, "train_micro_batch_size_per_gpu")
    accum = _count_or_auto(ctx, data, "gradient_accumulation_steps")
    zero_stage = _zero_stage(ctx, data.get("zero_optimization"))
    fields: dict[str, Any] = {
        "global_batch": global_batch,
        "grad_accum_steps": accum,
        "zero_stage": zero_stage,
        "sharded_optimizer": zero_stage >= 1,
        "pp": _pipeline_size(ctx, data),
        "partition_method": _partition(data.get("pipeline")),
        "tp": _tensor_size(ctx, data.get("tensor_parallel")),
        "precision": _precision(ctx, data),
        "schedule": "1f1b",
        "source_format": "deepspeed",
    }
    if accum is None and "gradient_accumulation_steps" not in data:
        ctx.note("gradient_accumulation_steps not stated: DeepSpeed derives it as "
                 "train_batch_size / (micro-batch size x dp)")
    apply_flags(ctx, fields, {"pp": "a pipeline size", "gpus": "a GPU count",
                              "tp": "a tensor-parallel size"})
    if fields["pp"] is None:
        ctx.note("pp not stated (DeepSpeed sets it in PipelineModule); assumed 1: pass --pp")
    fields["micro_batch_size"] = micro if micro is not None else _derive_micro(ctx, fields, data)
    if "activation_checkpointing" in data:
        ctx.note("activation_checkpointing takes effect only where the model code calls "
                 "deepspeed.checkpointing; recompute left unset")
    ignored = sorted(str(k) for k in data if k not in _READ)
    if ignored:
        shown = ", ".join(ignored[:8]) + (f" and {len(ignored) - 8} more" if len(ignored) > 8 else "")
        ctx.note(f"ignored keys: {shown}")
    return build(ctx, fields)


def _count_or_auto(ctx: Ctx, data: dict[str, Any], key: str) -> int | None:
    if key not in data:
        return None
    value = data[key]
    if value == "auto":
        ctx.note(f"{key} is \"auto\" (set by the Hugging Face Trainer at run time); left unset")
        return None
    return whole(ctx, key, value, fix=f"set {key} to a positive integer or \"auto\"")


def _zero_stage(ctx: Ctx, section: Any) -> int:
    if section is None:
        return 0
    if not isinstance(section, dict):
        raise ctx.bad(f"zero_optimization is {show(section)}; expected a mapping such as "
                      "{\"stage\": 1}")
    stage = section.get("stage", 0)
    if stage == "auto":
        ctx.note("zero_optimization.stage is \"auto\"; assumed 0 (no sharding)")
        return 0
    return whole(ctx, "zero_optimization.stage", stage, minimum=0, maximum=3,
                 fix="ZeRO stages are 0, 1, 2 or 3")


def _pipeline_size(ctx: Ctx, data: dict[str, Any]) -> int | None:
    sizes: dict[str, int] = {}
    section = data.get("pipeline")
    if section is not None and not isinstance(section, dict):
        raise ctx.bad(f"pipeline is {show(section)}; expected a mapping such as "
                      "{\"stages\": 4}")
    if isinstance(section, dict):
        stages = section.get("stages")
        if stages == "auto":
            ctx.note("pipeline.stages is \"auto\" (taken from PipelineModule at run time)")
        elif stages is not None:
            sizes["pipeline.stages"] = whole(ctx, "pipeline.stages", stages, maximum=MAX_DEVICES)
        partition = section.get("partition")
        if partition is not None and not isinstance(partition, str):
            raise ctx.bad(f"pipeline.partition is {show(partition)}; expected a method name "
                          "such as \"parameters\" or \"uniform\"")
    if "pipeline_parallel_size" in data:
        sizes["pipeline_parallel_size"] = whole(
            ctx, "pipeline_parallel_size", data["pipeline_parallel_size"], maximum=MAX_DEVICES
        )
    if len(set(sizes.values())) > 1:
        ctx.note(f"pipeline.stages {sizes['pipeline.stages']} and pipeline_parallel_size "
                 f"{sizes['pipeline_parallel_size']} disagree; used pipeline.stages")
    return sizes.get("pipeline.stages", sizes.get("pipeline_parallel_size"))


def _partition(section: Any) -> str | None:
    """DeepSpeed's PipelineModule partition method, when the config states one
    ("best" is DeepSpeed's placeholder default, the same as not stating it)."""
    if not isinstance(section, dict):
        return None
    method = section.get("partition")
    return method[:200] if isinstance(method, str) and method != "best" else None


def _tensor_size(ctx: Ctx, section: Any) -> int | None:
    """DeepSpeed AutoTP (``"tensor_parallel": {"autotp_size": N}``), when present."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise ctx.bad(f"tensor_parallel is {show(section)}; expected a mapping such as "
                      "{\"autotp_size\": 2}")
    for key in ("autotp_size", "tp_size"):
        if key in section:
            return whole(ctx, f"tensor_parallel.{key}", section[key], maximum=MAX_DEVICES)
    return None


def _precision(ctx: Ctx, data: dict[str, Any]) -> str | None:
    enabled: dict[str, bool] = {}
    for key, name in (("bf16", "bf16"), ("bfloat16", "bf16"), ("fp16", "fp16")):
        section = data.get(key)
        if section is None:
            continue
        if not isinstance(section, dict):
            raise ctx.bad(f"{key} is {show(section)}; expected a mapping such as "
                          "{\"enabled\": true}")
        flag = section.get("enabled", False)
        if flag == "auto":
            ctx.note(f"{key}.enabled is \"auto\"; precision left unset")
            return None
        if not isinstance(flag, bool):
            raise ctx.bad(f"{key}.enabled is {show(flag)}; expected true, false or \"auto\"")
        enabled[name] = enabled.get(name, False) or flag
    on = [name for name, flag in enabled.items() if flag]
    if len(on) > 1:
        ctx.note("both bf16 and fp16 are enabled (DeepSpeed refuses this); precision left unset")
        return None
    if on:
        return on[0]
    return "fp32" if enabled else None


def _derive_micro(ctx: Ctx, fields: dict[str, Any], data: dict[str, Any]) -> int:
    """DeepSpeed's own rule when only the batch and GA are given:
    micro = train_batch_size / (gradient_accumulation_steps * dp)."""
    batch, accum, gpus = fields["global_batch"], fields["grad_accum_steps"], fields.get("gpus")
    model_parallel = (fields["pp"] or 1) * (fields["tp"] or 1)
    if batch is not None and accum is not None and gpus is not None and gpus % model_parallel == 0:
        dp = gpus // model_parallel
        if batch % (accum * dp) == 0:
            micro: int = batch // (accum * dp)
            ctx.note(f"micro-batch size {micro} derived as DeepSpeed does: train_batch_size "
                     f"{batch} / (gradient_accumulation_steps {accum} x dp {dp})")
            return micro
    found = show(data["train_micro_batch_size_per_gpu"]) if (
        "train_micro_batch_size_per_gpu" in data) else "missing"
    raise ctx.bad(
        f"train_micro_batch_size_per_gpu is {found} and cannot be derived exactly from "
        f"train_batch_size, gradient_accumulation_steps and --gpus; set "
        "train_micro_batch_size_per_gpu to a number"
    )
