"""The loss's kernels (costmodel/loss.py), derived by hand from the frameworks' code.

Per logit: one pass each way moves 6 + 6 bytes; megatron-core's fused loss 22 + 10
(cast with the max; subtract, exp, sum; divide; backward scale written back and its
bf16 copy); its unfused loss 38 + 14 (float, max, -= max, exp, sum, div_; mul_ and
autograd's cast back to bf16).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.ends import head_ops
from pptune.costmodel.kernels import Phase
from pptune.costmodel.loss import BYTES, CrossEntropy
from pptune.costmodel.models import ModelShape
from pptune.costmodel.rates import Parallel, Rates
from pptune.frameworks.read import read_config

SMALL = ModelShape("loss", 2, 64, 4, 2, 128, 1000, 32, 8, True, False, "test")
H100 = presets.GPUS["h100-sxm"]


def _loss(par: Parallel) -> tuple[float, float]:
    ops = {o.name: o for o in head_ops(SMALL, 1, Rates.of(H100), par)}
    return ops["cross_entropy"].hbm_bytes, ops["cross_entropy.bwd"].hbm_bytes


def test_bytes_per_logit_of_each_implementation() -> None:
    assert BYTES[CrossEntropy.FUSED] == (2 + 4, 4 + 2)
    assert BYTES[CrossEntropy.NATIVE] == ((2 + 4) + (4 + 4) + (4 + 4), (4 + 4) + 2)
    assert BYTES[CrossEntropy.UNFUSED] == ((2 + 4) + 4 + (4 + 4) + (4 + 4) + 4 + (4 + 4),
                                           (4 + 4) + (4 + 2))
    # PyTorch eager: .float(), log-softmax reading a row three times and writing it;
    # backward: nll's zero-filled gradient, softmax backward (two reads of the gradient,
    # one of the output, one write), the cast back to bf16
    assert BYTES[CrossEntropy.EAGER] == ((2 + 4) + (3 * 4 + 4), 4 + (3 * 4 + 4) + (4 + 2))


def test_the_head_moves_its_logits_as_the_loss_does() -> None:
    # 32 tokens x 1000 logits; tp 2 splits the vocabulary: 16,000 a rank
    assert _loss(Parallel()) == (6 * 32_000, 6 * 32_000)
    assert _loss(Parallel(cross_entropy=CrossEntropy.UNFUSED)) == (38 * 32_000, 14 * 32_000)
    assert _loss(Parallel(tp=2, cross_entropy=CrossEntropy.NATIVE)) == (22 * 16_000,
                                                                          10 * 16_000)


def test_the_unfused_loss_adds_its_bytes_at_the_hbm_rate() -> None:
    rates = Rates.of(H100)
    fused, unfused = (analytic_layers(SMALL, H100, [1], cross_entropy=c)[-1].per_micro_batch[1]
                      for c in (CrossEntropy.FUSED, CrossEntropy.UNFUSED))
    # 32 bytes more a logit forward, 8 backward, and 6 + 1 more kernels
    assert unfused.fwd_s - fused.fwd_s == pytest.approx(32 * 32_000 / rates.hbm_bytes_per_s
                                                        + 6 * rates.launch_s)
    assert unfused.bwd_s - fused.bwd_s == pytest.approx(8 * 32_000 / rates.hbm_bytes_per_s
                                                        + 1 * rates.launch_s)
    assert [o.phase for o in head_ops(SMALL, 1, rates, Parallel())
            if o.name.startswith("cross")] == [Phase.F, Phase.B]


@pytest.mark.parametrize("flags, loss", [
    ("", "unfused"),
    ("--cross-entropy-loss-fusion", "native"),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl te", "fused"),
    ("--cross-entropy-loss-fusion --cross-entropy-fusion-impl linear", "fused"),
])
def test_megatron_scripts_state_their_loss(tmp_path: Path, flags: str, loss: str) -> None:
    path = tmp_path / "train.sh"
    path.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 "
                    "--hidden-size 4096 --num-attention-heads 32 --seq-length 8192 "
                    "--micro-batch-size 1 --global-batch-size 128 --bf16 " + flags + "\n")
    assert read_config(path).config.cross_entropy == loss


@pytest.mark.parametrize("tables, loss", [
    ("", "eager"),
    ("[compile]\nenable = true\n", "fused"),
    ('[compile]\nenable = true\ncomponents = ["model"]\n', "eager"),
    ("[compile]\nenable = false\n", "eager"),
])
def test_torchtitan_files_state_their_loss(tmp_path: Path, tables: str, loss: str) -> None:
    """torchtitan compiles its loss with [compile] enable and "loss" in components."""
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\n'
                    'local_batch_size = 1\nseq_len = 8192\n[parallelism]\n'
                    "data_parallel_shard_degree = 8\n" + tables)
    assert read_config(path, gpus=8).config.cross_entropy == loss
