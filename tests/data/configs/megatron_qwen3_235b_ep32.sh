#!/bin/bash
# Qwen3-235B-A22B pretraining on 32 nodes x 8 B200, Megatron-LM core_r0.14:
# TP2 PP8 VPP4 EP32, FP8 hybrid blockwise. EP32 spans four nodes, so the expert
# all-to-all crosses InfiniBand (a tester's launch script, data and logging left out).
export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-32}

TP=2
PP=8
VPP=4
EP=32
ETP=1
CP=1
MBS=1
GBS=1024
SEQ=4096

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NNODES
)

MODEL_ARGS=(
    --num-layers 94
    --hidden-size 4096
    --ffn-hidden-size 12288
    --num-attention-heads 64
    --kv-channels 128
    --group-query-attention
    --num-query-groups 4
    --qk-layernorm
    --seq-length $SEQ
    --max-position-embeddings 40960
    --position-embedding-type rope
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --vocab-size 151936
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --attention-backend fused
)

MOE_ARGS=(
    --num-experts 128
    --moe-ffn-hidden-size 1536
    --moe-router-topk 8
    --moe-router-load-balancing-type aux_loss
    --moe-token-dispatcher-type alltoall
    --moe-grouped-gemm
    --moe-layer-recompute
    --overlap-moe-expert-parallel-comm
)

TRAINING_ARGS=(
    --micro-batch-size $MBS
    --global-batch-size $GBS
    --bf16
    --fp8-format hybrid
    --fp8-recipe blockwise
    --fp8-param-gather
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --cross-entropy-loss-fusion
    --cross-entropy-fusion-impl te
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --num-virtual-stages-per-pipeline-rank $VPP
    --expert-model-parallel-size $EP
    --expert-tensor-parallel-size $ETP
    --context-parallel-size $CP
    --sequence-parallel
    --account-for-embedding-in-pipeline-split
    --account-for-loss-in-pipeline-split
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${MOE_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]}
