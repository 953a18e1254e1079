"""A DeepSpeed config's ``pipeline`` section: the keys DeepSpeed's own code does not read
(``stages``, ``partition``: PipelineModule's constructor decides) said as such, and a
pipeline whose size the file leaves to the model code checked at an assumed size with a
warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pptune.frameworks.read import read_config
from tests.check_json import check_file

BASE = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}
FLAGS = ("--gpus", "8", "--model", "llama3-8b", "--gpu", "h100-sxm")


def config(**pipeline: Any) -> str:
    return json.dumps({**BASE, "pipeline": pipeline})


def test_partition_best_is_said_to_be_deepspeeds_unread_default(tmp_path: Path) -> None:
    """"best" is get_pipeline_config's default for the key (deepspeed/runtime/config.py);
    no DeepSpeed code reads pipeline.partition: PipelineModule's partition_method does."""
    path = tmp_path / "ds.json"
    path.write_text(config(stages=2, partition="best"))
    result = read_config(path, gpus=8)
    assert result.config.partition_method == "parameters"
    (note,) = [n for n in result.notes if "partition" in n]
    assert note == (
        "pipeline.partition \"best\" is get_pipeline_config's default for the key "
        "(deepspeed/runtime/config.py), and no DeepSpeed code reads it: PipelineModule's "
        "partition_method argument splits the layers (deepspeed/runtime/pipe/module.py, "
        "default \"parameters\"); priced as \"parameters\" (balanced parameter counts): "
        "state \"parameters\" or \"uniform\" as the model code passes it")
    assert not any("not stated" in n for n in result.notes)


def test_partition_left_out_still_says_not_stated(tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text(config(stages=2))
    notes = read_config(path, gpus=8).notes
    assert any(n.startswith("pipeline partition not stated") for n in notes)


def test_stages_auto_without_pp_is_a_warning_naming_the_assumed_size(tmp_path: Path) -> None:
    """A CI gate must not pass silently on a pipeline it cannot size."""
    _, found, doc = check_file(tmp_path / "ds.json", config(stages="auto"), *FLAGS,
                               by="message")
    assert found["pp-assumed"] == (
        "pipeline.stages is \"auto\" (PipelineModule's num_stages sets it at run time) and "
        "no --pp: checked at pp=1, assumed; pass --pp N to check the pipeline that runs")
    assert doc["config"]["pp"] == 1
    severity = {f["id"]: f["severity"] for f in doc["findings"]}
    assert severity["pp-assumed"] == "warning"


def test_a_pipeline_section_without_stages_is_sized_the_same_way(tmp_path: Path) -> None:
    """DeepSpeed's default for pipeline.stages is "auto" (get_pipeline_config)."""
    _, found, _ = check_file(tmp_path / "ds.json", config(activation_checkpoint_interval=1),
                             *FLAGS, by="message")
    assert found["pp-assumed"].startswith("the pipeline section states no stages "
                                          "(DeepSpeed's default \"auto\"")


def test_pp_given_or_no_pipeline_section_is_no_warning(tmp_path: Path) -> None:
    _, found, doc = check_file(tmp_path / "a.json", config(stages="auto"), *FLAGS, "--pp", "2")
    assert "pp-assumed" not in found and doc["config"]["pp"] == 2
    _, found, doc = check_file(tmp_path / "b.json", json.dumps(BASE), *FLAGS)
    assert "pp-assumed" not in found
    assert any(n.startswith("pp not stated") for n in doc["notes"])
