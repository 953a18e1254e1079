"""The MoE kernel flags pptune's own Megatron-LM scripts state are read, not listed
as ignored: --moe-permute-fusion (the fused permutation pptune prices) and
--moe-router-dtype (the router's precision, noted as not priced)."""

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
    assert any(n.startswith("--moe-router-dtype fp32: the router's GEMM") and "BF16" in n
               for n in fused)
