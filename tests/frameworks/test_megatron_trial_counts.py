"""A Megatron-LM script whose sizes do not divide its GPUs, from a user trial: the
numbers check-config gives are the file's (frameworks/megatron/pipeline.py,
check/rules.py).

- the costs' GPU count is the GPUs the script launches (512), not tp x pp x cp (24);
- --num-layers-per-virtual-pipeline-stage with layers pp does not divide is refused
  once, with Megatron-LM's own message (validate_args: 'number of layers of the model
  must be divisible pipeline model parallel size'), not again as 'pp 6 x vpp 1'.
"""

from __future__ import annotations

from pathlib import Path

from tests.check_json import check_file

SCRIPT = ("torchrun --nnodes 64 --nproc_per_node 8 pretrain_gpt.py --num-layers {layers} "
          "--hidden-size 4096 --num-attention-heads 32 --seq-length 4096 "
          "--max-position-embeddings 4096 --tensor-model-parallel-size 4 "
          "--pipeline-model-parallel-size {pp} --num-layers-per-virtual-pipeline-stage {per} "
          "--micro-batch-size 1 --global-batch-size 1024 --bf16\n")


def split_errors(doc: dict) -> list[str]:
    return [f["message"] for f in doc["findings"] if f["id"] == "megatron-layers-not-divisible"]


def test_the_costs_pace_is_the_launched_gpus(tmp_path: Path) -> None:
    _, found, doc = check_file(tmp_path / "run.sh", SCRIPT.format(layers=80, pp=6, per=4))
    assert found["gpus-mismatch"] == "error"  # 512 over tp 4 x pp 6 = 24
    assert "slowest of 512 GPUs' pace" in doc["derived"]["cost_source"]


def test_layers_pp_does_not_divide_are_refused_once_in_megatrons_words(tmp_path: Path
                                                                       ) -> None:
    _, _, doc = check_file(tmp_path / "run.sh", SCRIPT.format(layers=80, pp=6, per=4))
    (said,) = split_errors(doc)
    assert said.startswith("--num-layers 80 is not divisible by pp 6")
    assert "'number of layers of the model must be divisible pipeline model parallel size'" \
        in said and "vpp 1" not in said


def test_a_stage_the_virtual_stages_do_not_divide_is_refused_once(tmp_path: Path) -> None:
    """80 layers over pp 4 are 20 a stage, not a multiple of 3 a virtual stage."""
    _, _, doc = check_file(tmp_path / "run.sh", SCRIPT.format(layers=80, pp=4, per=3))
    (said,) = split_errors(doc)
    assert said.startswith("--num-layers 80 over pp 4 is 20 layers a stage, not a multiple "
                           "of --num-layers-per-virtual-pipeline-stage 3")
    assert "'number of layers per pipeline stage must be divisible number of layers per " \
        "virtual pipeline stage'" in said
