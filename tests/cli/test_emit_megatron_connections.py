"""An emitted Megatron-LM script passes its own check-config --strict beside context
parallelism: before Blackwell, Megatron-LM warns of the expert all-to-all overlap with
tp or cp ('For Hopper and before, try not to use tensor model parallelism or context
parallelism with overlap_moe_expert_parallel_comm', validate_args) and no
CUDA_DEVICE_MAX_CONNECTIONS serves both, so a script leaves the overlap out there, as
the plan is priced, and ``recommend --framework megatron`` ranks no plan with it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.plan.emit import emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
OVERLAP = "--overlap-moe-expert-parallel-comm"
# Mixtral 8x7B on 32 GPUs at pp 2 x cp 2 x ep 8, interleaved: the search overlaps the
# expert all-to-all (its combined 1F1B order) in its fastest plans
SPACE = dict(gpus=32, model="mixtral-8x7b", cp="2", pp="2", schedules="interleaved-1f1b",
             sharding="zero1", recompute="none", top=2)


def _strict(path: Path) -> tuple[int, dict]:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            "--strict"])
    assert r.exit_code in (0, 1), r.stderr
    return r.exit_code, json.loads(r.stdout)


@pytest.mark.parametrize("gpu", ["h100-sxm", "a100-80gb"])
def test_the_overlap_beside_cp_before_blackwell_is_left_out_of_the_script(
        tmp_path: Path, gpu: str) -> None:
    run = recommend(RecommendSpec.of(gpu=gpu, **SPACE))
    first = run.result.plans[0]
    assert (first.cp, first.ep, first.a2a_overlap) == (2, 8, True)  # as searched
    out = emit("megatron", run)
    assert (out.plan.cp, out.plan.a2a_overlap) == (2, False)
    assert out.plan.step_time_s > first.step_time_s  # the all-to-all exposed
    assert any("all-to-all overlap (--overlap-moe-expert-parallel-comm) left out" in n
               for n in out.notes)
    text = out.files["pretrain_megatron.sh"]
    assert OVERLAP not in text and "--delay-wgrad-compute" not in text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" in text  # validate_args asserts it
    write(out, tmp_path)
    code, doc = _strict(tmp_path / "pretrain_megatron.sh")
    assert code == 0, doc["findings"]
    assert not any(f["id"] == "megatron-cuda-connections" for f in doc["findings"])
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_megatron_ranks_no_plan_with_the_contested_overlap(tmp_path: Path) -> None:
    """--framework megatron lists the plans as its scripts run them: beside cp 2 on an
    H100, without the overlap; plan 1 is written as listed and checks at its step."""
    spec = RecommendSpec.of(gpu="h100-sxm", **SPACE)
    run = recommend(replace(spec, framework="megatron"))
    assert run.result.plans and not any(p.a2a_overlap for p in run.result.plans)
    out = emit("megatron", run)
    assert out.plan.step_time_s == pytest.approx(run.result.plans[0].step_time_s, rel=1e-9)
    write(out, tmp_path)
    code, doc = _strict(tmp_path / "pretrain_megatron.sh")
    assert code == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_from_blackwell_on_the_overlap_beside_cp_is_written(tmp_path: Path) -> None:
    """validate_args checks nothing on a B200: the script keeps the overlap, with 32
    connections, and checks as strictly."""
    run = recommend(RecommendSpec.of(gpu="b200", **SPACE))
    out = emit("megatron", run)
    assert (out.plan.cp, out.plan.a2a_overlap) == (2, True)
    text = out.files["pretrain_megatron.sh"]
    assert OVERLAP in text and "export CUDA_DEVICE_MAX_CONNECTIONS=32\n" in text
    write(out, tmp_path)
    code, doc = _strict(tmp_path / "pretrain_megatron.sh")
    assert code == 0, doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
