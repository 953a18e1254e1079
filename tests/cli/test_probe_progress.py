"""probe's progress where stderr is no terminal (a CI log, a file: the user trial's R7,
six silent minutes on a CPU probe of a large MoE): plain lines, the first step's and then
at most one every ``every_s`` seconds, and the last; a terminal keeps rich's bar."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.cli.probe import RichReporter

runner = CliRunner()


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_at_most_one_every_30_s() -> None:
    out = io.StringIO()
    clock = Clock()
    reporter = RichReporter(Console(file=out, force_terminal=False, width=200), clock=clock)
    reporter.start("layers of m on cpu", 4)
    for step, seconds in enumerate((5.0, 20.0, 31.0, 2.0), 1):  # ends at 5, 25, 56, 58 s
        clock.now += seconds
        reporter.advance(f"block.{step} @ micro-batch 1")
    reporter.finish()
    assert out.getvalue().splitlines() == [
        "pptune: layers of m on cpu: 0/4 ...",
        "pptune: layers of m on cpu: 1/4, 5 s, block.1 @ micro-batch 1",  # the first step
        # 25 s: 20 s since the last line, none; 56 s: 51 s since it
        "pptune: layers of m on cpu: 3/4, 56 s, block.3 @ micro-batch 1",
        "pptune: layers of m on cpu: 4/4 done, 58 s",
    ]


def test_a_terminal_keeps_the_bar() -> None:
    out = io.StringIO()
    reporter = RichReporter(Console(file=out, force_terminal=True, width=100))
    reporter.start("layers of m on cpu", 2)
    reporter.advance("a")
    reporter.advance("b")
    reporter.finish()
    assert "pptune: layers of m on cpu" not in out.getvalue()
    assert "2/2" in out.getvalue() and "done" in out.getvalue()


@pytest.mark.torch
def test_probe_with_stderr_to_a_pipe_prints_lines(tmp_path: Path) -> None:
    """gpt-small: embedding, 6 blocks and the head at one micro-batch size, 8 steps."""
    r = runner.invoke(app, ["probe", "--model", "gpt-small", "--no-comm",
                            "--micro-batch-sizes", "1", "--repeats", "1", "--warmup", "0",
                            "--seq-len", "8", "-o", str(tmp_path / "p.json")],
                      catch_exceptions=False)
    assert r.exit_code == 0, r.stderr
    lines = r.stderr.splitlines()
    assert "pptune: layers of gpt-small on cpu: 0/8 ..." in lines
    assert any(x.startswith("pptune: layers of gpt-small on cpu: 1/8, ")
               and x.endswith(", embed @ micro-batch 1") for x in lines), lines
    assert any(x.startswith("pptune: layers of gpt-small on cpu: 8/8 done, ") for x in lines)
