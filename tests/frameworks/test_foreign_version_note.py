"""check-config with a --framework-version of another framework than the file's: a note
that it changes nothing (one CI line may give each framework's release for a folder of
configs), not a refusal as recommend --emit/--framework makes (cli/emit_flags.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app

CONFIGS = Path(__file__).resolve().parents[1] / "data" / "configs"
runner = CliRunner()


def _notes(*flags: str) -> tuple[int, list[str]]:
    r = runner.invoke(app, ["check-config", str(CONFIGS / "megatron_llama3_8b.sh"),
                            "--no-compare", "--output", "json", *flags])
    doc = json.loads(r.stdout)
    return r.exit_code, doc["notes"]


def test_a_release_of_another_framework_is_noted_and_changes_nothing() -> None:
    plain_code, plain = _notes()
    code, notes = _notes("--framework-version", "torchtitan=0.2.2",
                         "--framework-version", "torch=2.13.0")
    assert code == plain_code
    said = [n for n in notes if n not in plain]
    assert said == ["--framework-version torchtitan=0.2.2 names a release of another "
                    "framework than this Megatron-LM file's: it changes nothing here"]


def test_recommend_still_refuses_it() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--framework", "megatron",
                            "--framework-version", "torchtitan=0.2.2"])
    assert r.exit_code == 2
    assert "names a release of another framework than Megatron-LM" in r.stderr


def test_a_release_with_a_trailing_zero_is_that_release() -> None:
    from pptune.frameworks.common.versions import TORCH, Versions

    assert TORCH.later_than_read("2.13.0") is None
    assert TORCH.later_than_read("2.13.1") == "2.13"
    assert Versions({TORCH.name: "2.13"}).at_least(TORCH, 2, 13, 0)
    assert not Versions({TORCH.name: "2.12.9"}).at_least(TORCH, 2, 13)
