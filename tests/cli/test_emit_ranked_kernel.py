"""recommend --emit ranks with the kernels the framework's files run (plan/written.py:
the attention kernel, the loss, where weight gradients go and whose FP8 linears), so the
table's plan 1 and the file written are priced alike."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.ops import Attention
from pptune.costmodel.precision import Fp8Kernels
from pptune.costmodel.rates import WgradAccum
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()


def _kernels(spec: RecommendSpec) -> tuple[tuple[object, object, object], list[str]]:
    run = recommend(spec)
    c = run.request.costs
    return (c.attention, c.cross_entropy, c.wgrad_accum), [
        n for n in run.notes if n.startswith("kernels:")]


def test_megatron_ranks_with_its_kernels_unless_told() -> None:
    spec = RecommendSpec.of(gpus=8, top=1)
    kernels, said = _kernels(dataclasses.replace(spec, written_as="megatron"))
    assert kernels == (Attention.CUDNN, CrossEntropy.NATIVE, WgradAccum.FUSED)
    assert said == ["kernels: ranked with cudnn attention, its native cross-entropy and "
                    "fused weight-gradient accumulation, what Megatron-LM's files run "
                    "(--attention, --cross-entropy or --wgrad-accum sets another)"]
    # the user's kernels stay, the others still the files'
    told = RecommendSpec.of(gpus=8, top=1, attention="flash", wgrad_accum="unfused")
    kernels, said = _kernels(dataclasses.replace(told, written_as="megatron"))
    assert kernels == (Attention.FLASH, CrossEntropy.NATIVE, WgradAccum.UNFUSED)
    assert said == ["kernels: ranked with its native cross-entropy, what Megatron-LM's "
                    "files run (--cross-entropy sets another)"]
    # a framework that runs pptune's defaults changes nothing
    assert _kernels(dataclasses.replace(spec, written_as="torchtitan")) == (
        (Attention.SDPA, None, None), [])


def test_emitted_megatron_plan_is_priced_as_plan_one() -> None:
    # DeepSeek-V3 on 1,024 H100s had ranked DualPipeV first at 28.07 s under flash
    # attention, then written as 26.39 s (0.940x plan 1) under the script's cuDNN; and
    # ranked with pptune's fused loss and BF16 gradients, an interleaved plan written at
    # 1.092x plan 1 where plan 2 wrote at 1.005x
    r = runner.invoke(app, ["recommend", "--gpus", "16", "--model", "llama3-8b",
                            "--emit", "megatron"])
    assert r.exit_code == 0, r.stderr
    assert "kernels: ranked with cudnn attention" in r.stderr
    # what is left: a Megatron-FSDP plan's BF16 weight gradients (ranked with the FP32
    # main_grad's fused accumulation, the distributed optimizer's): 0.997x
    found = re.search(r"\(([0-9.]+)x plan 1\)", r.stderr)
    assert found is None or 0.99 <= float(found.group(1)) <= 1.01, r.stderr


def test_torchtitan_ranks_fp8_plans_with_torchaos_float8_unless_told() -> None:
    # torchtitan's float8 converter swaps in torchao's Float8Linear (closest.py prices
    # the written plan with Fp8Kernels.TORCHAO): no cached FP8 weight copies
    spec = RecommendSpec.of(gpus=8, top=1, precision="fp8")
    run = recommend(dataclasses.replace(spec, written_as="torchtitan"))
    assert run.request.costs.fp8_kernels is Fp8Kernels.TORCHAO
    assert [n for n in run.notes if n.startswith("kernels:")] == [
        "kernels: ranked with torchao FP8 linears, what torchtitan's files run "
        "(--fp8-kernels sets another)"]
    assert all(m.fp8_copies_bytes == 0 for p in run.result.plans for m in p.memory)
    told = RecommendSpec.of(gpus=8, top=1, precision="fp8", fp8_kernels="te")
    run = recommend(dataclasses.replace(told, written_as="torchtitan"))
    assert run.request.costs.fp8_kernels is Fp8Kernels.TE
    assert not [n for n in run.notes if n.startswith("kernels:")]
    # Megatron-LM runs Transformer Engine's: pptune's default, nothing said of it
    run = recommend(dataclasses.replace(spec, written_as="megatron"))
    assert run.request.costs.fp8_kernels in (None, Fp8Kernels.TE)
    assert "FP8 linears" not in " ".join(run.notes)


# llama3-70b, 32k tokens, FP8 on 64 H100s at tp 2, cp 8, pp 1 with FSDP over dp 4: a
# torchtitan file of it fits (check-config: 66.30 GiB of 79.65), but ranked with
# Transformer Engine's cached FP8 weights and transposes (2 bytes a GEMM weight, each
# rank all of its 80 blocks' since FSDP shards no cache: 80 x (2 x 8192^2 + 2 x 8192 x
# 1024 + 3 x 8192 x 28672) / tp 2 x 2 B = 63.75 GiB beyond it) recommend --framework
# torchtitan found no plan fits and check-config's best-plan comparison proposed it
_70B = ["--gpus", "64", "--model", "llama3-70b", "--gpu", "h100-sxm", "--seq-len", "32768",
        "--global-batch", "16", "--precision", "fp8"]


def test_te_weight_copies_are_what_kept_the_torchtitan_plan_out() -> None:
    gemm_weights = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672) // 2
    spec = RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm", seq_len=32768,
                            global_batch=16, precision="fp8", tp="2", cp="8", pp="1",
                            micro_batch_sizes="1", recompute="none", sharding="fsdp", top=1)
    plan = recommend(dataclasses.replace(spec, written_as="torchtitan")).result.plans[0]
    te = dataclasses.replace(spec, written_as="torchtitan", costs=dataclasses.replace(
        spec.costs, fp8_kernels=Fp8Kernels.TE))
    run = recommend(te)
    assert run.result.plans == []  # over the GPU with the copies
    assert run.result.rejected["out_of_memory"] == 1
    assert plan.memory[0].fp8_copies_bytes == 0
    assert gemm_weights * 2 / 2**30 == pytest.approx(63.75, abs=0.005)
    # the rest fits: 66.30 GiB of the 79.65 the H100's 80 GB leave (check-config's)
    assert max(plan.peak_memory_bytes) / 2**30 == pytest.approx(66.30, abs=0.005)
    assert max(plan.peak_memory_bytes) + gemm_weights * 2 > plan.memory_capacity_bytes


@pytest.mark.parametrize("layout", [["--tp", "2", "--cp", "8", "--pp", "1"], []])
def test_torchtitan_plan_one_fits_as_its_file_is_checked(layout: list[str],
                                                         tmp_path: Path) -> None:
    asked = ["recommend", *_70B, *layout, "--framework", "torchtitan"]
    r = runner.invoke(app, [*asked, "--json"])
    assert r.exit_code == 0, r.stderr
    planned = json.loads(r.stdout)["plans"][0]
    r = runner.invoke(app, [*asked, "--emit", "torchtitan", "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    c = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--strict",
                            "--output", "json"])
    doc = json.loads(c.stdout)
    assert c.exit_code == 0, doc["findings"]
    assert max(planned["peak_memory_bytes"]) == pytest.approx(
        doc["derived"]["peak_memory_bytes"][0], rel=1e-9)
    if layout:  # the plan check-config's comparison had named 1.15x faster
        assert (planned["pp"], planned["tp"], planned["cp"]) == (1, 2, 8)


# torchtitan's [model] converters run torchao's Float8Linear whatever --fp8-kernels says:
# --emit torchtitan writes an explicit `te` plan as torchao's with a note (closest.py), and
# --framework torchtitan, which ranks plans as its files run them, says it once and ranks
# them with torchao's linears (no cached FP8 weight copies: fp8_copies_bytes 0)
_TE = ("recommend", "--gpus", "8", "--precision", "fp8", "--fp8-kernels")
_SET_ASIDE = ("kernels: --fp8-kernels te set aside: torchtitan's files run torchao FP8 "
              "linears (no cached FP8 weights), with which the plans are ranked, as --emit "
              "torchtitan prices the file it writes")


def test_framework_torchtitan_says_it_ranks_te_fp8_as_torchao() -> None:
    r = runner.invoke(app, [*_TE, "te", "--framework", "torchtitan", "--json"])
    assert r.exit_code == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "--fp8-kernels" in line]
    assert said == [f"pptune: {_SET_ASIDE}"], r.stderr
    assert json.loads(r.stdout)["request"]["fp8_kernels"] == "torchao"  # the plan file's
    spec = RecommendSpec.of(gpus=8, top=3, precision="fp8", fp8_kernels="te")
    run = recommend(dataclasses.replace(spec, framework="torchtitan"))
    assert run.request.costs.fp8_kernels is Fp8Kernels.TORCHAO
    assert [n for n in run.notes if n.startswith("kernels:")] == [_SET_ASIDE]
    assert run.result.plans
    assert all(m.fp8_copies_bytes == 0 for p in run.result.plans for m in p.memory)
    # torchao asked: what its files run, nothing to say
    r = runner.invoke(app, [*_TE, "torchao", "--framework", "torchtitan", "--json"])
    assert r.exit_code == 0 and "--fp8-kernels" not in r.stderr, r.stderr


def test_emit_torchtitan_writes_te_fp8_as_torchao_with_a_note() -> None:
    """The --emit path (the table pptune's, ranked with te as asked): a note, no refusal;
    the same flag with --framework is no refusal either."""
    r = runner.invoke(app, [*_TE, "te", "--emit", "torchtitan"])
    assert r.exit_code == 0, r.stderr
    assert "torchao's float8 linears (no cached FP8 weights): predicted that way" in r.stderr
    assert "set aside" not in r.stderr
