"""`pptune validate` on real GPUs: NCCL, one process per GPU, CUDA-event stamps.

Marked ``gpu``: skipped, with the reason (tests/conftest.py), where torch sees
no CUDA device; the two-stage runs also where it sees fewer than two.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

pytestmark = pytest.mark.gpu
Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py


def gpus() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _check(doc: dict, pp: int) -> None:  # type: ignore[type-arg]
    assert doc["backend"] == "nccl" and doc["device"] == "cuda"
    for side in ("predicted", "measured"):
        assert doc[side]["step_time_s"] > 0
        assert 0 <= doc[side]["bubble_rate"] < 1
        assert len(doc[side]["devices"]) == pp
    assert doc["step_time_error"] is not None and math.isfinite(doc["step_time_error"])


@pytest.mark.parametrize("schedule", ["1f1b", "zb-h1"])
def test_two_gpu_pipeline(
    schedule: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli
) -> None:
    if gpus() < 2:
        pytest.skip(f"needs 2 GPUs for a 2-stage pipeline (torch sees {gpus()})")
    monkeypatch.chdir(tmp_path)
    r = cli(
        "validate", "--schedule", schedule, "--pp", "2", "--microbatches", "4",
        "--warmup", "2", "--steps", "3", "--json",
    )
    assert r.exit_code == 0, r.stderr
    _check(json.loads(r.stdout), 2)


def test_one_gpu_gpipe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Cli) -> None:
    """pp=1 on one card: CUDA-event stamps on the host clock, no p2p."""
    monkeypatch.chdir(tmp_path)
    r = cli(
        "validate", "--schedule", "gpipe", "--pp", "1", "--microbatches", "2",
        "--warmup", "2", "--steps", "3", "--json",
    )
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    _check(doc, 1)
    ops = {(o["kind"], o["stage"]): o for o in doc["ops"]}
    assert ops[("F", 0)]["measured_s"] > 0 and ops[("B", 0)]["measured_s"] > 0
