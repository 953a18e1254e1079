"""check-config --output json: "derived" holds the same keys whatever was computed, null
where nothing was (costs not priced, the prediction skipped, the search not run), so a
CI consumer can hold the document to a fixed schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from typer.testing import Result

from pptune.check.render import DERIVED_KEYS

Cli = Callable[..., Result]

# pptune's own format: 16 GPUs, tp 2 x pp 4 x dp 2; 128 = micro 1 x 64 micro-batches x dp 2
CONFIG = """gpus: 16
tp: 2
pp: 4
dp: 2
schedule: 1f1b
micro_batch_size: 1
global_batch: {batch}
grad_accum_steps: 64
seq_len: 8192
{model}gpu: h100-sxm
"""
PREDICTED = ("step_time_s", "bubble_rate", "peak_memory_bytes", "stage_layers",
             "recompute_layers_per_stage")


def derived(cli: Cli, tmp_path: Path, *flags: str, batch: int = 128,
            model: str = "model: llama3-8b\n") -> dict[str, Any]:
    path = tmp_path / "job.yaml"
    path.write_text(CONFIG.format(batch=batch, model=model))
    result = cli("check-config", path, "--output", "json", *flags)
    assert result.exit_code in (0, 1), result.output
    out: dict[str, Any] = json.loads(result.stdout)["derived"]
    assert list(out) == list(DERIVED_KEYS)  # every key, in one order
    return out


def test_a_full_check_computes_every_key(cli: Cli, tmp_path: Path) -> None:
    """DERIVED_KEYS holds every key check-config writes: none is null here."""
    out = derived(cli, tmp_path)
    assert [k for k, v in out.items() if v is None] == []
    assert (out["dp"], out["grad_accum_steps"], out["microbatches"]) == (2, 64, 64)
    assert out["cost_key"] == "tp2 bf16"
    assert len(out["peak_memory_bytes"]) == len(out["stage_layers"]) == 4  # per rank


def test_a_skipped_prediction_keeps_its_keys_as_null(cli: Cli, tmp_path: Path) -> None:
    """global_batch 100 is not 1 x 64 x 2: an error, and nothing predicted."""
    out = derived(cli, tmp_path, batch=100)
    assert all(out[k] is None for k in (*PREDICTED, "slowdown_vs_best"))
    assert (out["dp"], out["microbatches"], out["cost_key"]) == (2, 64, "tp2 bf16")


def test_no_search_and_no_costs_leave_their_keys_null(cli: Cli, tmp_path: Path) -> None:
    out = derived(cli, tmp_path, "--no-compare")
    assert out["slowdown_vs_best"] is None and out["step_time_s"] is not None
    out = derived(cli, tmp_path, model="")  # no model: nothing to price
    assert out["cost_key"] is None and all(out[k] is None for k in PREDICTED)
    assert out["dp"] == 2
