"""The tune package imports, and its pure core runs, without torch."""

from __future__ import annotations

import subprocess
import sys


def test_import_without_torch() -> None:
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import pptune.cli.tune\n"
        "from pptune.tune import artifacts, calibrate, candidates, journal, loop, model\n"
        "from pptune.tune import session, trial, validate_json, jobs, jobfit, launcher\n"
        "import pptune.cli.calibrate\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok"
