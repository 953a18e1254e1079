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
import os
import tempfile
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput

PROFILE_SCHEMA_VERSION = 1


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


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


class LinkPair(Strict):
    p2p: LinkSpec
    allreduce: LinkSpec


class Links(Strict):
    intra_node: LinkPair
    inter_node: LinkPair


class DeviceInfo(Strict):
    name: str
    memory_bytes: float = Field(gt=0)
    count: int = Field(1, ge=1, description="devices seen by the probe")
    peak_flops: float | None = Field(None, gt=0, description="peak dense bf16 FLOP/s, if known")


class ModelInfo(Strict):
    name: str
    seq_len: int = Field(ge=1, description="tokens per sample")
    global_batch: int | None = Field(None, ge=1, description="default global batch (samples)")
    hidden_size: int | None = Field(None, ge=1)
    num_blocks: int | None = Field(None, ge=1, description="transformer blocks (layers minus embedding/head)")


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
    max_bubble: float = Field(0.25, ge=0, le=1)
    max_slowdown: float = Field(1.10, ge=1)
    memory_fraction: float = Field(1.0, gt=0, le=1, description="usable share of device memory")


class TrainingConfig(Strict):
    """pptune's own training config; every framework reader produces one."""

    gpus: int | None = Field(None, description="total GPUs; default tp * pp * dp")
    gpus_per_node: int = 8
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    schedule: Schedule = Schedule.ONE_F_ONE_B
    virtual_stages: int = 1
    micro_batch_size: int
    global_batch: int | None = None
    grad_accum_steps: int | None = None
    seq_len: int | None = None
    model: str | None = Field(None, description="model preset name")
    hf_config: str | None = Field(None, description="path to a Hugging Face config.json")
    profile: str | None = Field(None, description="path to a pptune profile JSON")
    gpu: str | None = Field(None, description="GPU preset name")
    num_layers: int | None = Field(None, description="transformer blocks, when the file says")
    stage_layers: list[int] | None = Field(None, description="explicit layers per stage")
    zero_stage: int = 0
    sharded_optimizer: bool = False
    limits: Limits = Field(default_factory=Limits)
    source_format: str = Field("pptune", description="which reader produced this")


def load_json_model(path: Path, model: type[Strict], what: str) -> Any:
    """Read and validate a JSON file; BadInput with one line on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadInput(f"cannot read {what} file {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(f"{what} file {path} is not valid JSON: {exc}") from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadInput(f"{what} file {path} is invalid: {one_line(exc)}") from None


def one_line(exc: ValidationError) -> str:
    """All pydantic errors of a ValidationError, joined on one line."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(top level)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temp file and rename: never half a file."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None


def load_profile(path: Path) -> Profile:
    return load_json_model(path, Profile, "profile")  # type: ignore[no-any-return]
