"""Run a plan for real with torch.distributed.pipelining and stamp every compute op.

One process per pipeline rank: NCCL with one process per GPU when CUDA is
there, gloo with CPU processes otherwise (``torch.set_num_threads(1)`` each,
so two ranks do not fight over two cores; docs/measured.md). Standalone,
``run_spawned`` spawns the ranks (``MASTER_ADDR=127.0.0.1``, a free port);
under ``torchrun`` (RANK / WORLD_SIZE set) ``run_joined`` joins the job.

Each rank builds its stages from the model's layers (the probe's layer list:
embedding, blocks, head) with the plan's split, as ``nn.Sequential`` modules
wrapped in ``PipelineStage(module, stage_index, n_stages, device)``, and runs
the torch schedule class our schedule name maps to (``spec.TORCH_SCHEDULES``;
zbv's and dualpipev's stages sit in the V placement, torch's
``generate_stage_to_rank_mapping(..., style="v")``, which the schedule sets).
ScheduleDualPipeV without a registered overlap function runs each
``OVERLAP_F_B`` action as its forward, then its whole backward; those are
stamped ``F`` and ``BW``.

Timing: each stage's ``forward_one_chunk``, ``backward_one_chunk`` and
``backward_weight_one_chunk``, and the schedule's loss, are wrapped with
``time.perf_counter_ns()`` stamps (through ``torch_hooks``, the one adapter
to torch's private pipelining API) (on CUDA, with CUDA events placed on the
host clock through an anchor event at the step start). Time spent waiting
to receive sits outside those calls and counts as idle. A barrier precedes
each step; the garbage collector runs before the barrier and is paused during
the step (a collection inside a step is noise, not pipeline behaviour).
After the timed steps the rank holding the last stage times the loss alone
(forward and backward on a tensor shaped like its output): the profile's
head excludes it, and ``compare`` adds it to the prediction.

torch is imported inside functions only: ``import pptune.validate`` works
without it.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pptune.costmodel.schedules import Schedule
from pptune.errors import BadInput
from pptune.launch import deps, ranks
from pptune.launch.stats import median
from pptune.validate import runtime, timing, torch_hooks
from pptune.validate.measure import RankStep
from pptune.validate.saved import SavedTensorPeak, parameter_ptrs
from pptune.validate.spec import TORCH_SCHEDULES, RunSpec
from pptune.validate.workload import build_plan, loss_fn, make_batch


def import_torch() -> Any:
    """torch with its pipelining package, or MissingDependency with the install hint."""
    return deps.import_torch("validate", "torch.distributed.pipelining")


@dataclass
class RankResult:
    """What one rank sends back."""

    rank: int
    host: str
    steps: list[RankStep]
    loss_fwd_s: float | None = None
    loss_bwd_s: float | None = None
    threads: int | None = None
    ref_alone_s: float | None = None  # reference work timed alone (see ``contention``)
    ref_together_s: float | None = None  # ... and with every rank at once
    ref_ratios: list[float] = field(default_factory=list)  # together / alone, per round
    peak_saved_bytes: int | None = None  # most bytes saved for backward alive at once (saved.py)
    tiny_step_s: float | None = None  # the schedule over tiny stages (runtime.py)
    accum_s: dict[int, tuple[float, float]] = field(default_factory=dict)  # timing.py


@dataclass
class RunData:
    """Every rank's timed steps, as ``measure.summarize`` takes them."""

    spec: RunSpec
    ranks: list[RankResult]
    torch_version: str
    backend: str
    hosts: list[str] = field(default_factory=list)

    @property
    def shared_clock(self) -> bool:
        return len(set(self.hosts)) <= 1

    def steps(self) -> list[list[RankStep]]:
        n = min(len(r.steps) for r in self.ranks)
        return [[r.steps[i] for r in self.ranks] for i in range(n)]

    @property
    def contention(self) -> float | None:
        """Median of together / alone over every rank's rounds (``contention``); None if unknown."""
        ratios = [x for r in self.ranks for x in r.ref_ratios]
        if not ratios:
            ratios = [
                r.ref_together_s / r.ref_alone_s
                for r in self.ranks
                if r.ref_alone_s and r.ref_together_s
            ]
        return median(ratios) if ratios else None

    def accumulation(self) -> dict[int, tuple[float, float]]:  # timing.time_accumulation
        return {k: v for r in self.ranks for k, v in r.accum_s.items()}

    def peak_saved_bytes(self) -> list[float | None]:
        """Per rank (= pipeline rank): the most bytes saved for backward alive at once."""
        return [None if r.peak_saved_bytes is None else float(r.peak_saved_bytes)
                for r in sorted(self.ranks, key=lambda r: r.rank)]

    @property
    def tiny_step_s(self) -> float | None:
        """The slowest rank's tiny-stage step (runtime.tiny_step_s); None if not measured."""
        seen = [r.tiny_step_s for r in self.ranks if r.tiny_step_s is not None]
        return max(seen) if seen else None

    @property
    def loss_s(self) -> tuple[float, float] | None:
        for r in self.ranks:
            if r.loss_fwd_s is not None and r.loss_bwd_s is not None:
                return r.loss_fwd_s, r.loss_bwd_s
        return None


# --------------------------------------------------------------------------- one rank


def rank_main(
    rank: int,
    world: int,
    local_rank: int,
    spec: RunSpec,
    report: Callable[[int], None] = lambda step: None,
) -> list[RankResult] | None:
    """One rank's part, the process group initialised; rank 0 returns every rank's result."""
    torch = import_torch()
    import torch.distributed as dist
    from torch.distributed import pipelining as pl

    cuda = spec.device == "cuda"
    device = f"cuda:{local_rank}" if cuda else "cpu"
    plan = build_plan(spec.source, device, torch)
    bounds = spec.stage_bounds()
    my_stages = spec.stages_of(rank)
    # DualPipeV runs whole backwards beside split ones: they are stamped BW, as simulated
    stamper = timing.Stamper(torch, cuda, "BW" if spec.schedule is Schedule.DUALPIPEV else "B")
    stages = []
    modules = []
    ref_inputs: dict[int, Any] = {}  # module index -> a micro-batch input it saw
    for k in my_stages:
        s, e = bounds[k]
        module = torch.nn.Sequential(*[plan.build_layer(i) for i in range(s, e)]).to(device)
        module.train()
        modules.append(module)
        stage = pl.PipelineStage(module, k, spec.n_stages, torch.device(device))
        torch_hooks.hook_stage(stage, k, stamper.wrap)
        stages.append(stage)
        module.register_forward_pre_hook(timing.keep_first_input(ref_inputs, len(modules) - 1))
    cls = getattr(pl.schedules, TORCH_SCHEDULES[spec.schedule])
    single = spec.schedule in (Schedule.GPIPE, Schedule.ONE_F_ONE_B)
    schedule = cls(stages[0] if single else stages, spec.microbatches, loss_fn=loss_fn)

    last_out: dict[str, Any] = {}

    def timed_loss(
        call: Callable[[], Any], stage: Any, output: Any, target_mbs: Any, mb_index: int
    ) -> Any:
        if not (stage.is_last and target_mbs is not None):
            return call()
        start = stamper.now()
        try:
            return call()
        finally:
            stamper.open.append(("L", mb_index, stage.stage_index, start, stamper.now()))
            last_out["shape"] = tuple(output.shape)
            last_out["dtype"] = output.dtype
            last_out["target"] = target_mbs[mb_index]

    torch_hooks.hook_loss(schedule, timed_loss)

    x, target = make_batch(plan, spec, torch, device)
    has_first = 0 in my_stages
    has_last = spec.n_stages - 1 in my_stages
    args = (x,) if has_first else ()
    kwargs: dict[str, Any] = {"target": target} if has_last else {}

    steps: list[RankStep] = []
    saved = SavedTensorPeak(torch, parameter_ptrs(modules))
    peak_saved = 0
    # The saved-tensor accounting runs Python for every tensor autograd saves (a few per
    # cent of a CPU op): it watches the last warm-up step, never a timed one (with no
    # warm-up, the first timed step), so the timed ops run as the profile's did.
    watched = max(0, spec.warmup - 1)
    before: tuple[list[float], list[float], list[float]] = ([], [], [])
    for i in range(spec.warmup + spec.steps):
        if i == spec.warmup and i > 0:  # the warm-up captured each stage's inputs
            before = timing.contention(torch, dist, modules, ref_inputs, rank, world, cuda,
                                       device)
        for module in modules:
            module.zero_grad(set_to_none=True)
        gc.collect()
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)
        gc.disable()
        try:
            t0 = time.perf_counter_ns()
            stamper.begin(t0)
            if i == watched:
                saved.reset()
                with saved:
                    schedule.step(*args, **kwargs)
            else:
                schedule.step(*args, **kwargs)
            if cuda:
                torch.cuda.synchronize(device)
            t1 = time.perf_counter_ns()
        finally:
            gc.enable()
        if i == watched:
            peak_saved = saved.peak_bytes
        if i >= spec.warmup:
            steps.append(RankStep(rank, t0, t1, stamper.resolve()))
        report(i)

    after = timing.contention(torch, dist, modules, ref_inputs, rank, world, cuda, device)
    tiny = runtime.tiny_step_s(torch, dist, pl, cls, spec, my_stages, device, cuda)
    accum = timing.time_accumulation(torch, modules, ref_inputs, cuda, device, spec.split)
    alones, togethers, ratios = (before[k] + after[k] for k in range(3))
    loss_f = loss_b = None
    if has_last and "shape" in last_out:
        loss_f, loss_b = timing.time_loss(torch, loss_fn, last_out, device, cuda)
    mine = RankResult(
        rank=rank,
        host=ranks.node_key(),
        steps=steps,
        loss_fwd_s=loss_f,
        loss_bwd_s=loss_b,
        threads=torch.get_num_threads() if not cuda else None,
        ref_alone_s=median(alones) if alones else None,
        ref_together_s=median(togethers) if togethers else None,
        ref_ratios=ratios,
        peak_saved_bytes=peak_saved,
        tiny_step_s=tiny,
        accum_s={my_stages[i]: extra for i, extra in accum.items()},
    )
    gathered: list[Any] = [None] * world if rank == 0 else []
    dist.gather_object(mine, gathered if rank == 0 else None, dst=0)
    return gathered if rank == 0 else None


# --------------------------------------------------------------------------- spawned


def spawn_entry(rank: int, world: int, port: int, q: Any, spec: RunSpec) -> None:
    """Spawned rank: the launch layer's child skeleton around ``rank_main``."""

    def work(torch: Any, progress: Callable[[Any], None]) -> Any:
        return rank_main(rank, world, rank, spec, progress), torch.__version__

    ranks.child_main(rank, world, port, q, spec, "validate", work)


def run_spawned(spec: RunSpec, on_progress: Callable[[int, int], None] = lambda r, i: None,
                limit_s: float | None = None) -> RunData:
    """Spawn ``spec.pp`` local ranks, run, collect. RunFailed names a rank that fails or hangs;
    TimeLimit when the run is not done within ``limit_s`` seconds (its ranks ended)."""
    texts = ranks.SpawnTexts(
        died=lambda r, world, code: (
            f"validate: rank {r} of {world} exited with code {code} without a result "
            "(killed for memory?); rerun, or lower --micro-batch-size / --microbatches"
        ),
        silent=_silence,
        failed=lambda rank, world, text: f"validate: rank {rank} of {world} failed: {text}",
    )
    results, version = ranks.spawn_ranks(
        spawn_entry, (spec,), spec.pp, spec.timeout_s, texts, on_progress, limit_s
    )
    return RunData(spec, list(results), version, spec.backend, [r.host for r in results])


def _silence(world: int, started: set[int], finished: set[int], timeout_s: float) -> str:
    waiting = sorted(set(range(world)) - started)
    if waiting:
        return (
            f"validate: rank(s) {', '.join(map(str, waiting))} of {world} did not start within "
            f"{timeout_s:g} s (--timeout {timeout_s:g}): importing torch and joining the process "
            "group took longer; raise --timeout"
        )
    silent = sorted(set(range(world)) - finished)
    return (
        f"validate: rank(s) {', '.join(map(str, silent))} of {world} gave no word for "
        f"{timeout_s:g} s (--timeout {timeout_s:g}); a rank hangs or one step is slower than "
        "that: raise --timeout, or lower --microbatches or --micro-batch-size"
    )


# --------------------------------------------------------------------------- torchrun

_JOIN_TEXTS = ranks.JoinTexts(
    no_group=lambda rank, world, text: (
        f"validate: torchrun rank {rank} of {world} cannot join the process group: {text}"
    ),
    failed=lambda rank, world, text: f"validate failed on torchrun rank {rank} of {world}: {text}",
)


def run_joined(
    spec: RunSpec, env: dict[str, int], on_progress: Callable[[int, int], None] = lambda r, i: None
) -> RunData | None:
    """Join the torchrun job as one pipeline rank; rank 0 gets the data, others None.

    A watchdog ends the process with one error line (exit 1) when this rank
    gives no progress for ``spec.timeout_s``.
    """
    torch = import_torch()
    rank, world, local = env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
    if world != spec.pp:
        raise BadInput(
            f"torchrun started {world} processes but the plan has pp={spec.pp}: validate runs "
            f"one pipeline, one process per stage device; use --nproc-per-node {spec.pp} "
            "(and --nnodes 1) or change --pp"
        )
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    hang = (
        f"validate: torchrun rank {rank} of {world} made no progress for {spec.timeout_s:g} s "
        "(--timeout); a rank hangs"
    )

    with ranks.Watchdog(spec.timeout_s, hang) as watchdog:

        def progress(i: int) -> None:
            watchdog.touch()
            on_progress(rank, i)

        with ranks.joined_group(torch, spec, env, _JOIN_TEXTS):
            results = rank_main(rank, world, local, spec, progress)
    if results is None:
        return None
    return RunData(spec, results, torch.__version__, spec.backend, [r.host for r in results])
