"""Flags earlier Megatron-LM releases accepted and core_v0.16.1 does not (generated: do not edit).

Derived by ``python -m bench.megatron_flags GIT_DIR --earlier --write`` from Megatron-LM's
git tags core_v0.4.0 to core_v0.16.0 (every megatron-core release before
core_v0.16.1), as known_flags.py is from core_v0.16.1: removed or renamed since, so at
an earlier ``--framework-version megatron-core`` they are no misspelling (unknown.py).
"""

from __future__ import annotations

FIRST = "core_v0.4.0"  # the earliest release read
FLAGS = frozenset("""
--ammo-convert-te-to-local-spec --ammo-load-classic-megatron-to-mcore --ammo-quant-cfg
--delay-param-gather --drop-vision-class-token --enable-one-logger
--encoder-pipeline-model-parallel-size --encoder-tensor-model-parallel-size
--export-draft-vocab-size --export-eagle-algorithm --export-freeze-mtp --export-num-eagle-layers
--export-num-medusa-heads --export-num-mtp --grpo-default-temperature --grpo-default-top-p
--inference-dynamic-batching-buffer-guaranteed-fraction
--inference-dynamic-batching-buffer-overflow-factor --inference-dynamic-batching-chunk-size
--inference-dynamic-batching-max-requests-override
--inference-dynamic-batching-max-tokens-override
--keep-fp8-transpose-cache-when-using-custom-fsdp --kitchen-config-file --kitchen-recipe-number
--load-model-opt-format --local_rank --log-batch-size-to-tensorboard --moe-token-dropping
--no-delay-grad-reduce --no-log-learnig-rate-to-tensorboard
--no-rl-calculate-intra-group-similarity --one-logger-entity
--pipeline-model-parallel-split-rank --renormalize-blend-weights --retriever-seq-length
--retro-add-retriever --retro-attention-gate --retro-cyclic-train-iters
--retro-encoder-attention-dropout --retro-encoder-hidden-dropout --retro-encoder-layers
--retro-no-verify-neighbor-count --retro-num-neighbors --retro-num-retrieved-chunks
--retro-project-dir --retro-return-doc-ids --retro-workdir --rl-calculate-intra-group-similarity
--rl-sequence-packing-bin-size --s3-cache-path --standalone-embedding-stage
--teacher-model-config --use-custom-fsdp
""".split())
