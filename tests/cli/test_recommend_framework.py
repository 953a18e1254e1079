"""recommend --framework: its errors, its plan file key, and --emit of the same name."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

Cli = Callable[..., Result]
JOB = ("recommend", "--gpus", "8")
# the lines emit says when the plan asked for is not the one written (plan/emit.py and
# the adapters' closest.py)
SUBSTITUTED = ("cannot express", "emitting", "is written instead", "in all, plan")


def test_emit_of_another_framework_is_a_contradiction(cli: Cli, error_line) -> None:
    line = error_line(cli(*JOB, "--framework", "megatron", "--emit", "deepspeed"))
    assert line == ("pptune: error: --emit deepspeed with --framework megatron: the plans "
                    "ranked are those megatron's files state; give --emit megatron, or drop "
                    "--framework to rank every plan")


def test_an_unknown_framework_is_refused(cli: Cli, error_line) -> None:
    assert error_line(cli(*JOB, "--framework", "nemo")) == (
        "pptune: error: unknown --framework 'nemo'; choose pptune, deepspeed, megatron, "
        "torchtitan")


def test_no_layout_its_files_state_is_refused(cli: Cli, error_line) -> None:
    assert error_line(cli(*JOB, "--cp", "2", "--framework", "deepspeed")) == (
        "pptune: error: --framework deepspeed: DeepSpeed's files state none of the layouts "
        "searched (they cannot state cp 2): search one they state (--cp 1)")


def test_moments_its_files_cannot_keep_are_refused(cli: Cli, error_line) -> None:
    assert error_line(cli(*JOB, "--exp-avg-dtype", "bf16", "--framework", "torchtitan")) == (
        "pptune: error: torchtitan keeps Adam's moments in fp32: plan without "
        "--exp-avg-dtype/--exp-avg-sq-dtype, or --framework megatron (its precision-aware "
        "optimizer)")


def test_the_plan_file_names_the_framework(cli: Cli) -> None:
    r = cli(*JOB, "--framework", "torchtitan", "--top", "2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["request"]["framework"] == "torchtitan"
    assert {p["sharding"] for p in doc["plans"]} <= {"none", "fsdp"}  # its FSDP or none


def test_megatron_plan_one_is_written_as_ranked(cli: Cli, tmp_path: Path) -> None:
    r = cli(*JOB, "--framework", "megatron", "--emit", "megatron", "-o", tmp_path)
    assert r.exit_code == 0, r.stderr
    assert not [line for line in r.stderr.splitlines() if any(s in line for s in SUBSTITUTED)]
    check = cli("check-config", tmp_path / "pretrain_megatron.sh", "--gpu", "h100-sxm")
    assert check.exit_code == 0, check.stdout + check.stderr


def test_a_plan_emit_would_substitute_is_not_ranked(cli: Cli, tmp_path: Path) -> None:
    # FP8 ranks first; --emit deepspeed alone writes another plan in its place, and says
    # so; ranked for DeepSpeed, plan 1 is one its files state and is written as ranked
    # (DeepSpeed's two files go to a folder: -o DIR)
    flags = ("--cp", "1", "--precision", "bf16,fp8", "--emit", "deepspeed")
    alone = cli(*JOB, *flags, "-o", tmp_path / "alone")
    assert alone.exit_code == 0, alone.stderr
    assert "deepspeed cannot express plan 1 (DeepSpeed files here state no precision fp8)" \
        in alone.stderr
    ranked = cli(*JOB, *flags, "--framework", "deepspeed", "-o", tmp_path / "ranked")
    assert ranked.exit_code == 0, ranked.stderr
    assert not [line for line in ranked.stderr.splitlines()
                if any(s in line for s in SUBSTITUTED)]


def test_torchtitan_plan_one_is_written_at_its_step(cli: Cli, tmp_path: Path) -> None:
    """Ranked as torchtitan runs them, plan 1 is 1F1B over pp 2 x dp 4 at 43.177 s (the
    ZBV plan the search puts first, 42.860 s, outgrows the GPU with its model uncompiled,
    as torch's ZBV runs it: tests/plan/test_framework_search.py): written as ranked, and
    check-config prices the file at the table's step."""
    ranked = cli(*JOB, "--framework", "torchtitan", "--json")
    assert ranked.exit_code == 0, ranked.stderr
    first = json.loads(ranked.stdout)["plans"][0]
    assert (first["pp"], first["dp"], first["schedule"], round(first["step_time_s"], 3)) == (
        2, 4, "1f1b", 43.177)
    emitted = cli(*JOB, "--framework", "torchtitan", "--emit", "torchtitan", "-o", tmp_path)
    assert emitted.exit_code == 0, emitted.stderr
    assert not [line for line in emitted.stderr.splitlines()
                if any(s in line for s in SUBSTITUTED)]
    assert "torchtitan: pp=2 dp=4 tp=1 1f1b, 128 x 1" in emitted.stderr
    check = cli("check-config", tmp_path / "torchtitan.toml", "--gpus", "8", "--json")
    assert check.exit_code == 0, check.stdout + check.stderr
    step_s = json.loads(check.stdout)["derived"]["step_time_s"]
    assert abs(step_s / first["step_time_s"] - 1) <= 0.001
