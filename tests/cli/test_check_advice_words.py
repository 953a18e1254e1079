"""check-config's words for what a file already has: a whole table torchtitan 0.2 alone
has is named ``[compile]`` (not ``[] compile``), and a DeepSpeed config at ZeRO stage 2
that overflows is told the next stage up (3), not to use ZeRO (a user trial, R1/R4)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


def _findings(path: Path, *flags: str) -> list[dict]:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", *flags])
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)["findings"]


def test_a_whole_table_marker_is_named_as_a_table(tmp_path: Path) -> None:
    path = tmp_path / "t8.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\n'
                    'local_batch_size = 2\nglobal_batch_size = 64\nseq_len = 8192\n\n'
                    '[parallelism]\ndata_parallel_shard_degree = 32\n\n'
                    '[float8]\nenable_fsdp_float8_all_gather = true\n\n'
                    '[compile]\nenable = true\n')
    (unknown,) = [f for f in _findings(path, "--gpu", "h200", "--no-compare")
                  if f["id"] == "torchtitan-unknown-key"]
    assert "its [compile] is a key only 0.2 has" in unknown["message"]
    assert "[]" not in unknown["message"]


def test_zero2_overflow_is_told_the_next_stage(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({
        "train_batch_size": 512, "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2}}))
    (over,) = [f for f in _findings(path, "--model", "llama3-8b", "--gpus", "64",
                                    "--gpu", "h100-sxm", "--no-compare")
               if f["id"] == "memory-overflow"]
    assert "use ZeRO stage 3 (zero_optimization.stage 3)" in over["message"]
    assert "use ZeRO (zero_optimization.stage)" not in over["message"]


def test_zero3_overflow_is_not_told_zero(tmp_path: Path) -> None:
    path = tmp_path / "ds3.json"
    path.write_text(json.dumps({
        "train_batch_size": 512, "train_micro_batch_size_per_gpu": 16,
        "gradient_accumulation_steps": 4, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3}}))
    found = [f for f in _findings(path, "--model", "llama3-70b", "--gpus", "8",
                                  "--gpu", "h100-sxm", "--no-compare")
             if f["id"] == "memory-overflow"]
    assert found and all("ZeRO" not in f["message"] for f in found)
