"""The routing imbalance a '# pptune-plan:' line carries (recommend --moe-imbalance) and the
Megatron-LM reader's own word on routing: check-config says one thing, the value it prices."""

from __future__ import annotations

from pathlib import Path

from pptune.frameworks.read import read_config

BALANCED = "routing priced as balanced"
SCRIPT = """#!/bin/bash
{line}
torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 --hidden-size 1024 \\
    --num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 \\
    --micro-batch-size 1 --global-batch-size 16 --bf16 --num-experts 8 --moe-router-topk 2 \\
    --moe-token-dispatcher-type alltoall --expert-model-parallel-size 8 {flags}
"""


def _read(tmp_path: Path, line: str, flags: str = "") -> tuple[float | None, list[str]]:
    path = tmp_path / "pretrain.sh"
    path.write_text(SCRIPT.format(line=line, flags=flags))
    read = read_config(path)
    return read.config.moe_routing_imbalance, read.notes


def test_the_plan_line_s_imbalance_replaces_the_balanced_note(tmp_path: Path) -> None:
    """Before: 'routing priced as balanced (imbalance 1.0)' and then 'moe_routing_imbalance
    1.5 from the file's plan line': two words on one price. Now only the value priced."""
    imbalance, notes = _read(tmp_path, "# pptune-plan: gpu=h100-sxm moe_imbalance=1.5")
    assert imbalance == 1.5
    assert not any(BALANCED in n for n in notes), notes
    assert ("gpu h100-sxm, moe_routing_imbalance 1.5 from the file's '# pptune-plan:' line "
            "(what recommend --emit planned for; the file's flags state no routing "
            "imbalance)") in notes


def test_without_an_imbalance_on_the_plan_line_routing_is_still_said_balanced(
        tmp_path: Path) -> None:
    for line in ("# pptune-plan: gpu=h100-sxm", "", "# pptune-plan: moe_imbalance=0.5"):
        imbalance, notes = _read(tmp_path, line)
        assert imbalance is None
        assert any(BALANCED in n for n in notes), (line, notes)
        assert not any("state no routing imbalance" in n for n in notes)


def test_padding_to_capacity_is_the_file_s_own_imbalance(tmp_path: Path) -> None:
    """The file's flags win over the plan line (planned.py): capacity 1.25, padded."""
    imbalance, notes = _read(tmp_path, "# pptune-plan: gpu=h100-sxm moe_imbalance=1.5",
                             "--moe-expert-capacity-factor 1.25 "
                             "--moe-pad-expert-input-to-capacity")
    assert imbalance == 1.25
    assert not any(BALANCED in n for n in notes)
    assert any("routing priced with imbalance 1.25" in n for n in notes)
