"""Keys nested in a DeepSpeed config's sections: the ones DeepSpeed 0.19.8 refuses (its
pydantic sections forbid unknown keys) are error findings; the ones it reads as plain
dicts and ignores are listed as ignored, with a warning where one is likely a typo of a
key pptune prices."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pptune.frameworks.common.fields import ReaderFinding
from pptune.frameworks.read import ReadResult, read_config
from tests.check_json import check_file

BASE = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True}}


def read(tmp_path: Path, *versions: str, **sections: Any) -> ReadResult:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({**BASE, **sections}))
    return read_config(path, gpus=8, framework_versions=list(versions) or None)


def found(result: ReadResult, rule_id: str) -> list[ReaderFinding]:
    return [f for f in result.semantics.findings if f.id == rule_id]


def test_the_trial_config_is_refused_and_lists_what_was_not_read(tmp_path: Path) -> None:
    """The user trial: a ZeRO stage and an offload misspelled, and the pipeline's
    checkpoint interval misspelled, had read as ZeRO-0 without recompute, exit 0."""
    code, ids, doc = check_file(
        tmp_path / "ds.json",
        json.dumps({**BASE, "zero_optimization": {"stgae": 1, "offload_optimizr":
                                                  {"device": "cpu"}},
                    "pipeline": {"stages": 2, "activaton_checkpoint_interval": 1}}),
        "--gpus", "8", "--model", "llama3-8b", "--gpu", "h100-sxm", by="message")
    assert code == 1
    assert ids["deepspeed-unknown-key"] == (
        "zero_optimization.offload_optimizr (did you mean offload_optimizer?), "
        "zero_optimization.stgae (did you mean stage?): DeepSpeedZeroConfig raises pydantic's "
        "ValidationError 'Extra inputs are not permitted' for each (deepspeed/runtime/zero/"
        "config.py, a DeepSpeedConfigModel with extra=\"forbid\", deepspeed/runtime/"
        "config_utils.py); read here without them")
    assert ids["deepspeed-ignored-key"] == (
        "pipeline.activaton_checkpoint_interval (did you mean "
        "activation_checkpoint_interval?): DeepSpeed reads pipeline as a plain dict "
        "(get_pipeline_config, deepspeed/runtime/config.py) and no code reads this key, so "
        "the run ignores it, as the prediction does")
    assert doc["ignored"] == ["pipeline.activaton_checkpoint_interval",
                              "zero_optimization.offload_optimizr", "zero_optimization.stgae"]
    assert doc["config"]["recompute"] == "none" and doc["config"]["zero_stage"] == 0


def test_keys_of_the_offload_sub_models_are_refused_too(tmp_path: Path) -> None:
    result = read(tmp_path, zero_optimization={
        "stage": 3, "offload_optimizer": {"device": "cpu", "pin_memroy": True},
        "offload_param": {"device": "cpu", "buffer_count": 4}})
    (finding,) = found(result, "deepspeed-unknown-key")
    assert finding.severity == "error"
    assert finding.message.startswith(
        "zero_optimization.offload_optimizer.pin_memroy (did you mean pin_memory?): "
        "DeepSpeedZeroConfig raises")
    # read: device; the rest, known to DeepSpeed or not, listed in full
    assert result.semantics.ignored == ["zero_optimization.offload_optimizer.pin_memroy",
                                        "zero_optimization.offload_param.buffer_count"]
    assert result.config.offload_optimizer and result.config.offload_params


def test_precision_and_autotp_sections_are_deepspeed_models_as_well(tmp_path: Path) -> None:
    """bf16 / fp16 (runtime/precision_config.py) and tensor_parallel (TPTrainingConfig)
    are DeepSpeedConfigModels: "enabeld" would have trained in FP32 priced as such."""
    result = read(tmp_path, bf16={"enabeld": True}, tensor_parallel={"autotp_size": 2,
                                                                      "tp_overlap_com": True})
    messages = [f.message for f in found(result, "deepspeed-unknown-key")]
    assert messages[0].startswith("bf16.enabeld (did you mean enabled?): DeepSpeedBF16Config "
                                  "raises pydantic's ValidationError")
    assert messages[1].startswith("tensor_parallel.tp_overlap_com (did you mean "
                                  "tp_overlap_comm?): TPTrainingConfig raises")
    assert result.config.precision == "fp32"


def test_a_value_of_auto_is_dropped_before_deepspeed_validates(tmp_path: Path) -> None:
    """DeepSpeedConfigModel.__init__ (strict=False) drops every key whose value is "auto"
    before pydantic sees it (runtime/config_utils.py): no refusal, listed as ignored."""
    result = read(tmp_path, zero_optimization={"stage": 1, "stgae": "auto",
                                               "offload_optimizer": {"devise": "auto"}})
    assert not found(result, "deepspeed-unknown-key")
    assert result.semantics.ignored == ["zero_optimization.offload_optimizer.devise",
                                        "zero_optimization.stgae"]


def test_removed_zero_keys_are_refused_with_deepspeeds_own_message(tmp_path: Path) -> None:
    result = read(tmp_path, zero_optimization={"stage": 3, "mics_shard_size": 8})
    (finding,) = found(result, "deepspeed-unknown-key")
    assert finding.message.startswith(
        "zero_optimization.mics_shard_size: DeepSpeedConfig raises DeepSpeedConfigError "
        "'MiCS ZeRO-3 sharding has been removed")


def test_another_release_is_warned_not_refused(tmp_path: Path) -> None:
    """The key tables are 0.19.8's: at another release a key may have existed."""
    result = read(tmp_path, "deepspeed=0.14.0", zero_optimization={"stage": 1, "stgae": 1})
    (finding,) = found(result, "deepspeed-unknown-key")
    assert finding.severity == "warning"
    assert "DeepSpeed 0.19.8's DeepSpeedZeroConfig" in finding.message
    assert "0.14.0" in finding.message


@pytest.mark.parametrize(("section", "key", "close"), [
    ("pipeline", "partiton", "partition"),
    ("pipeline", "stage", "stages"),
    ("data_types", "grad_accum_dtyp", "grad_accum_dtype"),
    ("expert_parallel", "autoep_sise", "autoep_size"),
    ("pptune", "atention", "attention"),
])
def test_plain_sections_warn_on_a_likely_typo_of_a_key_pptune_reads(
        tmp_path: Path, section: str, key: str, close: str) -> None:
    result = read(tmp_path, **{section: {key: 1}})
    (finding,) = found(result, "deepspeed-ignored-key")
    assert finding.severity == "warning"
    assert finding.message.startswith(f"{section}.{key} (did you mean {close}?)")
    assert f"{section}.{key}" in result.semantics.ignored


def test_a_key_written_one_level_off_names_where_it_belongs(tmp_path: Path) -> None:
    """A trial: the pipeline size written inside the pipeline section and the checkpoint
    interval at the top level were listed as ignored, the interval hinted as
    activation_checkpointing; each is now named where DeepSpeed reads it."""
    result = read(tmp_path, pipeline={"pipeline_parallel_size": 4},
                  activation_checkpoint_interval=1)
    (finding,) = found(result, "deepspeed-ignored-key")
    assert finding.message.startswith(
        "activation_checkpoint_interval (did you mean pipeline.activation_checkpoint_interval?)"
        ", pipeline.pipeline_parallel_size (did you mean the top-level pipeline_parallel_size?)"
        ": ")
    assert result.config.pp == 1  # read at neither place: checked at pp=1


def test_plain_sections_list_keys_deepspeed_reads_and_pptune_does_not(tmp_path: Path) -> None:
    """Known to DeepSpeed (pipe_partitioned; activation_checkpointing's keys) or far from
    any key pptune reads: listed as ignored, no warning."""
    result = read(tmp_path, pipeline={"stages": 2, "pipe_partitioned": False, "colour": 1},
                  activation_checkpointing={"partition_activations": True})
    assert not found(result, "deepspeed-ignored-key")
    assert result.semantics.ignored == ["activation_checkpointing.partition_activations",
                                        "pipeline.colour", "pipeline.pipe_partitioned"]


def test_a_table_pptune_does_not_read_is_listed_whole(tmp_path: Path) -> None:
    result = read(tmp_path, zero_optimization={"stage": 1, "zenflow": {"topk_ratio": 0.1},
                                               "leaf_module": {"nmaes": ["x"]}})
    assert result.semantics.ignored == ["zero_optimization.leaf_module",
                                        "zero_optimization.zenflow"]
    (finding,) = found(result, "deepspeed-unknown-key")  # still DeepSpeed's refusal
    assert finding.message.startswith(
        "zero_optimization.leaf_module.nmaes (did you mean names?)")


def test_many_unknown_keys_are_counted_past_the_first_few(tmp_path: Path) -> None:
    result = read(tmp_path, zero_optimization={"stage": 1, **{f"k{i}": 1 for i in range(9)}})
    (finding,) = found(result, "deepspeed-unknown-key")
    assert "zero_optimization.k5, and 3 more:" in finding.message
    assert len(result.semantics.ignored) == 9


def test_a_top_level_typo_of_a_key_pptune_reads_is_warned(tmp_path: Path) -> None:
    """DeepSpeed ignores a top-level key it does not read: a misspelt section or batch key
    runs at its default. Keys DeepSpeed reads (steps_per_print, gradient_clipping) and
    keys far from pptune's are listed as ignored, not warned."""
    result = read(tmp_path, zero_optimisation={"stage": 1}, steps_per_print=10,
                  gradient_clipping=1.0, gradient_accumulation_step=4)
    (finding,) = found(result, "deepspeed-ignored-key")
    assert finding.severity == "warning"
    assert finding.message.startswith(
        "gradient_accumulation_step (did you mean gradient_accumulation_steps?), "
        "zero_optimisation (did you mean zero_optimization?): DeepSpeedConfig reads its "
        "top-level keys by name and ignores others")
    assert {"steps_per_print", "gradient_clipping"} <= set(result.semantics.ignored)


def test_top_level_keys_of_removed_features_are_refused_from_0_19_8(tmp_path: Path) -> None:
    """DeepSpeed 0.19.8's DeepSpeedConfig raises DeepSpeedConfigError for amp (Apex) and
    elasticity, whatever their value, before it reads anything else: one error each, with
    DeepSpeed's message; the keys stay in ignored."""
    result = read(tmp_path, amp={"enabled": False}, elasticity={"enabled": True,
                                                                "max_train_batch_size": 64})
    amp, elastic = found(result, "deepspeed-unknown-key")
    assert (amp.severity, elastic.severity) == ("error", "error")
    assert amp.message == (
        "amp: DeepSpeedConfig raises DeepSpeedConfigError 'NVIDIA Apex AMP integration has "
        "been removed. Use DeepSpeed 'fp16', 'bf16', or 'torch_autocast' instead.' "
        "(deepspeed/runtime/config.py _reject_removed_config_keys, from DeepSpeed 0.19.8 on); "
        "remove it")
    assert elastic.message.startswith(
        "elasticity: DeepSpeedConfig raises DeepSpeedConfigError 'Elastic training has been "
        "removed;")
    assert {"amp", "elasticity"} <= set(result.semantics.ignored)


def test_a_removed_key_is_read_by_deepspeed_before_its_removal(tmp_path: Path) -> None:
    """0.19.7 refuses nebula (and MiCS) but still reads amp and zeropp_loco_param; 0.19.6
    refuses none of them: a warning that pptune does not model what DeepSpeed reads."""
    sections: dict[str, Any] = {"amp": {"enabled": True}, "nebula": {"enabled": True},
                                "zero_optimization": {"stage": 1, "zeropp_loco_param": {},
                                                      "mics_shard_size": 8}}
    at7 = read(tmp_path, "deepspeed=0.19.7", **sections)
    assert [f.message.split(":")[0] for f in found(at7, "deepspeed-unknown-key")] == [
        "nebula", "zero_optimization.mics_shard_size"]
    assert [f.message.split(":")[0] for f in found(at7, "deepspeed-unmodelled")] == [
        "amp", "zero_optimization.zeropp_loco_param"]
    (amp, *_) = found(at7, "deepspeed-unmodelled")
    assert amp.severity == "warning"
    assert amp.message.startswith("amp: DeepSpeed 0.19.7 reads it (DeepSpeed 0.19.8 and "
                                  "later refuse it: 'NVIDIA Apex AMP integration")
    at6 = read(tmp_path, "deepspeed=0.19.6", **sections)
    assert not found(at6, "deepspeed-unknown-key")
    assert len(found(at6, "deepspeed-unmodelled")) == 4
