"""Every command's --help keeps to 80 columns at COLUMNS=80, its examples included
(trial u30, rough edge 2: recommend's --framework-version example ran to 84)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


@pytest.mark.parametrize("command", ["recommend", "check-config", "simulate", "calibrate"])
def test_help_fits_80_columns(command: str) -> None:
    r = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    wide = [line for line in r.stdout.splitlines() if len(line) > 80]
    assert wide == []
