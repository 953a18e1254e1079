#!/bin/bash
# DeepSeek-V3 671B pretraining on 128 nodes x 8 H100 (Megatron-LM core_r0.16)
set -euo pipefail

export CUDA_DEVICE_MAX_CONNECTIONS=32
export NVTE_ALLOW_NONDETERMINISTIC_ALGO=1
export TORCH_NCCL_AVOID_RECORD_STREAMS=1
export NCCL_IB_SL=1

NNODES=128
GPUS_PER_NODE=8
TP=2
PP=8
EP=64
MBS=1
GBS=8192
SEQ=4096

torchrun --nnodes $NNODES --nproc_per_node $GPUS_PER_NODE --node_rank ${NODE_RANK:-0} \
    --master_addr ${MASTER_ADDR:-localhost} --master_port 6000 \
    pretrain_gpt.py \
    --use-mcore-models \
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
    --rotary-scaling-factor 40 \
    --mscale 1.0 \
    --mscale-all-dim 1.0 \
    --rotary-base 10000 \
    --position-embedding-type rope \
    --normalization RMSNorm \
    --norm-epsilon 1e-6 \
    --swiglu \
    --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --attention-dropout 0.0 \
    --hidden-dropout 0.0 \
    --seq-length $SEQ \
    --max-position-embeddings 163840 \
    --vocab-size 129280 \
    --make-vocab-size-divisible-by 128 \
    --num-experts 256 \
    --moe-layer-freq "([0]*3+[1]*58)" \
    --moe-ffn-hidden-size 2048 \
    --moe-shared-expert-intermediate-size 2048 \
    --moe-router-topk 8 \
    --moe-router-num-groups 8 \
    --moe-router-group-topk 4 \
    --moe-router-score-function sigmoid \
    --moe-router-enable-expert-bias \
    --moe-router-bias-update-rate 1e-3 \
    --moe-router-topk-scaling-factor 2.5 \
    --moe-router-load-balancing-type seq_aux_loss \
    --moe-aux-loss-coeff 1e-4 \
    --moe-router-dtype fp32 \
    --moe-grouped-gemm \
    --moe-permute-fusion \
    --moe-token-dispatcher-type flex \
    --moe-flex-dispatcher-backend deepep \
    --overlap-moe-expert-parallel-comm \
    --delay-wgrad-compute \
    --mtp-num-layers 1 \
    --mtp-loss-scaling-factor 0.1 \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --pipeline-model-parallel-layout "Et|(tt|)*30mL" \
    --expert-model-parallel-size $EP \
    --context-parallel-size 2 \
    --cp-comm-type a2a \
    --sequence-parallel \
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
    --cross-entropy-fusion-impl te \
    --manual-gc \
    --manual-gc-interval 5 \
    --train-iters 120000 \
    --lr 2.2e-4 \
    --min-lr 2.2e-5 \
    --lr-decay-style cosine \
    --lr-warmup-iters 2000 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --clip-grad 1.0 \
    --init-method-std 0.006 \
    --data-path /lustre/data/dsv3_text_document \
    --tokenizer-type HuggingFaceTokenizer \
    --tokenizer-model deepseek-ai/DeepSeek-V3 \
    --log-interval 1 \
    --log-throughput \
    --save /lustre/ckpt/dsv3 \
    --load /lustre/ckpt/dsv3 \
    --save-interval 500 \
    --ckpt-format torch_dist \
    --eval-iters 0
