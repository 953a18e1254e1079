"""`pptune validate`: parse flags -> run the plan for real -> render the comparison.

The work lives in ``pptune.validate`` (torch imported lazily); this module
turns flags into a ``ValidateRequest``, shows progress on stderr and prints
the table (or ``--json``) on stdout. Errors are ``PptuneError``s, mapped to
one stderr line and an exit code by the CLI's central handler.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from pptune import limits
from pptune.cli.options import cost_option
from pptune.cli.util import out_console as _out
from pptune.cli.util import parse_ints as _ints
from pptune.cli.util import say as _say
from pptune.cli.util import show
from pptune.errors import BadInput
from pptune.files import check_output
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


def _check(timeout: float, warmup: int, steps: int, width: int, pp: int | None,
           microbatches: int | None, micro_batch_size: int | None, virtual_stages: int | None,
           seq_len: int | None, trace: Path | None) -> None:
    """Every number finite and in range, and the --trace path writable, before any work."""
    found = limits.problems(
        limits.problem("--timeout", timeout, 0.001, limits.MAX_TIMEOUT_S),
        limits.problem("--warmup", warmup, 0, limits.MAX_STEPS),
        limits.problem("--steps", steps, 1, limits.MAX_STEPS),
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
        check_output(trace, "--trace")  # before the run, not after it


def validate(
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
        None, "--schedule", "-s", help="gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv [default: 1f1b]"
    ),
    split: str | None = typer.Option(
        None, "--split", help="layers per stage, embedding and head included, e.g. 4,4 [default: even]"
    ),
    micro_batch_size: int | None = typer.Option(None, "--micro-batch-size", "-b", help="samples per micro-batch [default: 1]"),
    virtual_stages: int | None = typer.Option(
        None, "--virtual-stages", "-v", help="chunks per device for interleaved-1f1b [default: 2]"
    ),
    model: str | None = cost_option("--model", more="[default: gpt-small, the CPU demo size]"),
    hf_config: Path | None = typer.Option(None, "--hf-config", help="Hugging Face config.json: decoder blocks of that shape"),
    module: str | None = typer.Option(None, "--module", help="your layers: 'pkg.mod:factory' (see pptune probe --help)"),
    seq_len: int | None = typer.Option(None, "--seq-len", help="override the model's sequence length"),
    dtype: str = typer.Option("auto", "--dtype", help="auto (fp32 on CPU, bf16 on CUDA), fp32, bf16, fp16"),
    profile: Path | None = cost_option(
        "--profile", more="for the prediction [default: ./pptune-profile.json, else a quick probe]"
    ),
    warmup: int = typer.Option(2, "--warmup", help="untimed steps first"),
    steps: int = typer.Option(5, "--steps", help="timed steps; the median counts"),
    timeout: float = typer.Option(180.0, "--timeout", help="seconds a rank may stay silent before the run is abandoned"),
    device: str = typer.Option("auto", "--device", help="auto (cuda if available), cpu or cuda"),
    as_json: bool = typer.Option(False, "--json", help="machine-readable comparison on stdout"),
    trace: Path | None = typer.Option(None, "--trace", help="write the measured timeline as Chrome trace JSON"),
    timeline: bool = typer.Option(False, "--timeline", help="draw the measured and predicted timelines"),
    width: int = typer.Option(80, "--width", help="timeline width in columns"),
) -> None:
    _check(timeout, warmup, steps, width, pp, microbatches, micro_batch_size, virtual_stages,
           seq_len, trace)  # before the session module, which imports torch
    from pptune.validate.session import ValidateRequest, outcome_json, run

    plan_path: Path | None = None
    if plan is not None and plan.strip().isdigit():
        rank = int(plan)  # --plan N: the Nth plan of the saved recommendation
        plan_path = plans or Path(DEFAULT_PLANS_FILE)
    elif plan is not None:
        plan_path = Path(plan)
    elif plans is not None:
        plan_path = plans
    if dtype not in ("auto", "fp32", "bf16", "fp16"):
        raise BadInput(f"--dtype must be auto, fp32, bf16 or fp16 (got {dtype!r})")
    req = ValidateRequest(
        plan=plan_path, rank=rank, pp=pp, microbatches=microbatches, schedule=schedule,
        split=_ints(split, "--split"), micro_batch_size=micro_batch_size,
        virtual_stages=virtual_stages, model=model, hf_config=hf_config, module=module,
        seq_len=seq_len, dtype=dtype, profile=profile, warmup=warmup, steps=steps,
        timeout_s=timeout, device=device,
    )
    progress = _Progress(warmup + steps)
    try:
        outcome = run(req, _say, progress)
    finally:
        progress.close()
    if outcome is None:
        _say("this torchrun rank is done; rank 0 reports")
        return
    for note in outcome.notes:
        _say(note)
    doc = outcome_json(outcome)
    if trace is not None:
        from pptune.report import write_trace

        write_trace(trace, outcome.measured, name="pptune validate (measured)")
        _say(f"wrote {trace} (open in https://ui.perfetto.dev)")
    if as_json:
        typer.echo(json.dumps(json_safe(doc), indent=2))
        return
    from pptune.validate.render import comparison_table, ops_table, summary_lines

    out = _out()
    show(out, comparison_table(doc))
    show(out, ops_table(doc))
    for line in summary_lines(doc):
        out.print(line, highlight=False, markup=False)
    if timeline:
        from pptune.report import timeline_text

        out.print("measured (median step):", highlight=False, markup=False)
        out.print(timeline_text(outcome.measured, width=width))
        out.print("predicted:", highlight=False, markup=False)
        out.print(timeline_text(outcome.prediction.result, width=width))
