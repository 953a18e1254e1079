"""recommend --grad-compression under --framework X --emit X: the file states it.

torchtitan states a 16-bit reduction as ``training.mixed_precision_reduce = "bfloat16"``
(FSDP's reduce dtype), Megatron-LM as ``--grad-reduce-in-bf16``, DeepSpeed as
``communication_data_type`` (its 16-bit mode's gradients are reduced at 2 bytes already);
none states top-k, which is refused with one line. check-config reads the file back at the
step recommend's table and the file's header print, and the hint below the table never
suggests a flag already given.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
FILES = {"megatron": "pretrain_megatron.sh", "deepspeed": "ds_config.json",
         "torchtitan": "torchtitan.toml"}
# the user trial's job: llama3-70b at 32k tokens on 64 H100s, FP8 where the files state it
JOB = ["--gpus", "64", "--model", "llama3-70b", "--gpu", "h100-sxm", "--seq-len", "32768",
       "--global-batch", "16"]
PRECISION = {"torchtitan": "fp8", "megatron": "fp8", "deepspeed": "bf16"}


def _recommend(framework: str, compression: str, folder: Path) -> tuple[str, str, str]:
    """(plan 1's step as the table prints it, the header's, the stdout)."""
    r = runner.invoke(app, ["recommend", *JOB, "--precision", PRECISION[framework],
                            "--grad-compression", compression, "--framework", framework,
                            "--emit", framework, "-o", str(folder)])
    assert r.exit_code == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith(" 1 "))
    shown = re.search(r" (\d+\.\d{3}) s ", row)
    written = "".join(f.read_text() for f in sorted(folder.iterdir()))  # DeepSpeed's: the .txt
    header = re.search(r"predicted: step (\d+\.\d{3}) s", written)
    assert shown is not None and header is not None
    return shown.group(1), header.group(1), r.stdout


def _checked(path: Path) -> float:
    c = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare"])
    assert c.exit_code == 0, c.stdout
    doc = json.loads(c.stdout)
    assert doc["errors"] == 0, doc["findings"]
    return float(doc["derived"]["step_time_s"])


@pytest.mark.parametrize("framework", ["torchtitan", "megatron", "deepspeed"])
def test_the_file_written_runs_at_the_step_ranked(framework: str, tmp_path: Path) -> None:
    shown, header, _ = _recommend(framework, "fp16", tmp_path)
    assert header == shown
    assert f"{_checked(tmp_path / FILES[framework]):.3f}" == shown


def test_torchtitan_states_the_bf16_reduce_dtype(tmp_path: Path) -> None:
    _recommend("torchtitan", "bf16", tmp_path)
    text = (tmp_path / "torchtitan.toml").read_text()
    # plan 1 shards with FSDP (the trial's dp 4 x cp 2): its reduce dtype carries it
    assert 'data_parallel_shard_degree = 4' in text
    assert 'mixed_precision_reduce = "bfloat16"' in text


def test_megatron_states_the_bf16_gradient_buffer(tmp_path: Path) -> None:
    _recommend("megatron", "fp16", tmp_path)
    assert "--grad-reduce-in-bf16" in (tmp_path / "pretrain_megatron.sh").read_text()


@pytest.mark.parametrize("framework", ["torchtitan", "megatron", "deepspeed"])
@pytest.mark.parametrize("flag", ["--framework", "--emit"])
def test_top_k_is_refused_where_no_file_states_it(framework: str, flag: str,
                                                  tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", *JOB, "--precision", PRECISION[framework],
                            "--grad-compression", "topk:0.01", flag, framework,
                            "-o", str(tmp_path / "out")])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "top-k" in lines[0] and "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()



def test_the_hint_never_suggests_the_flag_given(tmp_path: Path) -> None:
    # the trial's plan 1 still exposes over 5% of its step in data-parallel traffic,
    # where the hint would suggest the flag given
    _, _, out = _recommend("torchtitan", "fp16", tmp_path)
    exposed = re.search(r"DP \w+ traffic exposes [\d.]+ m?s \((\d+\.\d)%\)", out)
    assert exposed is not None and float(exposed.group(1)) > 5.0, out
    assert "hint: the data-parallel traffic is exposed" not in out


def test_deepspeed_states_the_reduction_of_its_fp32_gradients(tmp_path: Path) -> None:
    # a BF16 pipeline at ZeRO-0 keeps FP32 gradients (engine.gradient_width): the file
    # states communication_data_type bf16, read back at the step ranked
    r = runner.invoke(app, ["recommend", "--gpus", "32", "--model", "llama3-8b",
                            "--global-batch", "64", "--pp", "4", "--sharding", "none", "--tp",
                            "1", "--grad-compression", "bf16", "--framework", "deepspeed",
                            "--emit", "deepspeed", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    config = json.loads((tmp_path / "ds_config.json").read_text())
    assert config["communication_data_type"] == "bf16"
    row = next(line for line in r.stdout.splitlines() if line.startswith(" 1 "))
    assert f" {_checked(tmp_path / 'ds_config.json'):.3f} s " in row


@pytest.mark.parametrize("framework", ["torchtitan", "megatron"])
def test_emit_alone_writes_the_step_its_file_runs(framework: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", *JOB, "--precision", PRECISION[framework],
                            "--grad-compression", "fp16", "--emit", framework,
                            "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    header = re.search(r"predicted: step (\d+\.\d{3}) s",
                       (tmp_path / FILES[framework]).read_text())
    assert header is not None
    assert f"{_checked(tmp_path / FILES[framework]):.3f}" == header.group(1)


def test_a_zero3_plan_written_with_fsdp_reduces_in_bf16_as_its_file_states(
        tmp_path: Path) -> None:
    # ZeRO-3 is searched with the BF16 reduction; priced again as torchtitan runs it,
    # unsharded by FSDP it all-reduced FP32 gradients, and that stayed after the plan
    # was written with FSDP, whose file states mixed_precision_reduce "bfloat16":
    # written at 7.118 s, read back at 6.994 s
    r = runner.invoke(app, ["recommend", *JOB, "--precision", "fp8", "--tp", "2", "--cp", "4",
                            "--pp", "1", "--sharding", "zero3", "--grad-compression", "fp16",
                            "--emit", "torchtitan", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    written = (tmp_path / "torchtitan.toml").read_text()
    assert 'mixed_precision_reduce = "bfloat16"' in written
    header = re.search(r"predicted: step (\d+\.\d{3}) s", written)
    assert header is not None
    assert f"{_checked(tmp_path / 'torchtitan.toml'):.3f}" == header.group(1)


def test_pptune_states_a_16_bit_reduction_and_its_file_runs_the_step(tmp_path: Path) -> None:
    """--emit pptune states fp16/bf16 compression as ``grad_reduce_dtype`` (gradients
    held at their width, reduced at 2 bytes: pptune's own pricing of the flag), and
    check-config of the file prices plan 1's step exactly; top-k has no key, and the
    file says so in a comment."""
    from pptune.frameworks.registry import Framework
    from pptune.plan.emit import emit, write
    from pptune.plan.recommend import RecommendSpec, recommend
    job = dict(gpus=16, model="llama3-8b", gpu="h100-sxm", sharding="zero1", pp="2", top=1)
    run = recommend(RecommendSpec.of(**job, grad_compression="bf16"))
    plain = recommend(RecommendSpec.of(**job))
    assert run.result.plans[0].step_time_s != plain.result.plans[0].step_time_s  # it shows
    out = emit(Framework.PPTUNE, run)
    assert "grad_reduce_dtype: bf16" in out.files["pptune.yaml"].splitlines()
    write(out, tmp_path)
    assert _checked(tmp_path / "pptune.yaml") == pytest.approx(out.plan.step_time_s, rel=1e-12)
    topk = emit(Framework.PPTUNE, recommend(RecommendSpec.of(**job, grad_compression="topk:0.01")))
    text = topk.files["pptune.yaml"]
    assert "grad_reduce_dtype" not in text and "# --grad-compression topk:0.01" in text
