"""pptune's own config: a YAML, TOML or JSON mapping of TrainingConfig's fields.

Example (YAML)::

    gpus: 8
    pp: 4
    schedule: 1f1b
    micro_batch_size: 1
    global_batch: 64
    model: llama3-8b
    gpu: h100-sxm
    limits: {max_bubble: 0.2}

Unknown keys are errors (with the closest known name), so a typo never
turns into a silently ignored setting.
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.precision import Fp8Recipe
from pptune.costmodel.schedules import OVERLAPPED
from pptune.frameworks.common.fields import Ctx, apply_flags, build
from pptune.frameworks.common.planned import held_note
from pptune.schemas import TrainingConfig

FP8_RECIPES = (*(r.value for r in Fp8Recipe), "mxfp8")  # what --emit pptune writes


def read_own(data: dict[Any, Any], ctx: Ctx) -> TrainingConfig:
    fields: dict[Any, Any] = dict(data)
    stated_format = fields.pop("source_format", None)
    if stated_format not in (None, "pptune"):
        ctx.note(f"source_format {stated_format!r} in the file ignored: read as pptune's format")
    if "micro_batch_size" not in fields:
        raise ctx.bad(
            "micro_batch_size is missing; expected the samples per micro-batch, "
            "e.g. micro_batch_size: 1"
        )
    recipe = fields.get("fp8_recipe")
    if recipe is not None and recipe not in FP8_RECIPES:
        raise ctx.bad(f"fp8_recipe {str(recipe)[:40]!r}: pptune's format takes "
                      f"{', '.join(FP8_RECIPES)}")
    apply_flags(ctx, fields, {"pp": "pp", "gpus": "gpus", "tp": "tp"})
    fields["source_format"] = "pptune"
    config = build(ctx, fields)
    unstated_notes(ctx, config, fields)
    if config.limits.held:
        ctx.note(held_note(config.limits.held, "its limits.held"))
    return config


def unstated_notes(ctx: Ctx, config: TrainingConfig, fields: dict[Any, Any]) -> None:
    """One note for each key left out that recommend's plans set: both default off
    (TrainingConfig, a contract), where recommend splits the sequence over tp
    (--sequence-parallel's default, options/groups.py) and hides the expert all-to-all
    behind the DualPipes' F&B pairs unless the plan recomputes
    (costmodel/candidates.py a2a_overlaps); and a pipeline without stage_layers is priced
    on the even split of blocks (check/split.py) where recommend balances the stages.
    ``recommend --emit pptune`` writes all three."""
    if config.tp > 1 and fields.get("sequence_parallel") is None:
        ctx.note(f"tp {config.tp} priced without sequence parallelism: the file does not "
                 "state sequence_parallel (default false), where recommend's plans split "
                 "the sequence over tp; set sequence_parallel: true to price it as they do")
    if (config.schedule in OVERLAPPED and config.ep > 1 and config.a2a_overlap is None
            and config.recompute in (None, "none")):
        ctx.note(f"{config.schedule.value} priced with the expert all-to-all exposed: the "
                 "file does not state a2a_overlap (default off), where recommend's "
                 f"{config.schedule.value} plans hide it behind another micro-batch's "
                 "compute; set a2a_overlap: true to price it as they do")
    if (config.pp > 1 and config.stage_layers is None and config.pipeline_layout is None
            and config.partition_method is None):
        ctx.note(f"pp {config.pp} priced on an even split of the blocks: the file does not "
                 "state stage_layers, where recommend's plans balance the stages around "
                 "the embedding and the head; set stage_layers: [...], as recommend --emit "
                 "writes it, to price it as they do")
