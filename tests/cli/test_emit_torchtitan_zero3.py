"""recommend --emit torchtitan where plan 1 is ZeRO-3 and FSDP2 outgrows the GPU.

torchtitan's files state FSDP2 over data_parallel_shard_degree or no sharding. FSDP2
keeps the same 16 bytes a parameter over dp as ZeRO-3 (FP32 weights and gradients and
Adam's moments, against BF16 weights and gradients beside FP32 main weights and
moments), but reduce-scatters each block's gradient through an FP32 copy: working
copies of 2 x 2 + 2 + 4 bytes a parameter of the largest layer, ZeRO-3's 2 x 2 + 2
(costmodel/sharding.py working_bytes). Llama 3 70B on 16 H100s: plan 1 is ZeRO-3 at tp 2
(78.84 GiB of 79.65 GiB) and the same plan with FSDP needs 4 bytes more a parameter of
the head's rank (128,256 x 8,192 / 2 and the final norm's 8,192): 80.79 GiB; no FSDP or
unsharded plan fits at tp 2. The file had been written unsharded
(data_parallel_replicate_degree 8: check-config refused it at 601.57 GiB); now the
fastest plan a torchtitan file states on the same GPUs is written, and check-config reads
it back at its predicted step.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.search import Sharding, evaluate
from pptune.errors import BadInput
from pptune.frameworks.registry import ADAPTERS, Framework
from pptune.plan.emit import job_of
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
RUN = ["--gpus", "16", "--model", "llama3-70b", "--gpu", "h100-sxm"]
HEAD = 128256 * 8192 / 2 + 8192  # the largest layer's parameters on a tp 2 rank


def test_fsdp_outgrows_the_gpu_where_zero3_fits() -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-70b", gpu="h100-sxm", top=1))
    plan = run.result.plans[0]
    assert (plan.sharding, plan.tp, plan.cp, plan.dp) == (Sharding.ZERO3, 2, 1, 8)
    job = job_of(run, plan)
    fsdp = evaluate(job.table, job.request, replace(plan.spec, sharding=Sharding.FSDP))
    assert fsdp.memory[0].state_bytes == plan.memory[0].state_bytes  # 16 bytes over dp
    assert plan.memory[0].working_bytes == pytest.approx(6 * HEAD, rel=1e-12)
    assert fsdp.memory[0].working_bytes == pytest.approx(10 * HEAD, rel=1e-12)
    assert max(plan.peak_memory_bytes) <= job.table.memory_bytes < max(fsdp.peak_memory_bytes)
    with pytest.raises(BadInput, match=r"torchtitan cannot express plan 1: it shards the "
                       r"training state as ZeRO-3, .* no plan on tp2 bf16 fits with FSDP or no "
                       r"sharding \(plan 1 with FSDP over data_parallel_shard_degree needs "
                       r"80\.79 GiB of 79\.65 GiB a GPU\)"):
        ADAPTERS[Framework.TORCHTITAN].express(job, plan, 1)


def test_the_written_plan_is_one_torchtitan_states_and_check_config_passes(
        tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", *RUN, "--top", "1", "--emit", "torchtitan", "-o",
                            str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    assert "the fastest plan a torchtitan file states on the same GPUs is written " \
           "instead: pp=1 dp=4 (tp2 cp2 bf16)" in " ".join(r.stderr.split())
    assert "configure it by hand" not in r.stderr
    text = (tmp_path / "torchtitan.toml").read_text()
    # FSDP over the 16 / (tp 2 x cp 2) = 4 data-parallel ranks, none replicated
    for line in ("data_parallel_replicate_degree = 1", "data_parallel_shard_degree = 4",
                 "tensor_parallel_degree = 2", "context_parallel_degree = 2"):
        assert f"\n{line}\n" in text, line
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--strict",
                            "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["errors"] == 0 and doc["warnings"] == 0, doc["findings"]
    assert doc["config"]["sharding"] == "fsdp" and doc["config"]["dp"] == 4
    assert round(doc["derived"]["step_time_s"], 3) == predicted


def test_with_no_plan_torchtitan_states_emit_refuses_in_one_line(tmp_path: Path) -> None:
    """Searched at tp 2 alone, where no plan with FSDP or no sharding fits: exit 2 with
    the refusal and the flag that ranks what torchtitan states, and no file."""
    r = runner.invoke(app, ["recommend", *RUN, "--tp", "2", "--cp", "1", "--top", "1",
                            "--emit", "torchtitan", "-o", str(tmp_path)])
    assert r.exit_code == 2
    error = [line for line in r.stderr.splitlines() if "error:" in line]
    assert len(error) == 1 and "torchtitan cannot express plan 1: it shards the training " \
        "state as ZeRO-3" in error[0] and "plan with --framework torchtitan" in error[0]
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "torchtitan.toml").exists()
