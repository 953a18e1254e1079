"""``TrainingConfig``: pptune's own training config, the form every framework
reader produces (``pptune schema config``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from pptune.costmodel.schedules import Schedule
from pptune.schemas.base import Strict
from pptune.schemas.limits import Limits


class TrainingConfig(Strict):
    """pptune's own training config; every framework reader produces one.

    Strict types: a string where a number belongs ("8") or a bool where a
    count belongs is an error that names the field, never a silent coercion.
    Bounds reject what cannot be a run (zero or negative counts) and what is
    surely a typo: device counts above 2**20 (about ten times the largest GPU
    clusters announced in 2024) and other counts above 2**31 - 1.

    Values that are valid one by one but disagree with each other
    (gpus != tp * pp * cp * dp, a global batch that is not
    micro_batch_size * grad_accum_steps * dp) are carried as stated:
    check-config reports them as findings.
    """

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    gpus: int | None = Field(None, ge=1, le=1 << 20, description="total GPUs; default tp * pp * cp * dp")
    gpus_per_node: int = Field(8, ge=1, le=1 << 20)
    tp: int = Field(1, ge=1, le=1 << 20, description="tensor-parallel degree")
    pp: int = Field(1, ge=1, le=1 << 20, description="pipeline-parallel degree (devices per pipeline)")
    cp: int = Field(1, ge=1, le=1 << 20, description="context-parallel degree (Megatron-LM, torchtitan)")
    dp: int | None = Field(None, ge=1, le=1 << 20, description="data-parallel degree, when the file says")
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = Field(1, ge=1, le=2**31 - 1, description="model chunks per device")
    micro_batch_size: int = Field(ge=1, le=2**31 - 1, description="samples per micro-batch")
    global_batch: int | None = Field(None, ge=1, le=2**31 - 1, description="samples per optimizer step")
    grad_accum_steps: int | None = Field(None, ge=1, le=2**31 - 1, description="micro-batches "
                                         "per optimizer step on one pipeline (DeepSpeed's meaning)")
    pipeline_flushes: int = Field(
        1, ge=1, le=2**31 - 1,
        description="pipeline schedule runs per optimizer step (torchtitan accumulates gradients "
        "over global / (local * dp) runs); each run has grad_accum_steps / pipeline_flushes "
        "micro-batches",
    )
    seq_len: int | None = Field(None, ge=1, le=2**31 - 1, description="tokens per sample")
    model: str | None = Field(None, description="model preset name")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
    profile: str | None = Field(None, description="path to a pptune profile JSON")
    gpu: str | None = Field(None, description="GPU preset name")
    num_layers: int | None = Field(
        None, ge=1, le=2**31 - 1, description="transformer blocks, when the file says"
    )
    stage_layers: list[int] | None = Field(None, description="explicit layers per stage")
    pipeline_layout: str | None = Field(
        None, max_length=10_000,
        description="the stages as the file states them in Megatron-LM's layout grammar (E "
        "embedding, t transformer layer, m MTP layer, L loss, | between stages in virtual-stage "
        "order; --pipeline-model-parallel-layout); stage_layers then holds its t per stage",
    )
    mtp_layers: int | None = Field(
        None, ge=0, le=2**31 - 1,
        description="multi-token-prediction layers after the last block (Megatron-LM "
        "--mtp-num-layers), when the file says",
    )
    partition_method: str | None = Field(
        None, max_length=200,
        description="how the framework splits layers when stage_layers is unset, as the file "
        "states it (DeepSpeed PipelineModule: 'parameters', 'uniform', 'type:REGEX')",
    )
    hidden_size: int | None = Field(None, ge=1, le=2**31 - 1, description="model width, when the file says")
    num_heads: int | None = Field(None, ge=1, le=2**31 - 1, description="attention heads")
    num_kv_heads: int | None = Field(
        None, ge=1, le=2**31 - 1, description="key/value heads (grouped-query attention)"
    )
    ffn_hidden_size: int | None = Field(None, ge=1, le=2**31 - 1, description="MLP inner width")
    vocab_size: int | None = Field(None, ge=1, le=2**31 - 1)
    gated_mlp: bool | None = Field(None, description="SwiGLU-style MLP (3 matrices), when stated")
    dropout: bool | None = Field(
        None, description="dropout runs in the blocks, when the file says or its framework's "
        "default decides (Megatron-LM: --hidden-dropout or --attention-dropout above 0, each "
        "0.1 unless set)")
    precision: Literal["fp32", "fp16", "bf16", "fp8", "mxfp8", "nvfp4"] | None = Field(
        None, description="training compute dtype, when the file says: fp8 / mxfp8 are the "
        "block GEMMs in FP8 (per-tensor or blockwise scaling) or OCP microscaling FP8, the "
        "rest in BF16 (Megatron-LM --fp8-format / --fp8-recipe, torchtitan's float8 and mx "
        "converters); nvfp4 the block GEMMs in NVFP4 (Megatron-LM --fp4-format e2m1)"
    )
    expert_precision: Literal["bf16", "fp8", "mxfp8"] | None = Field(
        None, description="the routed experts' GEMM precision where it is not precision's "
        "(torchtitan converts linears and the experts' grouped GEMMs by separate converters)"
    )
    cp_comm: Literal["p2p", "all-gather", "a2a", "a2a+p2p"] | None = Field(
        None, description="how context-parallel ranks exchange K/V, when the file says "
        "(Megatron-LM --cp-comm-type; torchtitan context_parallel_rotate_method: alltoall is "
        "the ring, p2p here)"
    )
    cross_entropy: Literal["fused", "native", "unfused", "eager"] | None = Field(
        None, description="the loss's kernels, when the file says: native "
        "(Megatron-LM --cross-entropy-loss-fusion), unfused (Megatron-LM without it), "
        "fused (one pass each way: --cross-entropy-fusion-impl te or linear, a compiled "
        "torchtitan loss), eager (torchtitan's loss without torch.compile)"
    )
    swiglu: Literal["fused", "eager"] | None = Field(
        None, description="a gated MLP's activation kernels, when the file says: fused "
        "(one kernel each way: Megatron-LM's --bias-swiglu-fusion, its default; a compiled "
        "torchtitan model), eager (silu then mul uncompiled, keeping the SiLU's output "
        "too: --no-bias-swiglu-fusion, torchtitan without [compile])"
    )
    wgrad_accum: Literal["fused", "unfused", "bf16"] | None = Field(
        None, description="where weight gradients go, when the file says: fused (into "
        "Megatron-LM's FP32 main_grad by the GEMM, its default), unfused (--no-gradient-"
        "accumulation-fusion: a BF16 gradient, then an add), bf16 (torch FSDP2's)")
    fp8_kernels: Literal["te", "torchao"] | None = Field(
        None, description="whose FP8 linear layers an FP8 config runs: te (Transformer "
        "Engine, Megatron-LM's and NeMo's: FP8 weight copies cached all step, FP8 GEMM "
        "inputs saved) or torchao (torchtitan's float8: cast per use, BF16 inputs saved); "
        "None: te")
    fp8_casts: Literal["fused", "eager"] | None = Field(
        None, description="torchao's float8 casts: fused by torch.compile (None), or eager, each "
        "op a kernel of its own (torchtitan with the model not compiled)")
    fp8_recipe: str | None = Field(
        None, max_length=40, description="the FP8 scaling recipe as the file names it "
        "(Megatron-LM --fp8-recipe delayed|tensorwise|blockwise|mxfp8; torchtitan "
        "recipe_name tensorwise|rowwise|...)"
    )
    fp8_param_gather: bool | None = Field(
        None, description="FP8 weights kept and all-gathered in FP8, no cached FP8 copies "
        "(Megatron-LM --fp8-param-gather; torchtitan enable_fsdp_float8_all_gather), when "
        "the file says"
    )
    recompute: Literal["none", "selective", "full", "modules"] | None = Field(
        None, description="activation recomputation (checkpointing), when the file says; "
        "modules: recompute_modules only (pptune's own files; Megatron-LM states it as "
        "selective with --recompute-modules)"
    )
    main_grads_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="the gradient buffer's width, in which gradients accumulate and "
        "are reduced over data parallelism (Megatron-LM --main-grads-dtype with "
        "--use-precision-aware-optimizer, --grad-reduce-in-bf16, FP16 under --fp16 without "
        "--accumulate-allreduce-grads-in-fp32; torchtitan FSDP's mixed_precision_reduce; "
        "default fp32)"
    )
    grad_reduce_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="the width gradients are reduced in over data parallelism where "
        "the file states it apart from the gradients' own (DeepSpeed communication_data_type; "
        "pptune's own files, for recommend --grad-compression fp16|bf16)"
    )
    main_params_dtype: Literal["fp32", "bf16"] | None = Field(
        None, description="the optimizer's copy of the weights: fp32 master weights, or bf16 "
        "where training keeps none (torchtitan training.dtype bfloat16, under FSDP: its "
        "sharded weights and gradients, torch FSDP2's reduced shards); default fp32"
    )
    fsdp_model_weights: bool | None = Field(
        None, description="FSDP keeps the model's BF16 weight shard beside the optimizer's "
        "copy (Megatron-FSDP optim_grads_params: 2 bytes a parameter over dp more)"
    )
    fsdp_grad_queue_elements: int | None = Field(None, ge=0, le=2**62, description=(
        "Megatron-FSDP: a backward keeps its gradients in unsharded buckets until more than "
        "this many elements wait for their reduce-scatters (--suggested-communication-unit-"
        "size, 1e9 unless given; 0: two layers', its double buffer)"))
    exp_avg_dtype: Literal["fp32", "fp16", "bf16", "fp8"] | None = Field(
        None, description="Adam's first moment's width (Megatron-LM --exp-avg-dtype with "
        "--use-precision-aware-optimizer; default fp32)"
    )
    exp_avg_sq_dtype: Literal["fp32", "fp16", "bf16", "fp8"] | None = Field(
        None, description="Adam's second moment's width (Megatron-LM --exp-avg-sq-dtype; "
        "default fp32)"
    )
    recompute_modules: list[Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp",
                                    "moe", "shared_experts", "op_sac"]] | None = Field(
        None, max_length=16, description="what selective recomputation reruns, megatron-core's "
        "module names (Megatron-LM --recompute-modules; default core_attn): mla_up_proj, mlp, "
        "moe_act, moe, shared_experts and layernorm are priced, core_attn costs nothing with "
        "flash attention; op_sac: torchtitan's per-op policy (selective_ac_option = \"op\": "
        "every second matmul and all but attention rerun), priced on blocks without experts "
        "or MLA"
    )
    sequence_parallel: bool = Field(
        False, description="Megatron-LM --sequence-parallel: activations split by tp along the sequence"
    )
    tp_comm_overlap: bool | None = Field(
        None, description="tensor-parallel collectives overlapped with their GEMMs by Transformer "
        "Engine's userbuffers (Megatron-LM --tp-comm-overlap, with sequence parallelism), when "
        "the file says; unset: exposed")
    rank_order: Literal["tp-dp-pp", "tp-pp-dp"] = Field(
        "tp-dp-pp", description="global rank order, fastest first (Megatron-LM "
        "--use-tp-pp-dp-mapping gives tp-pp-dp)"
    )
    recompute_block_layers: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="full recomputation of only the first N transformer layers of every stage "
        "(Megatron-LM --recompute-method block --recompute-num-layers N), when the file says",
    )
    recompute_uniform_layers: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="full recomputation checkpointing the transformer layers of every model "
        "chunk in groups of N, each keeping only its input and re-created whole in its "
        "backward (Megatron-LM --recompute-method uniform --recompute-num-layers N; "
        "DeepSpeed pipeline.activation_checkpoint_interval N), when the file says N > 1",
    )
    recompute_layers_per_stage: list[int] | None = Field(
        None, description="transformer blocks recomputed in full on each stage (the first N_k "
        "of stage k; pp x chunks entries), when the file says (pptune's own plans)",
    )
    recompute_every: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="selective recomputation per layer: every Nth block fully checkpointed "
        "(torchtitan selective_ac_option = N)",
    )
    sharding: Literal["none", "zero1", "zero2", "zero3", "fsdp"] | None = Field(
        None, description="training-state sharding over data parallelism, when the file says: "
        "zero1 = optimizer state (Megatron-LM --use-distributed-optimizer), zero2 = + gradients, "
        "zero3 = + weights (DeepSpeed), fsdp = torch FSDP full shard (torchtitan)",
    )
    memory_budget_ac: bool = Field(
        False, description="torchtitan's activation_checkpoint mode memory_budget (torch's "
        "solver recomputes to fit a budget): not modelled, priced without recomputation, and a "
        "predicted memory overflow is a warning, not an error")
    dp_replicate: int | None = Field(
        None, ge=1, le=2**31 - 1, description="HSDP: data-parallel replicas, each holding the "
        "whole sharded state (torchtitan data_parallel_replicate_degree); the state shards over "
        "dp x cp / dp_replicate")
    fsdp_reshard_after_forward: bool | None = Field(
        None, description="FSDP frees gathered weights after forward (torchtitan "
        "fsdp_reshard_after_forward), when the file says",
    )
    attention: Literal["flash", "eager", "cudnn", "sdpa"] | None = Field(
        None, description="attention kernel: flash (FlashAttention-2), eager, cudnn (TE's) or "
        "sdpa (torch's, the default: cuDNN's on Hopper and Blackwell, else FlashAttention-2)",
    )
    # Mixture of experts (absent: a dense model). Names follow pptune's ModelShape;
    # each framework's reader maps its own (Megatron-LM --num-experts, ...).
    ep: int = Field(1, ge=1, le=1 << 20, description="expert-parallel degree: the routed "
                    "experts are split over ep ranks")
    etp: int = Field(1, ge=1, le=1 << 20, description="expert tensor-parallel degree: each "
                     "expert split etp ways (Megatron-LM's default when unset: tp)")
    num_experts: int | None = Field(None, ge=1, le=2**31 - 1,
                                    description="routed experts of each MoE layer")
    moe_top_k: int | None = Field(None, ge=1, le=2**31 - 1,
                                  description="routed experts per token")
    moe_ffn_hidden_size: int | None = Field(
        None, ge=1, le=2**31 - 1, description="FFN width of one routed expert (default: "
        "ffn_hidden_size)")
    moe_shared_ffn_hidden_size: int | None = Field(
        None, ge=1, le=2**31 - 1, description="FFN width of the shared experts together")
    moe_first_dense_layers: int = Field(0, ge=0, le=2**31 - 1,
                                        description="leading blocks with a dense MLP")
    moe_layer_freq: int = Field(1, ge=1, le=2**31 - 1, description="from the first MoE "
                                "block on, block i is MoE when i % moe_layer_freq == "
                                "moe_layer_offset")
    moe_layer_offset: int = Field(0, ge=0, le=2**31 - 1)
    moe_grouped_gemm: bool | None = Field(
        None, description="the local experts' GEMMs as one grouped GEMM (default: grouped)")
    moe_routing_imbalance: float | None = Field(
        None, ge=1, le=1 << 20, description="tokens of the busiest expert over the mean "
        "(default 1.0: balanced routing)")
    moe_dispatcher: Literal["alltoall", "deepep", "allgather"] | None = Field(
        None, description="how tokens reach their experts: alltoall (one NCCL all-to-all "
        "copy per token and expert; Megatron-LM --moe-token-dispatcher-type alltoall, "
        "torchtitan's standard backend), deepep (one copy per node and rank; Megatron-LM flex "
        "with the deepep backend, torchtitan expert_parallel_comm_backend deepep), allgather "
        "(Megatron-LM's default) (default: alltoall)")
    moe_dispatcher_sms: int | None = Field(
        None, ge=1, le=1024, description="SMs the DeepEP dispatcher's kernels hold while they "
        "run (Megatron-LM --moe-deepep-num-sms; default 20)")
    moe_router_num_groups: int | None = Field(
        None, ge=1, le=2**31 - 1, description="group-limited routing: the routed experts in "
        "this many equal groups (Megatron-LM --moe-router-num-groups)")
    moe_router_group_topk: int | None = Field(
        None, ge=1, le=2**31 - 1, description="group-limited routing: each token's experts "
        "from this many groups (Megatron-LM --moe-router-group-topk)")
    kv_channels: int | None = Field(None, ge=1, le=2**31 - 1,
                                    description="attention head dimension (default hidden / heads)")
    qk_norm: bool = Field(False, description="RMSNorm over each head's query and key")
    sliding_window: int | None = Field(
        None, ge=1, le=2**31 - 1, description="sliding-window attention: a windowed layer's "
        "query attends to this many earlier tokens (Megatron-LM --window-size LEFT,0)")
    full_attention_every: int | None = Field(
        None, ge=2, le=2**31 - 1, description="with sliding_window: every this-many-th layer "
        "attends to all earlier tokens (Megatron-LM --window-attn-skip-freq N)")
    # Block style, when the file says (unset: the model's, ModelShape's defaults)
    normalization: Literal["layernorm", "rmsnorm"] | None = Field(
        None, description="the blocks' norm (Megatron-LM --normalization LayerNorm|RMSNorm)")
    qkv_bias: bool | None = Field(
        None, description="biases on the query, key and value projections (Megatron-LM: on "
        "unless --disable-bias-linear, or with --add-qkv-bias)")
    attn_out_bias: bool | None = Field(
        None, description="a bias on the attention output projection (Megatron-LM: off "
        "with --disable-bias-linear)")
    mlp_bias: bool | None = Field(
        None, description="biases on the MLP's and experts' projections (Megatron-LM: off "
        "with --disable-bias-linear)")
    tied_embeddings: bool | None = Field(
        None, description="the LM head shares the embedding's matrix (Megatron-LM: off "
        "with --untie-embeddings-and-output-weights)")
    # Multi-head latent attention (DeepSeek-V2/V3) when kv_lora_rank is set
    q_lora_rank: int | None = Field(None, ge=1, le=2**31 - 1)
    kv_lora_rank: int | None = Field(None, ge=1, le=2**31 - 1)
    qk_nope_head_dim: int | None = Field(None, ge=1, le=2**31 - 1)
    qk_rope_head_dim: int | None = Field(None, ge=1, le=2**31 - 1)
    v_head_dim: int | None = Field(None, ge=1, le=2**31 - 1)
    overlap_grad_reduce: bool | None = Field(
        None, description="the data-parallel gradient reduction run in buckets during the "
        "backward (Megatron-LM --overlap-grad-reduce, off unless given), when the file says; "
        "unset: overlapped"
    )
    overlap_param_gather: bool | None = Field(
        None, description="the distributed optimizer's parameter all-gather run behind the "
        "next step's forward (Megatron-LM --overlap-param-gather, off unless given), when the "
        "file says; unset: as overlap_grad_reduce"
    )
    a2a_overlap: bool | None = Field(
        None, description="the MoE expert all-to-all hidden behind another micro-batch's "
        "compute (the DualPipes' F&B pairs; Megatron-LM --overlap-moe-expert-parallel-comm), "
        "when the file says",
    )
    zero_stage: int = Field(0, ge=0, le=3)
    sharded_optimizer: bool = False
    offload_optimizer: bool = Field(
        False, description="the sharded optimizer state (FP32 master weights, Adam moments) "
        "kept in host memory (DeepSpeed zero_optimization.offload_optimizer): not counted on "
        "the GPU; the host's optimizer step and the PCIe traffic are not priced")
    offload_params: bool = Field(
        False, description="ZeRO-3's weight shards kept in host memory too (DeepSpeed "
        "zero_optimization.offload_param)")
    limits: Limits = Field(default_factory=Limits)
    source_format: str = Field("pptune", description="which reader produced this")

    @model_validator(mode="before")
    @classmethod
    def _schedule_by_name(cls, data: Any) -> Any:
        """Accept a schedule by its name in any case; list the names when unknown."""
        if isinstance(data, dict) and isinstance(data.get("schedule"), str):
            name = data["schedule"]
            try:
                schedule = Schedule(name.strip().lower())
            except ValueError:
                allowed = ", ".join(s.value for s in Schedule)
                raise ValueError(
                    f"schedule {name[:40]!r} is unknown; expected one of {allowed}"
                ) from None
            data = {**data, "schedule": schedule}
        return data

    @model_validator(mode="after")
    def _names_and_splits(self) -> TrainingConfig:
        from pptune.costmodel.presets import GPUS, MODELS

        if self.model is not None and self.model not in MODELS:
            raise ValueError(
                f"model {self.model[:40]!r} is not a preset; expected one of "
                f"{', '.join(MODELS)} (or give hf_config / profile instead)"
            )
        if self.gpu is not None and self.gpu not in GPUS:
            raise ValueError(
                f"gpu {self.gpu[:40]!r} is not a preset; expected one of {', '.join(GPUS)}"
            )
        if self.pipeline_layout is not None:
            from pptune.costmodel.layout_grammar import LayoutError, expand

            try:
                expand(self.pipeline_layout)
            except LayoutError as exc:
                raise ValueError(f"pipeline_layout: {exc}") from None
        layers = self.stage_layers
        if layers is not None and (not layers or any(n < 0 or n > 2**31 - 1 for n in layers)):
            raise ValueError(
                f"stage_layers {layers[:16]} must list one layer count (>= 0) per pipeline stage"
            )
        self._moe_keys()
        return self

    def _moe_keys(self) -> None:
        """An MoE or MLA shape needs its keys together: one line naming the missing one."""
        if self.num_experts is not None and self.moe_top_k is None:
            raise ValueError(f"num_experts {self.num_experts} needs moe_top_k (the routed "
                             "experts per token); set moe_top_k")
        if self.num_experts is None:
            stray = [k for k in ("moe_top_k", "moe_ffn_hidden_size", "moe_shared_ffn_hidden_size")
                     if getattr(self, k) is not None]
            if stray:
                raise ValueError(f"{stray[0]} describes routed experts but num_experts is not "
                                 "set; set num_experts or drop it")
        mla = ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
        if self.kv_lora_rank is not None:
            missing = [k for k in mla if getattr(self, k) is None]
            if missing:
                raise ValueError(f"kv_lora_rank {self.kv_lora_rank} (multi-head latent "
                                 f"attention) needs {missing[0]}; set {', '.join(missing)}")
        elif self.q_lora_rank is not None:
            raise ValueError("q_lora_rank needs kv_lora_rank (multi-head latent attention); "
                             "set kv_lora_rank or drop q_lora_rank")


