"""Megatron-FSDP as Megatron-LM judges a launch script (megatron_peer.py's part for it).

- Megatron-LM ``validate_args`` (megatron/training/arguments.py, core_v0.16.1): its
  rules about ``--use-megatron-fsdp`` and what it checks beside it, re-stated from that
  source in its words (it is not importable here: megatron_peer.py says why). In
  validate_args they sit in several places; here they run together, so a script that
  breaks two of them is refused with the first one found here.
- megatron-core (imported, run): the ``DistributedDataParallelConfig`` training.py
  ``get_model`` builds from the arguments, with the Megatron-FSDP fields.
"""

from __future__ import annotations

from typing import Any


def read(flags: dict[str, list[str | None]]) -> dict[str, Any]:
    """The arguments these rules read, as parse_args leaves them (defaults included);
    CUDA_DEVICE_MAX_CONNECTIONS is megatron_peer's ``max_connections``."""

    def last(name: str) -> str | None:
        return flags[name][-1] if name in flags else None

    return {
        "mfsdp": "--use-megatron-fsdp" in flags,
        "strategy": last("--data-parallel-sharding-strategy") or "no_shard",
        "ckpt_format": last("--ckpt-format") or "torch_dist",  # training_config.py default
        "weight_hash": last("--check-weight-hash-across-dp-replicas-interval"),
        "hybrid_cp": "--hybrid-context-parallel" in flags,
        "optimizer": last("--optimizer") or "adam",
        "manual_registration": "--fsdp-manual-registration" in flags,
        "nccl_ub": "--use-nccl-ub" in flags,
        "grad_reduce_in_bf16": "--grad-reduce-in-bf16" in flags,
        "fp32_grads_asked": "--accumulate-allreduce-grads-in-fp32" in flags,
    }


def validate_args(a: dict[str, Any]) -> None:
    """validate_args' Megatron-FSDP rules, each in its words."""
    if a["fsdp2"]:
        assert a["max_connections"] != "1", (
            "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
    if a["mfsdp"]:
        if a["strategy"] == "optim_grads_params":
            assert a["weight_hash"] is None, (
                "check_weight_hash_across_dp_replicas_interval is not supported with "
                "optim_grads_params")
        assert a["max_connections"] != "1", (
            "FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than one")
        assert a["ckpt_format"] == "fsdp_dtensor", (
            "Megatron FSDP only supports fsdp_dtensor checkpoint format")
    if a["manual_registration"]:
        assert a["mfsdp"], "FSDP manual registration is only supported with Megatron FSDP"
        assert a["nccl_ub"], "FSDP manual registration is only supported with nccl-ub option"
    if a["hybrid_cp"]:
        assert not a["pp"] > 1, "Hybrid context parallelism not supported with pipeline parallelism"
        assert not a["mfsdp"], "Hybrid context parallelism not supported with Megatron FSDP"
    if a["ckpt_format"] == "fsdp_dtensor":
        assert a["mfsdp"], "--ckpt-format fsdp_dtensor is only tested with Megatron FSDP."
    if "muon" in a["optimizer"]:
        assert not a["overlap_grad"], "Muon optimizer does not support overlap grad reduce for now."
        assert not a["overlap_param"], (
            "Muon optimizer does not support overlap param gather for now.")
        assert not a["dist_opt"], "Muon optimizer does not support distributed optimizer for now."
        assert not a["fsdp2"], "Muon optimizer does not support Torch-FSDP2 for now."
        assert not a["mfsdp"], "Muon optimizer does not support Megatron-FSDP for now."


def ddp_config(a: dict[str, Any]) -> dict[str, Any]:
    """megatron-core's DistributedDataParallelConfig as training.py builds it (its
    __post_init__ checks run): grad_reduce_in_fp32 is validate_args'
    accumulate_allreduce_grads_in_fp32 (under --bf16 on unless --grad-reduce-in-bf16;
    under --fp16 as asked). The facts: the strategy and the gradients' width."""
    from megatron.core.distributed import DistributedDataParallelConfig

    fp32 = (not a["grad_reduce_in_bf16"]) if a["bf16"] else a["fp32_grads_asked"]
    config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=fp32, overlap_grad_reduce=a["overlap_grad"],
        overlap_param_gather=a["overlap_param"], use_distributed_optimizer=a["dist_opt"],
        fp8_param_gather=a["fp8_param"], use_megatron_fsdp=a["mfsdp"],
        data_parallel_sharding_strategy=a["strategy"], nccl_ub=a["nccl_ub"],
        fsdp_manual_registration=a["manual_registration"])
    if not config.use_megatron_fsdp:
        return {}
    return {"fsdp_strategy": config.data_parallel_sharding_strategy,
            "fsdp_grads": "fp32" if config.grad_reduce_in_fp32 else "16-bit"}
