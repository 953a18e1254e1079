"""`pptune monitor` through the CLI: exit 2 in one line without a GPU or with bad
flags, and a real sampling run where NVML sees a GPU."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import Result

Cli = Callable[..., Result]  # the ``cli`` fixture of tests/conftest.py
ErrorLine = Callable[[Result], str]  # its ``error_line`` fixture


@pytest.fixture
def run(cli: Cli) -> Cli:
    return lambda *args: cli("monitor", *args)


def nvml_error() -> str | None:
    """Why NVML cannot start here, or None when it can."""
    try:
        import pynvml
    except ImportError:
        return "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return str(exc)
    try:
        if pynvml.nvmlDeviceGetCount() == 0:
            return "NVML sees no GPU"
    finally:
        pynvml.nvmlShutdown()
    return None


# ---------------------------------------------------------------- CLI / NVML


@pytest.mark.skipif(nvml_error() is None, reason="NVML works here: this checks the no-GPU path")
def test_without_nvml_exits_2_in_one_line(run: Cli, error_line: ErrorLine) -> None:
    line = error_line(run("--interval", "0.01", "--duration", "0.01"))
    assert "no NVIDIA GPU" in line and "NVML" in line
    error_line(run("--json"))


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--interval", "0"], "--interval must be > 0"),
        (["--duration", "-1"], "--duration must be > 0"),
        (["--min-util", "60"], "--min-util must be a fraction"),
    ],
)
def test_bad_flags_exit_2_before_touching_nvml(
    args: list[str], needle: str, run: Cli, error_line: ErrorLine
) -> None:
    assert needle in error_line(run(*args))


def test_help_has_an_example(run: Cli) -> None:
    res = run("--help")
    assert res.exit_code == 0
    assert "pptune monitor --interval 0.5 --duration 30" in res.stdout


@pytest.mark.gpu
def test_real_nvml_sampling(run: Cli) -> None:
    why = nvml_error()
    if why is not None:
        pytest.skip(f"needs an NVIDIA GPU with NVML: {why}")
    import pynvml

    pynvml.nvmlInit()
    try:
        count = pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()
    res = run("--interval", "0.1", "--duration", "0.3", "--json")
    assert res.exit_code in (0, 1), res.output  # an idle GPU is a finding
    out = json.loads(res.stdout)
    assert len(out["gpus"]) == count
    for g in out["gpus"]:
        assert g["samples"] == 3
        assert 0 <= g["min_util_share"] <= g["avg_util_share"] <= 1
        assert 0 <= g["peak_mem_bytes"] <= g["mem_total_bytes"]
    assert res.exit_code == (1 if out["flagged"] else 0)
    assert "sampling" in res.stderr
