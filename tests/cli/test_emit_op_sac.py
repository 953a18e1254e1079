"""torchtitan's per-op selective checkpointing in ``--emit torchtitan``.

Where a plan recomputes fully or every Nth block, the torchtitan file states the
per-op policy (``selective_ac_option = "op"``, costmodel/op_sac.py) when it fits and
is faster, and check-config prices the written file as emitted.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.search import Recompute, evaluate
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()


@pytest.fixture(scope="module")
def run() -> RecommendRun:
    # Llama 3 8B on 8 GPUs at 16 sequences a micro-batch: only recomputation fits
    return recommend(RecommendSpec.of(gpus=8, model="llama3-8b", sharding="fsdp", pp=[1],
                                      micro_batch_sizes=[16], top=1))


def test_the_file_states_per_op_checkpointing_and_reprices_the_same(
        run: RecommendRun, tmp_path: Path) -> None:
    ranked = run.result.plans[0]
    assert ranked.recompute in (Recompute.FULL, Recompute.SELECTIVE)
    emitted = emit(Framework.TORCHTITAN, run)
    plan = emitted.plan
    assert plan.recompute is Recompute.MODULES and plan.recompute_modules == ("op_sac",)
    # faster than every block recomputed, the one full mode torchtitan's file would state
    # (the ranked plan recomputes the fewest blocks that fit: a count no file states)
    every = evaluate(run.table, run.plan_request, replace(ranked.spec, recompute_layers=None))
    assert plan.step_time_s < every.step_time_s
    assert any("per-op selective checkpointing" in n for n in emitted.notes)
    write(emitted, tmp_path)
    text = (tmp_path / "torchtitan.toml").read_text()
    assert 'selective_ac_option = "op"' in text
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--gpus", "8",
                            "--gpu", "h100-sxm", "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    derived = json.loads(r.stdout)["derived"]
    assert derived["step_time_s"] == pytest.approx(plan.step_time_s, rel=1e-9)
    assert derived["peak_memory_bytes"] == pytest.approx(list(plan.peak_memory_bytes), rel=1e-9)


def test_megatron_files_never_state_it(run: RecommendRun) -> None:
    plan = emit(Framework.MEGATRON, run).plan
    assert "op_sac" not in plan.recompute_modules
