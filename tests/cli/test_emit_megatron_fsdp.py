"""``--emit megatron`` writes ZeRO-2, ZeRO-3 and FSDP plans as Megatron-FSDP, and
check-config reads each script back at the step and memory emit printed.

Megatron-FSDP's optim_grads_params with 16-bit gradients keeps exactly ZeRO-3's state
(BF16 weight and gradient shards, FP32 main weights and moments: 16 bytes a parameter
over dp) and gathers every layer in each micro-batch's forward and backward, as
pptune's ZeRO-3 does; with FP32 gradients it is priced as FSDP, gathered per layer
under a pipeline too (megatron_fsdp.py), which torch's pipelining does not do.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.search import Sharding, evaluate
from pptune.frameworks.registry import ADAPTERS, Framework
from pptune.plan.emit import emit, job_of, write
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend

runner = CliRunner()
SCRIPT = "pretrain_megatron.sh"


def _read_back(folder: Path) -> dict:
    r = runner.invoke(app, ["check-config", str(folder / SCRIPT), "--gpu", "h100-sxm",
                            "--output", "json"])
    assert r.exit_code == 0, r.stdout
    return json.loads(r.stdout)


def _args(text: str) -> list[str]:
    """The flags of the torchrun command, one a line as the writer puts them."""
    return [line.strip().rstrip(" \\") for line in text.splitlines() if line.startswith("    --")]


@pytest.fixture(scope="module")
def llama70b() -> RecommendRun:
    # Llama 3 70B on 64 H100s: plan 1 shards weights, gradients and state over dp x cp 64
    # (ZeRO-3, no pipeline, cp 4), ahead of the best pipelined ZeRO-1 plan, at
    # FlashAttention-2's rates (at cuDNN's, torch's SDPA on an H100, a pipelined plan wins)
    return recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm", top=1,
                                      attention="flash"))


def test_llama3_70b_zero3_winner_is_written_as_megatron_fsdp(llama70b: RecommendRun,
                                                              tmp_path: Path) -> None:
    plan = llama70b.result.plans[0]
    assert (plan.sharding, plan.pp, plan.dp, plan.cp) == (Sharding.ZERO3, 1, 16, 4)
    out = emit("megatron", llama70b)
    assert out.exact and out.plan.spec == plan.spec
    text = out.files[SCRIPT]
    args = _args(text)
    for flag in ("--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
                 "--grad-reduce-in-bf16", "--use-distributed-optimizer",
                 "--ckpt-format fsdp_dtensor", "--no-gradient-accumulation-fusion",
                 "--overlap-grad-reduce", "--overlap-param-gather"):
        assert flag in args, flag
    # validate_args asserts it is not 1 under Megatron-FSDP: never exported here
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text and "export CUDA" not in text
    # the state by hand: 16 bytes a parameter over dp x cp = 64 ranks; working copies two
    # gathered BF16 copies of the largest layer (the head: 128,256 x 8,192 and the final
    # norm's 8,192) and the BF16 gradient buckets a backward keeps queued: min(70.6e9
    # parameters, 1e9 + two of that layer's), 2 bytes each
    params = sum(job_of(llama70b, plan).table.layer_params)
    memory = out.plan.memory[0]
    head = 128256 * 8192 + 8192
    assert memory.state_bytes == pytest.approx(16 * params / 64, rel=1e-12)
    assert memory.working_bytes == pytest.approx(2 * 2 * head + 2 * (1e9 + 2 * head),
                                                 rel=1e-12)
    write(out, tmp_path)
    doc = _read_back(tmp_path)
    assert doc["config"]["sharding"] == "zero3" and doc["errors"] == 0
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(out.plan.peak_memory_bytes,
                                                                rel=1e-9)
    # no warning: an info says what pricing Megatron-FSDP as ZeRO-3 leaves out
    assert [f["id"] for f in doc["findings"] if f["severity"] == "warning"] == []
    assert [f["id"] for f in doc["findings"] if f["id"].startswith("megatron-")] == [
        "megatron-fsdp-priced"]


def test_a_zero2_plan_is_written_as_optim_grads(tmp_path: Path) -> None:
    run = recommend(RecommendSpec.of(gpus=16, gpu="h100-sxm", sharding="zero2", top=1))
    out = emit("megatron", run)
    assert out.plan.sharding is Sharding.ZERO2
    args = _args(out.files[SCRIPT])
    assert "--data-parallel-sharding-strategy optim_grads" in args
    assert "--grad-reduce-in-bf16" in args and "--overlap-param-gather" not in args
    write(out, tmp_path)
    doc = _read_back(tmp_path)
    assert doc["config"]["sharding"] == "zero2"
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(out.plan.peak_memory_bytes,
                                                                rel=1e-9)


def test_a_pipelined_fsdp_plan_is_priced_gathered_per_layer(tmp_path: Path) -> None:
    """FSDP on pp 8: pptune's FSDP keeps a stage's weights gathered for the step under a
    pipeline (torch's pipelining); Megatron-FSDP gathers every layer in each
    micro-batch's forward and backward: the script's plan is priced so, slower and
    smaller, with a note, and read back at those numbers."""
    # priced with the kernels a Megatron-LM script runs: only the sharding re-prices
    run = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm",
                                     sharding="fsdp", pp=[8], top=1, attention="cudnn",
                                     cross_entropy="native"))
    plan = run.result.plans[0]
    assert plan.sharding is Sharding.FSDP and plan.pp == 8
    job = job_of(run, plan)
    stated = ADAPTERS[Framework.MEGATRON].express(job, plan, 1)
    resharded = evaluate(job.table, replace(job.request, fsdp_reshard_after_forward=True),
                         plan.spec)
    assert not stated.exact and stated.plan.spec == plan.spec
    assert stated.plan.step_time_s == pytest.approx(resharded.step_time_s, rel=1e-12)
    assert stated.plan.step_time_s > plan.step_time_s
    assert max(stated.plan.peak_memory_bytes) < max(plan.peak_memory_bytes)
    assert any(n.startswith("Megatron-FSDP gathers every layer's weights") for n in stated.notes)
    files = ADAPTERS[Framework.MEGATRON].write(stated)
    args = _args(files[SCRIPT])
    assert "--data-parallel-sharding-strategy optim_grads_params" in args
    assert "--grad-reduce-in-bf16" not in args  # FSDP's gradients are FP32, as priced
    (tmp_path / SCRIPT).write_text(files[SCRIPT])
    doc = _read_back(tmp_path)
    assert (doc["config"]["sharding"], doc["config"]["fsdp_reshard_after_forward"]) == (
        "fsdp", True)
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(
        stated.plan.peak_memory_bytes, rel=1e-9)


def test_the_distributed_optimizer_alone_under_the_precision_aware_optimizer() -> None:
    """BF16 moments run on the distributed optimizer (widths.py): the search a Megatron-LM
    script is compared with keeps ZeRO-1 only then."""
    from pptune.costmodel.search import PlanRequest

    megatron = ADAPTERS[Framework.MEGATRON]
    req = PlanRequest(gpus=64, global_batch=512, moment_bytes=2.0)
    assert tuple(megatron.stateable(req, None).shardings) == (Sharding.ZERO1,)


def test_a_zero1_plan_found_at_megatron_fsdp_s_prices_keeps_its_step(tmp_path: Path) -> None:
    """qwen3-30b-a3b on 64 H100s at cp 2, 16,384 tokens, ep 8: plan 1 is FSDP DualPipe,
    which Megatron-LM cannot run; the fastest plan its scripts state on the same GPUs
    (ZeRO-1 interleaved) is searched at the prices plan 1 runs at in Megatron-FSDP, whose
    weight gradients are BF16 (--no-gradient-accumulation-fusion). The script it writes
    states ZeRO-1 with Megatron-LM's default fused accumulation into the FP32 main_grad,
    which check-config reads (wgrad_accum fused): the header said 12.264 s, the BF16
    weight-gradient price, and check-config 12.282 s, until emit priced the plan again
    as itself (plan/emit.py _or_faster_stateable). Header and check-config agree."""
    out = tmp_path / "out"
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--model", "qwen3-30b-a3b",
                            "--cp", "2", "--seq-len", "16384", "--ep", "8",
                            "--emit", "megatron", "-o", str(out)])
    assert r.exit_code == 0, r.stderr
    assert "the fastest plan a Megatron-LM file states on the same GPUs is written" in r.stderr
    text = (out / SCRIPT).read_text()
    header = next(line for line in text.splitlines() if line.startswith("# predicted: step "))
    step_s = float(header.split()[3])
    assert "--use-distributed-optimizer" in _args(text)
    assert "--no-gradient-accumulation-fusion" not in _args(text)
    r = runner.invoke(app, ["check-config", str(out / SCRIPT), "--output", "json",
                            "--no-compare"])
    assert r.exit_code == 0, r.stdout
    doc = json.loads(r.stdout)
    assert (doc["config"]["sharding"], doc["config"]["wgrad_accum"]) == ("zero1", "fused")
    assert doc["derived"]["step_time_s"] == pytest.approx(step_s, rel=1e-3)
