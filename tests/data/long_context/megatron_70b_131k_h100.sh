#!/bin/bash
# Llama 3.1 70B continued pretraining, 131k context, 64 nodes x 8 H100
set -euo pipefail
export CUDA_DEVICE_MAX_CONNECTIONS=1
export NVTE_FUSED_ATTN=1

GPUS_PER_NODE=8
NNODES=${SLURM_NNODES:-64}
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=${MASTER_PORT:-6000}

TP=8
PP=4
VP=5
CP=8
MBS=1
GBS=64
SEQ=131072

MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --seq-length $SEQ
    --max-position-embeddings $SEQ
    --position-embedding-type rope
    --rotary-base 500000
    --use-rope-scaling
    --swiglu
    --normalization RMSNorm
    --norm-epsilon 1e-5
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --vocab-size 128256
    --make-vocab-size-divisible-by 128
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --num-layers-per-virtual-pipeline-stage $VP
    --context-parallel-size $CP
    --cp-comm-type p2p
    --sequence-parallel
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --tp-comm-overlap
)

TRAIN_ARGS=(
    --micro-batch-size $MBS
    --global-batch-size $GBS
    --train-iters 2000
    --lr 1e-5
    --min-lr 1e-6
    --lr-decay-style cosine
    --lr-warmup-iters 50
    --weight-decay 0.1
    --clip-grad 1.0
    --bf16
    --fp8-format hybrid
    --fp8-amax-history-len 1024
    --fp8-amax-compute-algo max
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
    --cross-entropy-loss-fusion
    --attention-backend fused
)

LOG_ARGS=(
    --log-interval 1
    --log-throughput
    --save-interval 250
    --eval-interval 1000
    --eval-iters 0
    --save /checkpoints/llama31-70b-131k
    --load /checkpoints/llama31-70b-131k
    --tensorboard-dir /logs/tb
)

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --master_addr $MASTER_ADDR --master_port $MASTER_PORT \
    pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${PARALLEL_ARGS[@]}" \
    "${TRAIN_ARGS[@]}" \
    "${LOG_ARGS[@]}" \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model meta-llama/Llama-3.1-70B \
    --data-path /data/longctx_text_document
