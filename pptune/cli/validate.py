"""`pptune validate`: parse flags -> run the plan for real -> render the comparison.

The work lives in ``pptune.validate`` (torch imported lazily); this module
turns flags into a ``ValidateRequest``, shows progress on stderr and prints
the table (or ``--json``) on stdout. Errors are ``PptuneError``s, mapped to
one stderr line and an exit code by the CLI's central handler.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pptune import limits
from pptune.cli.options import Use, uses
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import show, show_lines, wrote
from pptune.errors import BadInput
from pptune.files import TRACE, check_output, dumps_json
from pptune.options import CostOptions, OutputOptions, RunOptions
from pptune.options.kinds import parse_split
from pptune.report.fmt import json_safe

DEFAULT_PLANS_FILE = "pptune-plans.json"

HELP = """Run a plan on this machine with torch.distributed.pipelining and compare the
measured step time and bubble with the simulator's prediction.

The plan comes from a recommendation saved with `pptune recommend ... -o
pptune-plans.json` (`--plan N` runs its Nth plan; `--plan FILE --rank N` reads
another file) or from flags. One process per pipeline rank: NCCL, one per GPU,
when CUDA is available; gloo CPU processes with 1 thread each otherwise.
Under torchrun it joins the job. Costs for the prediction: --profile, else
./pptune-profile.json, else a quick probe of the model in this process.

Examples:

  pptune validate --pp 2 --microbatches 4 --schedule 1f1b

  pptune recommend --gpus 2 --profile profile.json -o pptune-plans.json
  pptune validate --plan 1 --profile profile.json

  pptune validate --plan plans.json --rank 2 --profile profile.json --json

  pptune validate --schedule gpipe --split 3,5 --steps 9 --trace measured.json --timeline

  torchrun --nproc-per-node 4 $(which pptune) validate --plan plans.json
"""


class _Progress:
    """``step i/N`` of rank 0 on stderr (a rich bar on a terminal, nothing otherwise)."""

    def __init__(self, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.console = Console(stderr=True)
        self.bar: Any = None
        if self.console.is_terminal:
            self.bar = Progress(
                TextColumn("validate: steps (warm-up + timed)"), BarColumn(), MofNCompleteColumn(),
                console=self.console, transient=True,
            )
            self.task = self.bar.add_task("", total=total)
            self.bar.start()

    def __call__(self, rank: int, step: int) -> None:
        if self.bar is not None and rank == 0:
            self.bar.update(self.task, completed=step + 1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _check(run: RunOptions, width: int, pp: int | None,
           microbatches: int | None, micro_batch_size: int | None, virtual_stages: int | None,
           seq_len: int | None, trace: Path | None) -> None:
    """Every number finite and in range, and the --trace path writable, before any work."""
    found = limits.problems(
        limits.problem("--timeout", run.timeout, 0.001, limits.MAX_TIMEOUT_S),
        limits.problem("--warmup", run.warmup, 0, limits.MAX_STEPS),
        limits.problem("--steps", run.steps, 1, limits.MAX_STEPS),
        limits.problem("--width", width, 20, limits.MAX_TIMELINE_WIDTH),
        *(limits.problem(flag, value, 1, cap) for flag, value, cap in (
            ("--pp", pp, limits.MAX_GPUS), ("--microbatches", microbatches, limits.MAX_GLOBAL_BATCH),
            ("--micro-batch-size", micro_batch_size, limits.MAX_MICRO_BATCH),
            ("--virtual-stages", virtual_stages, limits.MAX_LAYERS),
            ("--seq-len", seq_len, limits.MAX_SEQ_LEN)) if value is not None),
    )
    if found:
        raise BadInput("; ".join(found))
    if trace is not None:
        check_output(trace, "--trace", kind=TRACE)  # before the run, not after it


@uses(costs=Use(CostOptions, only=("model", "hf_config", "seq_len", "profile"), more={
          "model": "[default: gpt-small, the CPU demo size]",
          "profile": "for the prediction [default: ./pptune-profile.json, else a quick probe]"}),
      run=RunOptions,
      out=Use(OutputOptions, more={"timeline": "the measured and predicted ones"}))
def validate(
    *,
    plan: str | None = typer.Option(
        None, "--plan",
        help="N: plan N of ./pptune-plans.json (or --plans FILE); or the path of a plan JSON "
        "saved by `pptune recommend -o FILE`",
    ),
    plans: Path | None = typer.Option(None, "--plans", help="plan JSON that --plan N picks from [default: ./pptune-plans.json]"),
    rank: int = typer.Option(1, "--rank", help="which plan of a --plan FILE to run (1 = the best)"),
    pp: int | None = typer.Option(None, "--pp", help="pipeline stages (devices) [default: 2]"),
    microbatches: int | None = typer.Option(None, "--microbatches", "-m", help="micro-batches per step [default: 4]"),
    schedule: str | None = typer.Option(
        None, "--schedule", "-s", help="gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipev [default: 1f1b]"
    ),
    split: str | None = typer.Option(
        None, "--split", help="layers per stage, embedding and head included, e.g. 4,4 or 5,4x14,3 (NxM: M stages of N layers) [default: even]"
    ),
    micro_batch_size: int | None = typer.Option(None, "--micro-batch-size", "-b", help="samples per micro-batch [default: 1]"),
    virtual_stages: int | None = typer.Option(
        None, "--virtual-stages", "-v", help="chunks per device for interleaved-1f1b [default: 2]"
    ),
    costs: CostOptions,
    dtype: str = typer.Option("auto", "--dtype", help="auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16"),
    run: RunOptions,
    out: OutputOptions,
    trace: Path | None = typer.Option(None, "--trace", help="write the measured timeline as Chrome trace JSON"),
) -> None:
    _check(run, out.width, pp, microbatches, micro_batch_size, virtual_stages,
           costs.seq_len, trace)  # before the session module, which imports torch
    from pptune.validate.session import ValidateRequest, outcome_json
    from pptune.validate.session import run as run_validate

    plan_path: Path | None = None
    if plan is not None and plan.strip().isascii() and plan.strip().isdigit():
        rank = int(plan)  # --plan N: the Nth plan of the saved recommendation
        if rank < 1:
            raise BadInput(f"--plan {plan.strip()}: plans are numbered from 1 (the best)")
        plan_path = plans or Path(DEFAULT_PLANS_FILE)
    elif plan is not None:
        plan_path = Path(plan)
    elif plans is not None:
        plan_path = plans
    if dtype not in ("auto", "fp32", "bf16", "fp16"):
        raise BadInput(f"--dtype must be auto, fp32, bf16 or fp16 (got {dtype!r})")
    req = ValidateRequest(
        plan=plan_path, rank=rank, pp=pp, microbatches=microbatches, schedule=schedule,
        split=parse_split(split, "--split"), micro_batch_size=micro_batch_size,
        virtual_stages=virtual_stages, costs=costs, dtype=dtype, run=run,
    )
    progress = _Progress(run.warmup + run.steps)
    try:
        outcome = run_validate(req, _say, progress)
    finally:
        progress.close()
    if outcome is None:
        _say("this torchrun rank is done; rank 0 reports")
        return
    for note in outcome.notes:
        _say(note)
    doc = outcome_json(outcome)
    if trace is not None:
        from pptune.report.trace import write_trace

        wrote(write_trace(trace, outcome.measured, name="pptune validate (measured)"),
              extra="open in https://ui.perfetto.dev")
    if out.as_json:
        typer.echo(dumps_json(json_safe(doc), indent=2))
        return
    console = _out()
    show_comparison(console, doc)
    if out.timeline:
        from pptune.report.timeline import timeline_text

        console.print("measured (median step):", highlight=False, markup=False)
        console.print(timeline_text(outcome.measured, width=out.width))
        console.print("predicted:", highlight=False, markup=False)
        console.print(timeline_text(outcome.prediction.result, width=out.width))


def show_comparison(console: Console, doc: dict[str, Any]) -> None:
    """The outcome's tables and the lines under them, at the console's width."""
    from pptune.validate.render import comparison_table, ops_table, summary_lines

    show(console, comparison_table(doc))
    show(console, ops_table(doc))
    show_lines(console, summary_lines(doc))
