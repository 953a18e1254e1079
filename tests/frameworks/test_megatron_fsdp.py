"""Megatron-LM scripts as users write them: Megatron-FSDP (--use-megatron-fsdp), its
sharding strategy read as the state it shards (megatron-core 0.16.1 arguments.py:
no_shard, optim, optim_grads, optim_grads_params; default no_shard; optim_grads_params
with 16-bit gradients is ZeRO-3's state, with FP32 ones priced as FSDP), and a
recompute count beside no recomputation."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check_json import check_file

SCRIPT = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\\n"
    "  --group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 \\\n"
    "  --max-position-embeddings 8192 \\\n"
    "  --micro-batch-size 1 --global-batch-size 64 --bf16 {flags}\n"
)


FSDP = "--use-megatron-fsdp --ckpt-format fsdp_dtensor"  # validate_args asserts the format


@pytest.mark.parametrize(("flags", "sharding"), [
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params "
     "--use-distributed-optimizer", "fsdp"),
    # 16-bit gradients: BF16 under --grad-reduce-in-bf16, FP16 under --fp16 (validate_args
    # accumulates in FP32 only when asked then)
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params --grad-reduce-in-bf16",
     "zero3"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params --fp16", "zero3"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params --fp16 "
     "--accumulate-allreduce-grads-in-fp32", "fsdp"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads", "zero2"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads --grad-reduce-in-bf16", "zero2"),
    (f"{FSDP} --data-parallel-sharding-strategy optim", "zero1"),
    (f"{FSDP} --use-distributed-optimizer", "zero1"),  # no_shard: the optimizer's
    (FSDP, "none"),
    ("--use-distributed-optimizer", "zero1"),
])
def test_megatron_fsdp_strategy_is_the_state_it_shards(tmp_path: Path, flags: str,
                                                      sharding: str) -> None:
    text = SCRIPT.format(flags=flags)
    if "--fp16" in flags:
        text = text.replace(" --bf16 ", " ")
    _code, found, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    # no framework refusal (the unsharded ones overflow 80 GB: a prediction)
    assert [k for k, v in found.items() if v == "error"] in ([], ["memory-overflow"]), found
    assert doc["config"]["sharding"] == sharding
    # how Megatron-FSDP is priced: an info where pptune's model of its state, gathers and
    # buckets prices it, a warning where state is left out (optim_grads' FP32 gradients)
    # or its no_shard and optim strategies are priced as Megatron-LM's own
    said = {k: v for k, v in found.items()
            if k in ("megatron-fsdp-priced", "megatron-unmodelled-flag")}
    own = sharding in ("zero3", "fsdp") or (sharding == "zero2" and "bf16" in flags)
    assert said == ({} if "megatron-fsdp" not in flags else
                    {"megatron-fsdp-priced": "info"} if own else
                    {"megatron-unmodelled-flag": "warning"})
    # 16-bit gradients are ZeRO-2's and ZeRO-3's own: no BF16 buffer on top of them
    assert doc["config"]["main_grads_dtype"] == (
        "bf16" if "bf16" in flags and sharding not in ("zero2", "zero3") else None)
    # FSDP gathers every layer in each micro-batch, pipeline or not (megatron_fsdp.py)
    assert doc["config"]["fsdp_reshard_after_forward"] == (True if sharding == "fsdp" and
                                                           "megatron-fsdp" in flags else None)


def test_the_priced_sharding_is_named_with_what_it_leaves_out(tmp_path: Path) -> None:
    """The warning says which sharding prices the strategy and what that does not count:
    FP32 gradients beside ZeRO-2's BF16 ones; FSDP's BF16 weight shard is counted."""
    _, _, doc = check_file(tmp_path / "a.sh", SCRIPT.format(
        flags=f"{FSDP} --data-parallel-sharding-strategy optim_grads"), "--gpu", "h100-sxm",
        by="message")
    found = {f["id"]: f["message"] for f in doc["findings"]}
    assert "priced as pptune's zero2" in found["megatron-unmodelled-flag"]
    assert "not counted: its FP32 gradient shard" in found["megatron-unmodelled-flag"]
    _, found, _ = check_file(tmp_path / "b.sh", SCRIPT.format(
        flags=f"{FSDP} --data-parallel-sharding-strategy optim_grads --grad-reduce-in-bf16"),
        "--gpu", "h100-sxm", by="message")
    assert "not counted" not in found["megatron-fsdp-priced"]
    _, found, _ = check_file(tmp_path / "c.sh", SCRIPT.format(
        flags=f"{FSDP} --data-parallel-sharding-strategy optim_grads_params"),
        "--gpu", "h100-sxm", by="message")
    assert "pptune's fsdp (FP32 gradients, reduced in FP32) with the BF16 weight shard" \
        in found["megatron-fsdp-priced"]
    assert "not counted" not in found["megatron-fsdp-priced"]


def test_megatron_fsdp_full_sharding_fits_where_the_distributed_optimizer_does_not(
        tmp_path: Path) -> None:
    """Llama 3 8B at 8k tokens on 8 H100s, no recomputation: the distributed optimizer
    keeps BF16 weights and FP32 gradients whole (6 bytes a parameter, 45 GiB) and
    overflows; Megatron-FSDP's optim_grads_params shards them too."""
    full = f"{FSDP} --data-parallel-sharding-strategy optim_grads_params"
    code, found, _ = check_file(tmp_path / "a.sh", SCRIPT.format(flags=full), "--gpu", "h100-sxm")
    assert code == 0 and "memory-overflow" not in found
    code, found, _ = check_file(tmp_path / "b.sh", SCRIPT.format(
        flags="--use-distributed-optimizer"), "--gpu", "h100-sxm")
    assert found.get("memory-overflow") == "error"


def test_an_unknown_strategy_is_one_clear_line(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from pptune.cli.app import app
    path = tmp_path / "c.sh"
    path.write_text(SCRIPT.format(
        flags="--use-megatron-fsdp --data-parallel-sharding-strategy full"))
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpu", "h100-sxm"])
    assert r.exit_code == 2
    assert r.stderr.strip().endswith("--data-parallel-sharding-strategy is 'full'; Megatron-LM "
                                     "takes no_shard, optim, optim_grads, optim_grads_params")


def test_a_zero_recompute_count_without_granularity_is_not_refused(tmp_path: Path) -> None:
    """megatron-core checks --recompute-num-layers only under --recompute-granularity full
    (MindSpeed's llama2 70B 128k script passes 0 beside no granularity)."""
    _, found, _ = check_file(tmp_path / "r.sh", SCRIPT.format(
        flags="--use-distributed-optimizer --recompute-num-layers 0"), "--gpus", "64",
        "--gpu", "h100-sxm")
    assert "megatron-recompute-full" not in found
    _code, found, _ = check_file(tmp_path / "f.sh", SCRIPT.format(
        flags="--recompute-granularity full --recompute-method block --recompute-num-layers 0"),
        "--gpus", "64", "--gpu", "h100-sxm")
    assert found["megatron-recompute-full"] == "error"


def test_a_settings_file_without_a_launch_is_read_from_its_variables(tmp_path: Path) -> None:
    """Megatron-LM's examples/post_training/modelopt/conf files keep a model's arguments in
    MODEL_ARGS for a launcher to source: read from there, with a note."""
    text = ('MODEL_ARGS=" \\\n  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \\\n'
            '  --ffn-hidden-size 14336 --swiglu --seq-length 8192 --micro-batch-size 1 \\\n'
            '  --group-query-attention --num-query-groups 8"\n')
    _, _, doc = check_file(tmp_path / "conf.sh", text, "--gpus", "8", "--gpu", "h100-sxm")
    assert doc["config"]["num_layers"] == 32
    assert any("no pretrain_*.py launch" in n for n in doc["notes"])


def test_a_test_or_echo_that_names_the_entry_point_is_no_launch(tmp_path: Path) -> None:
    text = ('if [ ! -f pretrain_gpt.py ]; then\n  echo "pretrain_gpt.py not found"\nfi\n'
            + SCRIPT.format(flags="--use-distributed-optimizer"))
    _, _, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    assert not any("launches" in n for n in doc["notes"])
    assert doc["config"]["num_layers"] == 32


@pytest.mark.parametrize("fp16", [False, True])
@pytest.mark.parametrize("sharding", ["zero2", "zero3", "fsdp"])
def test_the_flags_emit_writes_read_back_as_the_sharding(tmp_path: Path, sharding: str,
                                                        fp16: bool) -> None:
    """fsdp.write_args states the gradients' width each sharding is priced with:
    --grad-reduce-in-bf16 for ZeRO-2/3 under --bf16 (16-bit already under --fp16),
    --accumulate-allreduce-grads-in-fp32 for FSDP under --fp16 (FP32 already under
    --bf16); check-config reads each back as that sharding."""
    from pptune.costmodel.search import Sharding
    from pptune.frameworks.megatron.fsdp import write_args

    args = write_args(Sharding(sharding), fp16)
    assert ("--grad-reduce-in-bf16" in args) == (sharding != "fsdp" and not fp16)
    assert ("--accumulate-allreduce-grads-in-fp32" in args) == (sharding == "fsdp" and fp16)
    text = SCRIPT.format(flags=" ".join(args))
    if fp16:
        text = text.replace(" --bf16 ", " --fp16 ")
    _, found, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    assert doc["config"]["sharding"] == sharding
    assert [k for k, v in found.items() if v == "error"] in ([], ["memory-overflow"]), found


def test_optim_grads_params_keeps_a_bf16_weight_shard_beside_its_fp32_main_weights(
        tmp_path: Path) -> None:
    """Megatron-FSDP's optim_grads_params with FP32 gradients, Llama 3 8B over dp 8: each
    rank keeps the BF16 weight shard (2), the FP32 main weights (4) and gradients (4) and
    Adam's two FP32 moments (8), 18 bytes a parameter over dp (param_and_grad_buffer.py
    ``_init_each_parameter_group_buffers``): 2 more than pptune's FSDP (4 + 4 + 8)."""
    from pptune.check.rules import CheckOptions, check
    from pptune.frameworks.read import read_config
    from pptune.options import CostOptions

    path = tmp_path / "a.sh"
    path.write_text(SCRIPT.format(flags=f"{FSDP} --data-parallel-sharding-strategy "
                                  "optim_grads_params --use-distributed-optimizer"))
    read = read_config(path, gpu="h100-sxm")
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm"),
                                                       compare_best=False), read.semantics)
    assert report.plan is not None and report.table is not None
    assert report.plan.sharding.value == "fsdp" and report.plan.dp == 8
    params = sum(report.table.layer_params)
    assert report.plan.memory[0].state_bytes == pytest.approx(18 * params / 8, rel=1e-12)


@pytest.mark.parametrize(("flags", "queue"), [
    ("", 1e9),  # megatron_fsdp.py: max(1e9, twice a layer) unless given
    (" --suggested-communication-unit-size 3000000000", 3e9),
    (" --fsdp-double-buffer", 0.0),  # two layers' buckets
    (" --use-nccl-ub", 0.0),  # user buffers turn the double buffer on
])
def test_megatron_fsdp_counts_the_gradient_buckets_a_backward_queues(
        tmp_path: Path, flags: str, queue: float) -> None:
    """optim_grads_params with FP32 gradients, Llama 3 8B on one stage over dp 8: each
    gradient lands in an unsharded FP32 bucket that waits for its reduce-scatter until
    the queue passes --suggested-communication-unit-size elements (1e9 by default), so a
    backward holds at most min(P, queue + 2 L) of them (the queue, the bucket just queued
    and the one being filled), L the largest layer (the LM head's 525M), 4 bytes each,
    beside two gathered layers' BF16 weights (2 L x 2)."""
    from pptune.check.rules import CheckOptions, check
    from pptune.frameworks.read import read_config
    from pptune.options import CostOptions

    path = tmp_path / "a.sh"
    path.write_text(SCRIPT.format(flags=f"{FSDP} --data-parallel-sharding-strategy "
                                  "optim_grads_params --use-distributed-optimizer" + flags))
    read = read_config(path, gpu="h100-sxm")
    assert read.config.fsdp_grad_queue_elements == queue
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm"),
                                                       compare_best=False), read.semantics)
    assert report.plan is not None and report.table is not None
    params, largest = sum(report.table.layer_params), max(report.table.layer_params)
    assert largest == 128256 * 4096 + 4096  # the untied LM head with the final norm
    held = min(params, queue + 2 * largest)
    assert report.plan.memory[0].working_bytes == pytest.approx(
        2 * 2 * largest + 4 * held, rel=1e-12)
