"""`pptune tune` and `pptune calibrate`: parse -> run -> render -> exit code.

``tune`` takes recommend's option groups (the job and search space, the
cost source: ``pptune.options``), the run settings validate takes, and its
own. The work lives in ``pptune.tune`` (torch imported lazily).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pptune.cli.options import Use, uses
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import show, show_lines, wrote
from pptune.errors import BadInput, RunFailed
from pptune.files import dumps_json
from pptune.options import CostOptions, OutputOptions, PlanSpace, RunOptions
from pptune.report.fmt import fmt_seconds

HELP = """Measure the best candidate plans for real, calibrate the costs, keep the fastest.

Runs recommend's search, then runs its best candidates one after another with
the validate machinery (a few timed steps each, one process per pipeline
rank: gloo CPU processes here, NCCL on GPUs); after each trial it calibrates
the per-layer costs and the link from the measured ops, re-predicts the rest
and drops those whose calibrated lower bound cannot beat the best measured
step. Stops when none left can win, at --max-trials or when --budget is spent.

Examples:

\b
  pptune tune --gpus 2 --global-batch 8 -o tuned/
  pptune tune --gpus 2 --global-batch 8 --resume tuned/
  pptune tune --gpus 2 --profile profile.json --budget 300 --emit torchtitan \\
    -o tuned/
  pptune calibrate --run pretrain.sh --log train.log -o calibrated.json

On a cluster, --launcher runs each trial through the engine you already use:
tune fills the template per trial and rank 0 of each trial (pptune validate
under torchrun) prints its timings for tune to read; -o must be on a
filesystem the nodes share.

\b
  pptune tune --gpus 64 --gpu h100-sxm -o /shared/tuned --launcher \\
    'torchrun --nnodes {nodes} --nproc-per-node {nproc_per_node}
    --rdzv-backend c10d --rdzv-endpoint head:29500 {module}'

--recompute defaults to none here: the trials run without activation
recomputation, so tune searches what they can measure.

-o DIR gets tune.jsonl (one line per trial, appended as each finishes),
pptune-profile.json (calibrated), pptune-plans.json (measured beside predicted)
and, with --emit, the winner's framework config. Exit 1 when a trial fails
(the trials already written stay; --resume DIR continues).
"""

@uses(space=Use(PlanSpace, more={"recompute": "tune: none unless given (its trials run "
                                               "without it)"}),
      costs=CostOptions,
      trials=Use(RunOptions, more={"warmup": "per trial", "steps": "per trial",
                                   "timeout": "in tune its trial fails"}),
      out=Use(OutputOptions, only=("as_json",), more={"as_json": "the outcome"}))
def tune(
    *,
    space: PlanSpace,
    costs: CostOptions,
    trials: RunOptions,
    max_trials: int = typer.Option(8, "--max-trials", help="measure at most this many candidates"),
    budget: float = typer.Option(150.0, "--budget", help="seconds of trials; no trial starts that would not fit"),
    candidates: int = typer.Option(12, "--candidates", help="how many of the search's best plans are candidates"),
    output: Path | None = typer.Option(None, "--output", "-o", help="folder for tune.jsonl, the calibrated profile and the plan file"),
    resume: Path | None = typer.Option(None, "--resume", help="continue the tune in DIR: trials in its tune.jsonl are not rerun"),
    emit: str | None = typer.Option(None, "--emit", help="write the winner as megatron, deepspeed, torchtitan or pptune config"),
    launcher: str | None = typer.Option(
        None, "--launcher", help="run each trial through this command (a cluster): "
        "{nproc}, {nodes}, {nproc_per_node}, {command}, {module}, {python} filled per trial, "
        "e.g. 'torchrun --nnodes {nodes} --nproc-per-node {nproc_per_node} --rdzv-backend "
        "c10d --rdzv-endpoint head:29500 {module}'; needs -o on a shared filesystem"),
    out: OutputOptions,
) -> None:
    from pptune.costmodel.memory import Recompute
    from pptune.plan.recommend import RecommendSpec
    from pptune.tune import artifacts, loop, session, trial

    if space.recompute is None:  # the trials run without it: search what they can measure
        space = replace(space, recompute=(Recompute.NONE,))
    if emit is not None:
        from pptune.frameworks.registry import Framework

        if emit not in {f.value for f in Framework}:
            raise BadInput(f"unknown --emit {emit!r}; choose "
                           f"{', '.join(f.value for f in Framework)}")
    req = session.TuneRequest(
        search=RecommendSpec(space, costs), run=trials, max_trials=max_trials, budget_s=budget,
        candidates=candidates, output=output, resume=resume, launcher=launcher,
    )
    progress = _Progress(req.budget_s, trials.steps)
    try:
        run = trial.run(req, _say, progress)
    finally:
        progress.close()
    for note in run.notes:
        _say(note)
    for warning in (run.outcome.calibration.warnings if run.outcome.calibration else []):
        _say(f"warning: {warning}")
    refused = artifacts.calibration_refusal(loop.accounting(run.outcome.rows))
    if refused and run.outcome.calibrated is not None:
        _say(f"warning: {refused}")
    if run.folder is not None:
        for written in artifacts.write(run, run.folder):
            wrote(written)
    emitted = artifacts.emit_winner(run, emit) if emit else None
    if emitted is not None:
        _write_emitted(emitted, run.folder)
    _render(run, out.as_json)
    if run.outcome.winner is None:
        raise RunFailed(f"tune: none of the {len(run.outcome.rows)} candidates was measured "
                        "(the table says why each was skipped); nothing to recommend")


class _Progress:
    """Trials and budget on stderr (a rich bar on a terminal, one line per trial otherwise)."""

    def __init__(self, budget_s: float, steps: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True)
        self.budget_s = budget_s
        self.steps = steps
        self.bar: Any = None
        if self.console.is_terminal:
            self.bar = Progress(TextColumn("tune: {task.description}"), BarColumn(),
                                MofNCompleteColumn(), console=self.console, transient=True)
            self.trials = self.bar.add_task("trials", total=1)
            self.bar.start()

    def trial_started(self, n: int, limit: int, key: str, elapsed_s: float) -> None:
        text = f"trial {n} (of at most {limit}): {key}; {elapsed_s:.0f} of {self.budget_s:g} s budget"
        if self.bar is None:
            _say(text)
            return
        self.bar.update(self.trials, description=text, total=limit, completed=n - 1)

    def trial_done(self, n: int, row: Any, elapsed_s: float) -> None:
        if self.bar is not None:
            self.bar.update(self.trials, completed=n)
        elif row.measured_s is not None:
            _say(f"trial {n}: measured {fmt_seconds(row.measured_s)} per step "
                 f"({elapsed_s:.0f} s elapsed)")

    def step(self, rank: int, step: int) -> None:
        pass

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _write_emitted(emitted: Any, folder: Path | None) -> None:
    from pptune.plan import emit as emit_mod

    for note in emitted.notes:
        _say(note)
    _say(emitted.summary())
    if folder is None:
        for name, text in emitted.files.items():
            _say(f"--emit without -o: {name} follows on stderr")
            typer.echo(text.rstrip("\n"), err=True)
        return
    for written in emit_mod.write(emitted, folder):
        wrote(written)


def _render(run: Any, as_json: bool) -> None:
    from pptune.report.tune import accounting_line, trials_table, why_lines
    from pptune.tune import artifacts, loop

    o = run.outcome
    if as_json:
        typer.echo(dumps_json(artifacts.summary_json(run), indent=2))
        return
    out = _out()
    winner = o.winner
    rows = artifacts.ordered_rows(o.rows, o.calibration)
    f = o.calibration.contention if o.calibration is not None else None

    def plan_s(row: Any) -> float:
        return loop.plan_step_s(row, f)

    show(out, trials_table(rows, winner.cand.key if winner else None, plan_s))
    show_lines(out, [*why_lines(rows, winner, o.stopped, plan_s),
                     accounting_line(loop.accounting(o.rows)),
                     *(f"calibration: {note}" for note in
                       (o.calibration.notes if o.calibration is not None else []))])
