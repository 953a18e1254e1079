"""check-config on a file as a test sees it: the exit code and the JSON report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


def check_file(path: Path, text: str, *flags: str, by: str = "severity"
               ) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Write ``text`` to ``path`` and run ``check-config --output json --no-compare`` on it:
    (exit code, each finding's id -> its ``by`` field, the report). Exit 0 or 1 only."""
    path.write_text(text)
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            *flags])
    assert r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    return r.exit_code, {f["id"]: f[by] for f in doc["findings"]}, doc
