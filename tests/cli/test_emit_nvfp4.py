"""recommend --emit of an NVFP4 plan: Megatron-LM's script states it (--fp4-format e2m1
--fp4-recipe nvfp4, --fp4-param-gather) and check-config prices the script as recommend
priced the plan; check-config reads the flags and their refusals; the GPUs without an
FP4 peak refuse --precision nvfp4."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.errors import BadInput
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()


@functools.cache
def _nvfp4_run() -> RecommendRun:
    """Llama 3 8B on 16 GB200s in NVFP4 with its parameters gathered in NVFP4."""
    return recommend(RecommendSpec.of(gpus=16, model="llama3-8b", gpu="gb200", tp="1",
                                      precision="nvfp4", fp8_param_gather=True,
                                      sharding="zero1", top=1))


def test_megatron_round_trip_of_an_nvfp4_plan(tmp_path: Path) -> None:
    run = _nvfp4_run()
    emitted = emit(Framework.MEGATRON, run)
    script = emitted.files["pretrain_megatron.sh"]
    assert "--fp4-format e2m1" in script and "--fp4-recipe nvfp4" in script
    assert "--fp4-param-gather" in script and "--fp8-format" not in script
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "pretrain_megatron.sh"), "--output",
                            "json", "--no-compare", "--gpu", "gb200"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["config"]["precision"] == "nvfp4" and doc["config"]["fp8_param_gather"] is True
    assert doc["derived"]["cost_key"] == str(emitted.plan.key) == "tp1 nvfp4"
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


SCRIPT = ("torchrun pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
          "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
          "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 "
          "--global-batch-size 64 --tensor-model-parallel-size 1 "
          "--pipeline-model-parallel-size 1 --swiglu --bf16 --use-distributed-optimizer "
          "--hidden-dropout 0 --attention-dropout 0 {}\n")


def _check(tmp_path: Path, flags: str) -> tuple[int, dict]:
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT.format(flags))
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            "--gpu", "b200", "--gpus", "8"])
    return r.exit_code, (json.loads(r.stdout) if r.stdout.startswith("{") else {})


@pytest.mark.parametrize(("flags", "rule"), [
    ("--fp4-format e2m1 --fp8-format hybrid", "megatron-fp4-fp8"),
    ("--fp4-param-gather", "megatron-fp4-param-gather"),
])
def test_megatron_refusals_of_fp4_flags(tmp_path: Path, flags: str, rule: str) -> None:
    code, doc = _check(tmp_path, flags)
    assert code == 1
    assert rule in [f["id"] for f in doc["findings"]]


def test_fp4_format_reads_as_nvfp4(tmp_path: Path) -> None:
    code, doc = _check(tmp_path, "--fp4-format e2m1")
    assert code == 0, doc.get("findings")
    assert doc["config"]["precision"] == "nvfp4"
    assert doc["derived"]["cost_key"] == "tp1 nvfp4"


def test_nvfp4_refused_on_hopper() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--gpu", "h100-sxm",
                            "--precision", "nvfp4"])
    assert r.exit_code == 2
    assert "--precision nvfp4 needs FP4 tensor cores" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_torchtitan_and_deepspeed_state_no_nvfp4() -> None:
    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", gpu="gb200", tp="1",
                                     precision="nvfp4", top=1))
    # each names the precisions its files state on the GPU: torchtitan's float8 and mx
    for framework, plan_with in ((Framework.TORCHTITAN, "--precision bf16, fp8 or mxfp8"),
                                 (Framework.DEEPSPEED, "--precision bf16")):
        with pytest.raises(BadInput, match="state no precision nvfp4") as caught:
            emit(framework, run)
        assert f"; plan with {plan_with} (or emit another framework)" in str(caught.value)


def test_pptune_file_round_trip_of_an_nvfp4_plan(tmp_path: Path) -> None:
    run = _nvfp4_run()
    emitted = emit(Framework.PPTUNE, run)
    text = emitted.files["pptune.yaml"]
    assert "precision: nvfp4" in text and "fp8_param_gather: true" in text
    write(emitted, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "pptune.yaml"), "--output", "json",
                            "--no-compare", "--gpu", "gb200"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert doc["derived"]["cost_key"] == "tp1 nvfp4"
    assert doc["derived"]["step_time_s"] == pytest.approx(emitted.plan.step_time_s, rel=1e-9)


def test_an_nvfp4_winner_names_its_nvfp4_copies_and_the_fp4_gather() -> None:
    """A trial: the winner's line said "FP8 weight copies" of NVFP4 ones, and the
    not-searched gather named only the FP8 flag."""
    r = runner.invoke(app, ["recommend", "--gpus", "16", "--model", "llama3-8b", "--gpu",
                            "gb200", "--precision", "nvfp4", "--sharding", "zero1"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "of NVFP4 weight copies" in text and "of FP8 weight copies" not in text
    assert ("not searched: --fp8-param-gather (Megatron-LM --fp4-param-gather: NVFP4 weights "
            "all-gathered in NVFP4") in text
