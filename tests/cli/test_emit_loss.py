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
    # at FlashAttention-2's rates, where plan 1 is the ZBV plan these tests are about
    return recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[2],
                                      cross_entropy="unfused", top=1, attention="flash"))


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


def test_torchtitan_compiles_what_its_schedule_takes_and_predicts_it(
        run: RecommendRun, tmp_path: Path) -> None:
    """A BF16 plan priced with a fused loss and SwiGLU gets [compile]; torch's zero-bubble
    and DualPipeV schedules refuse compiled stage modules (schedules.py
    _check_torch_compile_compatibility), so under them only the loss is compiled and the
    SwiGLU is priced eager."""
    out = emit(Framework.TORCHTITAN, run)
    write(out, tmp_path)
    path = tmp_path / "torchtitan.toml"
    text = path.read_text()
    assert "[compile]\nenable = true" in text
    # ranked zbv, which fits only with the SwiGLU fused: priced eager it gives way to the
    # best plan that fits so, written with the SwiGLU eager as priced
    assert any("refuse a compiled model" in n for n in out.notes)
    assert 'components = ["loss"]' in text
    assert _step(path) == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_torchtitan_states_no_compile_where_the_plan_is_priced_eager(tmp_path: Path) -> None:
    """--cross-entropy eager --swiglu eager: nothing compiled, no [compile] table."""
    eager = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[2],
                                       schedules=["1f1b"], cross_entropy="eager",
                                       swiglu="eager", top=1))
    out = emit(Framework.TORCHTITAN, eager)
    write(out, tmp_path)
    path = tmp_path / "torchtitan.toml"
    assert "[compile]" not in path.read_text()
    assert _step(path) == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_a_plan_that_outgrows_the_gpu_as_run_is_replaced_or_said(
        run: RecommendRun, monkeypatch: pytest.MonkeyPatch) -> None:
    """Re-priced as a framework runs it (here: the eager SwiGLU, which keeps more), a plan
    that no longer fits gives way to the search's best plan on those costs; when the
    search finds none, a note says the file will overflow."""
    import dataclasses

    from pptune.costmodel.rates import Swiglu
    from pptune.frameworks.common import express as ex
    from pptune.plan.emit import job_of

    plan = run.result.plans[0]
    job = job_of(run, plan)

    def priced(notes: list[str]):  # type: ignore[no-untyped-def]
        return ex.priced_as_run(job, plan, name="torchtitan", attention="flash",
                                sequence_parallel=job.sequence_parallel, runs="eager",
                                notes=notes, swiglu=Swiglu.EAGER)

    # the 2-stage plan the search ranked first fits with the fused kernel, not eager
    assert max(plan.peak_memory_bytes) <= plan.memory_capacity_bytes
    notes: list[str] = []
    _, found = priced(notes)
    assert any(n.startswith("so run, the plan needs") for n in notes)
    assert max(found.peak_memory_bytes) <= found.memory_capacity_bytes
    real = ex.search
    monkeypatch.setattr(ex, "search", lambda *a, **k: dataclasses.replace(
        real(*a, **k), plans=[]))
    notes = []
    _, kept = priced(notes)
    assert any("no plan of the search fits so" in n for n in notes)
    assert max(kept.peak_memory_bytes) > max(plan.peak_memory_bytes)
