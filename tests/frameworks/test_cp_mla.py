"""Context parallelism with multi-head latent attention in a Megatron-LM script: the
exchanges Transformer Engine runs for it are priced, the others refused.

The script is a user's DeepSeek-V3 pretraining on 128 nodes of 8 H100 (Megatron-LM
core_r0.16) with ``--context-parallel-size 2 --cp-comm-type a2a``."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.plan.emit import Framework, emit
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

SCRIPT = (Path(__file__).parents[1] / "data" / "configs"
          / "megatron_deepseek_v3_cp2_a2a.sh").read_text()


def test_a2a_with_latent_attention_is_refused_as_transformer_engine_refuses(
        tmp_path: Path) -> None:
    code, found, _ = check_file(tmp_path / "a2a.sh", SCRIPT, by="message")
    assert code == 1
    said = found["megatron-cp-mla-comm"]
    assert said.startswith("--cp-comm-type a2a with --multi-latent-attention and "
                           "--context-parallel-size 2: Transformer Engine 2.5 to 2.14")
    assert "use --cp-comm-type p2p" in said
    assert "costs-unavailable" not in found


def test_p2p_with_latent_attention_is_priced_at_cp_2(tmp_path: Path) -> None:
    text = SCRIPT.replace("--cp-comm-type a2a", "--cp-comm-type p2p")
    code, found, doc = check_file(tmp_path / "p2p.sh", text, "--gpu", "h100-sxm")
    assert code == 0, found
    assert "megatron-cp-mla-comm" not in found and "costs-unavailable" not in found
    assert doc["derived"]["cost_key"].startswith("tp2 cp2 ep64")
    assert found["memory-ok"] == "info" and doc["derived"]["step_time_s"] > 0


def test_torchtitan_refuses_to_state_a_deepseek_v3_plan_with_cp() -> None:
    """torchtitan 0.2.2's deepseek_v3 flavors run FlexAttention, and its args refuse
    context parallelism with anything but SDPA: recommend may now pick cp 2 for
    DeepSeek-V3 (Megatron-LM runs it), but --emit torchtitan says it cannot state it."""
    run = recommend(RecommendSpec.of(
        gpus=256, model="deepseek-v3", gpu="h100-sxm", tp="4", cp="2", ep="16", pp="8",
        schedules="1f1b", micro_batch_sizes="1", recompute="full", top=1))
    assert run.result.plans[0].cp == 2
    with pytest.raises(BadInput, match=r"torchtitan cannot express plan 1: "
                       r"context_parallel_degree 2 with deepseek_v3 671B, whose attention is "
                       r"flex .* plan with --cp 1"):
        emit(Framework.TORCHTITAN, run)
    assert "--context-parallel-size 2" in emit(Framework.MEGATRON, run).files[
        "pretrain_megatron.sh"]
