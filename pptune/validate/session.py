"""`pptune validate` from request to comparison: resolve, predict, run, measure, compare.

Order: the plan (``--plan`` file or flags) and the model's layer list (so a
bad split fails before anything starts); the cost source, by the one
resolver's RUN column (``pptune.costs.resolve``: ``--profile``, else
./pptune-profile.json, else a quick in-process probe); the run (spawned
ranks, or this process's part of a torchrun job); the measurement; the
prediction (with the loss cost the last rank timed); the comparison. Talk
goes through ``say`` (stderr in the CLI); nothing here prints.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.costmodel.partition import SplitError, even_split
from pptune.costmodel.presets import MODELS
from pptune.costmodel.schedules import Schedule
from pptune.costs.profiles import DEFAULT_PROFILE_FILE
from pptune.costs.resolve import QuickProbe, resolve
from pptune.errors import BadInput
from pptune.launch import ranks
from pptune.options import CostOptions, RunOptions
from pptune.options.groups import SCHEDULE
from pptune.schemas import PlanFile, Profile, load_json_model
from pptune.validate import compare
from pptune.validate import spec as spec_mod
from pptune.validate.measure import Measured, summarize
from pptune.validate.spec import ModelSource, RunSpec

Say = Callable[[str], None]
# a ranks' forwards alone taking over 1.3x (or under 1/1.3) the profile's time
# is more than the 5-15% noise of CPU timings (docs/measured.md): say the profile is stale
STALE_PROFILE = 1.3


@dataclass
class ValidateRequest:
    """What the user asked for; ``None`` means "not given"."""

    plan: Path | None = None
    rank: int = 1
    pp: int | None = None
    microbatches: int | None = None
    schedule: str | None = None
    split: list[int] | None = None
    micro_batch_size: int | None = None
    virtual_stages: int | None = None
    costs: CostOptions = field(default_factory=CostOptions)  # model, hf_config, seq_len, profile
    dtype: str = "auto"
    run: RunOptions = field(default_factory=RunOptions)  # module, warmup, steps, timeout, device


# flag defaults when neither --plan nor the flag gives a value
DEFAULT_PP = 2
DEFAULT_MICROBATCHES = 4
DEFAULT_SCHEDULE = Schedule.ONE_F_ONE_B
DEFAULT_MICRO_BATCH_SIZE = 1


@dataclass
class Outcome:
    spec: RunSpec
    prediction: compare.Prediction
    measured: Measured
    comparison: dict[str, Any]
    origin: str  # where the predicted costs came from
    torch_version: str
    notes: list[str] = field(default_factory=list)
    # the model built, as a profile's model section names it (pptune calibrate compares)
    model_info: dict[str, Any] = field(default_factory=dict)


def _plan_record(path: Path, rank: int) -> Any:
    doc: PlanFile = load_json_model(path, PlanFile, "plan")
    if not doc.plans:
        raise BadInput(f"plan file {path} lists no plans (recommend found none that fit)")
    for record in doc.plans:
        if record.rank == rank:
            return doc, record
    ranks = ", ".join(str(r.rank) for r in doc.plans)
    raise BadInput(f"plan file {path} has no plan of rank {rank}; it has ranks {ranks} (--rank)")


def _schedule(name: str) -> Schedule:
    schedule = SCHEDULE.parse(name, "--schedule")
    if schedule is None:  # pragma: no cover - name is a str
        raise BadInput("--schedule is empty")
    return schedule


def _source(req: ValidateRequest, plan_doc: Any) -> tuple[ModelSource, list[str]]:
    c, module = req.costs, req.run.module
    given = [
        flag for flag, value in (
            ("--model", c.model), ("--hf-config", c.hf_config), ("--module", module)
        ) if value is not None
    ]
    if len(given) > 1:
        raise BadInput(f"{' and '.join(given)} both name the model; give one of them")
    notes = []
    model, seq_len, hf_config = c.model, c.seq_len, c.hf_config
    if not given and plan_doc is not None:
        planned = plan_doc.request.costs
        named, planned_len = planned.model, planned.seq_len
        if named is not None and named in MODELS:
            model = named
            if seq_len is None and planned_len is not None and planned_len != MODELS[named].seq_len:
                seq_len = planned_len
            notes.append(f"model {named} from the plan file")
        elif planned.hf_config is not None:
            hf_config = planned.hf_config
            if seq_len is None and planned_len is not None:
                seq_len = planned_len
            notes.append(f"model from the plan file: Hugging Face config {hf_config}")
        elif named is not None:
            raise BadInput(
                f"the plan file's model {str(named)[:60]!r} is not a preset; name it with "
                "--hf-config PATH or --module pkg.mod:factory"
            )
    return (
        ModelSource(
            model=model,
            hf_config=str(hf_config) if hf_config is not None else None,
            module=module,
            seq_len=seq_len,
            dtype=req.dtype,
        ),
        notes,
    )


def build_spec(req: ValidateRequest, n_layers_of: Callable[[ModelSource], int],
               device: str, threads: int = 1) -> tuple[RunSpec, list[str]]:
    """The RunSpec from --plan or the flags; BadInput lists every problem."""
    if req.rank < 1:
        raise BadInput(f"--rank must be >= 1 (got {req.rank})")
    plan_doc = record = None
    notes: list[str] = []
    if req.plan is not None:
        flags = [
            flag for flag, value in (
                ("--pp", req.pp), ("--microbatches", req.microbatches),
                ("--schedule", req.schedule), ("--split", req.split),
                ("--micro-batch-size", req.micro_batch_size),
                ("--virtual-stages", req.virtual_stages),
            ) if value is not None
        ]
        if flags:
            raise BadInput(
                f"--plan and {', '.join(flags)} both describe the plan; give the plan file "
                "or the flags"
            )
        plan_doc, record = _plan_record(req.plan, req.rank)
        if record.dp > 1 or record.tp > 1:
            notes.append(
                f"plan {record.rank} has dp={record.dp}, tp={record.tp}: validate runs one "
                f"pipeline of {record.pp} device(s) (dp=1, tp=1) and predicts the same"
            )
    source, source_notes = _source(req, plan_doc)
    notes += source_notes
    n_layers = n_layers_of(source)
    if record is not None:
        schedule = record.schedule
        pp, m, v, b = record.pp, record.num_microbatches, record.virtual_stages, record.micro_batch_size
        split = list(record.stage_layers)
    else:
        schedule = _schedule(req.schedule) if req.schedule is not None else DEFAULT_SCHEDULE
        pp = req.pp if req.pp is not None else DEFAULT_PP
        m = req.microbatches if req.microbatches is not None else DEFAULT_MICROBATCHES
        v = req.virtual_stages if req.virtual_stages is not None else (
            2 if schedule is Schedule.INTERLEAVED else 1
        )
        b = req.micro_batch_size if req.micro_batch_size is not None else DEFAULT_MICRO_BATCH_SIZE
        split = list(req.split) if req.split is not None else []
    spec = RunSpec(
        schedule=schedule, pp=pp, microbatches=m, virtual_stages=v, micro_batch_size=b,
        stage_layers=tuple(split), source=source, warmup=req.run.warmup, steps=req.run.steps,
        timeout_s=req.run.timeout, device=device, threads=threads,
    )
    if not split and pp >= 1:
        try:
            spec = replace(spec, stage_layers=tuple(even_split(n_layers, spec.n_stages)))
        except SplitError as exc:
            raise BadInput(str(exc)) from None
    spec_mod.check(spec, n_layers, None if record is None else
                   f"{req.plan} plan {record.rank}")
    return spec, notes


def resolve_profile(
    req: ValidateRequest, spec: RunSpec, say: Say, cwd: Path | None = None
) -> tuple[Profile, str]:
    """--profile, else ./pptune-profile.json, else a quick in-process probe of the model
    (the resolver's RUN column; validate's model flags name what runs, not costs)."""

    def measure() -> Profile:
        from pptune.probe.build import DeviceChoice, DType, NullReporter, ProbeOptions, run_probe

        src = spec.source
        say(
            f"no --profile and no ./{DEFAULT_PROFILE_FILE}: measuring a quick profile of "
            f"{src.label} in this process first (as pptune probe --quick --no-comm "
            f"--micro-batch-sizes {spec.micro_batch_size}); save one with pptune probe to skip this"
        )
        opts = ProbeOptions(
            model=src.model if src.hf_config is None and src.module is None else None,
            hf_config=Path(src.hf_config) if src.hf_config is not None else None,
            module=src.module,
            micro_batch_sizes=[spec.micro_batch_size],
            comm=False,
            quick=True,
            device=DeviceChoice(spec.device),
            dtype=DType(src.dtype),
            threads=spec.threads,
            seq_len=src.seq_len,
            smaller="lower -b/--micro-batch-size or --seq-len" if req.plan is None else
            "validate a plan of a smaller micro-batch size or lower --seq-len",
        )
        outcome = run_probe(opts, NullReporter())
        if outcome.profile is None:  # pragma: no cover - only torchrun ranks > 0
            raise BadInput("the quick probe returned no profile")
        return outcome.profile

    costs = resolve(CostOptions(profile=req.costs.profile), cwd=cwd, probe=QuickProbe(
        measure, "quick in-process probe (--no-comm: default CPU/GPU links)"))
    return costs.profile, costs.origin


def pick_device(choice: str, torch: Any) -> str:
    has_cuda = bool(torch.cuda.is_available())
    if choice == "cuda" and not has_cuda:
        raise BadInput(
            f"--device cuda: torch {torch.__version__} sees no CUDA device; use --device cpu or auto"
        )
    if choice == "auto":
        return "cuda" if has_cuda else "cpu"
    if choice not in ("cpu", "cuda"):
        raise BadInput(f"--device must be auto, cpu or cuda (got {choice!r})")
    return choice


def run(
    req: ValidateRequest,
    say: Say = lambda line: None,
    on_progress: Callable[[int, int], None] = lambda rank, step: None,
) -> Outcome | None:
    """The whole command; None on torchrun ranks other than 0."""
    from pptune.validate import runner, torch_hooks, workload

    torch = runner.import_torch()
    mismatch = torch_hooks.check(torch)
    if mismatch is not None:
        say(mismatch)
    device = pick_device(req.run.device, torch)
    layer_counts: dict[ModelSource, int] = {}
    plans: dict[ModelSource, Any] = {}

    def n_layers_of(source: ModelSource) -> int:
        plan = workload.build_plan(source, "cpu", torch)
        plans[source] = plan
        layer_counts[source] = len(plan.layer_names)
        return layer_counts[source]

    spec, notes = build_spec(req, n_layers_of, device)
    plan = plans[spec.source]
    for warning in plan.warnings:
        say(warning)
    env = ranks.torchrun_env()
    rank = env["RANK"] if env else 0
    if env is None:
        if device == "cuda" and torch.cuda.device_count() < spec.pp:
            raise BadInput(
                f"pp={spec.pp} needs {spec.pp} GPUs, one process each; torch sees "
                f"{torch.cuda.device_count()}: lower --pp or launch with torchrun on more nodes"
            )
        cores = os.cpu_count() or 1
        if device == "cpu" and spec.pp * spec.threads > cores:
            say(
                f"{spec.pp} ranks x {spec.threads} thread(s) on {cores} cores: the ranks share "
                "cores, so the run measures the oversubscription as much as the pipeline"
            )
    profile = origin = None
    if rank == 0:
        profile, origin = resolve_profile(req, spec, say)
        notes += compare.check_profile(profile, spec, list(plan.layer_names))
    if env is None:
        if device == "cpu" and plan.shape is not None:  # every rank a process of this host
            _fit_host(spec, plan)
        data = runner.run_spawned(spec, on_progress)
    else:
        joined = runner.run_joined(spec, env, on_progress)
        if joined is None:
            return None
        data = joined
    if profile is None or origin is None:  # pragma: no cover - rank 0 resolved both above
        raise RuntimeError("rank 0 holds no profile")
    measured = summarize(data.steps(), spec.pp, data.shared_clock)
    if not data.shared_clock:
        notes.append(
            "ranks on several hosts: each rank's ops are placed from its own step start "
            "(aligned by the barrier); cross-host waits are approximate"
        )
    alone = {r.rank: r.ref_alone_s for r in data.ranks if r.ref_alone_s}
    speeds = compare.rank_speeds(profile, spec, alone)
    pred = compare.predict(profile, spec, data.loss_s, data.contention, speeds, data.tiny_step_s,
                           data.accumulation())
    notes += pred.notes
    result = compare.comparison(spec, pred, measured, data.peak_saved_bytes())
    speed = compare.profile_speed(profile, spec, alone)
    result["profile_speed"] = speed
    result["loss_s"] = list(data.loss_s) if data.loss_s is not None else None  # for pptune calibrate
    # per stage: [whole backward, split W] extra seconds into held gradients (timing.py)
    result["accumulation_s"] = {str(k): list(v) for k, v in sorted(data.accumulation().items())}
    if speed is not None and not 1 / STALE_PROFILE <= speed <= STALE_PROFILE:
        notes.append(
            f"the ranks' training work ran alone in {speed:.2f}x the profile's time: the "
            f"machine is {'slower' if speed > 1 else 'faster'} now than when {origin} was "
            "measured (other load then or now?); the prediction scales each rank's costs by "
            "its own figure, re-probe for a profile of the host as it is"
        )
    info = {k: getattr(plan, k, None) for k in ("name", "seq_len", "hidden_size", "num_blocks",
                                                 "experts", "top_k")}
    return Outcome(spec, pred, measured, result, origin, data.torch_version, notes, info)


def _fit_host(spec: RunSpec, plan: Any) -> None:
    """BadInput when the ranks' weights, gradients and buffers cannot fit this host's free
    memory (host_fit.py), before any rank starts."""
    from pptune.probe.host_memory import available_bytes
    from pptune.validate import host_fit

    need = host_fit.trial_memory(plan.shape, spec, plan.param_dtype_bytes)
    line = host_fit.refusal(
        need, available_bytes(), f"validate's {spec.pp}-rank run of {plan.name}",
        "validate it on a GPU host (--device cuda), or a smaller model here (--model, "
        "--hf-config)")
    if line is not None:
        raise BadInput(line)


def outcome_json(out: Outcome) -> dict[str, Any]:
    """``pptune validate --json``: the plan, the settings, then the comparison."""
    s = out.spec
    return {
        "schedule": s.schedule.value,
        "torch_schedule": spec_mod.TORCH_SCHEDULES[s.schedule],
        "pp": s.pp,
        "num_microbatches": s.microbatches,
        "virtual_stages": s.chunks,
        "micro_batch_size": s.micro_batch_size,
        "stage_layers": list(s.stage_layers),
        "model": s.source.label,
        "model_info": out.model_info,
        "device": s.device,
        "backend": s.backend,
        "threads_per_rank": s.threads if s.device == "cpu" else None,
        "torch": out.torch_version,
        "warmup_steps": s.warmup,
        "timed_steps": s.steps,
        "cost_source": out.origin,
        **out.comparison,
        "notes": out.notes,
    }
