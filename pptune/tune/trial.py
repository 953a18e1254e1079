"""The torch side of tune: a quick probe, one trial with the validate machinery, the whole run.

torch is imported inside functions only (``pptune.validate.runner``);
``import pptune.tune.trial`` works without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pptune.costmodel.presets import host_gpus
from pptune.errors import BadInput
from pptune.schemas import Profile
from pptune.tune import candidates as cands
from pptune.tune import journal, loop, session
from pptune.tune.launcher import Launcher
from pptune.tune.model import Trial
from pptune.validate.spec import ModelSource


class TrialProgress(loop.Progress, Protocol):
    """loop.Progress plus the steps of the trial running now (rank 0's)."""

    def step(self, rank: int, step: int) -> None: ...


def quick_probe(source: ModelSource, sizes: list[int], device: str) -> Profile:
    """``pptune probe --quick --no-comm`` of ``source`` in this process."""
    from pptune.probe.build import DeviceChoice, DType, NullReporter, ProbeOptions, run_probe

    opts = ProbeOptions(
        model=source.model if source.hf_config is None and source.module is None else None,
        hf_config=None if source.hf_config is None else Path(source.hf_config),
        module=source.module, micro_batch_sizes=sizes, comm=False, quick=True,
        device=DeviceChoice(device), dtype=DType(source.dtype), threads=1, seq_len=source.seq_len,
    )
    outcome = run_probe(opts, NullReporter())
    if outcome.profile is None:  # pragma: no cover - only torchrun ranks > 0
        raise BadInput("the quick probe returned no profile")
    return outcome.profile


def measure(cand: cands.Candidate, on_step: Callable[[int, int], None],
            limit_s: float | None = None) -> Trial:
    """Run one pipeline of ``cand`` as ``pptune validate`` does; RunFailed when a rank fails,
    TimeLimit when it is not done within ``limit_s`` seconds (its ranks ended)."""
    from pptune.validate import runner
    from pptune.validate.measure import summarize

    spec = cand.spec
    data = runner.run_spawned(spec, on_step, limit_s)
    measured = summarize(data.steps(), spec.pp, data.shared_clock)
    return Trial(
        key=cand.key, schedule=spec.schedule, pp=spec.pp, microbatches=spec.microbatches,
        virtual_stages=spec.virtual_stages, micro_batch_size=spec.micro_batch_size,
        stage_layers=spec.stage_layers, step_times_s=tuple(measured.step_times_s),
        op_medians_s=dict(measured.op_medians_s), loss_s=data.loss_s, contention=data.contention,
    )


@dataclass
class Prepared:
    profile: Profile
    origin: str
    recommended: Any
    candidates: list[cands.Candidate]
    resumed: list[dict[str, Any]]
    notes: list[str]


def prepare(req: session.TuneRequest, say: session.Say) -> tuple[Prepared, Any]:
    """Everything before the first trial; also the folder (None without -o)."""
    from pptune.probe.host_memory import available_bytes
    from pptune.validate import runner, workload
    from pptune.validate.session import pick_device

    folder = session.check(req)
    session.refuse_torchrun()
    torch = runner.import_torch()
    device = pick_device(req.run.device, torch)
    here = device == "cpu" and req.launcher is None  # every rank a process of this host

    def fits(src: Any) -> None:  # a model this host cannot hold: refused before a probe
        early = workload.build_plan(src, "cpu", torch)
        if here and early.shape is not None:
            session.fit_model(early.shape, early.param_dtype_bytes, available_bytes(),
                              src.label)

    costs = session.resolve_costs(
        req, folder, say, lambda src, sizes: quick_probe(src, sizes, device), fits)
    recommended = session.search(req, costs, None)  # costs kept once the trials can run
    profile, origin = costs.profile, costs.origin
    source = session.model_source(req, profile)
    plan = workload.build_plan(source, "cpu", torch)
    n_layers = len(plan.layer_names)
    if n_layers != len(profile.layers):
        raise BadInput(f"the profile has {len(profile.layers)} layers but model {source.label} "
                       f"has {n_layers}; probe this model (pptune probe) or give its --profile")
    # with a launcher the trials run on the cluster's GPUs, not this host's
    devices = (req.search.space.gpus if req.launcher is not None
               else session.local_devices(torch, device))
    candidates = session.build_candidates(req, recommended, source, n_layers, devices, device)
    if here and plan.shape is not None:  # refuse what this host's memory cannot hold
        candidates = session.fit_host(candidates, plan.shape, plan.param_dtype_bytes,
                                      available_bytes())
    session.keep_costs(req, costs, folder)
    notes = list(recommended.notes) + list(plan.warnings)
    resumed = session.resumed_records(folder, req, say)
    return Prepared(profile, origin, recommended, candidates, resumed, notes), folder


def run(req: session.TuneRequest, say: session.Say, progress: TrialProgress) -> session.TuneRun:
    prepared, folder = prepare(req, say)
    if not prepared.candidates:
        from pptune.errors import NoFeasiblePlan
        from pptune.plan.unfit import no_plan_message

        raise NoFeasiblePlan(no_plan_message(prepared.recommended))
    journal_path = None if folder is None else folder / journal.FILE

    launcher = None
    if req.launcher is not None and folder is not None:  # session.check: -o is given
        # the host of the node the search planned for (--gpus-per-node, else the GPU's
        # NVLink domain; one compute tray where that domain spans hosts)
        rec = prepared.recommended
        host = host_gpus(rec.costs.gpu if rec.costs is not None else None,
                         rec.plan_request.gpus_per_node)
        launcher = Launcher(req.launcher, host, folder / session.PROBE_FILE, req.run.device)

    def trial(c: cands.Candidate, left_s: float) -> Trial:  # left_s: the budget left
        if launcher is not None:
            return launcher.measure(c.key, c.spec, prepared.profile, left_s)
        return measure(c, progress.step, left_s)

    outcome = loop.run(
        prepared.profile, prepared.candidates, trial,
        loop.Limits(req.max_trials, req.budget_s), journal_path, prepared.resumed, progress,
    )
    return session.TuneRun(outcome, prepared.recommended, prepared.profile, prepared.origin,
                           folder, prepared.notes + outcome.notes)
