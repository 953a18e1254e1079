"""check-config's slower-than-best finding (pptune.check.best): it names the settings
in which the best plan differs from the file's, file -> best, and states blocks per
stage with the embedding, the head and any MTP layers apart."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptune.check.best import blocks_text, differences, recompute_text, slower_than_best
from pptune.cli.app import app
from pptune.costmodel.keys import CostKey
from pptune.costmodel.partition import add_ends
from pptune.costmodel.presets import MODELS
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import (
    CostTable,
    Plan,
    PlanRequest,
    PlanSpec,
    Recompute,
    Sharding,
    evaluate,
)
from pptune.costs.resolve import analytic_costs

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"


@pytest.fixture(scope="module")
def priced() -> tuple[CostTable, Plan, Plan]:
    """llama3-8b on 8 GPUs, global batch 32: a 1F1B plan of pp 2 (dp 4, 8 micro-batches of
    1, ZeRO-1, no recomputation) and an interleaved one (v 2, 4 micro-batches of 2, every
    block recomputed)."""
    table, _ = analytic_costs(MODELS["llama3-8b"], "h100-sxm", (1, 2))
    req = PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),))
    plain = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 8,
                                          tuple(add_ends([16, 16])), 1,
                                          sharding=Sharding.ZERO1))
    other = evaluate(table, req, PlanSpec(Schedule.INTERLEAVED, 2, 2, 4,
                                          tuple(add_ends([8, 8, 8, 8])), 2,
                                          sharding=Sharding.ZERO1, recompute=Recompute.FULL))
    return table, plain, other


def test_the_settings_that_differ_are_named_file_to_best(
        priced: tuple[CostTable, Plan, Plan]) -> None:
    table, plain, other = priced
    assert differences(table, plain, other) == {
        "schedule": ["1f1b", "interleaved-1f1b"], "v": [1, 2], "micro-batch size": [1, 2],
        "recompute": ["none", "full"]}
    assert differences(table, plain, plain) == {}


def test_recomputation_is_said_by_what_it_reruns(priced: tuple[CostTable, Plan, Plan]) -> None:
    table, plain, other = priced
    # a Megatron-LM file's --recompute-modules are priced into every layer of the table:
    # a plan rerunning no whole block runs them
    assert recompute_text(table, plain, None, ("mla_up_proj",)) == "modules mla_up_proj"
    assert recompute_text(table, other, None, ("mla_up_proj",)) == "full"
    per_stage = evaluate(table, PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),)),
                         PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 8, tuple(add_ends([16, 16])), 1,
                                  sharding=Sharding.ZERO1, recompute=Recompute.FULL,
                                  recompute_layers=(3, 0)))
    assert recompute_text(table, per_stage, None) == "full (blocks per stage 3,0)"
    assert recompute_text(table, per_stage, None, ("mlp",)) == (
        "full (blocks per stage 3,0) and modules mlp")
    # 32 blocks in 8 stages of 4, the first four recomputed in full: 4x4,0x4
    eight = evaluate(table, PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),)),
                     PlanSpec(Schedule.ONE_F_ONE_B, 8, 1, 32, tuple(add_ends([4] * 8)), 1,
                              recompute=Recompute.FULL,
                              recompute_layers=(4, 4, 4, 4, 0, 0, 0, 0)))
    assert recompute_text(table, eight, None) == "full (blocks per stage 4x4,0x4)"
    # torchtitan's selective: every 2nd block of the 32
    selective = evaluate(table, PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),),
                                            recompute_every=2),
                         PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 8, tuple(add_ends([16, 16])), 1,
                                  recompute=Recompute.SELECTIVE))
    assert recompute_text(table, selective, 2) == "selective (1 block in 2)"


def test_blocks_per_stage_leave_the_mtp_layer_apart() -> None:
    names = ("embedding", "block0", "block1", "block2", "mtp0", "head")
    # stages: [embedding, block0] [block1, block2] [mtp0, head]
    assert blocks_text(names, [2, 2, 2]) == (
        "1,2,0 (+ embedding first, the MTP layer and the head last)")
    # stages: [embedding, block0] [block1, block2, mtp0] [head]
    assert blocks_text(names, [2, 3, 1]) == (
        "1,2,0 (+ embedding first, head last, the MTP layer on stage 1)")
    assert blocks_text(("embedding", "block0", "block1", "head"), [2, 2]) == (
        "1,1 (+ embedding first, head last)")


def test_blocks_per_stage_shorten_long_runs_as_recommend_does() -> None:
    """Nine blocks in five stages of 3,2,2,2,2 layers: the embedding's stage holds 2
    blocks, the next three 2 each, the head's 1: four 2s in a row read 2x4."""
    names = ("embedding", *(f"block{i}" for i in range(9)), "head")
    assert blocks_text(names, [3, 2, 2, 2, 2]) == "2x4,1 (+ embedding first, head last)"
    assert blocks_text(names, [3, 2, 2, 4]) == "2,2,2,3 (+ embedding first, head last)"


def test_the_finding_says_what_differs(priced: tuple[CostTable, Plan, Plan]) -> None:
    table, plain, other = priced
    slow, fast = sorted((plain, other), key=lambda p: -p.step_time_s)
    found: list[tuple[str, str, str, dict[str, Any]]] = []
    slower_than_best(table, slow, fast, gpus=8, limit=1.0, severity="warning",
                     add=lambda *a, **v: found.append((*a, v)))
    [(rule, severity, message, values)] = found
    assert (rule, severity) == ("slower-than-best", "warning")
    assert values["differs"] == differences(table, slow, fast)
    said = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in values["differs"].items())
    assert message.endswith(f"; it differs from the file in {said} and the split")
    assert values["slowdown"] == pytest.approx(slow.step_time_s / fast.step_time_s)
    found.clear()
    slower_than_best(table, slow, fast, gpus=8, limit=100.0, severity="warning",
                     add=lambda *a, **v: found.append((*a, v)))
    assert found == []  # within the limit


def test_a_ratio_just_over_the_limit_is_said_over_it(
        priced: tuple[CostTable, Plan, Plan]) -> None:
    """A ratio of 1.1047 (a GB200 script's, 2.462 s against its best plan's step) reads
    1.10x to two decimals, the limit itself ("1.10x ... (limit 1.10x)")."""
    table, plain, other = priced
    slow, fast = (dataclasses.replace(p, step_time_s=s) for p, s in ((plain, 2.2094),
                                                                      (other, 2.0)))
    found: list[tuple[str, str, str, dict[str, Any]]] = []
    slower_than_best(table, slow, fast, gpus=8, limit=1.10, severity="warning",
                     add=lambda *a, **v: found.append((*a, v)))
    [(_, _, message, values)] = found
    assert message.startswith("predicted step 2.209 s is 1.105x the best plan its files "
                              "state for the same 8 GPUs and batch (limit 1.10x): ")
    assert values["slowdown"] == pytest.approx(1.1047)


def test_check_config_names_the_difference_on_deepseek_v3() -> None:
    """NVIDIA's DeepSeek-V3 layout (61 blocks and the MTP layer): the best plan's blocks
    per stage sum to the 61 blocks, the MTP layer said apart, and the differences named."""
    r = CliRunner().invoke(app, ["check-config", str(DATA / "megatron_deepseek_v3_layout.sh"),
                                 "--gpu", "h100-sxm", "--max-slowdown", "1.0", "--output",
                                 "json"])
    [finding] = [f for f in json.loads(r.stdout)["findings"] if f["id"] == "slower-than-best"]
    message = finding["message"]
    blocks = message.split("blocks per stage ")[1].split(" (+")[0]
    # runs written NxM (N blocks on each of M stages), as recommend's table writes them
    assert sum(int(n) * int(m or 1) for n, _, m in
               (item.partition("x") for item in blocks.split(","))) == 61
    assert "the MTP layer" in message
    differs = finding["values"]["differs"]
    # with the kernels the best plan is priced with where the file's differ (the script
    # states no --cross-entropy-loss-fusion: megatron/as_run.py run_settings)
    assert set(differs) <= {"tp", "cp", "ep", "etp", "pp", "schedule", "v", "micro-batch size",
                            "recompute", "sharding", "a2a overlap", "rank order",
                            "cross-entropy", "attention", "weight gradients", "dispatcher"}
    for key, (file, best) in differs.items():
        assert f"{key} {file} -> {best}" in message


def test_a_token_counted_batch_is_said_in_the_files_keys(
        priced: tuple[CostTable, Plan, Plan]) -> None:
    """A file counting its batch in tokens (Semantics.batch_words: 4096 tokens a
    micro-batch, one sequence of 4096): the best plan's 4 micro-batches of 2 sequences on
    pp 2 are 4 of 2 x 4096 = 8192 tokens, stated by the count key; the size change is said
    in tokens; the JSON's differs keeps pptune's names."""
    from pptune.frameworks.common.batch_words import TokenBatch

    table, plain, other = priced
    words = TokenBatch(micro="tok", count="cnt", step="stp", tokens=4096, seq_len=4096,
                       size=1)
    found: list[tuple[str, str, str, dict[str, Any]]] = []
    slower_than_best(table, plain, other, gpus=8, limit=0.0, severity="warning",
                     add=lambda *a, **v: found.append((*a, v)), words=words)
    [(_, _, message, values)] = found
    assert ", 4 micro-batches of 8192 tokens (cnt 4), blocks per stage " in message
    assert "tok 4096 -> 8192" in message and "micro-batch size" not in message
    assert values["differs"]["micro-batch size"] == [1, 2]
