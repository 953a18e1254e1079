"""An output path that names a file the same command reads is refused (exit 2, one
line) before any work, and the input is left as it was: a tab-completion slip must
not replace a user's config, log or profile."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()
HF = Path(__file__).resolve().parents[1] / "data" / "hf" / "gemma3-1b-config.json"
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


@pytest.mark.parametrize("argv", [
    ["recommend", "--gpus", "8", "--hf-config", "{d}/in.json", "--seq-len", "2048",
     "-o", "{d}/in.json"],
    ["recommend", "--gpus", "8", "--hf-config", "{d}/in.json", "--seq-len", "2048",
     "-o", "{d}/sub/../in.json"],
    ["simulate", "--hf-config", "{d}/in.json", "--seq-len", "2048", "--trace", "{d}/in.json"],
    ["calibrate", "--run", "{d}/job.toml", "--log", "{d}/job.log", "-o", "{d}/job.log"],
    ["calibrate", "--run", "{d}/job.toml", "--log", "{d}/job.log", "-o", "{d}/job.toml"],
])
def test_an_output_that_is_an_input_is_refused(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "sub").mkdir()
    inputs = {"in.json": HF.read_bytes(),
              "job.toml": (LOGS / "torchtitan_h200_llama3_8b.toml").read_bytes(),
              "job.log": (LOGS / "torchtitan_h200_llama3_8b.log").read_bytes()}
    for name, data in inputs.items():
        (tmp_path / name).write_bytes(data)
    r = runner.invoke(app, [a.format(d=tmp_path) for a in argv])
    assert r.exit_code == 2, r.output
    errors = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(errors) == 1 and "file this command reads" in errors[0]
    for name, data in inputs.items():
        assert (tmp_path / name).read_bytes() == data
