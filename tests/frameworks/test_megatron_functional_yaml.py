"""Megatron-LM's functional-test configs (tests/functional_tests/test_cases/**/
model_config.yaml) read as the launch their launcher runs
(tests/functional_tests/shell_test_utils/_run_training.sh, Megatron-LM d98e8a64): ENV_VARS
exported, MODEL_ARGS as the flags, through the launch-script reader
(pptune/frameworks/megatron/functional_yaml.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.cli.app import app
from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.megatron.functional_yaml import launch
from pptune.frameworks.read import read_config
from tests.check_json import check_file, runner

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
YAML = (DATA / "megatron_functional_test.yaml").read_text()

# the same job as the YAML, written as a launch script (8 GPUs from torchrun; the YAML
# states none, so the test passes --gpus 8 for it)
SCRIPT = """\
export CUDA_DEVICE_MAX_CONNECTIONS=1
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
  --sequence-parallel --use-distributed-optimizer \\
  --num-layers 16 --hidden-size 2048 --num-attention-heads 16 \\
  --seq-length 4096 --max-position-embeddings 4096 --swiglu --ffn-hidden-size 5632 \\
  --norm-epsilon 1e-5 --hidden-dropout 0.0 --attention-dropout 0.0 \\
  --micro-batch-size 2 --global-batch-size 64 --bf16 \\
  --data-path ${DATA_PATH}/text_document --save ${CHECKPOINT_SAVE_PATH} \\
  --split 949,50,1 --log-interval 1
"""


def _one_line_refusal(path: Path, text: str) -> str:
    path.write_text(text)
    r = runner.invoke(app, ["check-config", str(path), "--gpus", "8"])
    assert r.exit_code == 2, r.stdout
    assert r.stderr.strip().count("\n") == 0
    return r.stderr


def test_it_reads_as_the_equivalent_launch_script(tmp_path: Path) -> None:
    _, found, doc = check_file(tmp_path / "model_config.yaml", YAML, "--gpu", "h100-sxm",
                               "--gpus", "8")
    _, stated, script = check_file(tmp_path / "run.sh", SCRIPT, "--gpu", "h100-sxm")
    assert doc["format"] == "megatron"
    assert doc["derived"] == script["derived"] and doc["config"] == script["config"]
    assert found == stated and doc["ignored"] == script["ignored"]
    # by hand: tp 2 x pp 2 on 8 GPUs leaves dp 2; 64 / (2 a micro-batch x dp 2) = 16
    assert doc["derived"]["dp"] == 2 and doc["derived"]["grad_accum_steps"] == 16
    cfg = doc["config"]
    assert (cfg["tp"], cfg["pp"], cfg["micro_batch_size"], cfg["global_batch"]) == (2, 2, 2, 64)
    assert cfg["sequence_parallel"] and cfg["sharded_optimizer"] and cfg["gated_mlp"]
    assert cfg["num_layers"] == 16 and cfg["ffn_hidden_size"] == 5632
    # ENV_VARS is the job's environment: without CUDA_DEVICE_MAX_CONNECTIONS=1, tp 2 on
    # an H100 is the warning a launch script without the export gets
    assert "megatron-cuda-connections" not in found
    _, found, _ = check_file(tmp_path / "b.yaml",
                             YAML.replace("CUDA_DEVICE_MAX_CONNECTIONS: 1", "NCCL_DEBUG: INFO"),
                             "--gpu", "h100-sxm", "--gpus", "8")
    assert found["megatron-cuda-connections"] == "warning"


def test_the_gpu_count_is_the_gpus_flags(tmp_path: Path) -> None:
    _, found, doc = check_file(tmp_path / "model_config.yaml", YAML, "--gpu", "h100-sxm")
    assert doc["config"]["gpus"] is None and found["dp-assumed"] == "warning"


def test_an_empty_string_drops_the_flag_and_false_is_passed_as_a_word(tmp_path: Path) -> None:
    # --overlap-grad-reduce: "" is dropped by yq's select(.value != "")
    cfg = read_config(DATA / "megatron_functional_test.yaml", gpus=8).config
    assert cfg.overlap_grad_reduce is False
    # an empty value (YAML null) passes the bare flag, as the launcher's default case does
    text = YAML.replace('--overlap-grad-reduce: ""', "--overlap-grad-reduce:")
    _, _, doc = check_file(tmp_path / "a.yaml", text, "--gpus", "8")
    assert doc["config"]["overlap_grad_reduce"] is True
    # false is not dropped: the launcher passes "--use-distributed-optimizer false", which
    # Megatron-LM's argparse refuses ("unrecognized arguments: false")
    text = YAML.replace("--use-distributed-optimizer: true", "--use-distributed-optimizer: false")
    code, found, doc = check_file(tmp_path / "b.yaml", text, "--gpus", "8", by="message")
    assert code == 1 and "unrecognized arguments: false" in found["megatron-flag-value"]
    assert "write true, or leave the flag out" in found["megatron-flag-value"]


def test_a_shell_reference_is_left_unresolved_unless_env_sets_it(tmp_path: Path) -> None:
    _, _, doc = check_file(tmp_path / "a.yaml", YAML, "--gpus", "8")
    assert any("left as written" in n and "${DATA_PATH}/text_document" in n
               for n in doc["notes"])
    text = YAML.replace("--micro-batch-size: 2", "--micro-batch-size: ${MBS}")
    assert "--micro-batch-size is missing or unresolved" in _one_line_refusal(
        tmp_path / "b.yaml", text)
    _, _, doc = check_file(tmp_path / "b.yaml", text, "--gpus", "8", "--env", "MBS=2",
                           "--env", "DATA_PATH=/data")
    assert doc["config"]["micro_batch_size"] == 2
    assert not any("${DATA_PATH}" in n for n in doc["notes"])


def test_detected_by_its_model_args_mapping_alone(tmp_path: Path) -> None:
    """No line starts with one of the flags the launch-script detector looks for."""
    text = ("MODEL_ARGS:\n  --hidden-size: 1024\n  --num-layers: 8\n"
            "  --num-attention-heads: 8\n  --seq-length: 1024\n"
            "  --max-position-embeddings: 1024\n  --micro-batch-size: 1\n")
    _, _, doc = check_file(tmp_path / "m.yaml", text, "--gpus", "2")
    assert doc["format"] == "megatron"
    assert doc["config"]["num_layers"] == 8 and doc["derived"]["dp"] == 2


@pytest.mark.parametrize(("body", "said"), [
    ("MODEL_ARGS:\n  --num-layers: 8\n   --hidden-size: 1024\n", "is not valid YAML"),
    ("MODEL_ARGS:\n  - --num-layers 8\n", "MODEL_ARGS is not a mapping of flags"),
    ("MODEL_ARGS:\n  trainer.max_steps: 10\n", "is not a --flag"),
    ("MODEL_ARGS:\n  --recompute-modules:\n    - core_attn\n", "a block list or a mapping"),
    ("MODEL_ARGS:\n  --data-path: \"it's\"\n", "unmatched quote"),
    ("MODE: inference\nMODEL_ARGS:\n  --num-layers: 8\n", "not a training launch"),
])
def test_a_malformed_functional_test_config_is_one_line_exit_2(
        tmp_path: Path, body: str, said: str) -> None:
    message = _one_line_refusal(tmp_path / "model_config.yaml", body)
    assert said in message and "model_config.yaml" in message


def test_values_are_passed_as_the_launcher_writes_them() -> None:
    """Its cases: ( ) double-quoted, [ ] unwrapped, blanks quoted, yq's text kept."""
    text = launch("ENV_VARS:\n  NVTE_FUSED_ATTN: 0\nMODEL_ARGS:\n"
                  "  --moe-layer-freq: ([0]*1+[1]*3)\n  --cp-comm-type: '[a2a p2p]'\n"
                  "  --norm-epsilon: 1e-6\n  --tokenizer-type: 'Null Tokenizer'\n"
                  "  --bf16: true\n  --lr: 3.0e-4\n  --recompute-modules: [mlp]\n",
                  Ctx(name="x.yaml"))
    assert text == ("export NVTE_FUSED_ATTN=0\n"
                    '--moe-layer-freq "([0]*1+[1]*3)" \\\n--cp-comm-type a2a p2p \\\n'
                    "--norm-epsilon 1e-6 \\\n"
                    '--tokenizer-type "Null Tokenizer" \\\n--bf16 \\\n--lr 3.0e-4 \\\n'
                    "--recompute-modules mlp\n")
    assert launch("#!/bin/bash\ntorchrun pretrain_gpt.py --num-layers 2\n",
                  Ctx(name="x.sh")) is None


def test_a_script_writing_such_a_file_is_still_a_script(tmp_path: Path) -> None:
    text = ("#!/bin/bash\ncat > model_config.yaml <<EOF\nMODEL_ARGS:\n  --num-layers: 2\nEOF\n"
            + SCRIPT)
    _, _, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    assert doc["config"]["num_layers"] == 16 and doc["config"]["gpus"] == 8
    assert not any("functional-test" in n for n in doc["notes"])
