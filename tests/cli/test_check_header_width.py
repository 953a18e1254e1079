"""check-config's first line keeps to COLUMNS like its findings: a header longer than
the console gives the counts a line of their own (the path is never cut)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

Cli = Callable[..., Result]
CONFIG = Path(__file__).resolve().parents[1] / "data" / "configs" / "megatron_llama3_8b.sh"
NAME = "pretrain_llama3_8b_sixteen_gpus_interleaved_schedule.sh"  # 55 characters


def test_a_header_over_80_columns_is_wrapped(cli: Cli, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(CONFIG, tmp_path / NAME)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    r = cli("check-config", NAME, "--gpu", "h100-sxm")
    lines = r.stdout.splitlines()
    counts = lines[1].strip()
    assert len(f"{NAME} (megatron): {counts}") > 80  # one line would not fit
    assert lines[0] == f"{NAME} (megatron):"
    assert lines[1] == f"  {counts}" and counts.endswith(("warning", "warnings"))
    assert max(len(line) for line in lines) <= 80, r.stdout


def test_a_header_that_fits_stays_one_line(cli: Cli, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copy(CONFIG, tmp_path / "job.sh")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "80")
    first = cli("check-config", "job.sh", "--gpu", "h100-sxm").stdout.splitlines()[0]
    assert first.startswith("job.sh (megatron): 0 errors, ")
