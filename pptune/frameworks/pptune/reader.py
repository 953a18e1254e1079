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
from pptune.frameworks.common.fields import Ctx, apply_flags, build
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
    return build(ctx, fields)
