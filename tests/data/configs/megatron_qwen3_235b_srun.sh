#!/bin/bash
# Qwen3-235B-A22B on 32 nodes x 8 H200 as a user trial launched it: srun starts the
# 256 pretrain_gpt.py ranks itself (no torchrun), TP2 PP8 with a layout of 32 stages
# (4 virtual stages), EP16, the expert all-to-all overlap with delayed weight
# gradients and CUDA_DEVICE_MAX_CONNECTIONS=32 (data, logging and checkpoint flags
# left out).
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=32

MODEL_ARGS=(
    --transformer-impl transformer_engine
    --num-layers 94
    --hidden-size 4096
    --ffn-hidden-size 12288
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 4
    --kv-channels 128
    --qk-layernorm
    --seq-length 4096
    --max-position-embeddings 40960
    --position-embedding-type rope
    --normalization RMSNorm
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --attention-backend fused
)

MOE_ARGS=(
    --num-experts 128
    --moe-ffn-hidden-size 1536
    --moe-router-topk 8
    --moe-router-load-balancing-type global_aux_loss
    --moe-router-dtype fp32
    --moe-grouped-gemm
    --moe-permute-fusion
    --moe-token-dispatcher-type alltoall
    --overlap-moe-expert-parallel-comm
    --delay-wgrad-compute
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 8
    --pipeline-model-parallel-layout "Et*2|(t*3|)*30,t*2L"
    --expert-model-parallel-size 16
    --expert-tensor-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --tp-comm-overlap
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 2048
    --bf16
    --fp8-format e4m3
    --fp8-recipe blockwise
    --fp8-param-gather
    --recompute-granularity selective
    --recompute-modules moe_act layernorm
)

srun --nodes=32 --ntasks-per-node=8 --gpus-per-node=8 --container-image=nvcr.io/nvidia/nemo:25.09 \
  python -u pretrain_gpt.py \
    ${MODEL_ARGS[@]} \
    ${MOE_ARGS[@]} \
    ${PARALLEL_ARGS[@]} \
    ${TRAINING_ARGS[@]}
