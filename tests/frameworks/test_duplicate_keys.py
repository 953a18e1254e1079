"""A key written twice in one mapping: whoever reads the file keeps only one of them.

DeepSpeed refuses a JSON config with a repeated key (deepspeed/runtime/config.py
DeepSpeedConfig loads the file with ``object_pairs_hook=dict_raise_error_on_duplicate_keys``,
deepspeed/runtime/config_utils.py): an error finding. pptune's own YAML and JSON, and
DeepSpeed YAML (which DeepSpeed never parses itself): bad input, one line naming the
key and its lines. TOML parsers refuse it themselves (tomllib: "Cannot overwrite a value").
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.errors import BadInput
from pptune.frameworks.read import read_config
from tests.check_json import check_file

runner = CliRunner()


def bad(path: Path, text: str) -> str:
    path.write_text(text)
    with pytest.raises(BadInput) as info:
        read_config(path)
    message = str(info.value)
    assert "\n" not in message
    return message


DS_TWO_BF16 = """{
  "train_micro_batch_size_per_gpu": 1,
  "bf16": {"enabled": true},
  "gradient_accumulation_steps": 8,
  "bf16": {"enabled": false}
}
"""


def test_deepspeed_refuses_a_repeated_top_level_key(tmp_path: Path) -> None:
    code, found, doc = check_file(tmp_path / "ds.json", DS_TWO_BF16, "--gpus", "8",
                                  "--model", "llama3-8b", by="message")
    assert code == 1
    assert found["deepspeed-duplicate-key"] == (
        "\"bf16\" is written twice in one object (lines 3 and 5): DeepSpeedConfig raises "
        "ValueError: Duplicate keys in DeepSpeed config: ['bf16'] (deepspeed/runtime/"
        "config.py loads the file with object_pairs_hook=dict_raise_error_on_duplicate_keys, "
        "deepspeed/runtime/config_utils.py); keep one")
    assert doc["config"]["precision"] == "fp32"  # the rest is judged as the last one reads


def test_deepspeed_refuses_a_repeated_nested_key(tmp_path: Path) -> None:
    text = ('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,\n'
            ' "zero_optimization": {"stage": 1,\n "stage": 2, "overlap_comm": true,\n'
            ' "overlap_comm": false}}\n')
    code, found, _ = check_file(tmp_path / "ds.json", text, "--gpus", "8", by="message")
    assert code == 1
    # DeepSpeed names every repeated key of the first object its hook sees
    assert ("DeepSpeedConfig raises ValueError: Duplicate keys in DeepSpeed config: "
            "['stage', 'overlap_comm']") in found["deepspeed-duplicate-key"]
    assert "\"stage\" is written twice in one object (lines 2 and 3)" in (
        found["deepspeed-duplicate-key"])


def test_the_same_key_in_two_objects_is_no_duplicate(tmp_path: Path) -> None:
    text = ('{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4,\n'
            ' "bf16": {"enabled": true}, "zero_optimization": {"stage": 1},\n'
            ' "activation_checkpointing": {"enabled": true}}\n')
    code, found, _ = check_file(tmp_path / "ds.json", text, "--gpus", "8")
    assert "deepspeed-duplicate-key" not in found and code == 0, found


def test_pptune_yaml_refuses_a_repeated_key(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    assert bad(path, "micro_batch_size: 1\ngpus: 8\npp: 2\ngpus: 16\n") == (
        f"{path}: key 'gpus' is written twice (lines 2 and 4); a YAML reader keeps one of "
        "them silently: keep one")


def test_pptune_yaml_refuses_a_repeated_nested_key_three_times(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    text = "micro_batch_size: 1\nlimits:\n  max_bubble: 0.2\n  max_bubble: 0.3\n  max_bubble: 0.1\n"
    assert bad(path, text) == (
        f"{path}: key 'max_bubble' is written 3 times (lines 3, 4 and 5); a YAML reader keeps "
        "one of them silently: keep one")


def test_pptune_json_refuses_a_repeated_key(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    assert bad(path, '{"micro_batch_size": 1,\n "gpus": 8,\n "gpus": 16}\n') == (
        f"{path}: key 'gpus' is written twice (lines 2 and 3); a JSON reader keeps one of "
        "them silently: keep one")


def test_deepspeed_yaml_with_a_repeated_key_is_bad_input(tmp_path: Path) -> None:
    """DeepSpeed parses JSON only; whatever loaded the YAML kept one of the two."""
    path = tmp_path / "ds.yaml"
    assert bad(path, "train_micro_batch_size_per_gpu: 1\nbf16: {enabled: true}\n"
                     "bf16: {enabled: false}\n") == (
        f"{path}: key 'bf16' is written twice (lines 2 and 3); a YAML reader keeps one of "
        "them silently: keep one")


def test_a_yaml_merge_key_is_no_duplicate(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("micro_batch_size: 1\nlimits:\n  <<: {max_bubble: 0.2}\n  max_bubble: 0.3\n")
    assert read_config(path).config.limits.max_bubble == 0.3


@pytest.mark.parametrize(("name", "text", "line"), [
    ("titan.toml", "[parallelism]\npipeline_parallel_degree = 2\n"
     "pipeline_parallel_degree = 4\n", "Cannot overwrite a value (at line 3, column 29)"),
    ("titan2.toml", "[training]\nlocal_batch_size = 8\n[parallelism]\npipeline_parallel_degree = 2\n"
     "[training]\nsteps = 10\n", "Cannot declare ('training',) twice (at line 5, column 10)"),
    ("own.toml", "micro_batch_size = 1\npp = 2\npp = 4\n",
     "Cannot overwrite a value (at line 3, column 7)"),
])
def test_toml_refuses_repeated_keys_itself(tmp_path: Path, name: str, text: str,
                                           line: str) -> None:
    """tomllib (torchtitan 0.2.2's reader too: torchtitan/config/manager.py) refuses them."""
    path = tmp_path / name
    assert bad(path, text) == f"{path} is not valid TOML: {line}"


def test_check_config_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("micro_batch_size: 1\ngpus: 8\ngpus: 16\n")
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "key 'gpus' is written twice (lines 2 and 3)" in r.stderr
