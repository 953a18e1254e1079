"""check-config with experts: the placement rules every framework enforces, the shape a
config states, and the expert-parallel cost key of its prediction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.check.experts import cost_key, experts_of, stated_shape
from pptune.cli.app import app
from pptune.costmodel import presets
from pptune.costmodel.keys import CostKey
from pptune.costs.modelspec import from_sizes
from pptune.schemas import TrainingConfig
from tests.check_json import check_file

runner = CliRunner()
MIXTRAL = "micro_batch_size: 1\nglobal_batch: 256\nmodel: mixtral-8x7b\ngpu: h100-sxm\n"


def check(tmp_path: Path, text: str, *flags: str) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / "pptune.yaml", text, *flags, by="message")


def test_expert_parallel_config_is_priced_with_its_key(tmp_path: Path) -> None:
    code, found, doc = check(tmp_path, MIXTRAL + "gpus: 64\ntp: 2\npp: 4\nep: 8\n")
    assert code == 0, found
    assert doc["config"]["ep"] == 8 and "memory-ok" in found
    dense = check(tmp_path, MIXTRAL + "gpus: 64\ntp: 2\npp: 4\n")[2]
    # eight experts a rank at ep 1, one at ep 8: the first rank's memory falls
    assert doc["derived"]["peak_memory_bytes"][0] < dense["derived"]["peak_memory_bytes"][0]


@pytest.mark.parametrize(("extra", "rule", "words"), [
    ("gpus: 48\ntp: 2\npp: 4\nep: 3\n", "moe-experts-ep", "ep 3 does not divide the 8 routed"),
    ("gpus: 16\ntp: 2\npp: 4\nep: 8\n", "moe-world", "ep x etp = 8 x 1 = 8 does not divide the 4"),
    ("gpus: 64\ntp: 2\npp: 4\nep: 2\netp: 3\n", "moe-etp-ffn",
     "etp 3 does not divide the expert FFN width 14336"),
    ("gpus: 64\ntp: 2\npp: 4\nep: 8\nrank_order: tp-pp-dp\n", "moe-rank-order",
     "must span tp x cp = 2 ranks"),
])
def test_placements_the_frameworks_refuse(tmp_path: Path, extra: str, rule: str,
                                          words: str) -> None:
    code, found, doc = check(tmp_path, MIXTRAL + extra)
    assert code == 1 and rule in found, found
    assert words in found[rule]
    assert doc["derived"]["step_time_s"] is None  # nothing predicted for a refused run


def test_expert_parallelism_without_experts_has_no_effect(tmp_path: Path) -> None:
    code, found, doc = check(tmp_path, "micro_batch_size: 1\nglobal_batch: 64\n"
                             "model: llama3-8b\ngpu: h100-sxm\ngpus: 16\npp: 2\nep: 2\n"
                             "sharding: zero1\n")
    assert code == 0 and "has no effect on it (priced as ep 1)" in found["moe-ep-dense"]
    assert doc["derived"]["step_time_s"] > 0


def test_top_k_above_the_experts_is_a_finding_naming_the_fix(tmp_path: Path) -> None:
    text = ("micro_batch_size: 1\nglobal_batch: 64\ngpus: 8\npp: 2\nnum_layers: 4\n"
            "hidden_size: 256\nnum_heads: 4\nseq_len: 128\nnum_experts: 4\nmoe_top_k: 6\n")
    code, found, _ = check(tmp_path, text)
    assert code == 1
    assert "top-k 6 exceeds the 4 routed experts" in found["moe-topk"]
    assert "set the top-k to at most 4" in found["moe-topk"]


@pytest.mark.parametrize(("extra", "words"), [
    ("num_experts: 8\n", "num_experts 8 needs moe_top_k (the routed experts per token); set"),
    ("moe_top_k: 2\n", "moe_top_k describes routed experts but num_experts is not set"),
    ("kv_lora_rank: 512\nqk_nope_head_dim: 128\n", "kv_lora_rank 512 (multi-head latent "
     "attention) needs qk_rope_head_dim; set qk_rope_head_dim, v_head_dim"),
    ("q_lora_rank: 64\n", "q_lora_rank needs kv_lora_rank"),
])
def test_an_moe_config_missing_a_key_is_bad_input(tmp_path: Path, extra: str,
                                                  words: str) -> None:
    path = tmp_path / "pptune.yaml"
    path.write_text("micro_batch_size: 1\nglobal_batch: 64\n" + extra)
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2
    assert words in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_a_config_states_its_shape_and_keeps_a_presets_own() -> None:
    cfg = TrainingConfig.model_validate({
        "micro_batch_size": 1, "num_experts": 16, "moe_top_k": 4, "moe_first_dense_layers": 1,
        "moe_layer_freq": 2, "moe_layer_offset": 1, "mtp_layers": 1, "kv_channels": 64})
    shape = stated_shape(cfg, from_sizes(8, 512, 8, 128, ffn=2048))
    assert (shape.experts, shape.top_k, shape.expert_ffn) == (16, 4, 2048)  # width: the FFN's
    assert [shape.moe_block(i) for i in range(8)] == [False, True, False, True, False, True,
                                                      False, True]
    assert (shape.mtp_layers, shape.kv_channels) == (1, 64)
    # a preset's experts stay when the config states none; its defaults are not "stated"
    ds = presets.MODELS["deepseek-v3"]
    same = stated_shape(TrainingConfig.model_validate({"micro_batch_size": 1}), ds)
    assert same == ds and same.first_dense == 3
    assert experts_of(TrainingConfig.model_validate(
        {"micro_batch_size": 1, "model": "qwen3-30b-a3b"})) == (128, 8, 768)


def test_the_cost_key_carries_ep_and_etp_for_experts_only() -> None:
    moe = TrainingConfig.model_validate({"micro_batch_size": 1, "model": "mixtral-8x7b",
                                         "tp": 2, "ep": 4, "etp": 2})
    assert cost_key(moe) == CostKey(tp=2, ep=4, etp=2)
    dense = TrainingConfig.model_validate({"micro_batch_size": 1, "model": "llama3-8b",
                                           "tp": 2, "etp": 2})
    assert cost_key(dense) == CostKey(tp=2)


@pytest.mark.parametrize(("drop", "set_", "words"), [
    ("num_experts_per_tok", {}, "missing num_experts_per_tok"),
    ("", {"num_experts_per_tok": 12}, "num_experts_per_tok (12) must not exceed "
     "num_local_experts (8)"),
])
def test_an_moe_hf_config_missing_a_key_writes_nothing(tmp_path: Path, drop: str, set_: dict,
                                                      words: str) -> None:
    doc = json.loads((Path(__file__).parents[1] / "data" / "hf" /
                      "mixtral-8x7b-config.json").read_text())
    doc.pop(drop, None)
    doc.update(set_)
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps(doc))
    out = tmp_path / "plans.json"
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--hf-config", str(hf), "-o", str(out)])
    assert r.exit_code == 2 and words in r.stderr, r.stderr
    assert r.stderr.strip().count("\n") == 0 and "Traceback" not in r.stderr
    assert not out.exists()
    emit = tmp_path / "launch"
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--hf-config", str(hf), "--emit",
                            "megatron", "-o", str(emit)])
    assert r.exit_code == 2 and not emit.exists()


DATA = Path(__file__).resolve().parents[1] / "data" / "configs"


@pytest.mark.parametrize(("extra", "choices"), [
    # 8 experts, 16 GPUs at tp 2 x pp 4: dp 2, a stage of tp x dp = 4 ranks
    ("gpus: 16\ntp: 2\npp: 4\nep: 3\n", "choose ep from 1, 2, 4"),
    # 64 GPUs: a stage of 16 ranks, but tp-pp-dp places the experts on tp x cp = 2
    ("gpus: 64\ntp: 2\npp: 4\nep: 3\nrank_order: tp-pp-dp\n", "choose ep from 1, 2"),
    # etp 8 on a stage of 4 ranks: no ep places
    ("gpus: 16\ntp: 2\npp: 4\nep: 3\netp: 8\n", "no ep that divides them places on the 4 "
     "ranks of a pipeline stage at etp 8 in this rank order; change etp or the GPUs"),
])
def test_the_ep_a_finding_offers_passes_the_placement_rules_too(
        tmp_path: Path, extra: str, choices: str) -> None:
    """The ep sizes moe-experts-ep offers are those that also place on a stage's ranks
    (moe-world) in the config's rank order (moe-rank-order), so following it never runs
    into another of these errors."""
    code, found, _ = check(tmp_path, MIXTRAL + extra)
    assert code == 1 and found["moe-experts-ep"].endswith(choices), found["moe-experts-ep"]


def test_deepseek_v3_at_ep_24_is_offered_only_what_its_stage_places(tmp_path: Path) -> None:
    """A user trial: DeepSeek-V3's recipe on 1,024 GPUs (pp 8, tp 1: a stage of 128 ranks)
    with ep 24 was told to choose ep from the 256 experts' divisors 2 ... 256, and a second
    error said ep x etp must divide 128: 256 is no choice. Each offered ep passes both."""
    text = (DATA / "megatron_deepseek_v3_h100_overlap.sh").read_text()
    assert "\nEP=64\n" in text and "\nPP=8\n" in text and "\nTP=1\n" in text
    code, found, _ = check_file(tmp_path / "ep24.sh", text.replace("\nEP=64\n", "\nEP=24\n"),
                                by="message")
    assert code == 1 and "ep x etp = 24 x 1 = 24 does not divide the 128" in found["moe-world"]
    assert found["moe-experts-ep"].endswith("choose ep from 1, 2, 4, 8, 16, 32, 64, 128")
    for ep in ("128", "2"):
        _, found, _ = check_file(tmp_path / f"ep{ep}.sh",
                                 text.replace("\nEP=64\n", f"\nEP={ep}\n"))
        assert not {"moe-experts-ep", "moe-world", "moe-rank-order"} & set(found), ep
