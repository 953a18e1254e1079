"""A size the user forced (--pp, --tp, --cp, --ep, --etp at one value) that the emitted
framework's files cannot state is refused, not swapped: the files' plan line records
the forced sizes as held (``held=``), so a file at another size would claim a size the
user never got (a user trial: --pp 4 --emit deepspeed wrote pp 1 under held=pp). One
line, exit 1 as recommend's no feasible plan, naming the flag, why and the fix, and
nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner, Result

from pptune.cli.app import app
from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()


def _refused(tmp_path: Path, *args: str) -> str:
    out = tmp_path / "out"
    r = runner.invoke(app, ["recommend", *args, "-o", str(out)])
    assert r.exit_code == 1, (r.exit_code, r.stderr)
    assert "Traceback" not in r.output
    errors = [line for line in r.stderr.splitlines() if line.startswith("pptune: error: ")]
    assert len(errors) == 1, r.stderr
    assert not out.exists() or not any(out.iterdir())  # nothing written
    return errors[0]


def test_deepspeed_refuses_a_forced_pipeline_its_autotp_drops(tmp_path: Path) -> None:
    # llama3-70b on 32 H100s at 8192 tokens, --pp 4: plan 1 is pp 4 tp 4 cp 2; DeepSpeed
    # states no cp, runs AutoTP (tp > 1) at pp 1 only, and pp 4 at tp 1 does not fit
    # (--framework deepspeed: no feasible plan), so its closest plan is pp 1
    line = _refused(tmp_path, "--gpus", "32", "--model", "llama3-70b", "--seq-len", "8192",
                    "--pp", "4", "--emit", "deepspeed")
    assert "--pp 4" in line and "pp 1" in line
    assert "AutoTP without a pipeline" in line
    assert "drop --pp" in line and "--framework deepspeed" in line


def test_torchtitan_refuses_a_forced_pipeline_for_qwen3(tmp_path: Path) -> None:
    # torchtitan 0.2.2's qwen3 TrainSpec has pipelining_fn None: no pp above 1
    line = _refused(tmp_path, "--gpus", "32", "--model", "qwen3-30b-a3b", "--seq-len", "32768",
                    "--pp", "2", "--emit", "torchtitan")
    assert "--pp 2" in line and "pp 1" in line
    assert "qwen3 model has no pipelining" in line
    assert "drop --pp" in line and "--framework torchtitan" in line


def test_a_forced_size_the_files_keep_is_still_written(tmp_path: Path) -> None:
    # llama3-8b on 16 GPUs, --pp 2: a DeepSpeed file states pp 2 at tp 1
    out = tmp_path / "ok"
    r = runner.invoke(app, ["recommend", "--gpus", "16", "--model", "llama3-8b", "--pp", "2",
                            "--top", "1", "--emit", "deepspeed", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    ds = json.loads((out / "ds_config.json").read_text())
    assert ds["pptune"]["held"] == ["pp"] and ds["pipeline"]["stages"] == 2


def test_deepspeed_memory_substitute_offers_only_1f1b() -> None:
    # the same 70B job without --pp: priced without sequence parallelism the plan outgrows
    # the GPU; the plan offered instead is one DeepSpeed runs (1F1B), never interleaved
    # or zbv, which its PipelineEngine does not have
    run = recommend(RecommendSpec.of(gpus=32, model="llama3-70b", seq_len=8192))
    notes = emit("deepspeed", run).notes
    (fit,) = [n for n in notes if "emitting the best plan that fits so" in n]
    assert " 1f1b, " in fit
    for schedule in ("zbv", "interleaved-1f1b", "zb-h1", "dualpipe", "gpipe"):
        assert schedule not in fit


def test_a_framework_version_of_another_framework_is_refused(
        error_line: Callable[[Result], str]) -> None:
    # --emit torchtitan writes torchtitan files: a DeepSpeed release changes nothing
    line = error_line(runner.invoke(app, ["recommend", "--gpus", "16", "--emit", "torchtitan",
                                          "--framework-version", "deepspeed=0.3.0"]))
    assert "--framework-version deepspeed=0.3.0" in line and "torchtitan" in line
    line = error_line(runner.invoke(app, ["recommend", "--gpus", "16", "--framework",
                                          "megatron", "--framework-version",
                                          "torchtitan=0.3.0"]))
    assert "--framework-version torchtitan=0.3.0" in line and "megatron" in line.lower()
