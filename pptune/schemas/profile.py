"""``Profile``: per-layer costs and links (``pptune schema profile``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from pptune.schemas.base import Strict, _drop_zeros, load_json_model

PROFILE_SCHEMA_VERSION: Literal[1] = 1


class LayerCost(Strict):
    """One layer's costs for one micro-batch of a given size."""

    fwd_s: float = Field(ge=0, description="forward time, seconds")
    bwd_s: float = Field(ge=0, description="input-gradient (B) time, seconds")
    wgrad_s: float = Field(0.0, ge=0, description="weight-gradient (W) time, seconds")
    act_bytes: float = Field(ge=0, description="activation bytes kept for backward")
    out_bytes: float = Field(ge=0, description="bytes of the output sent to the next stage")
    fwd_spread: float | None = Field(
        None, ge=0, description="probe only: relative spread (IQR / median) of fwd_s"
    )
    bwd_spread: float | None = Field(None, ge=0, description="probe only: spread of bwd_s")
    wgrad_spread: float | None = Field(None, ge=0, description="probe only: spread of wgrad_s")
    fwd_a2a_s: float = Field(
        0.0, ge=0, description="mixture of experts: dispatch and combine all-to-all in the "
        "forward, seconds (not in fwd_s)")
    bwd_a2a_s: float = Field(
        0.0, ge=0, description="mixture of experts: the all-to-alls of the backward, seconds "
        "(not in bwd_s)")
    split_bwd_s: float | None = Field(
        None, ge=0, description="probe only: B as torch.distributed.pipelining's split "
        "backward runs it (stage_backward_input), seconds; zero-bubble and V schedules' B "
        "ops take it; None: bwd_s")
    split_wgrad_s: float | None = Field(
        None, ge=0, description="probe only: W as the split backward runs it "
        "(stage_backward_weight), seconds; None: wgrad_s")

    @model_serializer(mode="wrap")
    def _without_zero_moe(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_zeros(handler(self), ("fwd_a2a_s", "bwd_a2a_s", "split_bwd_s",
                                           "split_wgrad_s"))


class Layer(Strict):
    name: str = Field(min_length=1)
    param_bytes: float = Field(ge=0, description="bytes of this layer's parameters")
    cache_bytes: float | None = Field(
        None, ge=0, description="bytes held all step outside the training state (FP8 weight "
        "copies and transposes, pptune.costmodel.precision); None: none"
    )
    expert_param_bytes: float = Field(
        0.0, ge=0, description="mixture of experts: the routed experts' part of param_bytes "
        "(sharded over expert data parallelism)")
    tied_param_bytes: float = Field(
        0.0, ge=0, description="the part of param_bytes that is the embedding's matrix too "
        "(an LM head tied to it): counted once where one stage holds the embedding and this "
        "layer")
    per_micro_batch: dict[str, LayerCost] = Field(
        description="costs keyed by micro-batch size, as a string: {\"1\": {...}, \"2\": {...}}"
    )

    @model_serializer(mode="wrap")
    def _without_zero_moe(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return _drop_zeros(handler(self), ("expert_param_bytes", "cache_bytes",
                                           "tied_param_bytes"))

    @model_validator(mode="after")
    def _keys_are_sizes(self) -> Layer:
        if not self.per_micro_batch:
            raise ValueError(f"layer {self.name!r} has no per_micro_batch costs")
        if self.expert_param_bytes > self.param_bytes:
            raise ValueError(f"layer {self.name!r}: expert_param_bytes "
                             f"({self.expert_param_bytes:g}) exceeds param_bytes "
                             f"({self.param_bytes:g}); they are part of them")
        if self.tied_param_bytes > self.param_bytes:
            raise ValueError(f"layer {self.name!r}: tied_param_bytes "
                             f"({self.tied_param_bytes:g}) exceeds param_bytes "
                             f"({self.param_bytes:g}); they are part of them")
        for key in self.per_micro_batch:
            if not key.isdigit() or int(key) < 1:
                raise ValueError(
                    f"layer {self.name!r}: micro-batch size keys must be positive integers "
                    f"as strings, got {key!r}"
                )
        return self

    def cost(self, micro_batch_size: int) -> LayerCost:
        return self.per_micro_batch[str(micro_batch_size)]


class LinkSpec(Strict):
    """Alpha-beta link: time = latency_s + bytes / bytes_per_s."""

    latency_s: float = Field(ge=0)
    bytes_per_s: float = Field(gt=0, description="for all-reduce: bus bandwidth (nccl-tests)")
    ranks_per_node: int | None = Field(
        None, ge=1,
        description="inter_node.allreduce only: ranks on each node the bus bandwidth was "
        "measured with. A cross-node all-reduce with G ranks a node drives G NICs at once, "
        "so the planner divides bytes_per_s by this to get one member a node (one NIC) and "
        "scales it by each group's members per node. None: already one member a node (the "
        "analytic presets' per-NIC figure, the probe's default)",
    )


class LinkPair(Strict):
    p2p: LinkSpec
    allreduce: LinkSpec
    all_to_all: LinkSpec | None = Field(
        None, description="all-to-all bus bandwidth (nccl-tests alltoall_perf: algbw x "
        "(n-1)/n), the expert dispatch and combine of a mixture of experts; only when "
        "measured")

    @model_serializer(mode="wrap")
    def _without_unmeasured(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        if doc.get("all_to_all") is None:  # files without a sweep stay as they were
            doc.pop("all_to_all", None)
        return doc


class FabricSpec(Strict):
    """What NCCL achieves on the node type (pptune.costmodel.collectives): with it the
    planner picks each collective's algorithm by message size and group shape."""

    ring_busbw_bytes_per_s: float = Field(gt=0, description="ring all-reduce bus bandwidth in a node")
    p2p_bytes_per_s: float = Field(gt=0, description="one pairwise copy in a node, one direction")
    nic_busbw_bytes_per_s: float = Field(gt=0, description="one NIC in a cross-node ring")
    nvls_busbw_bytes_per_s: float | None = Field(None, gt=0, description="NVLink SHARP all-reduce")
    nvls_min_ranks: int = Field(5, ge=2, description="NCCL picks NVLS from this many ranks")
    nvls_enabled: bool = Field(True, description="NCCL_NVLS_ENABLE")
    collective_ctas: int = Field(0, ge=0, description="SMs (one CTA a channel) a running "
                                 "NCCL collective holds; 0: not priced")
    sm_count: int = Field(0, ge=0, description="the GPU's SMs (with collective_ctas: the "
                          "share of them compute beside a collective loses)")
    mesh_link_bytes_per_s: float | None = Field(
        None, gt=0, description="one direct link, one direction, of a switchless full-mesh "
        "node (MI300X's xGMI): a group's collectives and all-to-alls inside the node run on "
        "its members' links; absent: a switched node")

    @model_serializer(mode="wrap")
    def _without_mesh(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        if doc.get("mesh_link_bytes_per_s") is None:  # switched nodes' files stay as they were
            doc.pop("mesh_link_bytes_per_s", None)
        return doc


class Links(Strict):
    intra_node: LinkPair
    inter_node: LinkPair
    fabric: FabricSpec | None = Field(
        None, description="measured NCCL figures (analytic presets); None: the links above"
    )


class DeviceInfo(Strict):
    name: str
    memory_bytes: float = Field(gt=0)
    count: int = Field(1, ge=1, description="devices seen by the probe")
    peak_flops: float | None = Field(None, gt=0, description="peak dense bf16 FLOP/s, if known")
    hbm_bytes_per_s: float | None = Field(
        None, gt=0, description="achieved HBM bandwidth, for the optimizer step (optimizer.py); "
        "None: the step is not priced"
    )


class ModelInfo(Strict):
    name: str
    seq_len: int = Field(ge=1, description="tokens per sample")
    global_batch: int | None = Field(None, ge=1, description="default global batch (samples)")
    hidden_size: int | None = Field(None, ge=1)
    num_blocks: int | None = Field(None, ge=1, description="transformer blocks (layers minus embedding/head)")
    hf_config: str | None = Field(
        None, description="the Hugging Face config.json the probe measured (validate rebuilds it)"
    )
    experts: int | None = Field(None, ge=1, description="mixture of experts: routed experts "
                                "of each MoE layer (model FLOPs count top_k / experts of them)")
    top_k: int | None = Field(None, ge=1, description="mixture of experts: routed experts "
                              "per token")

    @model_serializer(mode="wrap")
    def _without_moe(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        for key in ("experts", "top_k"):  # a dense model's file stays as it was
            if doc.get(key) is None:
                doc.pop(key, None)
        return doc

    @model_validator(mode="after")
    def _top_k_of_experts(self) -> ModelInfo:
        if (self.experts is None) != (self.top_k is None):
            raise ValueError("experts and top_k come together (a mixture of experts)")
        if self.experts is not None and self.top_k is not None and self.top_k > self.experts:
            raise ValueError(f"top_k {self.top_k} exceeds the {self.experts} experts")
        return self


class CalibrationRun(Strict):
    """One job the calibration was fitted to (``pptune calibrate --run``)."""

    config: str = Field(min_length=1, description="the job's config file, as given")
    framework: str = Field(description="whose config it is (megatron, torchtitan, ...)")
    step_source: str = Field(description="where the measured step came from: --step-s, or "
                             "the log and the iterations read")
    measured_step_s: float = Field(gt=0, description="seconds per step the job ran")
    predicted_step_s: float = Field(gt=0, description="seconds per step at the calibration")
    residual: float = Field(description="predicted / measured - 1")
    peak_memory_bytes: float | None = Field(
        None, ge=0, description="the log's peak memory of the first pipeline rank, if printed")
    predicted_memory_bytes: float | None = Field(
        None, ge=0, description="pptune's peak for that rank, reserve left out")
    parts: dict[str, float] = Field(
        default_factory=dict, description="the step at the calibration, by part, seconds "
        "(pptune.costmodel.breakdown)")
    measured_parts: dict[str, float] = Field(
        default_factory=dict, description="the step by part as the framework's own timers "
        "measured it, seconds (Megatron-LM's --timing-log-level timers: forward-backward, "
        "gradient sync, optimizer, rest of the step; pptune.costmodel.step_timers); {} where the "
        "log prints none")
    elasticity: dict[str, float] = Field(
        default_factory=dict, description="per rate group: -d log step / d log factor")
    gpus: int | None = Field(None, ge=1, description="the GPUs the job ran on")
    precision: Literal["bf16", "fp16", "fp8", "mxfp8"] | None = Field(
        None, description="the GEMM precision the job ran and was priced at")
    held_out_residual: float | None = Field(
        None, description="leave one out: the job's step predicted by the factors the other "
        "runs alone give, over its measured step, minus 1 (None: one run)")


class Calibration(Strict):
    """Factors on the analytic model's rates, fitted to jobs of one model on one GPU
    type (``pptune calibrate --run``): with them the resolver rebuilds analytic costs
    for any configuration of that model and GPU (pptune.costmodel.calibration)."""

    gpu: str = Field(description="the GPU preset the factors scale")
    model: dict[str, Any] = Field(description="the model's shape (pptune's ModelShape fields)")
    attention: Literal["flash", "eager", "cudnn", "sdpa"] = Field(
        "flash", description="the jobs' attention kernel")
    factors: dict[str, float] = Field(description="compute, memory and communication factors")
    fitted: list[list[str]] = Field(description="the factors fitted; groups listed together "
                                    "share one factor")
    reserve_bytes: float | None = Field(
        None, ge=0, description="memory per GPU beyond the modelled tensors, from the logs' "
        "peak (replaces --reserve-gib's 2 GiB default)")
    runs: list[CalibrationRun] = Field(min_length=1)
    notes: list[str] = Field(default_factory=list)
    precision: Literal["bf16", "fp16", "fp8", "mxfp8"] | None = Field(
        None, description="the GEMM precision the jobs ran (the first job's): recommend and "
        "simulate price it unless --precision says otherwise; None: bf16")
    fp8_kernels: Literal["te", "torchao"] | None = Field(
        None, description="an FP8 job's linear layers: Transformer Engine's or torchao's")
    fp8_recipe: str | None = Field(
        None, max_length=40, description="an FP8 job's scaling recipe as its config states it "
        "(Megatron-LM --fp8-recipe, torchtitan's float8 recipe)")
    fp8_param_gather: bool | None = Field(
        None, description="an FP8 job's weights kept and gathered in FP8 (Megatron-LM "
        "--fp8-param-gather)")
    main_grads_dtype: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="the jobs' gradient buffer width, as check-config read their configs "
        "(Megatron-LM: FP16 under --fp16 without --accumulate-allreduce-grads-in-fp32, BF16 "
        "with --grad-reduce-in-bf16): recommend prices its plans' gradients so unless "
        "--grad-compression is given; None: a profile written before this key (FP32)")
    warnings: list[str] = Field(
        default_factory=list, description="what makes the factors doubtful: residuals or "
        "held-out errors over pptune calibrate's threshold")
    # the kernels the jobs were priced with (check-config's reading of their configs):
    # recommend and simulate price them unless a flag says otherwise; None (a profile
    # written before these keys): pptune's defaults
    tp_comm_overlap: bool | None = Field(
        None, description="the jobs' tensor-parallel collectives hidden behind their GEMMs "
        "(Megatron-LM --tp-comm-overlap)")
    cross_entropy: Literal["fused", "native", "unfused", "eager"] | None = Field(
        None, description="the jobs' loss kernels (--cross-entropy)")
    swiglu: Literal["fused", "eager"] | None = Field(
        None, description="the jobs' gated-MLP activation kernels (--swiglu)")
    wgrad_accum: Literal["fused", "unfused", "bf16"] | None = Field(
        None, description="where the jobs' weight gradients went (--wgrad-accum)")
    moe_dispatcher: Literal["alltoall", "deepep", "allgather"] | None = Field(
        None, description="how the jobs' MoE tokens reached their experts "
        "(--moe-dispatcher); None: a dense model, or a profile written before this key")

    @model_validator(mode="after")
    def _known(self) -> Calibration:
        from pptune.costmodel.calibration import RateGroup
        from pptune.costmodel.presets import GPUS, ModelShape

        if self.gpu not in GPUS:
            raise ValueError(f"calibration gpu {self.gpu[:40]!r} is not a preset; expected one "
                             f"of {', '.join(GPUS)}")
        groups = {g.value for g in RateGroup}
        if set(self.factors) != groups:
            raise ValueError(f"calibration factors must be {', '.join(sorted(groups))}; got "
                             f"{', '.join(sorted(self.factors)) or 'none'}")
        bad = [k for k, v in self.factors.items() if not v > 0]
        if bad:
            raise ValueError(f"calibration factor {bad[0]} must be positive")
        if any(g not in groups for tie in self.fitted for g in tie):
            raise ValueError(f"calibration fitted lists an unknown group; expected "
                             f"{', '.join(sorted(groups))}")
        try:
            ModelShape(**self.model)
        except TypeError as exc:
            raise ValueError(f"calibration model is not a model shape: {exc}") from None
        return self


class Profile(Strict):
    schema_version: Literal[1] = PROFILE_SCHEMA_VERSION
    source: Literal["analytic", "probe"]
    model: ModelInfo
    device: DeviceInfo
    links: Links
    param_dtype_bytes: int = Field(2, ge=1, le=8, description="bytes per parameter as stored")
    layers: list[Layer] = Field(min_length=1)
    notes: list[str] = Field(default_factory=list)
    raw: dict[str, Any] | None = Field(None, description="probe only: raw sweeps and samples")
    calibration: Calibration | None = Field(
        None, description="pptune calibrate --run: the analytic model's rates scaled to the "
        "jobs it measured; the layers are then the costs of the first job's configuration")

    @model_serializer(mode="wrap")
    def _without_calibration(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        doc: dict[str, Any] = handler(self)
        if doc.get("calibration", 0) is None:  # profiles without one stay as they were
            del doc["calibration"]
        return doc

    @model_validator(mode="after")
    def _same_sizes(self) -> Profile:
        sizes = set(self.layers[0].per_micro_batch)
        for layer in self.layers[1:]:
            if set(layer.per_micro_batch) != sizes:
                raise ValueError(
                    f"layer {layer.name!r} has micro-batch sizes {sorted(layer.per_micro_batch)}"
                    f" but the first layer has {sorted(sizes)}; every layer needs the same sizes"
                )
        return self

    def micro_batch_sizes(self) -> list[int]:
        return sorted(int(k) for k in self.layers[0].per_micro_batch)



def load_profile(path: Path) -> Profile:
    return load_json_model(path, Profile, "profile")  # type: ignore[no-any-return]
