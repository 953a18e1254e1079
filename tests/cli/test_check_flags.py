"""check-config's flags that supply what a file lacks: --hf-config names the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.check_json import check_file

HF = Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen3-30b-a3b-config.json"
DS = json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                 "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
                 "expert_parallel": {"enabled": True, "autoep_size": 8},
                 "pptune": {"seq_len": 4096}})  # the config.json's own is 40,960


def test_hf_config_names_the_model_a_file_does_not(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A DeepSpeed JSON names no model: with --hf-config (relative to the working folder)
    check-config prices Qwen3-30B-A3B from its config.json, as --model prices the preset;
    without either it says no model is known."""
    monkeypatch.chdir(HF.parent)
    _, found, doc = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm",
                               "--hf-config", HF.name)
    assert "model-unknown" not in found and doc["derived"]["step_time_s"] > 0
    _, _, preset = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm",
                              "--model", "qwen3-30b-a3b")
    assert doc["derived"]["step_time_s"] == pytest.approx(preset["derived"]["step_time_s"],
                                                          rel=0.05)
    _, found, _ = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm")
    assert "model-unknown" in found
    assert "moe-ep-dense" not in found  # the model is unknown, not dense
