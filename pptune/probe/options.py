"""What ``pptune probe`` was asked for: the options, their defaults and their checks.

``resolve_options`` fills the defaults (``--quick`` ones first) and checks
every value before anything is imported or spawned; a bad value is a
``BadInput`` naming its flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any

from pptune.errors import BadInput

MIB = 1024**2
DEFAULT_OUTPUT = Path("pptune-profile.json")
DEFAULT_MODEL = "gpt-small"
DEFAULT_MICRO_BATCH_SIZES = [1, 2, 4]
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_BYTES = {"cpu": 64 * MIB, "cuda": 256 * MIB}
# --quick: the CI smoke run, well under a minute on a 2-core CPU machine.
QUICK = {"micro_batch_sizes": [1, 2], "repeats": 5, "warmup": 2, "max_bytes": 4 * MIB}


class DeviceChoice(str, Enum):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class DType(str, Enum):
    AUTO = "auto"  # fp32 on CPU, bf16 on CUDA
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


TORCH_DTYPES = {DType.FP32: "float32", DType.BF16: "bfloat16", DType.FP16: "float16"}


@dataclass
class ProbeOptions:
    """What the user asked for; ``None`` means "not given" (quick or normal default)."""

    model: str | None = None
    hf_config: Path | None = None
    module: str | None = None
    micro_batch_sizes: list[int] | None = None
    repeats: int | None = None
    warmup: int | None = None
    comm: bool = True
    nccl_tests: list[Path] = field(default_factory=list)
    max_bytes: int | None = None
    timeout_s: float | None = None
    quick: bool = False
    device: DeviceChoice | None = None
    dtype: DType = DType.AUTO
    threads: int | None = None
    seq_len: int | None = None
    # what to lower when the model does not fit, in the calling command's flags
    # (validate's quick probe measures one --micro-batch-size)
    smaller: str = "lower --micro-batch-sizes or --seq-len"


def resolve_options(opts: ProbeOptions) -> ProbeOptions:
    """Fill defaults (``--quick`` ones first) and check every value; BadInput names the knob."""
    sources = [
        flag
        for flag, value in (("--model", opts.model), ("--hf-config", opts.hf_config),
                            ("--module", opts.module))
        if value is not None
    ]
    if len(sources) > 1:
        raise BadInput(f"{' and '.join(sources)} both name the model; give one of them")
    if opts.nccl_tests and not opts.comm:
        raise BadInput("--nccl-tests and --no-comm both given; --nccl-tests already skips the "
                       "bandwidth probe, drop one")
    quick: dict[str, Any] = QUICK if opts.quick else {}
    out = replace(
        opts,
        model=opts.model if sources else DEFAULT_MODEL,
        micro_batch_sizes=opts.micro_batch_sizes
        or quick.get("micro_batch_sizes", DEFAULT_MICRO_BATCH_SIZES),
        repeats=opts.repeats if opts.repeats is not None else quick.get("repeats", DEFAULT_REPEATS),
        warmup=opts.warmup if opts.warmup is not None else quick.get("warmup", DEFAULT_WARMUP),
        max_bytes=opts.max_bytes if opts.max_bytes is not None else quick.get("max_bytes"),
        timeout_s=opts.timeout_s if opts.timeout_s is not None else DEFAULT_TIMEOUT_S,
        device=opts.device or (DeviceChoice.CPU if opts.quick else DeviceChoice.AUTO),
    )
    sizes = out.micro_batch_sizes or []
    bad = [b for b in sizes if b < 1]
    if bad or not sizes:
        raise BadInput(f"--micro-batch-sizes must be positive integers, got {sizes}")
    if len(set(sizes)) != len(sizes):
        raise BadInput(f"--micro-batch-sizes has repeated values: {sizes}")
    out.micro_batch_sizes = sorted(sizes)
    if (out.repeats or 0) < 1:
        raise BadInput(f"--repeats must be at least 1, got {out.repeats}")
    if (out.warmup or 0) < 0:
        raise BadInput(f"--warmup must be 0 or more, got {out.warmup}")
    from pptune.probe import comm as comm_mod  # torch-free, but not needed to parse flags

    if out.max_bytes is not None and out.max_bytes < comm_mod.MIN_BYTES:
        raise BadInput(
            f"--max-bytes {out.max_bytes} is below the smallest message "
            f"({comm_mod.MIN_BYTES} bytes); give e.g. 64M"
        )
    if out.max_bytes is not None and out.comm and not out.nccl_tests:
        from pptune.probe.fit import MIN_SIZES

        n = len(comm_mod.message_sizes(out.max_bytes))
        if n < MIN_SIZES:
            least = comm_mod.MIN_BYTES << (MIN_SIZES - 1)
            raise BadInput(
                f"--max-bytes {out.max_bytes} leaves {n} message size(s) "
                f"({comm_mod.MIN_BYTES} bytes doubling): a latency-and-bandwidth fit needs at "
                f"least {MIN_SIZES}, up to where a transfer outlasts the latency; give "
                f"--max-bytes {least // 1024}K or more (the default: 64M on CPU, 256M on GPU), "
                "or --no-comm"
            )
    if (out.timeout_s or 0) <= 0:
        raise BadInput(f"--timeout must be positive seconds, got {out.timeout_s}")
    if out.threads is not None and out.threads < 1:
        raise BadInput(f"--threads must be at least 1, got {out.threads}")
    if out.seq_len is not None and out.seq_len < 1:
        raise BadInput(f"--seq-len must be at least 1, got {out.seq_len}")
    return out
