"""The modern published benchmark: its data as transcribed and the recipe arithmetic."""

from __future__ import annotations

import pytest

from bench.published_modern import (
    long_context,
    megatron_split,
    model_flops_per_token,
    padded_vocab,
    predict,
    shape_of,
    trends,
)
from bench.published_modern_data import LONG_RUNS, RUNS


def test_every_development_row_is_here() -> None:
    by = {}
    for r in RUNS:
        by.setdefault(r.table.split()[0], []).append(r)
    # dgxc v25.02: 8B 5+5, 70B 6+6, 405B 6+6, GPT-3 5+5, 15B 3+3, 340B 5+5
    assert len(by["dgxc"]) == 60
    assert len(by["nemo24.07"]) == 12 and len(by["nemo25.02"]) == 6
    for r in RUNS:  # the published configuration multiplies out to the world
        assert r.gpus % (r.tp * r.pp * r.cp) == 0
        dp = r.gpus // (r.tp * r.pp * r.cp)
        assert r.global_batch % (dp * r.micro_batch) == 0, r


def test_published_per_gpu_is_cluster_tokens_over_gpus() -> None:
    first = next(r for r in RUNS if r.table == "dgxc llama3.1-8b bf16")
    assert first.published_tokens_per_gpu == pytest.approx(82028 / 8)


def test_recipe_arithmetic() -> None:
    assert padded_vocab(50257, 4) == 50688  # a multiple of 128 x 4
    assert padded_vocab(128256, 1) == 128256
    assert megatron_split(96, 48) == (3,) + (2,) * 46 + (3,)  # embedding and head added
    assert megatron_split(126, 64) == (2,) * 64  # NeMo 2.0: embedding and loss count as layers
    with pytest.raises(ValueError):
        megatron_split(9, 4)


def test_model_flops_match_the_dgxc_readmes() -> None:
    # llama3.1/README_70b.md: 3.94E+15 a sequence; nemo_megatron/README_175b.md: 2.20E+15
    for model, want in (("llama3-70b", 3.94e15), ("gpt3-175b", 2.20e15)):
        m = shape_of(model, 1, None, None)
        assert model_flops_per_token(m) * m.seq_len == pytest.approx(want, rel=0.005)


def test_one_row_end_to_end_and_its_trend() -> None:
    rows = [predict(r) for r in RUNS if r.table == "dgxc nemotron4-15b fp8"]
    assert [r["gpus"] for r in rows] == [16, 128, 2048]
    assert all(r["fits"] and r["distributed_optimizer"] for r in rows)
    assert rows[0]["ratio"] == pytest.approx(rows[0]["predicted_tokens_per_gpu"]
                                             / rows[0]["published_tokens_per_gpu"], rel=1e-3)
    (t,) = trends(rows)
    assert t["published"] == pytest.approx(rows[-1]["published_tokens_per_gpu"]
                                           / rows[0]["published_tokens_per_gpu"], rel=1e-3)


@pytest.mark.parametrize("run", LONG_RUNS, ids=lambda r: r.name)
def test_long_context_runs_fit(run) -> None:  # type: ignore[no-untyped-def]
    row = long_context(run)
    assert row["fits"], row["rejected"]
    assert row["peak_memory_gib"] <= 80
    # what the source states is what is priced (Meta: interleaved 1F1B and FSDP)
    assert run.schedule in (None, row["schedule"]) and run.sharding in (None, row["sharding"])


def test_each_recipe_states_the_loss_it_runs() -> None:
    """NeMo 1.x yamls that set cross_entropy_loss_fusion run megatron-core's fused loss
    (native); those that do not, megatron-core's default, the unfused one; NeMo 2.0's
    GPTConfig fuses it (native). No NeMo recipe runs pptune's one pass."""
    loss = {(r.table.split()[0], r.recipe.model): r.recipe.cross_entropy for r in RUNS}
    assert loss[("dgxc", "gpt3-175b")] == "unfused"
    assert loss[("dgxc", "llama3-70b")] == loss[("dgxc", "nemotron4-15b")] == "native"
    assert loss[("nemo24.07", "gpt3-175b")] == loss[("nemo24.07", "nemotron4-340b")] == "unfused"
    assert loss[("nemo24.07", "llama3-8b")] == loss[("nemo24.07", "nemotron3-8b")] == "native"
    assert all(r.recipe.cross_entropy != "fused" for r in RUNS)
    unset = [r for r in RUNS if r.recipe.cross_entropy == "unfused"]
    assert all("cross_entropy_loss_fusion unset" in r.recipe.source for r in unset)
