"""Every flag Megatron-LM's parse_args accepts at core_v0.16.1 (generated: do not edit).

Derived by ``python -m bench.megatron_flags GIT_DIR --write`` from Megatron-LM's git tag
core_v0.16.1: the option strings of the parser parse_args builds
(megatron/training/arguments.py: ``argparse.ArgumentParser(allow_abbrev=False)`` and
``add_megatron_arguments``, with the flags megatron-core's config dataclasses add through
``ArgumentGroupFactory``), and per entry script the flags its ``extra_args_provider``
adds. ``allow_abbrev=False``: only these exact names are accepted; parse_args calls
``parser.parse_args()`` (pretrain() never passes ignore_unknown_args), so any other
flag exits with argparse's "unrecognized arguments".
"""

from __future__ import annotations

TAG = "core_v0.16.1"
# Megatron-LM's own entry scripts at TAG
ENTRIES = frozenset("""
pretrain_bert.py pretrain_gpt.py pretrain_ict.py pretrain_mamba.py pretrain_t5.py
pretrain_vision_classify.py pretrain_vision_dino.py pretrain_vision_inpaint.py pretrain_vlm.py
""".split())
FLAGS = frozenset("""
--account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split
--accumulate-allreduce-grads-in-fp32 --activation-func-clamp-value --adam-beta1 --adam-beta2
--adam-eps --add-qkv-bias --adlr-autoresume --adlr-autoresume-interval
--allow-ambiguous-pad-tokens --app-tag-run-name --app-tag-run-version --apply-layernorm-1p
--apply-query-key-layer-scaling --apply-residual-connection-post-layernorm
--apply-wd-to-qk-layernorm --async-save --attention-backend --attention-dropout
--attention-output-gate --attention-softmax-in-fp32 --auto-detect-ckpt-format
--batch-invariant-mode --batch-size --bert-embedder-type --bert-load --bert-no-binary-head
--bf16 --biencoder-projection-dim --biencoder-shared-query-context-model --block-data-path
--cache-mla-latents --calc-ft-timeouts --calculate-per-token-loss --check-for-large-grads
--check-for-spiky-loss --check-weight-hash-across-dp-replicas-interval --checkpoint-activations
--ckpt-assume-constant-structure --ckpt-convert-format --ckpt-convert-save
--ckpt-convert-update-legacy-dist-opt-format --ckpt-format --ckpt-fully-parallel-load
--ckpt-fully-parallel-save --ckpt-step --classes-fraction --clip-grad --config-logger-dir
--context-parallel-size --cp-comm-type --cpu-offloading-num-layers --create-all-gather-group
--cross-entropy-fusion-impl --cross-entropy-loss-fusion --cuda-graph-impl --cuda-graph-scope
--cuda-graph-warmup-steps --data-args-path --data-cache-path --data-parallel-random-init
--data-parallel-sharding-strategy --data-path --data-per-class-fraction
--dataloader-defer-npy-index-mmap --dataloader-fast-cache-load --dataloader-type
--ddp-average-in-collective --ddp-bucket-size --ddp-num-buckets
--ddp-pad-buckets-for-high-nccl-busbw --ddp-reduce-scatter-with-fp32-accumulation
--decode-only-cuda-graphs --decoder-first-pipeline-num-layers --decoder-last-pipeline-num-layers
--decoder-num-layers --decoder-seq-length --decoupled-lr --decoupled-min-lr
--decrease-batch-size-if-needed --defer-embedding-wgrad-compute --delay-wgrad-compute
--deterministic-mode --dino-bottleneck-size --dino-freeze-last-layer --dino-head-hidden-size
--dino-local-crops-number --dino-local-img-size --dino-norm-last-layer --dino-teacher-temp
--dino-warmup-teacher-temp --dino-warmup-teacher-temp-epochs
--disable-async-tensor-model-parallel-allreduce --disable-bf16-reduced-precision-matmul
--disable-bias-linear --disable-chunked-prefill --disable-ckpt-fully-parallel-save
--disable-clone-scatter-output-in-embedding --disable-fp8-wgrad --disable-gloo-process-groups
--disable-jit-fuser --disable-log-loss-scale-to-tensorboard --disable-mamba-mem-eff-path
--disable-manual-gc-eval --disable-msc --disable-straggler-on-startup
--disable-strict-fsdp-dtensor-load --disable-symmetric-registration --disable-tp-comm-bulk-dgrad
--disable-tp-comm-bulk-wgrad --disable-tp-comm-overlap-ag --disable-tp-comm-overlap-rs
--disable-tp-comm-split-ag --disable-tp-comm-split-rs
--disable-use-tokenizer-model-from-checkpoint-args --dist-ckpt-format
--dist-ckpt-optim-fully-reshardable --dist-ckpt-save-pre-mcore-014 --dist-ckpt-strictness
--distrib-optim-fully-reshardable-mem-efficient --distribute-saved-activations
--distributed-backend --distributed-timeout-minutes --distributed-timeout-seconds-after-init
--dsa-indexer-head-dim --dsa-indexer-loss-coeff --dsa-indexer-n-heads --dsa-indexer-topk
--dsa-indexer-use-sparse-loss --dump-param-to-param-group-map --embedding-init-method-std
--embedding-path --empty-unused-memory-level --enable-chunked-prefill --enable-cuda-graph
--enable-experimental --enable-ft-package --enable-full-sharding-in-hsdp --encoder-num-layers
--encoder-seq-length --end-weight-decay --eod-mask-loss --ep-overlap-early-attn-memory-release
--error-injection-rate --error-injection-type --eval-interval --eval-iters --evidence-data-path
--exit-duration-in-mins --exit-interval --exit-on-missing-checkpoint --exit-signal
--exit-signal-handler --exit-signal-handler-for-dataloader --exp-avg-dtype --exp-avg-sq-dtype
--experimental-attention-variant --expert-model-parallel-size --expert-tensor-parallel-size
--external-cuda-graph --fake-process-group --ffn-hidden-size --fim-data --fim-eod-token
--fim-fragment-rate --fim-middle-token --fim-no-prefix --fim-pad-token --fim-prefix-token
--fim-rate --fim-split-sample --fim-spm-rate --fim-suffix-token
--fine-grained-activation-offloading --finetune --first-last-layers-bf16 --flash-decode --fp16
--fp16-lm-cross-entropy --fp32-residual-connection --fp4-format --fp4-param-gather
--fp4-quantizer-factory --fp4-recipe --fp8-amax-compute-algo --fp8-amax-history-len --fp8-format
--fp8-interval --fp8-margin --fp8-param-gather --fp8-quantizer-factory --fp8-recipe
--fsdp-double-buffer --fsdp-manual-registration --ft-num-warmup-iters --full-validation
--global-batch-size --glu-linear-offset --grad-reduce-in-bf16 --group-query-attention
--grpo-clamp-eps-lower --grpo-clamp-eps-upper --grpo-entropy-term-weight
--grpo-filter-groups-with-same-reward --grpo-group-size --grpo-iterations --grpo-kl-beta
--grpo-prompts-per-step --head-lr-mult --help --heterogeneous-layers-config-encoded-json
--heterogeneous-layers-config-path --hidden-dropout --hidden-size
--hierarchical-context-parallel-sizes --high-priority-stream-groups --hybrid-attention-ratio
--hybrid-context-parallel --hybrid-mlp-ratio --hybrid-override-pattern --hysteresis
--ict-head-size --ict-load --img-h --img-w --indexer-batch-size --indexer-log-interval
--inference-batch-times-seqlen-threshold --inference-coordinator-port
--inference-dynamic-batching --inference-dynamic-batching-block-size
--inference-dynamic-batching-buffer-size-gb --inference-dynamic-batching-cuda-graph-max-tokens
--inference-dynamic-batching-cuda-graph-mixed-prefill-count
--inference-dynamic-batching-max-requests --inference-dynamic-batching-max-tokens
--inference-dynamic-batching-num-cuda-graphs --inference-dynamic-batching-paused-buffer-size-gb
--inference-dynamic-batching-track-paused-request-events
--inference-dynamic-batching-unified-memory-level --inference-fuse-tp-communication
--inference-logging-step-interval --inference-max-batch-size --inference-max-requests
--inference-max-seq-length --inference-rng-tracker --inference-wandb-logging --init-method-std
--init-method-xavier-uniform --init-model-with-meta-device --initial-loss-scale
--inprocess-active-world-size --inprocess-barrier-timeout --inprocess-completion-timeout
--inprocess-empty-cuda-cache --inprocess-granularity --inprocess-hard-timeout
--inprocess-heartbeat-interval --inprocess-heartbeat-timeout --inprocess-last-call-wait
--inprocess-max-iterations --inprocess-monitor-process-interval
--inprocess-monitor-thread-interval --inprocess-progress-watchdog-interval --inprocess-restart
--inprocess-soft-timeout --inprocess-termination-grace-time --is-hybrid-model --iter-per-epoch
--iterations-to-skip --keep-fp8-transpose-cache --kitchen-attention-backend --kv-channels
--kv-lora-rank --langrl-env-config --langrl-external-server
--langrl-inference-server-conversation-template --langrl-inference-server-type --lazy-mpu-init
--legacy-tokenizer --linear-attention-freq --linear-conv-kernel-dim --linear-key-head-dim
--linear-num-key-heads --linear-num-value-heads --linear-value-head-dim --load
--load-main-params-from-ckpt --local-rank --log-device-memory-used --log-energy --log-interval
--log-max-attention-logit --log-memory-interval --log-memory-to-tensorboard
--log-num-zeros-in-grad --log-params-norm --log-progress --log-straggler --log-throughput
--log-timers-to-tensorboard --log-validation-ppl-to-tensorboard --log-world-size-to-tensorboard
--logging-level --loss-scale --loss-scale-window --lr --lr-decay-iters --lr-decay-samples
--lr-decay-style --lr-warmup-fraction --lr-warmup-init --lr-warmup-iters --lr-warmup-samples
--lr-wsd-decay-iters --lr-wsd-decay-samples --lr-wsd-decay-style --main-grads-dtype
--main-params-dtype --make-vocab-size-divisible-by --mamba-head-dim --mamba-num-groups
--mamba-num-heads --mamba-state-dim --manual-gc --manual-gc-interval --mask-factor --mask-prob
--mask-type --max-position-embeddings --max-seqlen-per-dp-cp-rank --max-tokens-to-oom
--memory-snapshot-path --merge-file --micro-batch-size
--microbatch-group-size-per-virtual-pipeline-stage --mid-level-dataset-surplus --min-loss-scale
--min-lr --min-offloaded-tensor-size --mlp-chunks-for-prefill --mock-data --model-parallel-size
--moe-apply-probs-on-input --moe-aux-loss-coeff --moe-deepep-num-sms --moe-enable-deepep
--moe-enable-routing-replay --moe-expert-capacity-factor --moe-extended-tp --moe-ffn-hidden-size
--moe-flex-dispatcher-backend --moe-grouped-gemm --moe-hybridep-num-sms --moe-input-jitter-eps
--moe-latent-size --moe-layer-freq --moe-layer-recompute --moe-pad-expert-input-to-capacity
--moe-pad-experts-for-cuda-graph-inference --moe-per-layer-logging --moe-permute-fusion
--moe-router-bias-update-rate --moe-router-dtype --moe-router-enable-expert-bias
--moe-router-force-load-balancing --moe-router-fusion --moe-router-group-topk
--moe-router-load-balancing-type --moe-router-num-groups --moe-router-padding-for-fp8
--moe-router-padding-for-quantization --moe-router-pre-softmax --moe-router-score-function
--moe-router-topk --moe-router-topk-scaling-factor --moe-shared-expert-gate
--moe-shared-expert-intermediate-size --moe-shared-expert-overlap --moe-token-dispatcher-type
--moe-token-drop-policy --moe-upcycling-granularity --moe-use-legacy-grouped-gemm
--moe-use-upcycling --moe-z-loss-coeff --mrope-section --mscale --mscale-all-dim
--mtp-loss-scaling-factor --mtp-num-layers --mtp-standalone --multi-latent-attention
--multiple-validation-sets --muon-extra-scale-factor --muon-fp32-matmul-prec --muon-momentum
--muon-no-split-qkv --muon-num-ns-steps --muon-scale-mode --muon-tp-mode --muon-use-nesterov
--nccl-all-reduce-for-prefill --nccl-communicator-config-path --no-align-grad-reduce
--no-align-param-gather --no-async-tensor-model-parallel-allreduce
--no-barrier-with-level-1-timing --no-bias-dropout-fusion --no-bias-gelu-fusion
--no-bias-swiglu-fusion --no-check-for-nan-in-loss-and-grad --no-ckpt-fully-parallel-save
--no-clone-scatter-output-in-embedding --no-create-attention-mask-in-dataloader
--no-data-sharding --no-fp8-wgrad --no-gradient-accumulation-fusion
--no-gradient-reduce-div-fusion --no-inference-wandb-logging --no-initialization
--no-langrl-external-server --no-load-optim --no-load-rng --no-log-loss-scale-to-tensorboard
--no-manual-gc-eval --no-masked-softmax-fusion --no-mmap-bin-files --no-one-logger
--no-overlap-p2p-communication --no-persist-layer-norm --no-pin-cpu-grads --no-pin-cpu-params
--no-position-embedding --no-rl-inference-logprobs-is-correction
--no-rl-offload-inference-model-weights-when-idle --no-rl-offload-kv-cache-during-training
--no-rl-partial-rollouts --no-rl-remove-kv-cache-during-training --no-rl-reset-cuda-graphs
--no-rl-skip-bos-token --no-rl-training-cuda-graphs --no-rl-use-sequence-packing
--no-rl-verify-model-weights-swap --no-rope-freq --no-rope-fusion --no-save-optim --no-save-rng
--no-scatter-gather-tensors-in-pipeline --no-strict-fsdp-dtensor-load --no-tp-comm-bulk-dgrad
--no-tp-comm-bulk-wgrad --no-tp-comm-overlap-ag --no-tp-comm-overlap-rs --no-tp-comm-split-ag
--no-tp-comm-split-rs --no-use-tokenizer-model-from-checkpoint-args --no-weight-decay-cond-type
--non-persistent-ckpt-type --non-persistent-global-ckpt-dir --non-persistent-local-ckpt-algo
--non-persistent-local-ckpt-dir --non-persistent-save-interval --norm-epsilon --normalization
--num-attention-heads --num-channels --num-classes --num-dataset-builder-threads
--num-distributed-optimizer-instances --num-experts --num-layers --num-layers-at-end-in-bf16
--num-layers-at-start-in-bf16 --num-layers-per-virtual-pipeline-stage --num-query-groups
--num-virtual-stages-per-pipeline-rank --num-workers --object-storage-cache-path
--offload-modules --one-logger-async --one-logger-project --one-logger-run-name --onnx-safe
--openai-gelu --optimizer --optimizer-cpu-offload --optimizer-offload-fraction
--outer-dp-sharding-strategy --output-bert-embeddings --overlap-cpu-optimizer-d2h-h2d
--overlap-grad-reduce --overlap-moe-expert-parallel-comm
--overlap-p2p-communication-warmup-flush --overlap-param-gather
--overlap-param-gather-with-optimizer-step --override-opt-param-scheduler
--override-opt_param-scheduler --padded-vocab-size --patch-dim --per-dataset-sequences-path
--per-split-data-args-path --perform-rl-step --persistent-save-interval
--phase-transition-iterations --pipeline-model-parallel-comm-backend
--pipeline-model-parallel-layout --pipeline-model-parallel-size --position-embedding-type
--pretrained-checkpoint --profile --profile-ranks --profile-step-end --profile-step-start
--q-lora-rank --qk-clip --qk-clip-alpha --qk-clip-threshold --qk-head-dim --qk-l2-norm
--qk-layernorm --qk-pos-emb-head-dim --query-in-block-prob --quick-geglu --rampup-batch-size
--recompute-activations --recompute-granularity --recompute-method --recompute-modules
--recompute-num-layers --record-memory-history --refit-method --relative-attention-max-distance
--relative-attention-num-buckets --replication --replication-factor --replication-jump
--rerun-mode --reset-attention-mask --reset-position-ids --result-rejected-tracker-filename
--retriever-report-topk-accuracies --retriever-score-scaling --reuse-grad-buf-for-mxfp8-param-ag
--rl-default-temperature --rl-default-top-k --rl-default-top-p
--rl-importance-sampling-truncation-coef --rl-inference-expert-model-parallel-size
--rl-inference-expert-tensor-model-parallel-size --rl-inference-logprobs-is-correction
--rl-inference-model-unified-memory-level --rl-inference-pipeline-model-parallel-size
--rl-inference-tensor-model-parallel-size --rl-offload-inference-model-weights-when-idle
--rl-offload-kv-cache-during-training --rl-offload-optimizer-during-inference
--rl-parallel-generation-tasks --rl-partial-rollouts --rl-prompts-per-eval
--rl-remove-kv-cache-during-training --rl-reset-cuda-graphs --rl-sequence-packing-algo
--rl-sequence-packing-max-sequences-per-bin --rl-skip-bos-token --rl-training-cuda-graphs
--rl-use-sequence-packing --rl-verify-model-weights-swap --rope-scaling-factor --rope-type
--rotary-base --rotary-interleaved --rotary-percent --rotary-scaling-factor
--rotary-seq-len-interpolation-factor --run-workload-inspector-server --sample-rate --save
--save-dgrads-interval --save-interval --save-retain-interval --save-wgrads-interval --seed
--seq-length --sequence-parallel --sft --sft-tokenizer-prompt-format --sgd-momentum
--sharp-enabled-group --short-seq-prob --skip-train --softmax-type --spec --split --squared-relu
--start-weight-decay --straggler-ctrlr-port --straggler-minmax-count
--suggested-communication-unit-size --swiglu --swin-backbone-type --symmetric-ar-type
--te-precision-config-file --te-rng-tracker --tensor-model-parallel-size --tensorboard-dir
--tensorboard-log-interval --tensorboard-queue-size --test-data-path --test-mode
--tiktoken-num-special-tokens --tiktoken-pattern --tiktoken-special-tokens --timing-log-level
--timing-log-option --titles-data-path --tokenizer-hf-include-special-tokens
--tokenizer-hf-use-fast --tokenizer-metadata --tokenizer-model --tokenizer-sentencepiece-legacy
--tokenizer-special-tokens --tokenizer-type --torch-fsdp2-no-reshard-after-forward
--tp-comm-bootstrap-backend --tp-comm-overlap --tp-comm-overlap-cfg --tp-comm-overlap-rs-dgrad
--train-data-path --train-iters --train-samples --train-sync-interval --transformer-impl
--trust-remote-code --untie-embeddings-and-output-weights --use-checkpoint-args
--use-checkpoint-opt-param-scheduler --use-checkpoint-opt_param-scheduler
--use-cpu-initialization --use-dist-ckpt --use-distributed-optimizer --use-flash-attn
--use-fused-weighted-squared-relu --use-kitchen-attention --use-legacy-models
--use-legacy-static-engine --use-mcore-models --use-megatron-fsdp
--use-mp-args-from-checkpoint-args --use-nccl-ub --use-one-sent-docs
--use-persistent-ckpt-worker --use-precision-aware-optimizer --use-pytorch-profiler
--use-ring-exchange-p2p --use-rope-scaling --use-rotary-position-embeddings --use-sharp
--use-te-activation-func --use-torch-fsdp2 --use-torch-optimizer-for-cpu-offload
--use-tp-pp-dp-mapping --v-head-dim --valid-data-path --vision-backbone-type
--vision-pretraining --vision-pretraining-type --vocab-extra-ids --vocab-file --vocab-size
--wandb-entity --wandb-exp-name --wandb-project --wandb-save-dir --warmup --weight-decay
--weight-decay-incr-style --wgrad-deferral-limit --window-attn-skip-freq --window-size
--yaml-cfg -h
""".split())
# the flags an entry script's extra_args_provider adds
EXTRA_FLAGS: dict[str, frozenset[str]] = {
    "pretrain_gpt.py": frozenset("""
    --enable-gpt-oss --export-force-local-attention --export-kd-cfg
    --export-kd-teacher-ckpt-format --export-kd-teacher-load --export-kd-teacher-model-config
    --export-kv-cache-quant --export-legacy-megatron --export-model-type
    --export-moe-apply-probs-on-input --export-offline-model --export-qk-l2-norm
    --export-quant-cfg --export-real-quant-cfg --export-te-mcore-model --finetune-data-split
    --finetune-hf-dataset --modelopt-enabled
""".split()),
    "pretrain_mamba.py": frozenset("""
    --enable-gpt-oss --export-force-local-attention --export-kd-cfg
    --export-kd-teacher-ckpt-format --export-kd-teacher-load --export-kd-teacher-model-config
    --export-kv-cache-quant --export-legacy-megatron --export-model-type
    --export-moe-apply-probs-on-input --export-offline-model --export-qk-l2-norm
    --export-quant-cfg --export-real-quant-cfg --export-te-mcore-model --finetune-data-split
    --finetune-hf-dataset --modelopt-enabled
""".split()),
    "pretrain_vlm.py": frozenset("""
    --dataloader-seq-length --decoder-tp-comm-overlap --disable-vision-class-token --freeze-LM
    --freeze-ViT --use-packed-sequence
""".split()),
}
