"""`pptune tune` from request to outcome: check, cost source, search, candidates, loop.

Order: every flag and the output folder are checked before anything runs
(budget, steps, the search's --gpus, --pp and the rest as recommend checks
them, an -o that cannot be written or would replace a journal);
the cost source, by the one resolver's RUN column (``pptune.costs.resolve``:
on --resume the profile the tune first priced with; --profile; --gpu:
analytic costs, as recommend; else ./pptune-profile.json unless a flag
names the model; else a quick probe of the model here), a measured one
saved beside the journal so a resumed tune prices the same way; the search
(recommend's over those costs, its top ``candidates`` plans); one
``Candidate`` per plan; the loop (``loop.run``) with trials run by the
validate machinery (``trial.py``). Talk goes through ``say``; nothing here prints.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pptune.costmodel.comm import compression_factor
from pptune.costmodel.presets import MODELS, ModelShape
from pptune.costs.profiles import DEFAULT_PROFILE_FILE
from pptune.costs.resolve import Costs, QuickProbe, resolve
from pptune.errors import BadInput
from pptune.launch import ranks
from pptune.options import RunOptions
from pptune.plan.recommend import RecommendRun, RecommendSpec, check_spec, recommend
from pptune.schemas import Profile, write_atomic
from pptune.tune import candidates as cands
from pptune.tune import journal, loop
from pptune.tune.launcher import Launcher
from pptune.validate import host_fit
from pptune.validate.spec import ModelSource

Say = Callable[[str], None]
PROBE_FILE = "probe-profile.json"  # the uncalibrated profile a tune priced with
PLANS_FILE = "pptune-plans.json"
OUTPUT_FILES = (PROBE_FILE, DEFAULT_PROFILE_FILE, PLANS_FILE)  # what -o DIR gets
QUICK_SIZES = [1, 2]  # the quick probe's micro-batch sizes (pptune probe --quick)


@dataclass
class TuneRequest:
    search: RecommendSpec
    run: RunOptions = field(default_factory=RunOptions)  # how each trial runs
    max_trials: int = 8
    budget_s: float = 150.0
    candidates: int = 12
    output: Path | None = None
    resume: Path | None = None
    launcher: str | None = None  # run each trial through this command (launcher.py)


@dataclass
class TuneRun:
    outcome: loop.Outcome
    recommended: RecommendRun
    profile: Profile
    origin: str
    folder: Path | None
    notes: list[str] = field(default_factory=list)


def check(req: TuneRequest) -> Path | None:
    """Every bad flag at once; the folder the journal goes to (None: no -o / --resume)."""
    problems = []
    if not req.budget_s > 0:
        problems.append(f"--budget must be > 0 seconds (got {req.budget_s:g})")
    if req.run.steps < 1:
        problems.append(f"--steps must be at least 1 (got {req.run.steps})")
    if req.run.warmup < 0:
        problems.append(f"--warmup must be 0 or more (got {req.run.warmup})")
    if req.max_trials < 1:
        problems.append(f"--max-trials must be at least 1 (got {req.max_trials})")
    if req.candidates < 1:
        problems.append(f"--candidates must be at least 1 (got {req.candidates})")
    if not req.run.timeout > 0:
        problems.append(f"--timeout must be positive seconds (got {req.run.timeout:g})")
    if req.output is not None and req.resume is not None and req.output != req.resume:
        problems.append(f"-o {req.output} and --resume {req.resume} differ: --resume DIR "
                        "continues the tune in DIR and writes there")
    if req.launcher is not None:
        if req.output is None and req.resume is None:
            problems.append("--launcher needs -o DIR on a filesystem the nodes share: each "
                            "trial's rank 0 reads the tune's profile there")
        try:
            Launcher(req.launcher, req.search.space.gpus_per_node or 1, Path()).check()
        except BadInput as exc:
            problems.append(str(exc))
    try:  # the search's own flags (--gpus, --pp, ...), before any probe or trial runs
        check_spec(req.search)
    except BadInput as exc:
        problems.insert(0, str(exc))
    try:
        compression_factor(req.search.space.grad_compression)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        raise BadInput("; ".join(problems))
    if req.resume is not None:
        if not (req.resume / journal.FILE).is_file():
            raise BadInput(f"--resume {req.resume}: no {journal.FILE} there to resume from")
        return req.resume
    if req.output is None:
        return None
    if (req.output / journal.FILE).exists():
        raise BadInput(f"{req.output / journal.FILE} exists: continue it with --resume "
                       f"{req.output}, or give another -o folder")
    taken = [n for n in OUTPUT_FILES if (req.output / n).exists()]
    if taken:
        raise BadInput(f"-o {req.output} already has {', '.join(taken)}: tune would replace "
                       "it; give a new or empty folder")
    _writable(req.output)
    return req.output


def _writable(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise BadInput(f"-o {folder} exists and is not a folder (tune writes several files)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise BadInput(f"-o {folder} cannot be written: {exc.strerror or exc}") from None


def model_source(req: TuneRequest, profile: Profile | None) -> ModelSource:
    s, module = req.search.costs, req.run.module
    if module is not None and (s.model or s.hf_config):
        raise BadInput("--module and --model/--hf-config both name the model; give one of them")
    if module is not None or s.hf_config is not None:
        return ModelSource(hf_config=str(s.hf_config) if s.hf_config else None,
                           module=module, seq_len=s.seq_len)
    name = s.model or (profile.model.name if profile is not None else "gpt-small")
    if name not in MODELS:
        raise BadInput(f"the profile's model {name[:60]!r} is not a preset; name it with "
                       "--hf-config PATH or --module pkg.mod:factory")
    seq_len = s.seq_len
    if seq_len is None and profile is not None and profile.model.seq_len != MODELS[name].seq_len:
        seq_len = profile.model.seq_len
    return ModelSource(model=name, seq_len=seq_len)


def resolve_costs(req: TuneRequest, folder: Path | None, say: Say,
                  probe: Callable[[ModelSource, list[int]], Profile],
                  fits: Callable[[ModelSource], None] = lambda source: None) -> Costs:
    """The uncalibrated costs (module docstring): ``probe`` measures a model here, once
    ``fits`` has not refused it (BadInput: a model this host cannot hold)."""
    c, sizes = req.search.costs, req.search.space.micro_batch_sizes
    resumed = None if folder is None or req.resume is None else folder / PROBE_FILE
    if resumed is not None and not resumed.exists():
        resumed = None
    if c.gpu is not None and resumed is None and c.profile is None:
        say(f"--gpu {c.gpu}: analytic costs of that GPU, but the trials run on this machine; "
            "the calibration carries the difference")
    quick = list(sizes or QUICK_SIZES)

    def measure() -> Profile:
        source = model_source(req, None)
        fits(source)
        say(f"no --profile and no ./{DEFAULT_PROFILE_FILE}: measuring a quick profile of "
            f"{source.label} here first (as pptune probe --quick --no-comm --micro-batch-sizes "
            f"{','.join(map(str, quick))})")
        return probe(source, quick)

    return resolve(c, sizes=sizes, profile=resumed, probe=QuickProbe(
        measure, "quick probe here (--no-comm: default CPU/GPU links)",
        names_model=req.run.module is not None))


def search(req: TuneRequest, costs: Costs, folder: Path | None) -> RecommendRun:
    """recommend's search over the tune's costs; with a ``folder``, ``keep_costs`` first."""
    keep_costs(req, costs, folder)
    return recommend(replace(req.search, top=req.candidates), costs)


def keep_costs(req: TuneRequest, costs: Costs, folder: Path | None) -> None:
    """A measured profile (any, with a launcher: its trials price with it) saved beside
    the journal (``PROBE_FILE``), so that a resumed tune prices the same way."""
    keep = costs.measured or req.launcher is not None
    if keep and folder is not None and not (folder / PROBE_FILE).exists():
        write_atomic(folder / PROBE_FILE, costs.profile.model_dump_json(indent=2) + "\n")


# what to do when this host cannot hold a trial (fit_host)
HOST_FIX = ("run the tune on a GPU host (--device cuda: each rank holds its stages in GPU "
            "memory), or on the cluster through --launcher; for a dry run here, a smaller "
            "--model (gpt-small is the CPU demo size)")


def fit_host(candidates: list[cands.Candidate], shape: ModelShape, dtype_bytes: int,
             available_bytes: int | None) -> list[cands.Candidate]:
    """The candidates, each whose CPU trial cannot fit this host's free memory skipped
    with the one-line reason (validate/host_fit.py counts what the ranks hold at once);
    BadInput, before any trial starts, when that leaves none to run (the smallest
    refused is named). ``available_bytes`` None: unknown, nothing skipped."""
    out, refused = [], []
    for c in candidates:
        if c.skip is None:
            need = host_fit.trial_memory(shape, c.spec, dtype_bytes)
            line = host_fit.refusal(need, available_bytes, f"trial {c.key!r}", HOST_FIX)
            if line is not None:
                refused.append((need.total_bytes, c.rank, line))
                c = replace(c, skip=line)
        out.append(c)
    if refused and all(c.skip is not None for c in out):
        raise BadInput("tune: none of the candidates fits this host's memory; the smallest: "
                       + min(refused)[2])
    return out


def fit_model(shape: ModelShape, dtype_bytes: int, available_bytes: int | None,
              label: str) -> None:
    """BadInput before anything is measured when even one copy of the model's weights and
    gradients cannot fit this host's free memory: no trial of it could run here, and a
    quick probe of it would take minutes before a refusal (``fit_host`` after it)."""
    line = host_fit.refusal(host_fit.model_floor(shape, dtype_bytes), available_bytes,
                            f"any trial of {label}", HOST_FIX)
    if line is not None:
        raise BadInput(f"tune: no trial fits this host's memory: {line}")


def build_candidates(req: TuneRequest, run: RecommendRun, source: ModelSource, n_layers: int,
                     local_devices: int, device: str) -> list[cands.Candidate]:
    settings = cands.RunSettings(source, req.run.warmup, req.run.steps, req.run.timeout, device)
    return [cands.candidate(p, i, n_layers, local_devices, settings)
            for i, p in enumerate(run.result.plans, 1)]


def resumed_records(folder: Path | None, req: TuneRequest, say: Say) -> list[dict[str, Any]]:
    if req.resume is None or folder is None:
        return []
    records, notes = journal.load(folder / journal.FILE)
    for note in notes:
        say(note)
    done = sum(1 for r in records if r.get("status") == loop.MEASURED)
    say(f"--resume {folder}: {done} measured trial(s) in {journal.FILE} are kept, not rerun")
    return records


def local_devices(torch: Any, device: str) -> int:
    """Ranks one host can give a pipeline: its GPUs, or its cores for CPU processes."""
    import os

    if device == "cuda":
        return int(torch.cuda.device_count())
    return os.cpu_count() or 1


def refuse_torchrun() -> None:
    if ranks.torchrun_env() is not None:
        raise BadInput("pptune tune launches its own ranks, one trial after another; under "
                       "torchrun, run pptune validate --plan N per plan and pptune calibrate")
