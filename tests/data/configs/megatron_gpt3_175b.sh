#!/bin/bash

# Runs the "175B" parameter model on 16 nodes x 8 GPUs (TP 8 x PP 16).
# Older Megatron-LM example style: string variables and
# python -m torch.distributed.launch.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
# Change for multinode config
MASTER_ADDR=localhost
MASTER_PORT=6000
NNODES=16
NODE_RANK=0

CHECKPOINT_PATH=$1 # <Specify path>
VOCAB_FILE=$2 # <Specify path to file>/gpt2-vocab.json
MERGE_FILE=$3 # <Specify path to file>/gpt2-merges.txt
DATA_PATH=$4 # <Specify path and file prefix>_text_document

DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES --node_rank $NODE_RANK --master_addr $MASTER_ADDR --master_port $MASTER_PORT"

GPT_ARGS="
    --tensor-model-parallel-size 8 \
    --pipeline-model-parallel-size 16 \
    --num-layers 96 \
    --hidden-size 12288 \
    --num-attention-heads 96 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --micro-batch-size 1 \
    --global-batch-size 1536 \
    --rampup-batch-size 16 16 5859375 \
    --lr 6.0e-5 \
    --train-iters 500000 \
    --lr-decay-iters 430000 \
    --lr-decay-style cosine \
    --min-lr 6.0e-6 \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --fp16
"

python -m torch.distributed.launch $DISTRIBUTED_ARGS \
       pretrain_gpt.py \
       $GPT_ARGS \
       --data-path $DATA_PATH \
       --vocab-file $VOCAB_FILE \
       --merge-file $MERGE_FILE \
       --save $CHECKPOINT_PATH \
       --load $CHECKPOINT_PATH
