"""The loss's kernels through ``--emit`` and back through check-config (costmodel/loss.py).

A plan priced with megatron-core's unfused loss (``--cross-entropy unfused``): the
Megatron-LM script states ``--cross-entropy-loss-fusion`` and the plan is re-predicted
with the fused kernels; pptune's own file states the key. Either file reads back at
the emitted step.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()


@pytest.fixture(scope="module")
def run() -> RecommendRun:
    return recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[2],
                                      cross_entropy="unfused", top=1))


def _step(path: Path) -> float:
    r = runner.invoke(app, ["check-config", str(path), "--gpus", "8", "--gpu", "h100-sxm",
                            "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    return float(json.loads(r.stdout)["derived"]["step_time_s"])


def test_megatron_states_the_fused_loss_and_predicts_with_it(run: RecommendRun,
                                                             tmp_path: Path) -> None:
    ranked = run.result.plans[0]
    out = emit(Framework.MEGATRON, run)
    note = next(n for n in out.notes if "--cross-entropy-loss-fusion" in n)
    # re-predicted with 22 + 10 bytes a logit, not 38 + 14: a shorter step
    assert float(re.search(r"step ([0-9.]+) s", note).group(1)) < ranked.step_time_s
    write(out, tmp_path)
    script = tmp_path / "pretrain_megatron.sh"
    assert "--cross-entropy-loss-fusion" in script.read_text()
    assert _step(script) == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_pptune_files_state_the_loss(run: RecommendRun, tmp_path: Path) -> None:
    out = emit(Framework.PPTUNE, run)
    write(out, tmp_path)
    path = tmp_path / "pptune.yaml"
    assert "cross_entropy: unfused" in path.read_text()
    assert _step(path) == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_torchtitan_states_no_compile_for_bf16_and_predicts_the_eager_loss(
        run: RecommendRun, tmp_path: Path) -> None:
    out = emit(Framework.TORCHTITAN, run)
    assert any("its cross-entropy and SwiGLU eagerly" in n for n in out.notes)
    write(out, tmp_path)
    path = tmp_path / "torchtitan.toml"
    assert "[compile]" not in path.read_text()
    assert _step(path) == pytest.approx(out.plan.step_time_s, rel=1e-9)
