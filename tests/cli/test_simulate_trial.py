"""simulate's answers to what a schedules researcher tried: interleaved without -v,
degenerate costs, activations over the GPU (an order Megatron-LM does not run:
test_simulate_inputs.py)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app

runner = CliRunner()


def sim(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["simulate", *args])


def test_interleaved_takes_two_chunks_a_device_unless_told() -> None:
    """pp 4, m 8, F 1 ms, B 2 ms, v 2: each device holds 2 chunks of F 0.5 / B 1 ms; the
    bubble is (p - 1) x (F + B) / v = 3 x 3 / 2 = 4.5 ms over a 24 ms ideal."""
    r = sim("-s", "interleaved-1f1b", "--fwd-ms", "1", "--bwd-ms", "2", "--json")
    assert r.exit_code == 0, r.stderr
    import json

    doc = json.loads(r.stdout)
    assert doc["virtual_stages"] == 2
    assert doc["step_time_s"] * 1e3 == pytest.approx(24 + 4.5, rel=1e-12)


def test_degenerate_costs_are_refused_in_one_line() -> None:
    r = sim("--fwd-ms", "0", "--bwd-ms", "0")
    assert r.exit_code == 2 and "no work to schedule" in r.stderr
    r = sim("--fwd-ms", "1e-300", "--bwd-ms", "1")
    assert r.exit_code == 2 and "--fwd-ms must be 0 or at least 1e-06 ms" in r.stderr


def test_suggested_micro_batch_counts_are_distinct() -> None:
    r = sim("-s", "interleaved-1f1b", "--pp", "4", "-m", "2", "-v", "2",
            "--fwd-ms", "1", "--bwd-ms", "2")
    assert r.exit_code == 2 and r.stderr.rstrip().endswith("try 4")


def test_activations_over_the_gpu_are_said() -> None:
    r = sim("--model", "llama3-8b", "-b", "64", "--pp", "4")
    assert r.exit_code == 0 and "this plan does not fit" in r.stderr
    r = sim("--model", "llama3-8b", "-b", "1", "--pp", "4")
    assert r.exit_code == 0 and "does not fit" not in r.stderr


def test_simulate_help_says_one_value_for_what_it_prices_one_of() -> None:
    """simulate prices one layout: its --tp, --cp, --ep and --precision take one value."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    r = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "400"})
    assert r.exit_code == 0
    assert "comma list" not in r.stdout and "to search" not in r.stdout
    for flag in ("--tp", "--cp", "--ep", "--precision"):
        assert flag in r.stdout


def test_the_note_counts_its_gpus_in_words() -> None:
    """One pipeline of one stage runs on 1 GPU, not "1 GPUs" (a user trial)."""
    one, two = sim("--pp", "1", "-m", "4", "--tp", "1"), sim("--pp", "2", "-m", "4", "--tp", "1")
    assert "one pipeline's schedule on 1 GPU: no" in one.stderr
    assert "one pipeline's schedule on 2 GPUs: no" in two.stderr
