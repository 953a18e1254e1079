"""A DeepSpeed config's ``pipeline`` section: the stage count, partition method and
checkpoint interval as the file states them.

DeepSpeed 0.19.8's ``get_pipeline_config`` (deepspeed/runtime/config.py) copies the
section over its defaults (``"stages": "auto"``, ``"partition": "best"``,
``"seed_layers": false``, ``"activation_checkpoint_interval": 0``, ...). The
PipelineEngine (deepspeed/runtime/pipe/engine.py) reads the checkpoint interval,
``pipe_partitioned``, ``grad_partitioned`` and ``use_reentrant``; no DeepSpeed code reads
``stages`` or ``partition``: the model code's ``PipelineModule(num_stages=...,
partition_method=...)`` (deepspeed/runtime/pipe/module.py) decides both. pptune reads them
as the values the model code passes (``recommend --emit deepspeed`` writes both and says
so in ds_partition.txt); a file that leaves the stage count to the model code is checked
at an assumed size, with a ``pp-assumed`` warning.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import CAPS, Ctx, show, whole

PP_ASSUMED = "pp-assumed"


def pipeline_size(ctx: Ctx, data: dict[str, Any]) -> int | None:
    """``pipeline.stages`` (or ``pipeline_parallel_size``); None: not stated, or "auto"."""
    sizes: dict[str, int] = {}
    section = data.get("pipeline")
    if section is not None and not isinstance(section, dict):
        raise ctx.bad(f"pipeline is {show(section)}; expected a mapping such as "
                      "{\"stages\": 4}")
    if isinstance(section, dict):
        stages = section.get("stages")
        if stages is not None and stages != "auto":  # "auto": assumed_pp says so
            sizes["pipeline.stages"] = whole(ctx, "pipeline.stages", stages, cap=CAPS["pp"])
        partition = section.get("partition")
        if partition is not None and not isinstance(partition, str):
            raise ctx.bad(f"pipeline.partition is {show(partition)}; expected a method name "
                          "such as \"parameters\" or \"uniform\"")
    if "pipeline_parallel_size" in data:
        sizes["pipeline_parallel_size"] = whole(
            ctx, "pipeline_parallel_size", data["pipeline_parallel_size"], cap=CAPS["pp"]
        )
    if len(set(sizes.values())) > 1:
        ctx.note(f"pipeline.stages {sizes['pipeline.stages']} and pipeline_parallel_size "
                 f"{sizes['pipeline_parallel_size']} disagree; used pipeline.stages")
    return sizes.get("pipeline.stages", sizes.get("pipeline_parallel_size"))


def assumed_pp(ctx: Ctx, data: dict[str, Any]) -> None:
    """What a file that states no pipeline size (and no --pp) is checked at: pp=1. With a
    pipeline section (a PipelineEngine's settings) the model code sizes a pipeline pptune
    cannot see: a warning, as check-config's ``dp-assumed``; without one, a note."""
    section = data.get("pipeline")
    if not isinstance(section, dict):
        ctx.note("pp not stated (DeepSpeed sets it in PipelineModule); assumed 1: pass --pp")
        return
    said = ("pipeline.stages is \"auto\" (PipelineModule's num_stages sets it at run time)"
            if "stages" in section else "the pipeline section states no stages (DeepSpeed's "
            "default \"auto\": PipelineModule's num_stages sets it at run time)")
    ctx.unmodelled(PP_ASSUMED, f"{said} and no --pp: checked at pp=1, assumed; pass --pp N "
                   "to check the pipeline that runs")


def partition(ctx: Ctx, section: Any) -> str:
    """The partition method the model code passes to PipelineModule (deepspeed/runtime/pipe/
    module.py ``_partition_layers``), as ``pipeline.partition`` states it: "parameters"
    (PipelineModule's default) where it is absent or DeepSpeed's unread default "best";
    "uniform" and "type:REGEX" as stated; anything else raises NotImplementedError in
    DeepSpeed."""
    method = section.get("partition") if isinstance(section, dict) else None
    if isinstance(method, str) and method.lower() == "best":
        ctx.note(f"pipeline.partition \"{method}\" is get_pipeline_config's default for the "
                 "key (deepspeed/runtime/config.py), and no DeepSpeed code reads it: "
                 "PipelineModule's partition_method argument splits the layers "
                 "(deepspeed/runtime/pipe/module.py, default \"parameters\"); priced as "
                 "\"parameters\" (balanced parameter counts): state \"parameters\" or "
                 "\"uniform\" as the model code passes it")
        return "parameters"
    if not isinstance(method, str):
        if isinstance(section, dict):  # a pipeline section that leaves it to the default
            ctx.note("pipeline partition not stated: PipelineModule's default "
                     "partition_method=\"parameters\" (balanced parameter counts)")
        return "parameters"
    lower = method.lower()
    if lower.startswith("type:"):
        ctx.unmodelled("deepspeed-partition-type",
                       f"pipeline.partition {method[:60]!r} balances layers by class name, which "
                       "pptune cannot see; predictions use an even split")
    elif lower not in ("uniform", "parameters"):
        ctx.refuse("deepspeed-partition-method",
                   f"pipeline.partition {method[:60]!r}: DeepSpeed's PipelineModule raises "
                   "NotImplementedError('Partitioning method ... not implemented') "
                   "(deepspeed/runtime/pipe/module.py _partition_layers); use \"parameters\", "
                   "\"uniform\" or \"type:REGEX\"")
    return method[:200]


def recompute(ctx: Ctx, data: dict[str, Any], pp: int | None) -> tuple[str, int | None]:
    """(recompute, group): full when PipelineModule checkpoints each run of N layer specs
    of a stage as one (pipeline.activation_checkpoint_interval N > 0, default 0;
    deepspeed/runtime/pipe/module.py forward), or when ``"pptune": {"recompute": "full"}``
    says the model code checkpoints (``--emit deepspeed`` without a pipeline: only the
    PipelineEngine reads the interval, deepspeed/runtime/pipe/engine.py)."""
    section = data.get("pipeline")
    interval = section.get("activation_checkpoint_interval", 0) if isinstance(section, dict) else 0
    interval = whole(ctx, "pipeline.activation_checkpoint_interval", interval, minimum=0)
    ours = data.get("pptune")
    said = ours.get("recompute") if isinstance(ours, dict) else None
    if said is not None:
        if said not in ("full", "none"):
            raise ctx.bad(f"pptune.recompute is {show(said)}; expected \"full\" (the model "
                          "code checkpoints every block) or \"none\"")
        return str(said), None
    if interval and pp == 1:
        ctx.note("pipeline.activation_checkpoint_interval is read by DeepSpeed's "
                 "PipelineEngine only (a PipelineModule, here of one stage); a model given to "
                 "deepspeed.initialize whole checkpoints in its own code")
    if "activation_checkpointing" in data and not interval:
        ctx.note("activation_checkpointing takes effect only where the model code calls "
                 "deepspeed.checkpointing; recompute read as none")
    group = interval if interval > 1 and pp != 1 else None
    if group:
        ctx.note(f"pipeline.activation_checkpoint_interval {interval}: each run of {interval} "
                 "transformer blocks of a stage checkpointed as one (DeepSpeed counts its "
                 "layer specs, the first stage's embedding among them; pptune counts blocks)")
    return ("full" if interval else "none"), group
