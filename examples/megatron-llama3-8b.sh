#!/bin/bash
# Llama 3 8B on 2 nodes x 8 H100: TP 2, PP 4 with 2 virtual stages, DP 2.
# Written in the style of Megatron-LM's examples (arrays of arguments
# expanded into a torchrun launch of pretrain_gpt.py).

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=${NUM_NODES:-2}
MASTER_ADDR=${MASTER_ADDR:-localhost}
MASTER_PORT=6000
NODE_RANK=${NODE_RANK:-0}
WORLD_SIZE=$((GPUS_PER_NODE * NUM_NODES))

CHECKPOINT_PATH=$1 # <Specify path>
TOKENIZER_MODEL=$2 # <Specify path to tokenizer>
DATA_PATH=$3 # <Specify path and file prefix>_text_document

TP=2
PP=4
export MBS=1
export GBS=128
SEQ=8192

DISTRIBUTED_ARGS=(
    --nproc_per_node $GPUS_PER_NODE
    --nnodes $NUM_NODES
    --node_rank $NODE_RANK
    --master_addr $MASTER_ADDR
    --master_port $MASTER_PORT
)

MODEL_ARGS=(
    --use-mcore-models
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length ${SEQ}
    --max-position-embeddings ${SEQ}
    --position-embedding-type rope
    --rotary-base 500000
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --attention-backend auto # Can use (flash/fused/unfused/local)
)

TRAINING_ARGS=(
    --micro-batch-size $MBS
    --global-batch-size $GBS
    --train-iters 500000
    --weight-decay 0.1
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.01
    --clip-grad 1.0
    --bf16
    --lr 3.0e-4
    --lr-decay-style cosine
    --min-lr 3.0e-5
    --lr-warmup-fraction .01
    --use-distributed-optimizer
    --recompute-granularity selective
)

MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size $TP
    --pipeline-model-parallel-size $PP
    --num-layers-per-virtual-pipeline-stage 4
    --sequence-parallel
)

DATA_ARGS=(
    --data-path $DATA_PATH
    --tokenizer-type HuggingFaceTokenizer
    --tokenizer-model ${TOKENIZER_MODEL}
    --split 99,1,0
)

EVAL_AND_LOGGING_ARGS=(
    --log-interval 10
    --log-throughput
    --save-interval 10000
    --eval-interval 1000
    --save $CHECKPOINT_PATH
    --load $CHECKPOINT_PATH
    --eval-iters 10
)

torchrun ${DISTRIBUTED_ARGS[@]} pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "${MODEL_PARALLEL_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${EVAL_AND_LOGGING_ARGS[@]}" 2>&1 | tee train_${NODE_RANK}.log
