"""A user trial of recommend's and check-config's messages: an odd sequence under
context parallelism, a reserve larger than the GPU, no-plan hints that name only what
was not searched, the interleaved m < pp label, --plan for the row after --top, and
check-config's blocks per stage at 80 columns."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.schedules import Schedule
from tests.conftest import Cli

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
ODD = ("sequence 131073 is odd: context parallelism splits it into 2 x cp chunks (causal "
       "load balancing), which no cp above 1 divides; use an even sequence length or cp 1")


def test_an_odd_sequence_names_no_cp_to_choose(cli: Cli,
                                               error_line: Callable[[Result], str]) -> None:
    r = cli("recommend", "--gpus", "8", "--seq-len", "131073", "--cp", "8")
    assert error_line(r) == f"pptune: error: --cp 8: {ODD}"


def test_without_cp_an_odd_sequence_says_cp_was_not_searched(cli: Cli) -> None:
    r = cli("recommend", "--gpus", "8", "--seq-len", "131073", "--global-batch", "8",
            "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["request"]["cp"] == 1  # the one size searched (a list when several)
    said = [n for n in doc["notes"] if "cp > 1" in n]
    assert said == [f"context parallelism (cp > 1) was not searched: cp 2: {ODD}"]
    # one token more, even: cp 2 to 64 leave >= 2,048 tokens a rank, those dividing 8 are
    # searched and nothing is said
    r = cli("recommend", "--gpus", "8", "--seq-len", "131072", "--global-batch", "8",
            "--json")
    doc = json.loads(r.stdout)
    assert doc["request"]["cp"] == [1, 2, 4, 8]
    assert not [n for n in doc["notes"] if "cp > 1" in n]


def test_a_reserve_the_gpu_cannot_hold_is_bad_input(
        cli: Cli, error_line: Callable[[Result], str]) -> None:
    # h100-sxm: 81,559 MiB = 79.65 GiB; 2% of it 1.59 GiB, under the 2 GiB default reserve
    assert error_line(cli("recommend", "--gpus", "8", "--reserve-gib", "100")) == (
        "pptune: error: --reserve-gib 100 is more than h100-sxm's 79.65 GiB")
    assert error_line(cli("recommend", "--gpus", "8", "--max-memory", "0.02")) == (
        "pptune: error: --max-memory 0.02 leaves 1.59 GiB of h100-sxm's 79.65 GiB, no more "
        "than the 2.00 GiB reserve; raise --max-memory or lower --reserve-gib")


def test_no_plan_hints_name_only_what_was_not_searched(cli: Cli) -> None:
    # every tp, sharding and recomputation searched, micro-batches of 1: more GPUs alone
    r = cli("recommend", "--gpus", "8", "--model", "llama3.1-405b")
    assert r.exit_code == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("pptune: error: no feasible plan for 8 GPUs")
    assert line.endswith("; try more GPUs (the weights, gradients and optimizer state alone "
                         "are 6,048 GiB at their smallest (fully sharded): at least 76 GPUs "
                         "of 80 GiB (10 nodes of 8))")
    # narrowed by hand: each narrowing comes back as a hint
    r = cli("recommend", "--gpus", "8", "--model", "llama3.1-405b", "--tp", "1", "--sharding",
            "zero1", "--recompute", "none,selective", "--micro-batch-sizes", "2")
    assert r.exit_code == 1
    assert r.stderr.strip().endswith(
        "of 80 GiB (10 nodes of 8)), --tp 2/4/8, --sharding fsdp, --recompute full or smaller "
        "--micro-batch-sizes")


def test_an_expert_group_larger_than_a_stage_says_what_to_change(cli: Cli) -> None:
    # 64 GPUs over pp 8 at tp 8: a stage holds 8 ranks, and ep 64 cannot live inside it
    r = cli("recommend", "--gpus", "64", "--model", "deepseek-v3", "--ep", "64", "--tp", "8",
            "--pp", "8")
    assert r.exit_code == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "pptune: error: no feasible plan for 64 GPUs (ep x etp does not divide the stage: 1); "
        "try --ep x --etp dividing a stage's ranks (tp x cp x dp, the GPUs over pp: "
        "megatron-core's expert groups live inside a pipeline stage), so a smaller --ep or a "
        "shallower --pp")


def test_interleaved_with_fewer_micro_batches_than_pp_is_counted_as_m_lt_pp(cli: Cli) -> None:
    """Global batch 7 on 8 GPUs: the only pipelines with 7 micro-batches or fewer than
    their stages are pp 8 (dp 1, 7 of 1), refused as m < pp under 1f1b and interleaving
    alike; no count of 7 or more is refused as not a multiple (Megatron-LM's micro-batch
    groups run it)."""
    r = cli("recommend", "--gpus", "8", "--global-batch", "7", "--json")
    rejected = json.loads(r.stdout)["rejected"]
    assert rejected["microbatches_less_than_pp"] > 0
    assert "microbatches_not_multiple_of_pp" not in rejected


def test_plan_takes_the_row_listed_after_top(cli: Cli,
                                             error_line: Callable[[Result], str]) -> None:
    """--top 2 on 8 GPUs ranked by step time alone (--pipeline-margin 0) lists 3 plans:
    two pipelined, then the best plan without a pipeline; --plan 3 writes the third row,
    the plan file's rank 3. With the margin, which puts that plan first, --top 2 lists
    two (docs/guide/recommend.md: the extra row only when none of the N runs without a
    pipeline)."""
    ranked = ("recommend", "--gpus", "8", "--top", "2", "--pipeline-margin", "0")
    plans = json.loads(cli(*ranked, "--json").stdout)["plans"]
    assert [(p["rank"], p["pp"] > 1) for p in plans] == [(1, True), (2, True), (3, False)]
    third = plans[2]
    r = cli(*ranked, "--emit", "pptune", "--plan", "3")
    assert r.exit_code == 0, r.stderr
    assert f"schedule: {third['schedule']}" in r.stdout and "pp: 1" in r.stdout
    assert third["schedule"] == Schedule.ONE_F_ONE_B.value
    assert error_line(cli(*ranked, "--emit", "pptune", "--plan", "4")) == (
        "pptune: error: --plan 4 is not among the plans --top 2 lists (at most 3: the best "
        "plan without a pipeline may follow); give --plan 1 to 3 (or raise --top)")
    margin = json.loads(cli("recommend", "--gpus", "8", "--top", "2", "--json").stdout)
    assert [(p["rank"], p["pp"] == 1) for p in margin["plans"]] == [(1, True), (2, False)]


def test_check_config_shortens_blocks_per_stage_to_80_columns(
        cli: Cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("check-config", str(CONFIGS / "megatron_qwen3_235b_ep32.sh"))
    assert r.exit_code == 0, r.stderr
    # the best plan, pp 8 x v 4 = 32 chunks of Qwen3-235B's 94 blocks: 31 of 3, the head's 1
    assert "blocks per stage 3x31,1 (+ embedding first, head last)" in " ".join(
        r.stdout.split())
    assert max(map(len, r.stdout.splitlines())) <= 80
