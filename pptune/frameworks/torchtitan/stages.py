"""torchtitan's pipeline keys -> schedule, stages per rank and layer split.

Rules of torchtitan 0.2.2 (torchtitan/distributed/pipeline_parallel.py:
pipeline_llm, generate_llm_fqn_per_model_part, pipeline_module_split) and of
torch's schedule classes; what they refuse becomes an error finding through
``ctx.refuse``, what pptune cannot model a warning through ``ctx.unmodelled``.

InterleavedZeroBubble is a multi-stage schedule in torchtitan (pipeline_llm, 0.2.2
pipeline_parallel.py:104-115: two stages per rank by default, at least two from
``pipeline_parallel_layers_per_stage``), torch's ZB-1P order over those stages. pptune's
simulator has no interleaved zero-bubble schedule (its zb-h1 runs one stage per rank), so
it is priced as interleaved-1f1b over the stages torchtitan builds, with a warning: the
layout, the stage split and the memory of each stage are torchtitan's; the bubble that the
split backward fills is counted, so the step is an upper bound.
"""

from __future__ import annotations

import re
from itertools import pairwise
from typing import Any

from pptune.costmodel.schedules import SPLIT_BACKWARD, Schedule
from pptune.frameworks.common.fields import Ctx, show
from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.torchtitan.fqns import (
    TORCHTITAN,
    head,
    torchtitan_fqns,
    torchtitan_stage_count,
)
from pptune.frameworks.torchtitan.table import Table

# torch.distributed.pipelining's names (matched case-insensitively, as
# torch's get_schedule_class does) -> (pptune schedule, chunks per device)
SCHEDULES: dict[str, tuple[str, int | None]] = {
    "1f1b": ("1f1b", 1),
    "gpipe": ("gpipe", 1),
    "interleaved1f1b": ("interleaved-1f1b", None),  # None: 2 or from layers_per_stage
    "interleavedzerobubble": ("interleaved-1f1b", None),  # priced so (module doc)
    "zbvzerobubble": ("zbv", 2),
    "dualpipev": ("dualpipev", 2),
}
SUPPORTED = ("1F1B, GPipe, Interleaved1F1B, InterleavedZeroBubble (as interleaved-1f1b), "
             "ZBVZeroBubble, DualPipeV")
ZERO_BUBBLE_LOOPED = "interleavedzerobubble"  # torch's ScheduleInterleavedZeroBubble
# torch schedules pptune cannot model, and the schedule it predicts them with
UNMODELLED = {"loopedbfs": ("interleaved-1f1b", None),
              # the base class of the looped schedules, which runs the order a CSV gives
              # it (pipeline_parallel_schedule_csv) and none without one
              "pipelineschedulemulti": ("interleaved-1f1b", None)}


def schedule(ctx: Ctx, par: Table, pp: int, layers: int | None) -> dict[str, Any]:
    name = par.text("pipeline_parallel_schedule", "1F1B") or "1F1B"
    if pp == 1:
        if par.has("pipeline_parallel_schedule"):
            ctx.note(f"pipeline_parallel_degree is 1: torchtitan ignores "
                     f"pipeline_parallel_schedule {name}")
        return {"schedule": "1f1b", "virtual_stages": 1}
    csv = par.text("pipeline_parallel_schedule_csv", "") or None
    mapped = SCHEDULES.get(name.lower())
    if csv:  # pipeline_parallel.py build_pipeline_schedule: the name is not used then
        mapped = mapped or ("interleaved-1f1b", None)
        ctx.unmodelled("torchtitan-unmodelled",
                       f"pipeline_parallel_schedule_csv {csv[:60]}: torchtitan runs the file's "
                       "schedule (torch's _PipelineScheduleRuntime; pipeline_parallel_schedule "
                       f"{name[:40]} is not used), which pptune does not model; predictions "
                       f"use {mapped[0]}")
    elif name.lower() == "pipelineschedulesingle":  # torch's name of an abstract class
        raises = ("torchtitan raises 'PipelineScheduleSingle is an abstract base class. Use "
                  "a concrete single-stage schedule such as GPipe or 1F1B.' (torchtitan/"
                  "distributed/pipeline_parallel.py)" if ctx.semantics.versions.at_least(
                      TORCHTITAN, 0, 3) else "Python raises \"Can't instantiate abstract "
                  "class PipelineScheduleSingle\" (torch's _step_microbatches is abstract; "
                  "torchtitan/distributed/pipeline_parallel.py build_pipeline_schedule)")
        ctx.refuse("torchtitan-schedule", "parallelism.pipeline_parallel_schedule "
                   f"'PipelineScheduleSingle': {raises}; use one of {SUPPORTED}")
        return {"schedule": "1f1b", "virtual_stages": 1}
    if mapped is None and name.lower() in UNMODELLED:
        mapped = UNMODELLED[name.lower()]
        ctx.unmodelled("torchtitan-unmodelled",
                       f"pipeline_parallel_schedule {name} is not modelled; predictions use "
                       f"{mapped[0]}")
    if mapped is None:
        ctx.refuse("torchtitan-schedule",
                   f"parallelism.pipeline_parallel_schedule {name[:40]!r}: torch's "
                   f"get_schedule_class raises \"Unknown schedule name '{name[:40]}'. The "
                   "valid options are [...]\" "
                   "(torch/distributed/pipelining/schedules.py); use one of "
                   f"{SUPPORTED}")
        return {"schedule": "1f1b", "virtual_stages": 1}
    schedule, chunks = mapped
    if name.lower() == ZERO_BUBBLE_LOOPED:
        ctx.unmodelled("torchtitan-unmodelled",
                       "pipeline_parallel_schedule InterleavedZeroBubble: pptune has no "
                       "interleaved zero-bubble schedule; priced as interleaved-1f1b over the "
                       "stages per rank torchtitan builds (pipeline_llm): the split backward's "
                       "filling of the bubble is not counted, so the bubble and step are upper "
                       "bounds, and the activations held until each deferred weight gradient "
                       "are not (docs/limits.md)")
    split = _explicit_split(ctx, par, layers)
    if split is not None:
        return _with_split(ctx, name, schedule, chunks, pp, split)
    per_stage = par.count("pipeline_parallel_layers_per_stage", None)
    if per_stage is None or layers is None:
        if per_stage is not None:
            ctx.note("pipeline_parallel_layers_per_stage needs the model's layer count; stages "
                     "per rank assumed torchtitan's default")
        if chunks is None:
            ctx.note("virtual stages 2 per device: torchtitan's default for looped schedules")
        return {"schedule": schedule, "virtual_stages": chunks or 2}
    stages = _stage_count(par, layers, per_stage)
    single = chunks == 1
    if stages % pp:
        ctx.refuse("torchtitan-stage-count",
                   f"pipeline_parallel_layers_per_stage {per_stage} gives {stages} stages for "
                   f"{layers} layers: torchtitan raises 'Number of virtual stages ({stages}) must "
                   f"be divisible by pipeline parallel size ({pp})' (torchtitan/distributed/"
                   "pipeline_parallel.py pipeline_llm); change pipeline_parallel_layers_per_stage")
    elif single and stages != pp:
        ctx.refuse("torchtitan-stage-count",
                   f"pipeline_parallel_layers_per_stage {per_stage} gives {stages // pp} stages "
                   f"per rank: torchtitan raises 'Single stage schedule requires exactly 1 stage "
                   f"per rank' for {name} (pipeline_llm); change pipeline_parallel_layers_per_stage")
    elif not single and stages // pp < 2:
        ctx.refuse("torchtitan-stage-count",
                   f"pipeline_parallel_layers_per_stage {per_stage} gives 1 stage per rank: "
                   f"torchtitan raises 'Multi-stage schedule requires at least 2 stages per "
                   f"rank' for {name} (pipeline_llm); change pipeline_parallel_layers_per_stage")
    elif chunks is not None and stages // pp != chunks:
        ctx.refuse("torchtitan-stage-count",
                   f"{name} runs exactly {chunks} stages per rank but "
                   f"pipeline_parallel_layers_per_stage {per_stage} gives {stages // pp} "
                   "(torch: 'ZBV requires exactly 2 stages per rank'); change it")
    else:
        return {"schedule": schedule, "virtual_stages": stages // pp}
    return {"schedule": schedule, "virtual_stages": chunks or 2}


_BLOCK = re.compile(r"layers\.([0-9]{1,9})")


def _explicit_split(ctx: Ctx, par: Table, layers: int | None) -> list[int] | None:
    """Transformer blocks per stage from module_fqns_per_model_part or split points.

    module_fqns_per_model_part lists each stage's modules ("tok_embeddings",
    "layers.0", ..., "output"); only "layers.N" count as blocks. The older
    pipeline_parallel_split_points ("layers.8", ...) start a new stage at
    each named block.
    """
    parts = par.data.get("module_fqns_per_model_part")
    if parts is not None:
        if not (isinstance(parts, list) and parts and all(
                isinstance(part, list) and all(isinstance(n, str) for n in part)
                for part in parts)):
            raise ctx.bad(f"parallelism.module_fqns_per_model_part is {show(parts)}; expected "
                          'a list of lists of module names, e.g. [["tok_embeddings", "layers.0"]]')
        _check_modules(ctx, parts)
        return [sum(1 for n in part if _BLOCK.fullmatch(n)) for part in parts]
    points = par.data.get("pipeline_parallel_split_points")
    if not points:
        return None
    names = points.split(",") if isinstance(points, str) else points
    starts = [_BLOCK.fullmatch(n.strip()) if isinstance(n, str) else None
              for n in (names if isinstance(names, list) else [None])]
    if None in starts:
        raise ctx.bad(f"parallelism.pipeline_parallel_split_points is {show(points)}; expected "
                      'block names such as ["layers.8", "layers.16"]')
    if layers is None:
        ctx.note("pipeline_parallel_split_points need the model's layer count; stage split "
                 "left to pptune")
        return None
    bounds = [0] + [int(m.group(1)) for m in starts if m] + [layers]
    if any(b < a for a, b in pairwise(bounds)):
        raise ctx.bad(f"parallelism.pipeline_parallel_split_points {show(points)} must be "
                      f"increasing block indices below {layers}")
    return [b - a for a, b in pairwise(bounds)]


def default_split(ctx: Ctx, par: Table, fields: dict[str, Any], layers: int | None) -> None:
    """Without module_fqns_per_model_part torchtitan splits with
    generate_llm_fqn_per_model_part: the embedding and the norm+head count as
    first/last_stage_less_layers layers and the first stages take the extra ones."""
    pp = fields["pp"] or 1
    if layers is None or pp == 1 or "stage_layers" in fields:
        return
    stages = pp * (fields["virtual_stages"] or 1)
    first = par.count("pipeline_parallel_first_stage_less_layers", 1, minimum=0) or 0
    last = par.count("pipeline_parallel_last_stage_less_layers", 1, minimum=0) or 0
    try:
        parts = torchtitan_fqns(stages, layers, input_weight=first, output_weight=last,
                                main=ctx.semantics.versions.at_least(TORCHTITAN, 0, 3))
    except FrameworkRefusal as exc:
        ctx.refuse(exc.rule_id, str(exc))
        return
    fields["stage_layers"] = [sum(1 for n in part if _BLOCK.fullmatch(n)) for part in parts]


def _check_modules(ctx: Ctx, parts: list[list[str]]) -> None:
    """Every top-level module must sit on some stage: pipeline_module_split keeps
    only the named modules, so a misspelt or other-version name drops a module.
    The LM head is ``output`` up to torchtitan 0.2.2 and ``lm_head`` on its main branch
    after it (``--framework-version torchtitan=0.3.0``; unreleased)
    (torchtitan/distributed/pipeline_parallel.py generate_llm_fqn_per_model_part)."""
    versions = ctx.semantics.versions
    names = {n for part in parts for n in part}
    for module in ("tok_embeddings", "norm", head(versions)):
        if module in names:
            continue
        other = {"output": "lm_head", "lm_head": "output"}.get(module)
        hint = (f" ('{other}' is the head's name in torchtitan "
                f"{'main after 0.2.2 (0.3.0)' if other == 'lm_head' else '0.2.2 and earlier'})"
                if other in names else "")
        ctx.refuse("torchtitan-module-missing",
                   f"module_fqns_per_model_part places no '{module}' on any stage{hint}: "
                   f"torchtitan {versions.of(TORCHTITAN)}'s pipeline_module_split keeps only the "
                   "named modules, so that module would be dropped; name it in the first "
                   "(embedding) or last (norm, head) part")


def _with_split(ctx: Ctx, name: str, schedule: str, chunks: int | None, pp: int,
                split: list[int]) -> dict[str, Any]:
    """Schedule fields when the file fixes the stages: their count sets the chunks
    (torchtitan pipeline_module_split: 'num_stages must be evenly divisible by pp_degree')."""
    fallback = {"schedule": schedule, "virtual_stages": chunks or 2}
    if len(split) % pp:
        ctx.refuse("torchtitan-stage-count",
                   f"the config's stage split has {len(split)} stages, not a multiple of pp {pp}: "
                   f"torchtitan asserts 'num_stages {len(split)} must be evenly divisible by "
                   f"pp_degree {pp}' (pipeline_module_split); give pp x chunks stages")
        return fallback
    per_rank = len(split) // pp
    wanted = chunks if chunks is not None else max(per_rank, 2)
    if per_rank != wanted:
        kind = "Single" if wanted == 1 else "Multi"
        ctx.refuse("torchtitan-stage-count",
                   f"the config's stage split has {per_rank} stages per rank, but {name} runs "
                   f"{wanted}: torchtitan raises '{kind}-stage schedule requires ...' "
                   "(pipeline_llm); change the split")
        return fallback
    return {"schedule": schedule, "virtual_stages": per_rank, "stage_layers": split}


def _stage_count(par: Table, layers: int, per_stage: int) -> int:
    first = par.count("pipeline_parallel_first_stage_less_layers", 1, minimum=0) or 0
    last = par.count("pipeline_parallel_last_stage_less_layers", 1, minimum=0) or 0
    return torchtitan_stage_count(layers, per_stage, first, last)


def split_backward_name(par: Table, schedule: str) -> str | None:
    """The file's schedule name where torch runs it with a split backward (B and W):
    pptune's split-backward schedules, and InterleavedZeroBubble, priced as
    interleaved-1f1b (module doc); None otherwise."""
    name = par.text("pipeline_parallel_schedule", "1F1B") or "1F1B"
    return name if Schedule(schedule) in SPLIT_BACKWARD or (
        name.lower() == ZERO_BUBBLE_LOOPED) else None
