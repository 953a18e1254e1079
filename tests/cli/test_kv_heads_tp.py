"""Tensor parallelism and the key/value heads, by each framework's own rule
(costs/dims.py KvHeads): megatron-core takes a tp that divides the query groups or is
a multiple of them (transformer_config.py), torchtitan one that divides them
(models/llama3/model/model.py views each rank's K/V columns as whole heads)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.presets import GPUS, MODELS
from pptune.costs.dims import KvHeads, kv_problem, search_keys
from pptune.costs.modelspec import from_hf_config
from pptune.costs.profiles import analytic_profile
from pptune.options import CostOptions
from tests.conftest import Cli

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
TITAN_TP16 = CONFIGS / "torchtitan_llama3_70b_tp16.toml"  # tp 16 cp 4 pp 4, 512 H100
MEGATRON_TP16 = CONFIGS / "megatron_llama3_70b_tp16.sh"  # tp 16 cp 8 pp 4, 8 groups
# the README's cluster recipe's model: 8 query heads, 4 key/value heads
TINY_GQA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
            "intermediate_size": 688, "num_hidden_layers": 4, "num_attention_heads": 8,
            "num_key_value_heads": 4, "vocab_size": 4096, "max_position_embeddings": 512,
            "tie_word_embeddings": False}


def test_each_framework_rule() -> None:
    assert kv_problem(8, 16, KvHeads.REPLICATE, "m") is None  # 2 ranks keep each head
    assert kv_problem(8, 4, KvHeads.REPLICATE, "m") is None
    assert kv_problem(8, 12, KvHeads.REPLICATE, "m") == (
        "is neither a divisor nor a multiple of the 8 key/value heads of m (megatron-core: "
        "num_query_groups must be a multiple or divisor of tensor_model_parallel_size, "
        "transformer_config.py)")
    assert kv_problem(8, 4, KvHeads.SPLIT, "m") is None
    why = kv_problem(8, 16, KvHeads.SPLIT, "m")
    assert why is not None and why.startswith("does not divide the 8 key/value heads of m "
                                              "(torchtitan shards wk and wv over tp")


def test_the_search_takes_tp_8_over_4_query_groups_where_megatron_runs_it() -> None:
    """Qwen3-30B-A3B: 32 heads, 4 key/value heads; tp 1, 2, 4, 8 in a node of 8."""
    qwen = MODELS["qwen3-30b-a3b"]
    opts = CostOptions(cp=(1,), ep=(1,))

    def tps(kv: KvHeads) -> list[int]:
        return [k.tp for k in search_keys(opts, qwen, GPUS["h100-sxm"], 64, 8, kv)]
    assert tps(KvHeads.REPLICATE) == [1, 2, 4, 8]
    assert tps(KvHeads.SPLIT) == [1, 2, 4]


def test_recommend_tp_16_over_8_groups_for_megatron_not_torchtitan(
        cli: Cli, error_line: Callable[[Result], str]) -> None:
    flags = ("recommend", "--model", "llama3-70b", "--gpu", "gb200", "--gpus", "144",
             "--tp", "16")
    r = cli(*flags, "--json")
    assert r.exit_code == 0, r.stderr
    assert {p["tp"] for p in json.loads(r.stdout)["plans"]} == {16}
    assert error_line(cli(*flags, "--emit", "torchtitan")) == (
        "pptune: error: --tp 16: does not divide the 8 key/value heads of llama3-70b "
        "(torchtitan shards wk and wv over tp and views each rank's columns as whole heads, "
        "models/llama3/model/model.py Attention.forward: a tp that does not divide them "
        "fails at the first forward); choose a tp that divides 8")


def test_check_config_judges_tp_by_the_files_framework(cli: Cli) -> None:
    r = cli("check-config", TITAN_TP16, "--gpus", "512", "--output", "json", "--no-compare")
    doc = json.loads(r.stdout)
    assert r.exit_code == 1
    (kv,) = [f for f in doc["findings"] if f["id"] == "tp-kv-heads"]
    assert kv["severity"] == "error" and kv["message"].startswith(
        "tp 16 does not divide the 8 key/value heads of llama3-70b (torchtitan")
    r = cli("check-config", MEGATRON_TP16, "--gpu", "h100-sxm", "--output", "json",
            "--no-compare")
    doc = json.loads(r.stdout)
    assert not [f for f in doc["findings"] if f["id"] == "tp-kv-heads"], doc["findings"]
    assert {f["id"] for f in doc["findings"]} >= {"memory-ok", "bubble-ok"}


@pytest.fixture()
def gqa_profile(tmp_path: Path) -> Path:
    """A profile of the recipe's model that names its Hugging Face config, as probe's."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_GQA))
    prof = analytic_profile(from_hf_config(config), "h100-sxm", [1])
    prof = prof.model_copy(update={"model": prof.model.model_copy(
        update={"hf_config": str(config)})})
    path = tmp_path / "pptune-profile.json"
    path.write_text(prof.model_dump_json())
    return path


def test_a_measured_profile_follows_the_same_rule(
        cli: Cli, error_line: Callable[[Result], str], gqa_profile: Path) -> None:
    flags = ("recommend", "--profile", gqa_profile, "--gpus", "64", "--tp", "8")
    r = cli(*flags)
    assert r.exit_code == 0, r.stderr
    assert ("--tp 8 exceeds the model's 4 key/value heads: megatron-core keeps one whole "
            "head a rank (2 ranks share each)") in r.stderr
    line = error_line(cli(*flags, "--emit", "torchtitan"))
    assert line.startswith(
        f"pptune: error: --tp 8 does not divide the 4 key/value heads of the model profile "
        f"{gqa_profile}")
    # the attention heads first: 8 of them
    assert error_line(cli("recommend", "--profile", gqa_profile, "--gpus", "48", "--tp", "3",
                          "--emit", "torchtitan")).startswith(
        "pptune: error: --tp 3 does not divide the 8 attention heads of the model")


def test_check_configs_best_plan_searches_the_files_frameworks_tp() -> None:
    """The comparison's other layouts (check.layouts) at the tp the file's framework takes."""
    from pptune.check.costs import costs
    from pptune.frameworks.read import read_config

    for name, rule in (("torchtitan_llama3_8b.toml", KvHeads.SPLIT),
                       ("megatron_llama3_8b.sh", KvHeads.REPLICATE)):
        read = read_config(CONFIGS / name, gpus=16, gpu="h100-sxm")
        priced = costs(read.config, CONFIGS, CostOptions(gpu="h100-sxm"),
                       lambda *a, **v: None, gpus=16)
        assert priced.kv_heads is rule
