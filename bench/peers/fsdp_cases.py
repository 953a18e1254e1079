"""Megatron-FSDP scripts written around validate_args' rules for it (core_v0.16.1,
megatron/training/arguments.py), for the Megatron peer: name -> (lines before the
launch, flags after suite.MEGATRON_BASE, GPUs)."""

from __future__ import annotations

FULL = ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
        "--use-distributed-optimizer --global-batch-size 64")
DTENSOR = "--ckpt-format fsdp_dtensor"
MEGATRON_FSDP: dict[str, tuple[str, str, int]] = {
    "mg-fsdp-full": ("", f"{FULL} {DTENSOR}", 8),
    "mg-fsdp-full-bf16-grads": ("", f"{FULL} {DTENSOR} --grad-reduce-in-bf16", 8),
    "mg-fsdp-optim-grads": ("", "--use-megatron-fsdp --data-parallel-sharding-strategy "
                            f"optim_grads --global-batch-size 64 {DTENSOR}", 8),
    "mg-fsdp-ckpt-default": ("", FULL, 8),
    "mg-fsdp-ckpt-torch-dist": ("", f"{FULL} --ckpt-format torch_dist", 8),
    "mg-fsdp-ckpt-alone": ("", f"--use-distributed-optimizer --global-batch-size 64 {DTENSOR}",
                           8),
    "mg-fsdp-connections-1": ("export CUDA_DEVICE_MAX_CONNECTIONS=1\n",
                              f"{FULL} {DTENSOR} --tensor-model-parallel-size 2", 8),
    "mg-fsdp-tp2-unset": ("unset CUDA_DEVICE_MAX_CONNECTIONS\n",
                          f"{FULL} {DTENSOR} --tensor-model-parallel-size 2", 8),
    "mg-fsdp-weight-hash": ("", f"{FULL} {DTENSOR} "
                            "--check-weight-hash-across-dp-replicas-interval 100", 8),
    "mg-fsdp-weight-hash-optim-grads": (
        "", "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads "
        f"--global-batch-size 64 {DTENSOR} --check-weight-hash-across-dp-replicas-interval 100",
        8),
    "mg-fsdp-hybrid-cp": ("", f"{FULL} {DTENSOR} --hybrid-context-parallel", 8),
    "mg-fsdp-muon": ("", "--use-megatron-fsdp --data-parallel-sharding-strategy "
                     f"optim_grads_params --global-batch-size 64 {DTENSOR} --optimizer muon", 8),
    "mg-fsdp-manual-registration": ("", f"{FULL} {DTENSOR} --fsdp-manual-registration", 8),
    "mg-fsdp-manual-registration-alone": (
        "", "--use-distributed-optimizer --global-batch-size 64 --fsdp-manual-registration "
        "--use-nccl-ub", 8),
    "mg-fsdp-param-gather-alone": ("", f"{FULL} {DTENSOR} --overlap-param-gather", 8),
    "mg-fsdp-param-gather": ("", "--use-megatron-fsdp --data-parallel-sharding-strategy "
                             f"optim_grads_params --global-batch-size 64 {DTENSOR} "
                             "--overlap-grad-reduce --overlap-param-gather", 8),
    "mg-fsdp-fp8-param": ("", "--use-megatron-fsdp --data-parallel-sharding-strategy "
                          f"optim_grads_params --global-batch-size 64 {DTENSOR} "
                          "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather", 8),
}
