"""A job's step as Megatron-LM's own timers split it, beside pptune's parts at the
calibration (costmodel/step_timers.py, calibrate's report)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.costmodel.breakdown import BUBBLE, DATA_PARALLEL, OPTIMIZER, SENDS
from pptune.costmodel.step_timers import (
    FORWARD_BACKWARD,
    GRADIENT_SYNC,
    REST,
    measured_parts,
    model_parts,
)
from pptune.costmodel.step_timers import OPTIMIZER as OPTIMIZER_STEP
from pptune.schemas import load_profile
from tests.frameworks.test_megatron_timers import megatron_timers

Cli = Callable[..., Result]
LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"
MPI, LOG8 = LOGS / "megatron_gpt3_7b_fp8_mpi.sh", LOGS / "megatron_gpt3_7b_fp8_8gpu.log"


def test_megatrons_timers_grouped_as_the_step_is() -> None:
    # a 10 s step: forward-backward 9.5 s; the gradient sync 0.15 (all-grads-sync) +
    # 0.05 (layernorm grads, sequence parallelism); the optimizer 0.2 s, its sub-timers
    # inside it (not counted again); the rest 0.1 s
    timers = {"forward-backward": 9500.0, "forward-compute": 3000.0, "all-grads-sync": 150.0,
              "layernorm-grads-all-reduce": 50.0, "optimizer": 200.0,
              "optimizer-inner-step": 120.0, "params-all-gather": 40.0}
    parts = measured_parts(timers, 10.0)
    assert parts == pytest.approx({FORWARD_BACKWARD: 9.5, GRADIENT_SYNC: 0.2,
                                   OPTIMIZER_STEP: 0.2, REST: 0.1})
    # without the forward-backward timer (--timing-log-level 0) nothing is said
    assert measured_parts({"optimizer": 200.0}, 10.0) == {}


def test_pptunes_parts_in_the_same_groups() -> None:
    parts = {"gemm": 6.0, "attention": 2.0, BUBBLE: 1.0, SENDS: 0.1, DATA_PARALLEL: 0.3,
             OPTIMIZER: 0.2}
    assert model_parts(parts) == pytest.approx({FORWARD_BACKWARD: 9.1, GRADIENT_SYNC: 0.3,
                                                OPTIMIZER_STEP: 0.2})


def test_calibrate_reports_the_timers_beside_its_parts(tmp_path: Path, cli: Cli) -> None:
    # the 8-GPU log with a timer block after every iteration line: forward-backward 95%
    # of the line's step, the gradient sync 2%, the optimizer 2%
    lines = []
    for line in LOG8.read_text().splitlines():
        lines.append(line)
        if "elapsed time per iteration (ms):" in line:
            ms = float(line.split("elapsed time per iteration (ms):")[1].split("|")[0])
            lines.append(megatron_timers({"forward-backward": (0.9 * ms, 0.95 * ms),
                                          "all-grads-sync": (0.01 * ms, 0.02 * ms),
                                          "optimizer": (0.02 * ms, 0.02 * ms)}))
    log = tmp_path / "train.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", MPI, "--gpus", "8", "--log", log, "--gpu", "h100-sxm",
            "-o", out)
    assert r.exit_code == 0, r.stderr
    run = load_profile(out).calibration.runs[0]  # type: ignore[union-attr]
    measured = run.measured_parts
    total = run.measured_step_s
    assert measured[FORWARD_BACKWARD] / total == pytest.approx(0.95, abs=0.002)
    assert measured[GRADIENT_SYNC] / total == pytest.approx(0.02, abs=0.001)
    assert measured[REST] / total == pytest.approx(0.01, abs=0.003)
    text = " ".join(r.stdout.split())  # lines wrap at the terminal's width
    said = text.split("Megatron-LM's timers (slowest rank) make the step ")
    assert len(said) == 2 and said[1].startswith("forward-backward 95.0%, gradient sync 2.0%")
    assert "; pptune at the calibration: forward-backward" in said[1]
    doc = json.loads(out.read_text())
    assert "measured_parts" in doc["calibration"]["runs"][0]
