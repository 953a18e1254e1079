#!/bin/bash
# DeepSeek-V3 (671B) on 128 nodes x 8 H100 as NVIDIA's performance recipe runs
# it: TP 2, PP 8 with 4 virtual stages, EP 64, global batch 16384, micro-batch 1,
# the MTP layer beside the loss on the last stage, and the layout
# "Et|(tt|)*30mL" (NVIDIA-NeMo/Megatron-Bridge,
# src/megatron/bridge/perf_recipes/deepseek/h100/deepseek_v3.py,
# deepseek_v3_pretrain_1024gpu_h100_bf16_config; recompute modules and the
# precision-aware optimizer's BF16 gradients and moments as there).
# The model sizes are DeepSeek-V3's (its config.json); written as a Megatron-LM
# launch of pretrain_gpt.py, with rotary position embeddings as the recipe's
# model provider uses (MTP refuses learned absolute ones). Megatron-LM derives the 4 virtual stages from the
# layout's 32 stages (validate_args), so the script does not state them.

export CUDA_DEVICE_MAX_CONNECTIONS=1

GPUS_PER_NODE=8
NUM_NODES=128

MODEL_ARGS=(
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --seq-length 4096
    --max-position-embeddings 4096
    --position-embedding-type rope
    --swiglu
    --normalization RMSNorm
    --untie-embeddings-and-output-weights
    --disable-bias-linear
    --multi-latent-attention
    --num-experts 256
    --moe-router-topk 8
    --moe-ffn-hidden-size 2048
    --moe-shared-expert-intermediate-size 2048
    --moe-layer-freq '([0]*3+[1]*58)'
    --mtp-num-layers 1
)

PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 8
    --pipeline-model-parallel-layout "Et|(tt|)*30mL"
    --expert-model-parallel-size 64
    --sequence-parallel
    --use-distributed-optimizer
    --use-precision-aware-optimizer
    --main-grads-dtype bf16
    --exp-avg-dtype bf16
    --exp-avg-sq-dtype bf16
)

TRAINING_ARGS=(
    --micro-batch-size 1
    --global-batch-size 16384
    --bf16
    --recompute-granularity selective
    --recompute-modules mla_up_proj mlp
)

torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES pretrain_gpt.py \
    "${MODEL_ARGS[@]}" \
    "${PARALLEL_ARGS[@]}" \
    "${TRAINING_ARGS[@]}"
