"""The split check-config predicts: the cost table's layers per stage, and the blocks
each stage recomputes, from what the config states."""

from __future__ import annotations

from typing import Any

from pptune.check.framework import framework_split
from pptune.costmodel.keys import CostKey
from pptune.costmodel.layout_grammar import LayoutError, parse_layout
from pptune.costmodel.partition import add_ends, even_split, mtp_count
from pptune.costmodel.search import CostTable
from pptune.costmodel.stage_recompute import stage_blocks
from pptune.costmodel.table import built_params
from pptune.schemas import TrainingConfig


def table_split(cfg: TrainingConfig, table: CostTable, n_stages: int,
                key: CostKey | None = None) -> list[int]:
    """The cost table's layers per stage: a stated layout's stages as they stand;
    else blocks per stage (stated, the framework's own such as DeepSpeed's
    partition_method, or even), plus the embedding on the first stage and the
    head and any MTP layers on the last (where megatron-core builds them:
    multi_token_prediction.py ``get_mtp_num_layers_to_build``). A framework's
    split by parameters counts each layer's parameters as built on a rank of
    ``key``'s layout (expert layers over ep x etp)."""
    if cfg.pipeline_layout is not None:
        return [len(stage) for stage in parse_layout(cfg.pipeline_layout, cfg.pp).stages]
    blocks, mtp = table_blocks(table)
    if cfg.stage_layers is None and not mtp:
        k = key or CostKey(tp=cfg.tp)
        split = framework_split(cfg, built_params(table, k.tp, k.ep, k.etp), n_stages)
        if split is not None:
            return split
    split = add_ends(cfg.stage_layers if cfg.stage_layers else even_split(blocks, n_stages))
    split[-1] += mtp
    return split


def table_blocks(table: CostTable) -> tuple[int, int]:
    """(transformer blocks, MTP layers) of the table (embedding and head aside)."""
    mtp = mtp_count(table.names)
    return len(table.names) - 2 - mtp, mtp


def layout_fits(cfg: TrainingConfig, table: CostTable, add: Any) -> bool:
    """Whether the stated layout places the cost model's layers (a profile or preset
    may differ from the file's --num-layers / --mtp-num-layers)."""
    if cfg.pipeline_layout is None:
        return True
    blocks, mtp = table_blocks(table)
    try:
        parse_layout(cfg.pipeline_layout, cfg.pp, num_layers=blocks, mtp_layers=mtp)
    except LayoutError as exc:
        add("layout-mismatch", "error",
            f"{exc}: the costs ({blocks} blocks, {mtp} MTP layers) are not the layout's "
            "model; give the model the layout was written for (--model, --profile)",
            num_layers=blocks, mtp_layers=mtp)
        return False
    return True


def recompute_layers(cfg: TrainingConfig, table: CostTable,
                      split: list[int]) -> tuple[int, ...] | None:
    """Blocks recomputed per stage: stated per stage, or Megatron-LM's block method
    (the first N blocks of every stage); None: the config's uniform choice."""
    if cfg.recompute != "full":
        return None
    blocks = stage_blocks(list(table.names), split)
    if cfg.recompute_layers_per_stage is not None:
        stated = cfg.recompute_layers_per_stage
        if len(stated) != len(blocks) or any(not 0 <= r <= n for r, n in zip(stated, blocks, strict=True)):
            raise StageRecomputeError(stated, blocks)
        return tuple(stated)
    if cfg.recompute_block_layers is None:
        return None
    return tuple(min(cfg.recompute_block_layers, n) for n in blocks)


class StageRecomputeError(ValueError):
    def __init__(self, stated: list[int], blocks: list[int]) -> None:
        super().__init__(f"recompute_layers_per_stage {stated[:16]} does not fit the stages' "
                         f"blocks {blocks[:16]} (one count per stage, each at most its blocks)")
