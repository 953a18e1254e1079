"""recommend --emit ranks with the attention kernel the framework's files run, so the
table's plan 1 and the file written are priced with the same kernel."""

from __future__ import annotations

import dataclasses
import re

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.ops import Attention
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()


def _kernel(spec: RecommendSpec) -> tuple[Attention | None, list[str]]:
    run = recommend(spec)
    return run.request.costs.attention, [n for n in run.notes if n.startswith("attention:")]


def test_megatron_ranks_with_cudnn_unless_told() -> None:
    spec = RecommendSpec.of(gpus=8, top=1)
    kernel, said = _kernel(dataclasses.replace(spec, written_as="megatron"))
    assert kernel is Attention.CUDNN and len(said) == 1 and "Megatron-LM" in said[0]
    # the user's kernel stays, and a framework that runs pptune's default changes nothing
    told = RecommendSpec.of(gpus=8, top=1, attention="flash")
    assert _kernel(dataclasses.replace(told, written_as="megatron")) == (Attention.FLASH, [])
    assert _kernel(dataclasses.replace(spec, written_as="torchtitan")) == (Attention.FLASH, [])


def test_emitted_megatron_plan_is_priced_as_plan_one() -> None:
    # DeepSeek-V3 on 1,024 H100s had ranked DualPipeV first at 28.07 s under flash
    # attention, then written as 26.39 s (0.940x plan 1) under the script's cuDNN
    r = runner.invoke(app, ["recommend", "--gpus", "16", "--model", "llama3-8b",
                            "--emit", "megatron"])
    assert r.exit_code == 0, r.stderr
    assert "attention: ranked with cudnn attention" in r.stderr
    ratio = float(re.search(r"\(([0-9.]+)x plan 1\)", r.stderr).group(1))  # type: ignore[union-attr]
    # what is left is the script's fused cross-entropy (1.010x); under flash attention
    # the same file was written at 0.91x plan 1
    assert 1.0 <= ratio <= 1.02
