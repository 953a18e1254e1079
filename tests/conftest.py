"""Shared test setup: the real CLI as fixtures, and the skip of the GPU marker.

- ``app``: pptune's Typer app as users get it (``pptune.cli.app``), commands,
  ``_guard`` and exit codes included; tests never rebuild it.
- ``cli``: ``cli(*args)`` runs that app with typer's CliRunner (stdout and
  stderr apart, exceptions not caught: a traceback fails the test).
- ``error_line``: the one ``pptune: error:`` line of a run refused as bad
  input, checked (exit 2, nothing else on stderr, nothing on stdout but the
  error document --json asks for).
- ``@pytest.mark.gpu``: skipped where no NVIDIA GPU is usable, and
  ``@pytest.mark.torch`` where torch is not installed; each reason is worded
  once, here.

Tests are laid out like the package: tests/<layer>/ for pptune/<layer>/, and
every test that goes through the command line in tests/cli/.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from functools import cache

import pytest
import typer
from typer.testing import CliRunner, Result

Cli = Callable[..., Result]


@cache
def no_gpu_reason() -> str | None:
    """Why GPU tests cannot run here, or None when torch sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return "needs an NVIDIA GPU with CUDA: torch is not installed"
    if not torch.cuda.is_available():
        return "needs an NVIDIA GPU with CUDA: torch.cuda.is_available() is False here"
    return None


NO_TORCH = "needs torch: pip install 'pptune[probe]' (torch==2.13.0 on this machine)"


@pytest.hookimpl(trylast=True)  # after -m deselects: `make test-fast` never imports torch
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if importlib.util.find_spec("torch") is None:
        for item in items:
            if item.get_closest_marker("torch") is not None:
                item.add_marker(pytest.mark.skip(reason=NO_TORCH))
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = no_gpu_reason()
    if reason is not None:
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def app() -> typer.Typer:
    from pptune.cli.app import app

    return app


@pytest.fixture(scope="session")
def cli(app: typer.Typer) -> Cli:
    runner = CliRunner()

    def invoke(*args: object) -> Result:
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


@pytest.fixture(scope="session")
def error_line() -> Callable[[Result], str]:
    def check(result: Result) -> str:
        assert result.exit_code == 2, (result.exit_code, result.output)
        assert "Traceback" not in result.output
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("pptune: error: ")
        if result.stdout:  # under --json the error document, in the same words
            doc = json.loads(result.stdout)
            assert doc.pop("exit_code") == 2 and doc.pop("error") == lines[0][15:], doc
            assert set(doc) <= {"file"}, doc  # check-config's names the file
        return lines[0]

    return check
