"""The README's cluster recipe, end to end on CPU with a tiny Hugging Face
config; and an emitted launch script run with a stand-in ``torchrun``."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
TINY_HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 4,
           "vocab_size": 256, "max_position_embeddings": 32}


def ok(*args: str) -> str:
    r = runner.invoke(app, list(args), env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.stdout + r.stderr
    return r.stdout + r.stderr


def _stand_in_torchrun(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """A ``torchrun`` on PATH (inside tmp_path) that records its argv, one per line."""
    bin_dir, record = tmp_path / "bin", tmp_path / "torchrun-argv.txt"
    bin_dir.mkdir()
    fake = bin_dir / "torchrun"
    fake.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {shlex.quote(str(record))}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    return env, record


@pytest.mark.parametrize("costs", [["--model", "gpt3-1.3b"], ["--profile", "PROFILE"]])
def test_emitted_megatron_script_runs_with_every_argument(
    tmp_path: Path, costs: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pptune.costs.profiles import analytic_profile

    monkeypatch.chdir(tmp_path)
    prof = tmp_path / "profile.json"
    prof.write_text(analytic_profile("gpt-small", "h100-sxm", [1, 2]).model_dump_json())
    costs = [str(prof) if c == "PROFILE" else c for c in costs]
    ok("recommend", "--gpus", "8", *costs, "--schedules", "1f1b", "--emit", "megatron",
       "-o", str(tmp_path / "launch"))
    env, record = _stand_in_torchrun(tmp_path)
    subprocess.run(["bash", str(tmp_path / "launch" / "pretrain_megatron.sh"), "--extra", "1"],
                   env=env, check=True, cwd=tmp_path, timeout=30)
    argv = record.read_text().splitlines()
    assert "pretrain_gpt.py" in argv
    for flag in ("--pipeline-model-parallel-size", "--num-layers", "--micro-batch-size",
                 "--global-batch-size"):
        assert flag in argv, argv
    assert argv[-2:] == ["--extra", "1"]  # every continuation line reached torchrun
    assert not any(a.startswith("#") for a in argv)


@pytest.mark.torch
@pytest.mark.slow
def test_readme_recipe_end_to_end_on_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(TINY_HF))
    # 1. probe (one process here; torchrun on the cluster)
    ok("probe", "--hf-config", "config.json", "--no-comm", "--micro-batch-sizes", "1",
       "--repeats", "2", "--warmup", "1", "--device", "cpu", "-o", "pptune-profile.json")
    # 2-3. recommend, then emit
    ok("recommend", "--gpus", "64", "--tp", "8", "--sequence-parallel", "-o", "pptune-plans.json")
    plans = json.loads((tmp_path / "pptune-plans.json").read_text())
    assert plans["plans"] and plans["request"]["hf_config"].endswith("config.json")
    ok("recommend", "--gpus", "64", "--tp", "8", "--sequence-parallel", "--emit", "megatron",
       "-o", "launch/")
    # the script states the probed config's shape (the plan file keeps its path)
    script = (tmp_path / "launch" / "pretrain_megatron.sh").read_text()
    assert f"--hidden-size {TINY_HF['hidden_size']}" in script
    assert "names no model shape" not in script
    # 4. CI check with the costs the plan was priced with, and a real run of plan 1
    assert "# priced with the profile ./pptune-profile.json (measured on cpu" in script
    predicted = script.split("# predicted: step ")[1].split(",")[0]
    checked = ok("check-config", "launch/pretrain_megatron.sh", "--profile",
                 "pptune-profile.json")
    assert f"step {predicted}" in checked and "slower-than-best" not in checked
    out = ok("validate", "--plan", "1", "--warmup", "0", "--steps", "1", "--device", "cpu")
    assert "Hugging Face config" in out


def test_the_emitted_header_names_its_costs_and_check_config_prices_them_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The README's flow from ./pptune-profile.json: the script's header says what it was
    priced with and which check-config prices it the same way, and that one does (same
    step, no slower-than-best warning against the plan pptune just wrote)."""
    from pptune.costs.profiles import analytic_profile

    monkeypatch.chdir(tmp_path)
    profile = analytic_profile("gpt-small", "h100-sxm", [1, 2])
    (tmp_path / "pptune-profile.json").write_text(profile.model_dump_json())
    ok("recommend", "--gpus", "8", "--schedules", "1f1b", "--emit", "megatron", "-o", "launch")
    script = (tmp_path / "launch" / "pretrain_megatron.sh").read_text()
    lines = script.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("# predicted: step "))
    assert lines[at + 1:at + 3] == [
        "# priced with the profile ./pptune-profile.json (measured on "
        f"{profile.device.name}):",
        "# pptune check-config --profile ./pptune-profile.json prices this file the same way"]
    predicted = lines[at].removeprefix("# predicted: step ").split(",")[0]
    checked = ok("check-config", "launch/pretrain_megatron.sh", "--profile",
                 "./pptune-profile.json")
    assert f"step {predicted}" in checked and "slower-than-best" not in checked
    # analytic costs: the plan line names the GPU, so check-config needs no flag
    ok("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--schedules", "1f1b", "--emit",
       "megatron", "-o", "analytic")
    script = (tmp_path / "analytic" / "pretrain_megatron.sh").read_text()
    assert ("# priced with analytic costs on h100-sxm: pptune check-config prices this file "
            "the same way ('# pptune-plan:' names the GPU)") in script
    predicted = script.split("# predicted: step ")[1].split(",")[0]
    assert f"step {predicted}" in ok("check-config", "analytic/pretrain_megatron.sh")


def test_torchtitan_without_a_pipeline_takes_the_micro_batches_as_accumulation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pp = 1: local_batch_size is the micro-batch; global / (local x dp) steps accumulate."""
    import tomllib

    monkeypatch.chdir(tmp_path)
    out = ok("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--pp", "1", "--emit",
             "torchtitan", "-o", "tt")
    doc = tomllib.loads((tmp_path / "tt" / "torchtitan.toml").read_text())
    train, par = doc["training"], doc["parallelism"]
    assert par["pipeline_parallel_degree"] == 1
    # no pipeline keys to ignore: the micro-batch is the local batch
    assert "pipeline_parallel_microbatch_size" not in par
    assert train["global_batch_size"] % train["local_batch_size"] == 0
    step = out.split("predicted step ")[-1].split(",")[0]
    checked = ok("check-config", "tt/torchtitan.toml", "--gpu", "h100-sxm", "--model", "gpt3-1.3b")
    assert f"step {step}" in checked and "memory-ok" in checked
