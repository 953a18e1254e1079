"""calibrate keeps the jobs' MoE token dispatcher, which recommend then prices."""

from __future__ import annotations

from pathlib import Path

from pptune.schemas import load_profile
from tests.conftest import Cli

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
MEGATRON = DATA / "megatron_llama3_8b.sh"


def test_the_profile_keeps_the_jobs_dispatcher(tmp_path: Path, cli: Cli) -> None:
    """A DeepEP job's profile says so, and what-ifs on it are priced with DeepEP unless
    --moe-dispatcher is given (a trial's were priced with NCCL's all-to-all, 1.19x
    slower); a dense job's says none."""
    from pptune.costmodel.dispatch import Dispatcher
    from pptune.costs import calibrated
    from pptune.options import CostOptions

    out = tmp_path / "cal.json"
    r = cli("calibrate", "--run", DATA / "megatron_deepseek_v3_h100_overlap.sh",
            "--step-s", "30", "-o", out)
    assert r.exit_code == 0, r.stderr
    cal = load_profile(out).calibration
    assert cal is not None and cal.moe_dispatcher == "deepep"
    opts, notes = calibrated.as_ran(CostOptions(), cal)
    assert opts.dispatcher is Dispatcher.DEEPEP and "--moe-dispatcher deepep" in notes[-1]
    dense = tmp_path / "dense.json"
    assert cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--gpu", "h100-sxm",
               "-o", dense).exit_code == 0
    assert load_profile(dense).calibration.moe_dispatcher is None  # type: ignore[union-attr]


def test_a_missing_output_is_asked_for_after_the_form(cli: Cli) -> None:
    """A trial: calibrate without -o said "Missing option '--output'" before anything else,
    even with no run given at all; the form is said first, then -o."""
    r = cli("calibrate")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("pptune: error: calibrate needs --run CONFIG with --step-s or "
                                "--log, or validate RESULTS with --profile")
    r = cli("calibrate", "--run", MEGATRON, "--step-s", "9.0", "--gpu", "h100-sxm")
    assert r.exit_code == 2
    assert r.stderr.strip() == ("pptune: error: calibrate needs -o FILE: where the "
                                "calibrated profile goes")
