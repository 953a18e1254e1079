"""Pydantic models for everything that crosses a file boundary.

- ``Profile``: per-layer costs and links, written by ``pptune probe`` or the
  analytic presets, read by ``simulate``, ``recommend`` and ``check-config``.
- ``TrainingConfig``: pptune's own training config, and the normalized form
  every framework reader (DeepSpeed, Megatron-LM, torchtitan) produces.

All models forbid unknown keys, so a typo in a hand-written file is an error
that names the key, not a silently ignored value.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput

PROFILE_SCHEMA_VERSION = 1


class Strict(BaseModel):
    # NaN and infinity are refused in every file pptune reads or writes: JSON has no such numbers
    model_config = ConfigDict(extra="forbid", frozen=False, allow_inf_nan=False)


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


class Layer(Strict):
    name: str = Field(min_length=1)
    param_bytes: float = Field(ge=0, description="bytes of this layer's parameters")
    cache_bytes: float | None = Field(
        None, ge=0, description="bytes held all step outside the training state (FP8 weight "
        "copies and transposes, pptune.costmodel.precision); None: none"
    )
    per_micro_batch: dict[str, LayerCost] = Field(
        description="costs keyed by micro-batch size, as a string: {\"1\": {...}, \"2\": {...}}"
    )

    @model_validator(mode="after")
    def _keys_are_sizes(self) -> Layer:
        if not self.per_micro_batch:
            raise ValueError(f"layer {self.name!r} has no per_micro_batch costs")
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


class FabricSpec(Strict):
    """What NCCL achieves on the node type (pptune.costmodel.collectives): with it the
    planner picks each collective's algorithm by message size and group shape."""

    ring_busbw_bytes_per_s: float = Field(gt=0, description="ring all-reduce bus bandwidth in a node")
    p2p_bytes_per_s: float = Field(gt=0, description="one pairwise copy in a node, one direction")
    nic_busbw_bytes_per_s: float = Field(gt=0, description="one NIC in a cross-node ring")
    nvls_busbw_bytes_per_s: float | None = Field(None, gt=0, description="NVLink SHARP all-reduce")
    nvls_min_ranks: int = Field(5, ge=2, description="NCCL picks NVLS from this many ranks")
    nvls_enabled: bool = Field(True, description="NCCL_NVLS_ENABLE")


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


class Limits(Strict):
    # strict: a quoted "0.2" in a hand-written file is an error, not a number.
    model_config = ConfigDict(extra="forbid", strict=True)

    max_bubble: float = Field(0.25, ge=0, le=1)
    max_slowdown: float = Field(1.10, ge=1)
    memory_fraction: float = Field(1.0, gt=0, le=1, description="usable share of device memory")


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

    model_config = ConfigDict(extra="forbid", strict=True)

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
    grad_accum_steps: int | None = Field(
        None, ge=1, le=2**31 - 1,
        description="micro-batches per optimizer step on one pipeline (DeepSpeed's meaning)",
    )
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
    precision: Literal["fp32", "fp16", "bf16"] | None = Field(
        None, description="training compute dtype, when the file says"
    )
    recompute: Literal["none", "selective", "full"] | None = Field(
        None, description="activation recomputation (checkpointing), when the file says"
    )
    sequence_parallel: bool = Field(
        False, description="Megatron-LM --sequence-parallel: activations split by tp along the sequence"
    )
    rank_order: Literal["tp-dp-pp", "tp-pp-dp"] = Field(
        "tp-dp-pp", description="global rank order, fastest first (Megatron-LM "
        "--use-tp-pp-dp-mapping gives tp-pp-dp)"
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
    fsdp_reshard_after_forward: bool | None = Field(
        None, description="FSDP frees gathered weights after forward (torchtitan "
        "fsdp_reshard_after_forward), when the file says",
    )
    attention: Literal["flash", "eager"] | None = Field(
        None, description="attention kernel: fused flash attention or the unfused (eager) path",
    )
    zero_stage: int = Field(0, ge=0, le=3)
    sharded_optimizer: bool = False
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
        layers = self.stage_layers
        if layers is not None and (not layers or any(n < 0 or n > 2**31 - 1 for n in layers)):
            raise ValueError(
                f"stage_layers {layers[:16]} must list one layer count (>= 0) per pipeline stage"
            )
        return self


class PlanRecord(Strict):
    """One ranked plan, as ``pptune recommend --json`` prints it."""

    rank: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    tp: int = Field(ge=1)
    schedule: Schedule
    virtual_stages: int = Field(ge=1)
    micro_batch_size: int = Field(ge=1)
    num_microbatches: int = Field(ge=1)
    grad_accum_steps: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    stage_layers: list[int] = Field(description="layer count per stage (pp * chunks entries)")
    stage_layer_names: list[list[str]] = Field(description="first and last layer of each stage")
    bubble_rate: float
    step_time_s: float
    tokens_per_s: float
    peak_memory_bytes: list[float] = Field(description="per pipeline rank (GPU)")
    memory_capacity_bytes: float
    headroom_bytes: float
    ideal_step_s: float
    efficiency: float = Field(description="ideal step time / predicted step time")
    mfu: float | None = Field(
        None, description="model FLOPs utilisation: model FLOPs per step / (step x GPUs x peak "
        "FLOP/s); null when the device's peak is unknown"
    )
    gradient_accumulation_aligned: bool = Field(description="micro-batches a multiple of pp")
    exposed_p2p_s: float | None = None
    exposed_allreduce_s: float | None = None
    rank_order: Literal["tp-dp-pp", "tp-pp-dp"] = Field(
        "tp-dp-pp", description="global rank order, fastest first (Megatron-LM: tp-cp-ep-dp-pp "
        "default, tp-cp-ep-pp-dp with --use-tp-pp-dp-mapping)"
    )
    sharding: Literal["none", "zero1", "zero2", "zero3", "fsdp"] = Field(
        "none", description="training-state sharding over data parallelism"
    )
    recompute: Literal["none", "selective", "full"] = Field(
        "none", description="activation recomputation"
    )
    training_days: float | None = Field(None, description="with --train-tokens")
    gpu_hours: float | None = Field(None, description="with --train-tokens")
    measured_step_s: float | None = Field(
        None, description="pptune tune: median measured step of one pipeline of this plan"
    )
    calibrated_step_s: float | None = Field(
        None, description="pptune tune: predicted step over the calibrated profile"
    )
    tune_status: str | None = Field(
        None, description="pptune tune: measured, pruned, skipped, failed or not run (and why)"
    )


class PlanFile(Strict):
    """What ``pptune recommend --json`` prints and ``-o FILE`` saves."""

    plans: list[PlanRecord]
    rejected: dict[str, int]
    source: str = Field(description="where the costs came from")
    request: dict[str, Any] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)


# profile and plan files: a 4,096-layer profile with eight micro-batch sizes is
# about 8 MiB of JSON
MAX_JSON_FILE_BYTES = 64 << 20


def load_json_model(path: Path, model: type[Strict], what: str) -> Any:
    """Read and validate a JSON file; BadInput with one line on any problem."""
    from pptune.files import read_limited

    raw = read_limited(Path(path), f"{what} file", MAX_JSON_FILE_BYTES)
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise BadInput(f"{what} file {path} is not UTF-8 text; expected JSON") from None
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} file {path} is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadInput(f"{what} file {path}: JSON nested too deeply to be a {what}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadInput(f"{what} file {path} is invalid: {one_line(exc)}") from None
    except RecursionError:
        raise BadInput(f"{what} file {path}: JSON nested too deeply to be a {what}") from None


def one_line(exc: ValidationError) -> str:
    """All pydantic errors of a ValidationError, joined on one line."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all (``pptune.files.write_text``:
    regular files only; a symlink's target is written, never the link)."""
    from pptune.files import write_text

    write_text(Path(path), text)


def load_profile(path: Path) -> Profile:
    return load_json_model(path, Profile, "profile")  # type: ignore[no-any-return]
