"""The MoE kernel flags pptune's own Megatron-LM scripts state are read, not listed
as ignored: --moe-permute-fusion (the fused permutation pptune prices) and
--moe-router-dtype (the router's precision: what of it is priced, noted)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

SCRIPT = ("pretrain_gpt.py --num-layers 4 --hidden-size 1024 --num-attention-heads 16 "
          "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
          "--global-batch-size 64 --bf16 --num-experts 8 --moe-router-topk 2 "
          "--moe-grouped-gemm --expert-model-parallel-size 8 "
          "--moe-token-dispatcher-type alltoall --use-distributed-optimizer")


def notes(tmp_path: Path, extra: str) -> list[str]:
    path = tmp_path / "train.sh"
    path.write_text(SCRIPT + extra + "\n")
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpus", "8", "--output",
                                 "json", "--no-compare"])
    assert r.exit_code in (0, 1), r.output
    return list(json.loads(r.stdout)["notes"])


def test_the_fused_permutation_is_read(tmp_path: Path) -> None:
    unfused = notes(tmp_path, "")
    assert any(n.startswith("no --moe-permute-fusion") for n in unfused)
    fused = notes(tmp_path, " --moe-permute-fusion --moe-router-dtype fp32")
    assert not any("permute-fusion" in n for n in fused)
    assert not any(n.startswith("ignored") for n in fused)
    assert any(n.startswith("--moe-router-dtype fp32: the router's forward GEMM") for n in fused)


def test_the_fp32_router_says_what_is_priced_and_what_is_not(tmp_path: Path) -> None:
    """megatron-core's RouterGatingLinearFunction runs the forward on the BF16 operands
    (FP32 logits out: priced as run) and the two backward GEMMs on FP32 operands, which
    Transformer Engine runs on TF32 tensor cores (cublaslt_gemm.cu: 'default to tf32'),
    half the BF16 rate: their 4 h E FLOPs a token are priced at the BF16 rate. Beside the
    routed experts' 18 k h f (SwiGLU: fc1 2f wide, fc2; forward and two backward GEMMs):
    4 x 256 / (18 x 8 x 2048) = 0.35% for DeepSeek-V3's shape. fp64 is not priced."""
    deepseek = SCRIPT.replace("--num-experts 8 --moe-router-topk 2",
                              "--num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 "
                              "--swiglu")
    path = tmp_path / "train.sh"
    path.write_text(deepseek + " --moe-router-dtype fp32\n")
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpus", "8", "--output", "json",
                                 "--no-compare"])
    (said,) = [n for n in json.loads(r.stdout)["notes"] if n.startswith("--moe-router-dtype")]
    assert "FP32 logits, priced as it runs" in said and "TF32" in said
    assert said.endswith("4 x hidden x experts FLOPs a token, 0.35% of the routed experts' "
                         "GEMM FLOPs, are priced at the BF16 rate")
    assert any(n.startswith("--moe-router-dtype fp64: the router's GEMMs are priced in BF16")
               for n in notes(tmp_path, " --moe-router-dtype fp64"))
