"""What Megatron-LM core_v0.16.1's validate_args (megatron/training/arguments.py) refuses
of Megatron-FSDP, as check-config's error findings: each quotes the assertion, and the
script that satisfies it is not refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check_json import check_file

LAUNCH = (
    "{env}torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size {tp} --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\\n"
    "  --group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 \\\n"
    "  --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 64 --bf16 \\\n"
    "  {flags}\n"
)
FULL = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params"
DTENSOR = "--ckpt-format fsdp_dtensor"


def _check(tmp_path: Path, flags: str, env: str = "", tp: int = 1) -> dict[str, str]:
    """Each finding's id -> its message (check-config --output json)."""
    _code, found, _doc = check_file(tmp_path / "run.sh", LAUNCH.format(env=env, tp=tp,
                                                                       flags=flags),
                                    "--gpu", "h100-sxm", by="message")
    return found


def _errors(found: dict[str, str], prefix: str = "megatron-") -> set[str]:
    return {k for k in found if k.startswith(prefix)
            and k not in ("megatron-unmodelled-flag", "megatron-fsdp-priced")}


@pytest.mark.parametrize(("flags", "said"), [
    (FULL, "--ckpt-format torch_dist (the default)"),  # training_config.py: torch_dist
    (f"{FULL} --ckpt-format torch_dist", "--ckpt-format torch_dist:"),
])
def test_megatron_fsdp_needs_the_dtensor_checkpoint_format(tmp_path: Path, flags: str,
                                                           said: str) -> None:
    found = _check(tmp_path, flags)
    assert _errors(found) == {"megatron-fsdp-ckpt-format"}
    assert said in found["megatron-fsdp-ckpt-format"]
    assert ("'Megatron FSDP only supports fsdp_dtensor checkpoint format' "
            "(megatron/training/arguments.py validate_args); add --ckpt-format fsdp_dtensor"
            ) in found["megatron-fsdp-ckpt-format"]


def test_the_format_may_come_from_words_out_of_sight(tmp_path: Path) -> None:
    """"$@" may carry --ckpt-format, as it may --max-position-embeddings; an unresolved
    value is not judged either."""
    assert _errors(_check(tmp_path, f'{FULL} "$@"')) == set()
    assert _errors(_check(tmp_path, f"{FULL} --ckpt-format $FORMAT")) == set()
    assert _errors(_check(tmp_path, f"{FULL} {DTENSOR}")) == set()


def test_the_dtensor_format_needs_megatron_fsdp(tmp_path: Path) -> None:
    found = _check(tmp_path, f"--use-distributed-optimizer {DTENSOR}")
    assert _errors(found) == {"megatron-fsdp-ckpt-format"}
    assert "'--ckpt-format fsdp_dtensor is only tested with Megatron FSDP.'" in found[
        "megatron-fsdp-ckpt-format"]


@pytest.mark.parametrize("flag", ["--use-megatron-fsdp", "--use-torch-fsdp2"])
def test_fsdp_refuses_one_cuda_connection(tmp_path: Path, flag: str) -> None:
    """validate_args asserts 'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large
    than one' for both FSDPs; with tp > 1 it then only warns about tensor parallelism's
    wish for 1, so no megatron-cuda-connections warning either way."""
    flags = f"{flag} {DTENSOR}" if flag == "--use-megatron-fsdp" else flag
    found = _check(tmp_path, flags, env="export CUDA_DEVICE_MAX_CONNECTIONS=1\n", tp=2)
    assert "megatron-fsdp-cuda-connections" in found
    assert "'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one'" in found[
        "megatron-fsdp-cuda-connections"]
    found = _check(tmp_path, flags, env="unset CUDA_DEVICE_MAX_CONNECTIONS\n", tp=2)
    assert not {"megatron-fsdp-cuda-connections", "megatron-cuda-connections"} & set(found)
    # without FSDP, tensor parallelism still wants it exported (a warning)
    assert "megatron-cuda-connections" in _check(tmp_path, "--use-distributed-optimizer", tp=2)


@pytest.mark.parametrize(("flags", "rule", "quote"), [
    (f"{FULL} {DTENSOR} --check-weight-hash-across-dp-replicas-interval 100",
     "megatron-fsdp-weight-hash",
     "'check_weight_hash_across_dp_replicas_interval is not supported with optim_grads_params'"),
    (f"{FULL} {DTENSOR} --hybrid-context-parallel", "megatron-fsdp-hybrid-cp",
     "'Hybrid context parallelism not supported with Megatron FSDP'"),
    (f"{FULL} {DTENSOR} --optimizer muon", "megatron-fsdp-muon",
     "'Muon optimizer does not support Megatron-FSDP for now.'"),
    (f"{FULL} {DTENSOR} --fsdp-manual-registration", "megatron-fsdp-manual-registration",
     "'FSDP manual registration is only supported with nccl-ub option'"),
    ("--use-distributed-optimizer --fsdp-manual-registration --use-nccl-ub",
     "megatron-fsdp-manual-registration",
     "'FSDP manual registration is only supported with Megatron FSDP'"),
])
def test_what_validate_args_refuses_beside_megatron_fsdp(tmp_path: Path, flags: str, rule: str,
                                                          quote: str) -> None:
    found = _check(tmp_path, flags)
    assert _errors(found) == {rule}
    assert quote in found[rule] and "(megatron/training/arguments.py validate_args)" in found[rule]


def test_their_allowed_neighbours_are_not_refused(tmp_path: Path) -> None:
    """The weight hash is refused with optim_grads_params only; manual registration runs
    with Megatron-FSDP and NCCL user buffers; Adam is the default optimizer."""
    fine = [f"--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads {DTENSOR} "
            "--check-weight-hash-across-dp-replicas-interval 100",
            f"{FULL} {DTENSOR} --fsdp-manual-registration --use-nccl-ub --optimizer adam"]
    for flags in fine:
        assert _errors(_check(tmp_path, flags)) == set(), flags


def test_megatron_fsdp_stands_in_for_the_distributed_optimizer(tmp_path: Path) -> None:
    """--overlap-param-gather and --fp8-param-gather take 'distributed optimizer or megatron
    fsdp' (validate_args); --overlap-param-gather still needs --overlap-grad-reduce."""
    found = _check(tmp_path, f"{FULL} {DTENSOR} --overlap-grad-reduce --overlap-param-gather "
                   "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather")
    assert _errors(found) == set(), found
    found = _check(tmp_path, f"{FULL} {DTENSOR} --overlap-param-gather")
    assert _errors(found) == {"megatron-overlap-param-gather"}
    assert found["megatron-overlap-param-gather"].startswith(
        "--overlap-param-gather without --overlap-grad-reduce")
    found = _check(tmp_path, "--overlap-grad-reduce --overlap-param-gather --fp8-format hybrid "
                   "--fp8-recipe tensorwise --fp8-param-gather")
    assert _errors(found) == {"megatron-overlap-param-gather", "megatron-fp8-param-gather"}
