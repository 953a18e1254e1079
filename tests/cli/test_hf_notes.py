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
    assert r.exit_code == 2 and r.stdout == ""
    errors = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(errors) == 1 and "model_type 'qwen3_next' is a hybrid" in errors[0]
    assert "Traceback" not in r.output + r.stderr
