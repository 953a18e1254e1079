"""Values of the plan file a dashboard reads: a part that is not there is exactly 0 (not
a rounding residue of two simulated steps), and each GPU's peak memory by part."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import Result

from pptune.costmodel.evaluate import CANCELLED, exposed

Cli = Callable[..., Result]
GIB = 1024**3
JOB = ["--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb"]


def test_exposed_is_zero_within_rounding_and_the_difference_beyond() -> None:
    step = 1.2
    assert exposed(step + 4e-16, step, step) == 0.0  # a few ulps of the step: nothing
    assert exposed(step, step + 1e-3, step) == 0.0  # never negative
    assert exposed(step + 2 * CANCELLED * step, step, step) == pytest.approx(2.4e-9, rel=1e-6)
    assert exposed(step + 1e-6, step, step) == pytest.approx(1e-6, rel=1e-9)  # one send's latency


def plans(cli: Cli, *args: str) -> list[dict]:  # type: ignore[type-arg]
    r = cli("recommend", *JOB, *args, "--json")
    assert r.exit_code == 0, r.stderr
    return json.loads(r.stdout)["plans"]  # type: ignore[no-any-return]


def test_a_plan_without_a_pipeline_exposes_exactly_no_p2p(cli: Cli) -> None:
    """GPT-3 1.3B on 8 A100s wins without a pipeline; its p2p was 1.2e-15 s before."""
    (winner,) = plans(cli, "--top", "1")
    assert winner["pp"] == 1
    assert winner["exposed_p2p_s"] == 0.0 and winner["exposed_allreduce_s"] > 1e-4


def test_each_gpus_peak_memory_by_part(cli: Cli) -> None:
    """pp 2, 1F1B, 8 sequences of 2,048 tokens a micro-batch, hidden 2,048, bf16: each GPU
    holds one p2p buffer on its side of the one stage boundary (the first sends activations
    and receives gradients there, the second the reverse: docs/models.md "one p2p buffer
    per boundary side"), 8 x 2048 x 2048 x 2 bytes = 64 MiB; no sharding, so no working
    copies; the --reserve-gib as given."""
    (plan,) = plans(cli, "--top", "1", "--pp", "2", "--schedules", "1f1b", "--tp", "1",
                    "--micro-batch-sizes", "8", "--sharding", "none", "--recompute", "full",
                    "--reserve-gib", "3")
    assert (plan["pp"], plan["tp"], plan["micro_batch_size"]) == (2, 1, 8)
    parts = plan["peak_memory_parts"]
    assert len(parts) == 2
    for gpu, peak in zip(parts, plan["peak_memory_bytes"], strict=True):
        assert gpu["p2p_bytes"] == 8 * 2048 * 2048 * 2 == 64 * 2**20
        assert gpu["working_copies_bytes"] == 0.0 and gpu["reserve_bytes"] == 3 * GIB
        assert gpu["state_bytes"] > 0 and gpu["activation_bytes"] > 0
        assert (gpu["state_bytes"] + gpu["working_copies_bytes"] + gpu["activation_bytes"]
                + gpu["p2p_bytes"] + gpu["reserve_bytes"]) == peak


def test_the_parts_are_those_the_winner_line_names(cli: Cli) -> None:
    """The text's "(state 9.91 GiB, working copies 0 B, ...)" is the fullest GPU's record."""
    (plan,) = plans(cli, "--top", "1")
    (gpu,) = plan["peak_memory_parts"]
    text = cli("recommend", *JOB, "--top", "1").stdout
    flat = " ".join(text.split())
    assert f"state {gpu['state_bytes'] / GIB:.2f} GiB" in flat
    assert f"activations {gpu['activation_bytes'] / GIB:.2f} GiB" in flat
    assert "p2p 0 B" in flat and "reserve 2.00 GiB" in flat
