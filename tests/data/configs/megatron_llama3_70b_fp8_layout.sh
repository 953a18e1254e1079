#!/bin/bash
# Llama 3 70B on 8 nodes x 8 H100 as NVIDIA's FP8 performance recipe runs it:
# TP 4, PP 8 with 5 virtual stages, global batch 256, micro-batch 1, and the
# layout "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL" (40 stages: 80 layers, the first
# stage's two beside the embedding, one stage of three, the last layer beside
# the loss). NVIDIA-NeMo/Megatron-Bridge,
# src/megatron/bridge/perf_recipes/llama/h100/llama3.py,
# llama3_70b_pretrain_64gpu_h100_fp8cs_config; the model sizes are Llama 3
# 70B's. Written as a Megatron-LM launch of pretrain_gpt.py (bf16 here: FP8
# is not part of this check).

export CUDA_DEVICE_MAX_CONNECTIONS=1

LAYOUT='Et*2|(t*2|)*34,t*3|(t*2|)*3,tL'

torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
    --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 --swiglu \
    --normalization RMSNorm --untie-embeddings-and-output-weights --disable-bias-linear \
    --tensor-model-parallel-size 4 --pipeline-model-parallel-size 8 \
    --pipeline-model-parallel-layout "$LAYOUT" \
    --sequence-parallel --use-distributed-optimizer \
    --micro-batch-size 1 --global-batch-size 256 --bf16
