"""The batch identity at an assumed dp: a warning while some dp would make it hold, an
error when none can (DeepSpeed's _batch_assertion: train_batch == micro x GA x dp)."""

from __future__ import annotations

import json
from pathlib import Path

from pptune.check.rules import check
from pptune.schemas import TrainingConfig
from tests.check_json import check_file

BASE = dict(tp=1, pp=1, micro_batch_size=1, grad_accum_steps=1, model="llama3-8b",
            gpu="h100-sxm", schedule="1f1b")


def findings(cfg: dict) -> dict[str, tuple[str, str]]:
    report = check(TrainingConfig.model_validate(cfg), Path("."))
    return {f.id: (f.severity, f.message) for f in report.findings}


def test_a_batch_no_dp_can_make_is_an_error_at_an_assumed_dp() -> None:
    """500 over micro-batch 2 x GA 16: 500 / 32 = 15.625, no whole dp."""
    found = findings({**BASE, "global_batch": 500, "micro_batch_size": 2,
                      "grad_accum_steps": 16})
    assert found["dp-assumed"][0] == "warning"
    severity, message = found["batch-mismatch"]
    assert severity == "error"
    assert message == (
        "global batch 500 != micro-batch 2 x GA steps 16 x dp for any dp: 500 is not a "
        "multiple of 32, so no data-parallel size makes them agree and the framework refuses "
        "it on any GPU count (the dp=1 assumed is not the cause); set the global batch to a "
        "multiple of 32 (480 or 512 are the nearest), or GA to a divisor of 250")


def test_a_derived_ga_with_an_odd_batch_is_an_error_at_any_dp() -> None:
    """GA derived (not stated): 7 sequences in micro-batches of 2 fit no dp."""
    found = findings({**BASE, "global_batch": 7, "micro_batch_size": 2,
                      "grad_accum_steps": None})
    severity, message = found["batch-mismatch"]
    assert severity == "error"
    assert message.startswith("global batch 7 != micro-batch 2 x dp for any dp: 7 is not a "
                              "multiple of 2,")
    assert message.endswith("set the global batch to a multiple of 2 (6 or 8 are the nearest)")


def test_a_batch_some_dp_would_make_stays_a_warning() -> None:
    """Mixtral ep 8 at tp 2 assumes dp 4 (verdicts.assumed_dp): 6 sequences in micro-batches
    of 1 do not divide over dp 4, but they do over dp 1, 2, 3 or 6: a warning."""
    found = findings({**BASE, "model": "mixtral-8x7b", "tp": 2, "ep": 8, "global_batch": 6,
                      "grad_accum_steps": None})
    assert "assumed dp=4" in found["dp-assumed"][1]
    severity, message = found["batch-mismatch"]
    assert severity == "warning"
    assert message.endswith("(at dp=4, assumed: the config states no GPU count; pass --gpus "
                            "N to check it)")


def test_a_deepspeed_config_whose_batch_no_gpu_count_fits_fails(tmp_path: Path) -> None:
    """A user's trial: train_batch_size 500, micro 2, GA 16 at --pp 4 and no --gpus had
    passed with a warning 'at dp=1, assumed'; DeepSpeed refuses it on any GPU count."""
    text = json.dumps({"train_batch_size": 500, "train_micro_batch_size_per_gpu": 2,
                       "gradient_accumulation_steps": 16, "bf16": {"enabled": True},
                       "zero_optimization": {"stage": 1}})
    code, found, _ = check_file(tmp_path / "ds.json", text, "--pp", "4", "--model",
                                "llama3-8b", "--gpu", "h100-sxm")
    assert (code, found["batch-mismatch"]) == (1, "error")
    # a batch some GPU count makes (512 = 2 x 16 x dp 16) is inferred, not refused
    text = text.replace("500", "512")
    code, found, _ = check_file(tmp_path / "ok.json", text, "--pp", "4", "--model",
                                  "llama3-8b", "--gpu", "h100-sxm")
    assert "batch-mismatch" not in found and found["dp-inferred"] == "info"
