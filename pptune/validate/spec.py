"""What to run: one pipeline plan, checked before any process starts (pure Python).

A ``RunSpec`` is picklable (it crosses into spawned processes) and carries
only plain values: the schedule, pipeline depth, micro-batches, chunks per
device, micro-batch size, layers per stage, where the model comes from, and
the run's settings. ``check`` reports every problem at once, in pptune's
words and with the values, before torch would refuse them mid-launch
(torch 2.13's own texts: docs/measured.md), e.g. Schedule1F1B:
"Number of microbatches (2) must be greater than or equal to the number of
stages (4)."
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pptune.costmodel.schedules import (
    SPLIT_BACKWARD,
    Schedule,
    ScheduleError,
    chunks_per_device,
    device_stages,
    validate,
)
from pptune.errors import BadInput
from pptune.options import RunOptions

# the run settings' defaults, as --warmup, --steps and --timeout declare them
DEFAULT_WARMUP = RunOptions().warmup
DEFAULT_STEPS = RunOptions().steps
DEFAULT_TIMEOUT_S = RunOptions().timeout
# torch.distributed.pipelining class for each of our schedule names. zb-h1 is
# torch's ZB1P order (ScheduleInterleavedZeroBubble) run with one stage per
# rank, which torch 2.13 accepts; docs/measured.md checked its order against the
# ZB-H1 bound (p-1)/(3m+p-1) for m >= p.
TORCH_SCHEDULES = {
    Schedule.GPIPE: "ScheduleGPipe",
    Schedule.ONE_F_ONE_B: "Schedule1F1B",
    Schedule.INTERLEAVED: "ScheduleInterleaved1F1B",
    Schedule.ZB_H1: "ScheduleInterleavedZeroBubble",
    Schedule.ZBV: "ScheduleZBVZeroBubble",
    Schedule.DUALPIPEV: "ScheduleDualPipeV",
}
# Schedules torch runs in the V placement (two stages per rank, stage r and
# 2p-1-r; torch's generate_stage_to_rank_mapping(..., style="v"))
V_PLACED = frozenset({Schedule.ZBV, Schedule.DUALPIPEV})


@dataclass(frozen=True)
class ModelSource:
    """Where the layers come from; exactly one of model / hf_config / module."""

    model: str | None = None
    hf_config: str | None = None
    module: str | None = None
    seq_len: int | None = None
    dtype: str = "auto"  # auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16

    @property
    def label(self) -> str:
        if self.hf_config is not None:
            return f"--hf-config {self.hf_config}"
        if self.module is not None:
            return f"--module {self.module}"
        return self.model or "gpt-small"


@dataclass(frozen=True)
class RunSpec:
    schedule: Schedule
    pp: int
    microbatches: int
    virtual_stages: int  # as the planner counts it; chunks_per_device() gives the real count
    micro_batch_size: int
    stage_layers: tuple[int, ...]
    source: ModelSource = field(default_factory=ModelSource)
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    timeout_s: float = DEFAULT_TIMEOUT_S
    device: str = "cpu"  # "cpu" or "cuda"
    threads: int = 1  # torch threads per CPU rank (docs/measured.md: 1 each on 2 cores)

    @property
    def chunks(self) -> int:
        return chunks_per_device(self.schedule, self.virtual_stages)

    @property
    def n_stages(self) -> int:
        return self.pp * self.chunks

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    @property
    def split(self) -> bool:
        """Whether torch runs this schedule's backward split into B and W ops."""
        return self.schedule in SPLIT_BACKWARD

    @property
    def sim_v(self) -> int:
        """The ``v`` the simulator takes: chunks for interleaved, 2 for zbv and dualpipev,
        else 1."""
        return self.chunks if self.schedule is Schedule.INTERLEAVED or (
            self.schedule in V_PLACED) else 1

    def stages_of(self, rank: int) -> list[int]:
        """Global stage indices rank ``rank`` holds (loop placement, or V for zbv and
        dualpipev)."""
        return device_stages(self.schedule, self.pp, self.sim_v)[rank]

    def stage_bounds(self) -> list[tuple[int, int]]:
        out, start = [], 0
        for n in self.stage_layers:
            out.append((start, start + n))
            start += n
        return out


# validate's flag -> the plan file's key that sets the same value with --plan
PLAN_KEYS = {"--pp": "pp", "--microbatches": "num_microbatches", "--schedule": "schedule",
             "--split": "stage_layers", "--micro-batch-size": "micro_batch_size",
             "--virtual-stages": "virtual_stages"}


def check(spec: RunSpec, n_layers: int, plan: str | None = None) -> None:
    """Raise BadInput listing every reason this plan cannot run (values and knobs).
    ``plan``: the spec came from this plan file's plan ("plans.json plan 2"), so its
    problems name the file's keys, not flags that were never given."""

    def knob(flag: str) -> str:
        return f"{plan}'s {PLAN_KEYS[flag]}" if plan is not None and flag in PLAN_KEYS \
            else flag

    problems: list[str] = []
    p, m, s = spec.pp, spec.microbatches, spec.schedule
    if p < 1:
        problems.append(f"{knob('--pp')} must be >= 1 (got {p})")
    if m < 1:
        problems.append(f"{knob('--microbatches')} must be >= 1 (got {m})")
    if spec.micro_batch_size < 1:
        problems.append(f"{knob('--micro-batch-size')} must be >= 1 "
                        f"(got {spec.micro_batch_size})")
    if spec.warmup < 0:
        problems.append(f"--warmup must be 0 or more (got {spec.warmup})")
    if spec.steps < 1:
        problems.append(f"--steps must be at least 1 (got {spec.steps})")
    if not spec.timeout_s > 0:
        problems.append(f"--timeout must be positive seconds (got {spec.timeout_s:g})")
    if problems:
        raise BadInput("; ".join(problems))
    if s not in TORCH_SCHEDULES:
        # a plan file's plan cannot take --schedule (validate refuses both): its flags instead
        instead = (f"validate --schedule dualpipev --pp {p} --microbatches {m}, without "
                   "--plan" if plan is not None else "validate --schedule dualpipev")
        raise BadInput(
            f"{knob('--schedule')} {s.value}: no torch runtime has it (torch.distributed.pipelining "
            f"has DualPipeV, not the bidirectional DualPipe, which is DeepSeek's own "
            f"implementation), so validate cannot run it; {instead}, "
            f"or pptune simulate --schedule {s.value}"
        )
    try:
        validate(s, p, m, spec.virtual_stages)
    except ScheduleError as exc:
        problems.append(str(exc))
    if s is Schedule.ONE_F_ONE_B and m < p:
        problems.append(
            f"1f1b needs at least as many micro-batches as pipeline stages ({m} < pp={p}): "
            f"torch's Schedule1F1B refuses fewer; raise --microbatches to {p} or more, "
            "or use gpipe"
        )
    if s in (Schedule.INTERLEAVED, Schedule.ZBV) and p < 2:
        problems.append(f"{s.value} needs pp >= 2 (got pp={p}); use 1f1b or gpipe on one device")
    if s is Schedule.INTERLEAVED and m >= p and m % p:
        # torch runs its own order for these; pptune prices Megatron-LM's micro-batch
        # groups (schedule_orders.microbatch_group), so no prediction would be its run's
        problems.append(
            f"{s.value} with micro-batches ({m}) not a multiple of pp ({p}) runs in torch's "
            "own order, which pptune does not simulate (it prices Megatron-LM's micro-batch "
            f"groups); use {m - m % p} or {m + p - m % p}")
    elif s in (Schedule.INTERLEAVED, Schedule.ZB_H1) and m >= 1:
        # torch 2.13 (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble):
        # rounds = max(1, m // pp) and m must be a multiple of the rounds
        rounds = max(1, m // p)
        if m % rounds:
            problems.append(
                f"{s.value} in torch needs the micro-batches ({m}) to be a multiple of "
                f"max(1, m // pp) = {rounds} rounds; use a multiple of pp={p}, e.g. "
                f"{m - m % p if m - m % p >= p else p} or {m + p - m % p}"
            )
    n_stages = spec.n_stages
    split = list(spec.stage_layers)
    if len(split) != n_stages or sum(split) != n_layers or any(n < 1 for n in split):
        problems.append(
            f"{knob('--split')} {','.join(map(str, split))} must have {n_stages} entries "
            f"(pp={p} x {spec.chunks} chunk(s) per device), each >= 1, summing to the model's "
            f"{n_layers} layers (embedding + blocks + head); it has {len(split)} summing to "
            f"{sum(split)}"
        )
    if n_stages > n_layers:
        problems.append(
            f"{n_stages} stages need at least {n_stages} layers; the model has {n_layers}: "
            f"lower {knob('--pp')} or {knob('--virtual-stages')}"
        )
    if problems:
        raise BadInput("; ".join(problems))
