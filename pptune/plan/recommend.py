"""`pptune recommend`: resolve the cost source, build the request, search."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from pptune import limits
from pptune.costmodel.comm import compression_factor
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.schedules import DEFAULT_SCHEDULES, Schedule
from pptune.costmodel.search import (
    CostTable,
    PlanRequest,
    Recompute,
    SearchResult,
    Sharding,
    search,
)
from pptune.costs.resolve import CostOptions, resolve
from pptune.errors import BadInput

GIB = 1024**3
E = TypeVar("E", bound=Enum)
# samples per step when neither --global-batch nor the profile names one: the
# batch pptune assumes for a Hugging Face config (pptune.costs.modelspec)
DEFAULT_GLOBAL_BATCH = 512


@dataclass
class RecommendSpec:
    gpus: int
    tp: int = 1
    gpus_per_node: int = 8
    global_batch: int | None = None
    micro_batch_sizes: list[int] | None = None
    schedules: list[Schedule] = field(default_factory=lambda: list(DEFAULT_SCHEDULES))
    virtual_stages: list[int] = field(default_factory=lambda: [2, 3, 4])
    pp: list[int] | None = None
    model: str | None = None
    gpu: str | None = None
    profile: Path | None = None
    efficiency: float | None = None  # None: per GEMM shape (ops.py)
    attention: str | None = None  # None: flash
    tp_comm_overlap: bool = False
    overlap_grad_reduce: bool = True
    sharded_optimizer: bool = False
    grad_compression: str | None = None
    reserve_gib: float = 2.0
    blocking_send: bool = False
    top: int = 5
    sequence_parallel: bool = False
    recompute: str | None = None  # comma list of none, selective, full; None: all
    sharding: str | None = None  # comma list of none, zero1, zero2, zero3, fsdp; None: all
    recompute_every: int = 2
    hf_config: Path | None = None
    seq_len: int | None = None


@dataclass
class RecommendRun:
    result: SearchResult
    table: CostTable
    plan_request: PlanRequest
    names: list[str]
    global_batch: int
    origin: str
    request: dict[str, Any]
    notes: list[str]
    shape: ModelShape | None = None  # a model given by --hf-config or with --seq-len
    model_flops_per_step: float | None = None  # for MFU (pptune.costs.resolve)
    peak_flops: float | None = None  # per GPU, dense bf16


def check_spec(spec: RecommendSpec) -> None:
    """Every bad flag at once, in one line (the cost flags: ``resolve``)."""
    problems = limits.problems(
        limits.problem("--gpus", spec.gpus, 1, limits.MAX_GPUS),
        limits.problem("--tp", spec.tp, 1, limits.MAX_TP),
        limits.problem("--gpus-per-node", spec.gpus_per_node, 1, limits.MAX_GPUS),
        None if spec.global_batch is None else limits.problem(
            "--global-batch", spec.global_batch, 1, limits.MAX_GLOBAL_BATCH),
        limits.problem("--top", spec.top, 1, limits.MAX_TOP),
        limits.problem("--reserve-gib", spec.reserve_gib, 0, limits.MAX_RESERVE_GIB),
    )
    if not problems and spec.gpus % spec.tp:
        problems.append(f"--tp {spec.tp} must divide --gpus {spec.gpus}")
    if spec.recompute_every < 1:
        problems.append(f"--recompute-every must be >= 1 (got {spec.recompute_every})")
    if any(v < 2 for v in spec.virtual_stages):
        problems.append("--virtual-stages candidates must be >= 2 (interleaved-1f1b)")
    elif any(v > limits.MAX_LAYERS for v in spec.virtual_stages):
        problems.append(f"--virtual-stages candidates must be <= {limits.MAX_LAYERS}")
    if not problems and spec.pp:
        ranks = spec.gpus // spec.tp
        bad = [p for p in spec.pp if ranks % p]
        if bad:
            problems.append(
                f"--pp {','.join(map(str, bad))} does not divide the {ranks} pipeline x "
                f"data-parallel ranks (--gpus {spec.gpus} / --tp {spec.tp}); choose from "
                f"{', '.join(str(p) for p in range(1, ranks + 1) if ranks % p == 0)}")
    if problems:
        raise BadInput("; ".join(problems))


def recommend(spec: RecommendSpec) -> RecommendRun:
    check_spec(spec)
    schedules = [Schedule(s) for s in spec.schedules]
    try:
        factor = compression_factor(spec.grad_compression)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    recomputes = choices(spec.recompute, Recompute, "--recompute")
    shardings = choices(spec.sharding, Sharding, "--sharding")
    if spec.sharded_optimizer:
        if spec.sharding is not None and shardings != [Sharding.ZERO1]:
            raise BadInput("--sharded-optimizer means --sharding zero1; drop one of them")
        shardings = [Sharding.ZERO1]
    costs = resolve(CostOptions(
        profile=spec.profile, model=spec.model, hf_config=spec.hf_config, seq_len=spec.seq_len,
        gpu=spec.gpu, tp=spec.tp, efficiency=spec.efficiency,
        sequence_parallel=spec.sequence_parallel,
        micro_batch_sizes=tuple(spec.micro_batch_sizes) if spec.micro_batch_sizes else None,
        attention=spec.attention, tp_comm_overlap=spec.tp_comm_overlap,
    ))
    notes = [*costs.notes, f"costs: {costs.origin}"]
    table = costs.table
    sizes = spec.micro_batch_sizes or sorted(table.by_mb)
    global_batch = spec.global_batch or costs.profile.model.global_batch
    if global_batch is None:
        global_batch = DEFAULT_GLOBAL_BATCH
        notes.append(f"the profile names no global batch; planning for {global_batch} samples "
                     "per step (pass --global-batch to change it)")
    req = PlanRequest(
        gpus=spec.gpus, global_batch=global_batch, tp=spec.tp, gpus_per_node=spec.gpus_per_node,
        schedules=tuple(schedules), virtual_stages=tuple(spec.virtual_stages),
        micro_batch_sizes=tuple(sizes), pp=tuple(spec.pp) if spec.pp else None,
        shardings=tuple(shardings), recomputes=tuple(recomputes),
        recompute_every=spec.recompute_every, reserve_bytes=spec.reserve_gib * GIB,
        grad_bytes_factor=factor, blocking_send=spec.blocking_send, top=spec.top,
        overlap_grad_reduce=spec.overlap_grad_reduce,
    )
    result = search(table, req)
    requested = global_batch
    if not result.plans and result.rejected.get("out_of_memory", 0) == 0:
        alt = _nearby_batch(table, req)
        if alt is not None:
            req, result = alt
            global_batch = req.global_batch
            change = (global_batch - requested) / requested
            result.notes.insert(0, (
                f"no plan divides global batch {requested}; changed it to {global_batch} "
                f"({change:+.1%}) so that one does. The learning rate may need rescaling "
                "(e.g. linearly with the batch, Goyal et al. 2017)"
            ))
    if result.rejected.get("out_of_memory", 0):
        hint = _memory_what_if(table, req, result, spec)
        if hint:
            result.notes.append(hint)
    request = {
        "gpus": spec.gpus, "tp": spec.tp, "gpus_per_node": spec.gpus_per_node,
        "global_batch": global_batch, "global_batch_requested": requested,
        "micro_batch_sizes": list(sizes),
        "schedules": [s.value for s in schedules], "model": costs.profile.model.name,
        "device": costs.profile.device.name, "sharded_optimizer": spec.sharded_optimizer,
        "grad_compression": spec.grad_compression or "none", "seq_len": table.seq_len,
        "sequence_parallel": spec.sequence_parallel,
        "recompute": ",".join(r.value for r in recomputes),
        "sharding": ",".join(s.value for s in shardings),
        "recompute_every": spec.recompute_every,
        "attention": (spec.attention or "flash") if not costs.measured else None,
        "tp_comm_overlap": spec.tp_comm_overlap,
        "overlap_grad_reduce": spec.overlap_grad_reduce,
    }
    hf = spec.hf_config.resolve() if spec.hf_config is not None else costs.profile.model.hf_config
    if hf is not None:  # validate --plan rebuilds the model from it
        request["hf_config"] = str(hf)
    return RecommendRun(result, table, req, list(table.names), global_batch, costs.origin,
                        request, notes, costs.shape,
                        _times(costs.model_flops_per_token, global_batch * table.seq_len),
                        costs.profile.device.peak_flops)


def _times(a: float | None, b: float) -> float | None:
    return None if a is None else a * b


def choices(text: str | None, kind: type[E], flag: str) -> list[E]:
    """A comma list of enum values (all of them when None); bad names in one line."""
    if text is None:
        return list(kind)
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [n for n in names if n not in {k.value for k in kind}]
    if bad or not names:
        raise BadInput(f"{flag} takes a comma list of {', '.join(k.value for k in kind)} "
                       f"(got {text!r})")
    return list(dict.fromkeys(kind(n) for n in names))


def _memory_what_if(
    table: CostTable, req: PlanRequest, result: SearchResult, spec: RecommendSpec
) -> str | None:
    """When memory rejected candidates: would a sharding or a recomputation the
    search was told to skip give a faster plan (or any plan)? One line, with the figures."""
    from dataclasses import replace

    best = result.plans[0].step_time_s if result.plans else None
    options = []
    if set(req.shardings) != set(Sharding):
        options.append(("every --sharding", replace(req, shardings=tuple(Sharding), top=1)))
    if Recompute.FULL not in req.recomputes and not result.plans:
        options.append(("--recompute full", replace(req, recomputes=(Recompute.FULL,), top=1)))
    for flag, alt_req in options:
        alt = search(table, alt_req)
        if not alt.plans:
            continue
        a = alt.plans[0]
        desc = (f"pp={a.pp} dp={a.dp} tp={a.tp} {a.schedule.value}, {a.num_microbatches} x "
                f"{a.micro_batch_size}, sharding {a.sharding.value}, recompute "
                f"{a.recompute.value}, step {a.step_time_s:.3g} s")
        if best is None:
            return f"with {flag} a plan fits: {desc}"
        if a.step_time_s < best * 0.97:
            return f"with {flag} the best plan would be {desc} ({best / a.step_time_s:.2f}x faster)"
    return None


def _nearby_batch(table: CostTable, req: PlanRequest) -> tuple[PlanRequest, SearchResult] | None:
    """The closest global batch (within 25%) for which the search finds a plan."""
    from dataclasses import replace

    gb = req.global_batch
    sizes = req.micro_batch_sizes or sorted(table.by_mb)
    depths = [p for p in range(1, req.gpus // req.tp + 1) if (req.gpus // req.tp) % p == 0]

    def could(g: int) -> bool:
        for p in depths:
            dp = req.gpus // (p * req.tp)
            for b in sizes:
                if g % (b * dp) == 0 and g // (b * dp) >= p:
                    return True
        return False

    tried = 0
    for delta in range(1, max(2, gb // 4) + 1):
        for g in (gb + delta, gb - delta):
            if g < 1 or not could(g):
                continue
            alt = replace(req, global_batch=g)
            res = search(table, alt)
            tried += 1
            if res.plans:
                return alt, res
            if tried >= 8:
                return None
    return None


def no_plan_message(run: RecommendRun) -> str:
    """What to change when nothing fits, with the counts that say why."""
    rej = run.result.rejected
    counts = ", ".join(f"{k} {n}" for k, n in sorted(rej.items(), key=lambda kv: -kv[1]))
    hints = []
    if rej.get("out_of_memory"):
        hints.append("more GPUs, --tp 2/4/8, --sharding zero1,fsdp, --recompute full or smaller "
                     "--micro-batch-sizes")
    if rej.get("batch_not_divisible"):
        hints.append(
            f"a --global-batch divisible by micro-batch size x dp (now {run.global_batch})"
        )
    if rej.get("too_large_to_simulate"):
        hints.append("a smaller --global-batch or larger --micro-batch-sizes (over "
                     "2,000,000 ops per step are not simulated)")
    if rej.get("microbatches_less_than_pp") or rej.get("microbatches_not_multiple_of_pp"):
        hints.append("a larger --global-batch so that micro-batches >= pipeline depth")
    return (
        f"no feasible plan for {run.plan_request.gpus} GPUs ({counts or 'no candidates'}); "
        f"try {'; or '.join(hints) or 'different flags'}"
    )
