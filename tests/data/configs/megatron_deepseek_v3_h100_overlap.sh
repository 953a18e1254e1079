#!/bin/bash
# DeepSeek-V3 671B on 128 nodes x 8 H100 as a user trial wrote it (Megatron-LM core_r0.16):
# PP8 with a layout of 32 stages, EP64, DeepEP, the expert all-to-all overlap with
# delayed weight gradients, the distributed optimizer with BF16 moments and selective
# recomputation of three modules (learning rate, data and logging flags left out)
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=32

NNODES=128
GPUS_PER_NODE=8
TP=1
PP=8
EP=64
MBS=1
GBS=8192
SEQ=4096

torchrun --nnodes $NNODES --nproc_per_node $GPUS_PER_NODE --node_rank ${NODE_RANK:-0} \
    --master_addr ${MASTER_ADDR:-localhost} --master_port 6000 \
    pretrain_gpt.py \
    --transformer-impl transformer_engine \
    --num-layers 61 \
    --hidden-size 7168 \
    --ffn-hidden-size 18432 \
    --num-attention-heads 128 \
    --kv-channels 128 \
    --multi-latent-attention \
    --q-lora-rank 1536 \
    --kv-lora-rank 512 \
    --qk-head-dim 128 \
    --qk-pos-emb-head-dim 64 \
    --v-head-dim 128 \
    --qk-layernorm \
    --position-embedding-type rope \
    --normalization RMSNorm \
    --swiglu \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --seq-length $SEQ \
    --max-position-embeddings 163840 \
    --vocab-size 129280 \
    --num-experts 256 \
    --moe-layer-freq "([0]*3+[1]*58)" \
    --moe-ffn-hidden-size 2048 \
    --moe-shared-expert-intermediate-size 2048 \
    --moe-router-topk 8 \
    --moe-router-num-groups 8 \
    --moe-router-group-topk 4 \
    --moe-router-score-function sigmoid \
    --moe-router-enable-expert-bias \
    --moe-router-topk-scaling-factor 2.5 \
    --moe-router-load-balancing-type seq_aux_loss \
    --moe-router-dtype fp32 \
    --moe-grouped-gemm \
    --moe-permute-fusion \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend deepep \
    --overlap-moe-expert-parallel-comm \
    --delay-wgrad-compute \
    --mtp-num-layers 1 \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --pipeline-model-parallel-layout "Et|(tt|)*30mL" \
    --expert-model-parallel-size $EP \
    --expert-tensor-parallel-size 1 \
    --use-distributed-optimizer \
    --use-precision-aware-optimizer \
    --main-grads-dtype fp32 \
    --exp-avg-dtype bf16 \
    --exp-avg-sq-dtype bf16 \
    --overlap-grad-reduce \
    --overlap-param-gather \
    --micro-batch-size $MBS \
    --global-batch-size $GBS \
    --bf16 \
    --fp8-format e4m3 \
    --fp8-recipe blockwise \
    --recompute-granularity selective \
    --recompute-modules mla_up_proj moe_act layernorm \
    --cross-entropy-loss-fusion \
    --cross-entropy-fusion-impl te
