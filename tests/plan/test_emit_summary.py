"""``--emit``'s summary line counts blocks per stage as check-config's findings do
(report.fmt.blocks_text): an MTP layer is not a block, and the stage that holds it is
named (trial u30 M1: DeepSeek-V3's 61 blocks had read as 62)."""

from __future__ import annotations

from types import SimpleNamespace

from pptune.costmodel.schedules import Schedule
from pptune.frameworks.registry import Framework
from pptune.plan.emit import Emitted

# the embedding, five blocks, one MTP layer and the head over three stages of 3, 2 and 3
# layers: stage 0 holds the embedding and block0-1, stage 1 block2-3, stage 2 block4,
# mtp0 and the head, so 2, 2 and 1 blocks (5 in all), the MTP layer with the head
NAMES = ("embedding", *(f"block{i}" for i in range(5)), "mtp0", "head")
PLAN = SimpleNamespace(pp=3, dp=1, tp=1, cp=1, ep=1, etp=1, schedule=Schedule.ONE_F_ONE_B,
                       virtual_stages=1, num_microbatches=6, micro_batch_size=1,
                       stage_layers=[3, 2, 3], step_time_s=1.0, bubble_rate=0.25)


def test_the_summary_counts_no_mtp_layer_as_a_block() -> None:
    line = Emitted(Framework.MEGATRON, PLAN, {}, names=NAMES).summary()  # type: ignore[arg-type]
    assert "blocks/stage 2,2,1 (+ embedding first, the MTP layer and the head last);" in line


def test_without_mtp_layers_the_summary_reads_as_before() -> None:
    names = ("embedding", *(f"block{i}" for i in range(6)), "head")
    line = Emitted(Framework.MEGATRON, PLAN, {}, names=names).summary()  # type: ignore[arg-type]
    assert "blocks/stage 2,2,2 (+ embedding first, head last);" in line
