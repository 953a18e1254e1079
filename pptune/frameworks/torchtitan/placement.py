"""How a torchtitan job file states a plan's stages: through the options that make
torchtitan build the split itself when they can, else each stage's modules.

torchtitan 0.2.2 (torchtitan/distributed/pipeline_parallel.py ``pipeline_llm``):
without ``module_fqns_per_model_part`` it builds the stages with
``generate_llm_fqn_per_model_part`` from the stage count (``pp`` x 1 for
single-stage schedules, x 2 for looped ones, or
ceil((layers + first_less + last_less) / ``pipeline_parallel_layers_per_stage``))
and ``pipeline_parallel_first/last_stage_less_layers`` (both 1 by default:
the embedding and the norm + head count as one layer each). torchtitan's main
branch after 0.2.2 keeps the same fields in its Python config (the head module is ``lm_head``
there): writer.py states them in 0.2.2's TOML, writer_main.py as ParallelismConfig's
arguments.
"""

from __future__ import annotations

from pptune.costmodel.partition import strip_ends
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Plan
from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.torchtitan.fqns import torchtitan_fqns, torchtitan_stage_count

DEFAULT_LESS = 1  # pipeline_parallel_first/last_stage_less_layers
MAX_LESS = 8  # the "less layers" tried when matching a split


def stage_options(plan: Plan, mtp: int = 0) -> list[str] | None:
    """The [parallelism] lines that make torchtitan build exactly the plan's split, or
    None when only module_fqns_per_model_part can state it; ``mtp``: the plan's
    multi-token-prediction layers, after its last block, which torchtitan does not build."""
    blocks = strip_ends(plan.stage_layers)
    for i in reversed(range(len(blocks))):  # the MTP layers leave the last stages
        take = min(mtp, blocks[i])
        blocks[i] -= take
        mtp -= take
    layers, n_stages = sum(blocks), len(blocks)
    default = plan.pp * (1 if plan.schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B) else 2)
    for first in range(MAX_LESS + 1):
        for last in range(MAX_LESS + 1):
            if _blocks(n_stages, layers, first, last) != blocks:
                continue
            lines = []
            if n_stages != default:
                per = _layers_per_stage(layers, n_stages, first, last)
                if per is None:
                    continue
                lines.append(f"pipeline_parallel_layers_per_stage = {per}")
            if first != DEFAULT_LESS:
                lines.append(f"pipeline_parallel_first_stage_less_layers = {first}")
            if last != DEFAULT_LESS:
                lines.append(f"pipeline_parallel_last_stage_less_layers = {last}")
            return lines
    return None


def _blocks(n_stages: int, layers: int, first: int, last: int) -> list[int] | None:
    try:
        parts = torchtitan_fqns(n_stages, layers, input_weight=first, output_weight=last)
    except FrameworkRefusal:
        return None
    return [sum(1 for n in part if n.startswith("layers.")) for part in parts]


def _layers_per_stage(layers: int, n_stages: int, first: int, last: int) -> int | None:
    """The pipeline_parallel_layers_per_stage whose stage count is ``n_stages``."""
    effective = layers + first + last
    for per in range(max(1, effective // n_stages), effective + 1):
        count = torchtitan_stage_count(layers, per, first, last)
        if count == n_stages:
            return per
        if count < n_stages:
            return None
    return None
