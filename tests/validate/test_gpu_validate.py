"""`pptune validate` on real GPUs: NCCL, one process per GPU, CUDA-event stamps.

Skipped, with the reason, where torch sees no CUDA device (or fewer than two).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import typer  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from pptune.cli import validate as cli_validate  # noqa: E402
from pptune.cli.app import _guard  # noqa: E402

CUDA = torch.cuda.is_available()
GPUS = torch.cuda.device_count() if CUDA else 0
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not CUDA, reason="needs an NVIDIA GPU: torch.cuda.is_available() is False"),
]

app = typer.Typer()
app.command("validate")(_guard(cli_validate.validate))


@app.command("noop")
def _noop() -> None:
    """A second command keeps "validate" a subcommand name."""


def _check(doc: dict, pp: int) -> None:  # type: ignore[type-arg]
    assert doc["backend"] == "nccl" and doc["device"] == "cuda"
    for side in ("predicted", "measured"):
        assert doc[side]["step_time_s"] > 0
        assert 0 <= doc[side]["bubble_rate"] < 1
        assert len(doc[side]["devices"]) == pp
    assert doc["step_time_error"] is not None and math.isfinite(doc["step_time_error"])


@pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs for a 2-stage pipeline (torch sees {GPUS})")
@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_two_gpu_pipeline(schedule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, [
        "validate", "--schedule", schedule, "--pp", "2", "--microbatches", "4",
        "--warmup", "2", "--steps", "3", "--json",
    ], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    _check(json.loads(r.stdout), 2)


def test_one_gpu_gpipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pp=1 on one card: CUDA-event stamps on the host clock, no p2p."""
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, [
        "validate", "--schedule", "gpipe", "--pp", "1", "--microbatches", "2",
        "--warmup", "2", "--steps", "3", "--json",
    ], catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    _check(doc, 1)
    ops = {(o["kind"], o["stage"]): o for o in doc["ops"]}
    assert ops[("F", 0)]["measured_s"] > 0 and ops[("B", 0)]["measured_s"] > 0
