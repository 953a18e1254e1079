"""recommend --emit ranks with the kernels the framework's files run (plan/written.py:
the attention kernel, the loss and where weight gradients go), so the table's plan 1
and the file written are priced alike."""

from __future__ import annotations

import dataclasses
import re

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.ops import Attention
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
