"""A Megatron-LM script recommend --emit megatron writes passes check-config --strict: each
flag the writer states is one the reader prices (no megatron-unmodelled-flag), Megatron-LM
defines (no megatron-unknown-flag) and its validate_args runs without a warning, and the
step is the one the header predicts.

Megatron-FSDP (--use-megatron-fsdp with the optim_grads or optim_grads_params strategy,
its --ckpt-format fsdp_dtensor, the distributed optimizer, --grad-reduce-in-bf16 for
ZeRO-2/3, --no-gradient-accumulation-fusion and the overlap flags) is priced with pptune's
model of its own state, gathers and gradient buckets (megatron/fsdp.py): check-config says
how in an info finding, megatron-fsdp-priced, where it had warned megatron-unmodelled-flag
and failed pptune's own script under --strict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from tests.check_json import check_file

runner = CliRunner()
SCRIPT = "pretrain_megatron.sh"
L8 = ["--gpus", "16", "--model", "llama3-8b"]

# (plan flags, the flags the script must state for the case)
CASES = {
    "fsdp": ([*L8, "--sharding", "fsdp", "--pp", "1"],
             ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params",
              "--ckpt-format fsdp_dtensor", "--no-gradient-accumulation-fusion"]),
    "zero3": ([*L8, "--sharding", "zero3", "--pp", "1"],
              ["--data-parallel-sharding-strategy optim_grads_params", "--grad-reduce-in-bf16",
               "--overlap-param-gather"]),
    "zero2": ([*L8, "--sharding", "zero2", "--pp", "1"],
              ["--data-parallel-sharding-strategy optim_grads", "--grad-reduce-in-bf16"]),
    "zero1": ([*L8, "--sharding", "zero1", "--pp", "2"],
              ["--use-distributed-optimizer", "--pipeline-model-parallel-size 2"]),
    "moe": (["--gpus", "64", "--model", "qwen3-30b-a3b", "--ep", "8"],
            ["--expert-model-parallel-size 8", "--moe-grouped-gemm",
             "--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]),
    "cp": ([*L8, "--seq-len", "65536", "--cp", "4", "--tp", "1", "--cp-comm", "a2a+p2p"],
           ["--context-parallel-size 4", "--cp-comm-type a2a+p2p"]),
    "fp8": ([*L8, "--precision", "fp8", "--fp8-param-gather", "--sharding", "zero1"],
            ["--fp8-format hybrid", "--fp8-param-gather"]),
    # priced with an FP32 gradient buffer, which --fp16 keeps only with this flag
    "fp16": ([*L8, "--precision", "fp16", "--sharding", "zero1", "--pp", "2"],
             ["--fp16", "--accumulate-allreduce-grads-in-fp32"]),
    # priced with a 16-bit buffer: --fp16's own (no --grad-reduce-in-bf16, which needs --bf16)
    "fp16-held": ([*L8, "--precision", "fp16", "--sharding", "zero1", "--pp", "2",
                   "--grad-compression", "fp16"], ["--fp16"]),
}
ABSENT = {"fp16-held": ("--accumulate-allreduce-grads-in-fp32", "--grad-reduce-in-bf16")}


def _args(text: str) -> list[str]:
    return [line.strip().rstrip(" \\") for line in text.splitlines() if line.startswith("    --")]


@pytest.mark.parametrize("case", list(CASES))
def test_an_emitted_script_passes_strict(tmp_path: Path, case: str) -> None:
    flags, stated = CASES[case]
    r = runner.invoke(app, ["recommend", *flags, "--top", "1", "--emit", "megatron", "-o",
                            str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    text = (tmp_path / SCRIPT).read_text()
    args = _args(text)
    for flag in stated:
        assert flag in args, flag
    assert not set(ABSENT.get(case, ())) & set(args)
    predicted = float(text.split("# predicted: step ")[1].split(" s,")[0])
    r = runner.invoke(app, ["check-config", str(tmp_path / SCRIPT), "--strict", "--output",
                            "json", "--no-compare"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0, doc["findings"]
    assert [f for f in doc["findings"] if f["severity"] != "info"] == []
    assert round(doc["derived"]["step_time_s"], 3) == predicted
    priced = [f["message"] for f in doc["findings"] if f["id"] == "megatron-fsdp-priced"]
    assert len(priced) == ("--use-megatron-fsdp" in args)


def test_what_the_fsdp_finding_says(tmp_path: Path) -> None:
    """optim_grads_params with FP32 gradients: priced as FSDP with the BF16 weight shard,
    and the copy --no-gradient-accumulation-fusion makes named as not counted; optim_grads
    with FP32 gradients still warns: its FP32 gradient shard is not counted."""
    script = ("torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py "
              "--tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
              "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
              "--ffn-hidden-size 14336 --group-query-attention --num-query-groups 8 --swiglu "
              "--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 "
              "--global-batch-size 64 --bf16 --use-megatron-fsdp --ckpt-format fsdp_dtensor "
              "--use-distributed-optimizer --no-gradient-accumulation-fusion "
              "--data-parallel-sharding-strategy {}\n")
    _, found, _ = check_file(tmp_path / "a.sh", script.format("optim_grads_params"),
                             "--gpu", "h100-sxm", by="message")
    assert "megatron-unmodelled-flag" not in found
    said = found["megatron-fsdp-priced"]
    assert said.startswith("--use-megatron-fsdp with --data-parallel-sharding-strategy "
                           "optim_grads_params is priced as pptune's fsdp")
    assert "not counted: the copy of each BF16 weight gradient into its gradient bucket" in said
    _, found, _ = check_file(tmp_path / "b.sh", script.format("optim_grads"),
                             "--gpu", "h100-sxm")
    assert found["megatron-unmodelled-flag"] == "warning"
    assert "megatron-fsdp-priced" not in found
