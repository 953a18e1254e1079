"""What ``pptune recommend`` is asked (``RecommendSpec``), what it returns
(``RecommendRun``), and the checks of the ask made before any search (``check_spec``).

Apart from the search (``pptune.plan.recommend``, which re-exports them) to keep each
module small.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pptune import limits
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.records import DEFAULT_TOP
from pptune.costmodel.search import CostTable, PlanRequest, SearchResult, Sharding
from pptune.costmodel.sharding import StateDtype
from pptune.costs.dims import KvHeads
from pptune.costs.resolve import Costs
from pptune.errors import BadInput
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.registry import find
from pptune.options import CostOptions, PlanSpace, build, fields_of
from pptune.options.record import PlanFileRequest
from pptune.plan.forced import Forced
from pptune.plan.jobs import Jobs


@dataclass(frozen=True)
class RecommendSpec:
    """What recommend was asked: the job and search space, the cost source, the plans kept."""

    space: PlanSpace
    costs: CostOptions = field(default_factory=CostOptions)
    top: int = DEFAULT_TOP
    # the framework whose files the plan is written as (recommend --emit): plan/written.py
    written_as: str | None = None
    # rank only the plans this framework's files state (recommend --framework):
    # plan/framework_search.py; its kernels too, as ``written_as``'s
    framework: str | None = None
    # --grad-compression not given: a calibrated profile's jobs' widths (plan/gradients.py)
    jobs_gradients: bool = False
    versions: Versions = field(default_factory=Versions)  # --framework-version's releases

    @property
    def files_of(self) -> str | None:
        """The framework whose files the plans are priced for: ``written_as``, else
        ``framework``."""
        return self.written_as or self.framework

    @property
    def kv_heads(self) -> KvHeads:
        """The key/value heads' tp rule of ``files_of``'s framework, else megatron-core's."""
        adapter = find(self.files_of) if self.files_of is not None else None
        return adapter.kv_heads if adapter is not None else KvHeads.REPLICATE

    @classmethod
    def of(cls, *, top: int = DEFAULT_TOP, **flags: Any) -> RecommendSpec:
        """From the flags by field name, values as text or typed, e.g.
        ``RecommendSpec.of(gpus=8, sharding="none", tp=2)`` (BadInput as on the command line)."""
        cost_names = {f.name for f in fields_of(CostOptions)}
        return cls(build(PlanSpace, {k: v for k, v in flags.items() if k not in cost_names}),
                   build(CostOptions, {k: v for k, v in flags.items() if k in cost_names}), top)


@dataclass
class RecommendRun:
    result: SearchResult
    table: CostTable
    plan_request: PlanRequest
    names: list[str]
    global_batch: int
    origin: str
    request: PlanFileRequest  # the plan file's request: the options as resolved
    notes: list[str]
    shape: ModelShape | None = None  # a model given by --hf-config or with --seq-len
    model_flops_per_step: float | None = None  # for MFU (pptune.costs.resolve)
    peak_flops: float | dict[Precision, float] | None = None  # per GPU, by GEMM precision
    costs: Costs | None = None  # the resolved costs: a table per searched key
    # --framework: the requests the plans were searched with, each for some of the keys
    # (Adapter.stateable_groups); empty: ``plan_request`` for every key
    groups: tuple[PlanRequest, ...] = ()
    jobs: Jobs | None = None  # the plans' jobs as the adapters see them (emit.job_of)
    forced: Forced | None = None  # the sizes --tp/--cp/--ep forced, the best without them

    def table_for(self, key: CostKey) -> CostTable:
        """The cost table a plan of ``key`` was priced with."""
        return self.costs.table_for(key) if self.costs is not None else self.table

    def request_for(self, key: CostKey) -> PlanRequest:
        """The request a plan of ``key`` was searched and priced with."""
        return request_for(self.groups, self.plan_request, key)


def check_spec(spec: RecommendSpec) -> None:
    """Every bad flag at once, in one line (the cost flags: ``resolve``)."""
    s, tps = spec.space, spec.costs.tp or ()
    problems = limits.problems(
        limits.problem("--gpus", s.gpus, 1, limits.MAX_GPUS),
        *(limits.problem("--tp", tp, 1, limits.MAX_TP) for tp in tps),
        None if s.gpus_per_node is None else limits.problem(
            "--gpus-per-node", s.gpus_per_node, 1, limits.MAX_GPUS),
        None if s.global_batch is None else limits.problem(
            "--global-batch", s.global_batch, 1, limits.MAX_GLOBAL_BATCH),
        limits.problem("--top", spec.top, 1, limits.MAX_TOP),
        None if s.reserve_gib is None else limits.problem(
            "--reserve-gib", s.reserve_gib, 0, limits.MAX_RESERVE_GIB),
        None if s.max_memory is None else limits.problem(
            "--max-memory", s.max_memory, 0, 1, lo_open=True, capped=False),
        limits.problem("--pipeline-margin", s.pipeline_margin, 0, 1, capped=False),
    )
    for tp in tps if not problems else ():
        if s.gpus % tp:
            problems.append(f"--tp {tp} must divide --gpus {s.gpus}")
    if s.recompute_every < 1:
        problems.append(f"--recompute-every must be >= 1 (got {s.recompute_every})")
    if any(v < 2 for v in s.virtual_stages):
        problems.append("--virtual-stages candidates must be >= 2 (interleaved-1f1b)")
    elif any(v > limits.MAX_LAYERS for v in s.virtual_stages):
        problems.append(f"--virtual-stages candidates must be <= {limits.MAX_LAYERS}")
    if not problems and s.pp and len(tps) <= 1:
        tp = tps[0] if tps else 1
        ranks = s.gpus // tp
        bad = [p for p in s.pp if ranks % p]
        if bad:
            problems.append(
                f"--pp {','.join(map(str, bad))} does not divide the {ranks} pipeline x "
                f"data-parallel ranks (--gpus {s.gpus} / --tp {tp}); choose from "
                f"{', '.join(str(p) for p in range(1, ranks + 1) if ranks % p == 0)}")
    if problems:
        raise BadInput("; ".join(problems))


def with_moments(shardings: tuple[Sharding, ...], s: PlanSpace) -> tuple[Sharding, ...]:
    """The shardings searched for Adam moments narrower than FP32: Megatron-LM's
    precision-aware optimizer, which megatron-core runs only with the distributed
    optimizer (OptimizerConfig.__post_init__), so never ``none``."""
    if (s.exp_avg_dtype, s.exp_avg_sq_dtype) == (StateDtype.FP32, StateDtype.FP32):
        return shardings
    left = tuple(sh for sh in shardings if sh is not Sharding.NONE)
    if not left:
        raise BadInput("--exp-avg-dtype/--exp-avg-sq-dtype other than fp32 is Megatron-LM's "
                       "precision-aware optimizer, which needs the distributed optimizer: "
                       "drop --sharding none (or search zero1)")
    return left


def request_for(groups: Sequence[PlanRequest], req: PlanRequest, key: CostKey) -> PlanRequest:
    """Of the requests ``groups`` (a framework's, each for some keys), the one for ``key``;
    ``req`` without one."""
    return next((g for g in groups if key in g.keys()), req)
