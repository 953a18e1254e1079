"""``--pipeline-model-parallel-layout``: a Megatron-LM script's stages, read as
megatron-core 0.16.1 reads them, and written back for ``--emit megatron``.

Reading (``read_layout``) follows Megatron-LM core_r0.16: validate_args
(megatron/training/arguments.py) counts the layout's stages, asserts they are
a multiple of pp and derives the virtual stages from them (so neither
``--num-virtual-stages-per-pipeline-rank`` nor the layer-divisibility rule
applies); TransformerConfig.__post_init__
(megatron/core/transformer/transformer_config.py) refuses the layout beside
``--decoder-first/last-pipeline-num-layers`` or the account-for flags, then
``PipelineParallelLayerLayout.validate_layer_layout`` checks E first, L last,
the layer and MTP counts and the MTP stage (``costmodel/layout_grammar.py``
re-states those rules).

Which failures are which exit code: a string pptune cannot read as stages
(an unknown symbol, unbalanced or nested parentheses, a misplaced digit, a
count of 0 that megatron-core would silently drop) is bad input, exit 2, as
an unparseable value of any flag is: Megatron-LM's own parser asserts on the
same strings before any model exists ("Invalid layer character"), and no
prediction can be made. A string that reads as stages but breaks a rule of
the run (stage count against pp, layer counts against --num-layers /
--mtp-num-layers, E / L / m placement) is the framework refusing the run, an
error finding (exit 1) beside the others, as every other Megatron-LM rule is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pptune.costmodel.layout_grammar import (
    KNOB,
    LayerKind,
    LayoutError,
    Stage,
    expand,
    parse_layout,
    write_layout,
)
from pptune.costmodel.partition import is_mtp, stage_bounds
from pptune.frameworks.megatron.flags import FlagReader
from pptune.frameworks.megatron.knobs import with_knobs

CONFLICTS = ("--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
             "--account-for-embedding-in-pipeline-split",
             "--account-for-loss-in-pipeline-split")
_RULES = ("megatron-core PipelineParallelLayerLayout.validate_layer_layout, "
          "megatron/core/transformer/pipeline_parallel_layer_layout.py")


def read_layout(r: FlagReader, fields: dict[str, Any]) -> bool:
    """Stages, virtual stages and schedule from the layout flag into ``fields``;
    False when the script gives none (the other pipeline flags decide)."""
    ctx, flags = r.ctx, r.flags
    if not flags.has(KNOB):
        return False
    text = r.text(KNOB)
    fields["schedule"], fields["virtual_stages"] = "1f1b", None
    if text is None:  # an unresolved shell reference: noted by r.text
        ctx.unmodelled("megatron-layout-unresolved",
                       f"{KNOB} is not a string pptune can resolve without running the script; "
                       "predictions use an even split")
        return True
    try:
        stage_count = len(expand(text))
    except LayoutError as exc:
        megatron = "reads it as meant" if exc.megatron_reads else "refuses or misreads it"
        raise ctx.bad(f"{exc}; megatron-core's parse_str_to_list {megatron} "
                      "(megatron/core/transformer/pipeline_parallel_layer_layout.py)") from None
    conflicts = [n for n in CONFLICTS if flags.has(n)]
    if conflicts:
        ctx.refuse("megatron-layout-conflict",
                   f"{KNOB} with {' and '.join(conflicts)}: megatron-core TransformerConfig "
                   "raises 'pipeline_model_parallel_layout cannot be set with other pipeline "
                   "layout arguments' (transformer_config.py); keep the layout alone")
    pp = fields["pp"] or 1
    try:
        layout = parse_layout(text, pp, num_layers=fields["num_layers"],
                              mtp_layers=fields.get("mtp_layers") or 0)
    except LayoutError as exc:
        ctx.refuse("megatron-layout", f"{exc} ({_where(exc)}); change the layout, "
                   "--pipeline-model-parallel-size, --num-layers or --mtp-num-layers")
        # validate_args derives the virtual stages from the stage count alone, before
        # TransformerConfig validates the layout: known where pp divides it, else it stops
        if stage_count % pp:
            with_knobs(ctx, virtual_unknown=True)
        elif stage_count // pp > 1:
            fields["schedule"], fields["virtual_stages"] = "interleaved-1f1b", stage_count // pp
        return True
    if layout.vp > 1:
        fields["schedule"], fields["virtual_stages"] = "interleaved-1f1b", layout.vp
    fields["stage_layers"] = layout.layers_per_stage()
    fields["pipeline_layout"] = text
    return True


def _where(exc: LayoutError) -> str:
    if "stages where" in exc.problem:
        return ("Megatron-LM validate_args: 'The length of pipeline_model_parallel_layout must "
                "be divisible by pipeline_model_parallel_size'")
    return _RULES


def layout_stages(names: Sequence[str], stage_layers: Sequence[int]) -> tuple[Stage, ...]:
    """A split of the cost table's layers (embedding, blocks, MTP layers, head) as
    layout stages: E, t, m and L in the table's order."""
    kinds = [_kind(n, i, len(names)) for i, n in enumerate(names)]
    return tuple(tuple(kinds[s:e]) for s, e in stage_bounds(stage_layers))


def _kind(name: str, i: int, n: int) -> LayerKind:
    if i == 0:
        return LayerKind.EMBEDDING
    if i == n - 1:
        return LayerKind.LOSS
    return LayerKind.MTP if is_mtp(name) else LayerKind.DECODER


def plan_layout(names: Sequence[str], stage_layers: Sequence[int], pp: int) -> str | None:
    """The layout string of a plan's split, when megatron-core accepts it (its MTP
    rules may not: every MTP layer in one stage, the last virtual stage of its rank)."""
    stages = layout_stages(names, stage_layers)
    text = write_layout(stages)
    counts = [sum(k is kind for s in stages for k in s)
              for kind in (LayerKind.DECODER, LayerKind.MTP)]
    try:
        parse_layout(text, pp, len(stages) // pp, num_layers=counts[0], mtp_layers=counts[1])
    except LayoutError:
        return None
    return text
