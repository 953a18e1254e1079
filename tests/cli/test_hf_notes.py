"""CLI: what the Hugging Face reader assumes reaches stderr and `recommend --json`'s
notes alike; a config it cannot price ends in one error line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

HF = Path(__file__).resolve().parents[1] / "data" / "hf"
runner = CliRunner()


def test_reader_notes_reach_the_json_notes_and_stderr() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config",
                            str(HF / "gemma3-1b-config.json"), "--json", "--top", "1"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    said = [n for n in notes if "sequence length 32768 from max_position_embeddings" in n]
    tied = [n for n in notes if "tie_word_embeddings" in n]
    assert len(said) == 1 and len(tied) == 1 and said[0] in r.stderr and tied[0] in r.stderr
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config",
                            str(HF / "gemma3-1b-config.json"), "--seq-len", "4096", "--json",
                            "--top", "1"])
    assert r.exit_code == 0, r.stderr
    assert not any("sequence length" in n for n in json.loads(r.stdout)["notes"])


def test_a_hybrid_config_is_refused_in_one_line() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config",
                            str(HF / "qwen3-next-80b-a3b-config.json"), "--json"])
    assert r.exit_code == 2
    errors = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(errors) == 1 and "model_type 'qwen3_next' is a hybrid" in errors[0]
    # --json: the same words as the error document on stdout
    assert json.loads(r.stdout) == {"exit_code": 2, "error": errors[0][15:]}
    assert "Traceback" not in r.output + r.stderr


def test_a_state_space_model_and_a_short_layer_types_are_refused_in_one_line(
        tmp_path: Path) -> None:
    base = {"hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
            "vocab_size": 8}
    for doc, needle in (
            ({"model_type": "mamba2"}, "model_type 'mamba2' is a state-space model (Mamba-2 "
             "layers) with no attention; pptune plans transformer decoders"),
            ({"model_type": "gemma3_text", "layer_types": ["sliding_attention"] * 3},
             "layer_types has 3 entries for num_hidden_layers 4")):
        path = tmp_path / "config.json"
        path.write_text(json.dumps({**base, **doc}))
        r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config", str(path),
                                "--seq-len", "2048"])
        assert r.exit_code == 2 and r.stdout == ""
        errors = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
        assert len(errors) == 1 and needle in errors[0], r.stderr
        assert "hybrid" not in r.stderr and "Traceback" not in r.output + r.stderr


def test_gemma2_softcapping_reaches_the_recommend_notes() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config",
                            str(HF / "gemma2-27b-config.json"), "--seq-len", "8192", "--json",
                            "--top", "1"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    capped = [n for n in notes if "softcapping" in n]
    assert len(capped) == 2 and all(n in r.stderr for n in capped)


def test_mistral_window_reaches_the_simulated_step(tmp_path: Path) -> None:
    doc = json.loads((HF / "mistral-7b-v0.1-config.json").read_text())
    full = tmp_path / "config.json"
    full.write_text(json.dumps({**doc, "sliding_window": None}))

    def step_s(path: Path) -> float:
        r = runner.invoke(app, ["simulate", "--pp", "2", "-m", "8", "--hf-config", str(path),
                                "--seq-len", "8192", "--gpu", "h100-sxm", "--json"])
        assert r.exit_code == 0, r.stderr
        return float(json.loads(r.stdout)["step_time_s"])

    # every layer's attention over 3,072 keys a query rather than 4,096 (test_hf_families)
    assert step_s(HF / "mistral-7b-v0.1-config.json") < step_s(full)


def test_check_config_states_the_reader_notes_and_refuses_a_bad_flag_file(tmp_path: Path
                                                                           ) -> None:
    cfg = tmp_path / "train.yaml"
    cfg.write_text("pp: 1\ngpus: 8\nmicro_batch_size: 1\nglobal_batch: 64\nseq_len: 4096\n")
    r = runner.invoke(app, ["check-config", str(cfg), "--hf-config",
                            str(HF / "gemma3-1b-config.json"), "--output", "json"])
    assert r.exit_code in (0, 1), r.output
    found = json.loads(r.stdout)["findings"]
    tied = [f for f in found if f["id"] == "hf-config-note"]
    assert len(tied) == 1 and "tie_word_embeddings" in tied[0]["message"]
    assert tied[0]["severity"] == "info"
    r = runner.invoke(app, ["check-config", str(cfg), "--hf-config",
                            str(HF / "qwen3-next-80b-a3b-config.json")])
    assert r.exit_code == 2 and r.stdout == ""
    assert "model_type 'qwen3_next' is a hybrid" in r.stderr


def test_simulate_json_carries_the_reader_notes() -> None:
    r = runner.invoke(app, ["simulate", "--pp", "2", "-m", "4", "--hf-config",
                            str(HF / "gemma3-1b-config.json"), "--seq-len", "4096", "--json"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any("tie_word_embeddings" in n for n in notes)
    assert all(n in r.stderr for n in notes)


# flags Megatron-LM defines (a made-up one is an error: megatron-unknown-flag) and
# pptune does not read
UNREAD = ["--lr", "--min-lr", "--weight-decay", "--clip-grad", "--adam-beta1", "--adam-beta2",
          "--adam-eps", "--lr-warmup-iters", "--train-iters", "--log-interval", "--save-interval",
          "--eval-iters"]


def test_check_config_json_lists_every_ignored_flag(tmp_path: Path) -> None:
    flags = " ".join(f"{flag} {i + 1}" for i, flag in enumerate(UNREAD))
    script = tmp_path / "train.sh"
    script.write_text("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 4 "
                      "--hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                      f"--micro-batch-size 1 --global-batch-size 8 --bf16 {flags}\n")
    r = runner.invoke(app, ["check-config", str(script), "--output", "json", "--no-compare"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    assert "megatron-unknown-flag" not in {f["id"] for f in doc["findings"]}
    assert doc["ignored"] == UNREAD
    assert any("and 4 more" in n for n in doc["notes"])


def test_an_unknown_family_and_a_missing_ffn_width_are_said(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({
        "model_type": "totally_unknown", "architectures": ["FooForMaskedLM"],
        "hidden_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 8,
        "vocab_size": 32000, "intermediate_size": None}))
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config", str(path), "--seq-len",
                            "2048", "--json", "--top", "1"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert any("'totally_unknown' (FooForMaskedLM) is not a family" in n for n in notes)
    assert any("4 x hidden = 4096 assumed" in n for n in notes)
