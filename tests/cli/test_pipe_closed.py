"""A reader that goes away (``pptune ... | head -1``): exit 141 without a word
(cli/errors.py module doc), not click's or rich's exit 1, which check-config uses for
findings (a user trial: ``check-config x | head`` read as findings in CI).

Real processes: stdout is a pipe whose read end is closed before pptune writes
anything, so every write meets EPIPE, whatever the pipe's buffer holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = {
    "table": ["presets"],  # rich's console
    "json": ["presets", "--json"],  # typer.echo
    "help": ["recommend", "--help"],  # click's help, printed while parsing
    "findings": ["check-config", str(ROOT / "tests" / "data" / "configs" /
                                     "torchtitan_qwen3_fp8_both.toml"), "--gpus", "64"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_closed_pipe_exits_141_silently(case: str) -> None:
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first write
    try:
        done = subprocess.run([sys.executable, "-m", "pptune", *CASES[case]], stdout=write,
                              stderr=subprocess.PIPE, cwd=ROOT, timeout=120, check=False,
                              env={**os.environ, "COLUMNS": "80"})
    finally:
        os.close(write)
    assert done.returncode == 141  # 128 + SIGPIPE, what a shell reports for it
    said = done.stderr.decode()
    assert "Traceback" not in said and "pptune: error" not in said
    assert "Broken pipe" not in said and "BrokenPipeError" not in said
