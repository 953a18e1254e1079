"""Adam's moments below fp32 (``--exp-avg-dtype``, ``--exp-avg-sq-dtype``): Megatron-LM's
precision-aware optimizer, searched by recommend, written by ``--emit megatron`` and
``--emit pptune``, read back by check-config at the same step and memory, and refused
where a framework's files keep fp32 moments."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.search import Sharding, evaluate
from pptune.costmodel.sharding import moment_bytes, state_bytes_per_param
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()


def test_moment_bytes_average_the_two_widths() -> None:
    assert moment_bytes("fp32", "fp32") == 4.0
    assert moment_bytes("bf16", "bf16") == 2.0
    assert moment_bytes("bf16", "fp8") == 1.5


def test_bf16_moments_under_the_distributed_optimizer_by_hand() -> None:
    # ZeRO-1 over 4 ranks: bf16 weights 2 + fp32 grads 4 fixed; master 4 + moments sharded
    assert state_bytes_per_param(Sharding.ZERO1, 4) == 2 + 4 + (4 + 4 + 4) / 4
    assert state_bytes_per_param(Sharding.ZERO1, 4, moment_bytes=2.0) == 2 + 4 + (4 + 2 + 2) / 4


@pytest.fixture(scope="module")
def run() -> RecommendRun:
    return recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm",
                                      exp_avg_dtype="bf16", exp_avg_sq_dtype="bf16", top=3))


def test_the_search_prices_bf16_moments_and_never_plans_without_sharding(
        run: RecommendRun) -> None:
    assert run.plan_request.moment_bytes == 2.0
    assert Sharding.NONE not in run.plan_request.shardings
    assert run.result.plans and all(p.sharding is not Sharding.NONE for p in run.result.plans)
    best = run.result.plans[0]
    fp32 = evaluate(run.table_for(best.key), replace(run.plan_request, moment_bytes=4.0),
                    best.spec)
    # the same plan with fp32 moments holds more, and runs a longer optimizer step
    assert max(fp32.peak_memory_bytes) > max(best.peak_memory_bytes)
    assert fp32.optimizer_s > best.optimizer_s


def test_the_plan_file_records_the_widths(tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--exp-avg-dtype", "bf16",
                            "--exp-avg-sq-dtype", "bf16", "--top", "1", "-o", str(out)])
    assert r.exit_code == 0, r.output
    request = json.loads(out.read_text())["request"]
    assert (request["exp_avg_dtype"], request["exp_avg_sq_dtype"]) == ("bf16", "bf16")


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.PPTUNE])
def test_emitted_files_state_the_moments_and_read_back_alike(
        run: RecommendRun, framework: Framework, tmp_path: Path) -> None:
    emitted = emit(framework, run)
    write(emitted, tmp_path)
    (path,) = tmp_path.iterdir()
    text = path.read_text()
    if framework is Framework.MEGATRON:
        for flag in ("--use-distributed-optimizer", "--use-precision-aware-optimizer",
                     "--exp-avg-dtype bf16", "--exp-avg-sq-dtype bf16"):
            assert flag in text
    else:
        assert "exp_avg_dtype: bf16" in text and "exp_avg_sq_dtype: bf16" in text
    r = runner.invoke(app, ["check-config", str(path), "--gpus", "8", "--gpu", "h100-sxm",
                            "--json"])
    assert r.exit_code == 0, r.stdout
    derived = json.loads(r.stdout)["derived"]
    assert derived["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)
    assert max(derived["peak_memory_bytes"]) == pytest.approx(
        max(emitted.plan.peak_memory_bytes), rel=1e-9)


@pytest.mark.parametrize("framework", ["torchtitan", "deepspeed"])
def test_frameworks_with_fp32_moments_refuse_before_searching(framework: str,
                                                              tmp_path: Path) -> None:
    out = tmp_path / "out"
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--exp-avg-dtype", "bf16",
                            "--emit", framework, "-o", str(out)])
    assert r.exit_code == 2
    assert f"{framework} keeps Adam's moments in fp32" in r.output
    assert "costs:" not in r.output and not out.exists()


def test_bf16_moments_without_sharding_is_refused() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--exp-avg-dtype", "bf16",
                            "--sharding", "none"])
    assert r.exit_code == 2
    assert "needs the distributed optimizer: drop --sharding none" in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_an_unknown_width_is_one_line() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--exp-avg-sq-dtype", "int4"])
    assert r.exit_code == 2
    assert "--exp-avg-sq-dtype must be one of fp32, fp16, bf16, fp8 (got 'int4')" in r.output
