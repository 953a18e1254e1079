"""pptune's command line: parse -> call -> render -> exit code. No arithmetic here.

stdout carries data (tables, --json); stderr carries talk (notes, warnings,
errors). Domain errors (``PptuneError``) become one line on stderr and their
exit code in one place, ``_guard``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from pptune import limits
from pptune.cli.emit_flags import check_emit_flags, framework_versions, given
from pptune.cli.errors import OneLineErrors, echo_json_error, json_asked, print_version
from pptune.cli.file_flags import framework_version_option
from pptune.cli.options import Use, option_for, uses
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import show as _show
from pptune.cli.util import wrote as _wrote
from pptune.errors import BadInput, NoFeasiblePlan, PptuneError
from pptune.files import PLANS, SVG, TRACE, check_folder, check_output, dumps_json, same_file
from pptune.options import CostOptions, OutputOptions, PlanSpace
from pptune.options.kinds import parse_split

F = TypeVar("F", bound=Callable[..., Any])


app = typer.Typer(
    cls=OneLineErrors,
    name="pptune",
    help="Pipeline-parallel tuning advisor: probe your cards, simulate schedules, "
    "recommend stage splits and micro-batches, check training configs in CI.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=print_version, is_eager=True,
                                 help="print pptune's version and exit"),
) -> None:
    """Pipeline-parallel tuning advisor."""


def _guard(fn: F) -> F:
    """Map PptuneError to one stderr line and its exit code (under --json a refusal's
    error document on stdout besides: errors.echo_json_error); nothing else.

    The class carries the code: BadInput / MissingDependency 2, NoFeasiblePlan
    and RunFailed (a rank failed, died or hung at run time) 1.
    """

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PptuneError as exc:
            msg = " ".join(str(exc).split())
            if exc.exit_code == 2 and json_asked():  # refused before any result was printed
                echo_json_error(msg, exc.exit_code)
            typer.echo(f"pptune: error: {msg}", err=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper  # type: ignore[return-value]


def _check_width(width: int) -> None:
    found = limits.problem("--width", width, 20, limits.MAX_TIMELINE_WIDTH)
    if found:
        raise BadInput(found)


# --------------------------------------------------------------------------- simulate

SIMULATE_HELP = """Simulate one pipeline schedule event by event.

Textbook what-if (equal stages, times per device):

\b
  pptune simulate -s 1f1b --pp 4 -m 8 --fwd-ms 1 --bwd-ms 2 --timeline

Per-layer costs from a preset or a profile:

\b
  pptune simulate --model gpt3-1.3b --gpu h100-sxm --pp 4 -m 8 --split 7,6,6,7

DualPipeV's overlapped F&B pairs hiding an expert all-to-all:

\b
  pptune simulate -s dualpipev --pp 4 -m 16 --fwd-ms 1 --bwd-ms 1 \\
    --wgrad-ms 1 --a2a-ms 0.5 --timeline
"""


@app.command("simulate", help=SIMULATE_HELP)
@_guard
@uses(costs=Use(CostOptions, help={  # simulate prices one layout: one value each
    "tp": "tensor-parallel size inside each stage [default: 1]",
    "cp": "context-parallel size (the sequence split over cp ranks) [default: 1]",
    "ep": "expert-parallel size of a mixture-of-experts model [default: 1]",
    "etp": "expert tensor-parallel size (Megatron-LM --expert-tensor-parallel-size) "
    "[default: 1]",
    "precision": "GEMM precision: bf16, fp16, fp8, mxfp8, nvfp4 [default: bf16]"}),
    out=OutputOptions)
def simulate_cmd(
    *,
    schedule: str = typer.Option("1f1b", "--schedule", "-s", help="gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, dualpipe, dualpipev"),
    pp: int = typer.Option(4, "--pp", help="pipeline stages (devices)"),
    microbatches: int = typer.Option(8, "--microbatches", "-m", help="micro-batches per step"),
    virtual_stages: int | None = typer.Option(None, "--virtual-stages", "-v", help="chunks per device: interleaved-1f1b's [default: 2]; zbv and the DualPipes always 2, the others 1"),
    fwd_ms: float | None = typer.Option(None, "--fwd-ms", help="forward time per device per micro-batch (textbook mode)"),
    bwd_ms: float | None = typer.Option(None, "--bwd-ms", help="backward (input-grad) time per device"),
    wgrad_ms: float = typer.Option(0.0, "--wgrad-ms", help="weight-grad time per device"),
    p2p_ms: float = typer.Option(0.0, "--p2p-ms", help="time of one stage-to-stage send"),
    a2a_ms: float = typer.Option(0.0, "--a2a-ms", help="expert all-to-all per device per micro-batch, in forward and again in backward (textbook mode; F&B pairs hide it)"),
    a2a_overlap: bool = typer.Option(False, "--a2a-overlap", help="interleaved-1f1b, or 1f1b at --pp 1: Megatron-LM's combined order (--overlap-moe-expert-parallel-comm)"),
    micro_batch_size: int = typer.Option(1, "--micro-batch-size", "-b", help="samples per micro-batch"),
    split: str | None = typer.Option(None, "--split", help="layers per stage, e.g. 6,6,6,6 or 5,4x14,3 (NxM: M stages of N layers; default even)"),
    costs: CostOptions,
    blocking_send: bool = option_for(PlanSpace, "blocking_send"),
    out: OutputOptions,
    trace: Path | None = typer.Option(None, "--trace", help="write Chrome trace JSON (Perfetto)"),
    svg: Path | None = typer.Option(None, "--svg", help="write the timeline as SVG"),
) -> None:
    from pptune.plan import whatif as simulation

    _check_width(out.width)
    for flag, path, kind in (("--trace", trace, TRACE), ("--svg", svg, SVG)):
        if path is not None:
            check_output(path, flag, costs.input_files(), kind)
    if trace is not None and svg is not None and same_file(trace, svg):
        raise BadInput(f"--trace and --svg name one file ({svg}): the SVG would replace the "
                       "trace; give each its own path")
    spec = simulation.SimSpec(
        schedule=schedule, pp=pp, microbatches=microbatches, virtual_stages=virtual_stages,
        fwd_ms=fwd_ms, bwd_ms=bwd_ms, wgrad_ms=wgrad_ms, p2p_ms=p2p_ms, a2a_ms=a2a_ms,
        a2a_overlap=a2a_overlap, costs=costs,
        micro_batch_size=micro_batch_size, split=parse_split(split, "--split"),
        blocking_send=blocking_send,
    )
    run = simulation.run(spec)
    for note in run.notes:
        _say(note)
    from pptune.report.svg import write_svg
    from pptune.report.tables import sim_summary_table
    from pptune.report.timeline import timeline_text
    from pptune.report.trace import write_trace

    if trace is not None:
        _wrote(write_trace(trace, run.result), extra="open in https://ui.perfetto.dev")
    if svg is not None:
        _wrote(write_svg(svg, run.result))
    if out.as_json:
        typer.echo(dumps_json(simulation.result_json(run), indent=2))
        return
    console = _out()
    _show(console, sim_summary_table(run.result))
    if out.timeline:
        console.print(timeline_text(run.result, width=out.width))


# --------------------------------------------------------------------------- recommend

RECOMMEND_HELP = """Find the fastest pipeline plan that fits, and explain it.

\b
  pptune recommend --gpus 8
  pptune recommend --gpus 64 --model llama3-70b --tp 8 --json -o plans.json
  pptune recommend --gpus 8 --emit megatron -o launch/
  pptune recommend --gpus 8 --framework torchtitan
  pptune recommend --gpus 8 --emit torchtitan --framework-version torchtitan=0.3.0

Costs come from --profile, else --model/--gpu presets, else ./pptune-profile.json,
else the embedded default (llama3-8b on h100-sxm). Exit 1 when no plan fits.
"""


@app.command("recommend", help=RECOMMEND_HELP)
@_guard
@uses(space=PlanSpace, costs=CostOptions,
      out=Use(OutputOptions, more={"as_json": '{"plans": [...], "rejected": {...}}',
                                   "timeline": "the winner's"}))
def recommend_cmd(
    ctx: typer.Context,
    *,
    space: PlanSpace,
    costs: CostOptions,
    top: int = typer.Option(5, "--top", help="plans to rank; when none of them runs without a pipeline, the best plan that does follows as one more row (and in --json)"),
    out: OutputOptions,
    output: Path | None = typer.Option(None, "--output", "-o", help="save the JSON to FILE (with --emit: the folder for the files)"),
    emit: str | None = typer.Option(None, "--emit", help="write the plan as megatron, deepspeed, torchtitan or pptune config"),
    framework: str | None = typer.Option(None, "--framework", help="rank only the plans megatron's, deepspeed's, torchtitan's or pptune's files state, priced with the kernels they run (a note names the layouts dropped); --emit, if given, must name the same framework"),
    plan_rank: int = typer.Option(1, "--plan", help="which plan of the table --emit writes, by its number: 1 to --top, or --top + 1 where the best plan without a pipeline is listed as one more row (the plan file's rank)"),
    train_tokens: float | None = typer.Option(None, "--train-tokens", help="tokens to train on: adds days and GPU-hours per plan"),
    force: bool = typer.Option(False, "--force", help="with --emit -o DIR: overwrite files already in DIR"),
    framework_version: list[str] | None = framework_version_option(
        "; with --framework or --emit, the release plans are ranked and files written for "
        "(torchtitan=0.3.0: main's Python config; the default: 0.2.2's TOML)"),
) -> None:
    from pptune.plan import recommend as planning
    from pptune.plan.framework_search import check_moments, grad_reduction, parse_framework

    if emit is not None:  # an unknown framework is refused before the search
        parse_framework(emit)
    if framework is not None:
        framework = parse_framework(framework, "--framework").value
        if emit is not None and parse_framework(emit).value != framework:
            raise BadInput(f"--emit {emit} with --framework {framework}: the plans ranked are "
                           f"those {framework}'s files state; give --emit {framework}, or "
                           "drop --framework to rank every plan")
    req = planning.RecommendSpec(space, costs, top, emit, framework,
                                 jobs_gradients=not given(ctx, "grad_compression"))
    _check_width(out.width)
    if train_tokens is not None:
        found = limits.problem("--train-tokens", train_tokens, 0, limits.MAX_TRAIN_TOKENS, lo_open=True)
        if found:
            raise BadInput(found)
    if emit is not None and out.as_json:
        raise BadInput("--json and --emit: --emit writes the framework's files (to -o DIR, "
                       "else to stdout); run recommend --json -o plans.json for the plans")
    # before the search: --plan and --force only with --emit, its folder, its plan numbers
    check_emit_flags(emit, output, plan_rank, given(ctx, "plan_rank"), force, top)
    versions, version_notes = framework_versions(framework_version or [], emit or framework)
    req = req if versions is None else dataclasses.replace(req, versions=versions)  # its plans
    if emit is not None:
        check_moments(emit, (space.exp_avg_dtype.value, space.exp_avg_sq_dtype.value))
        grad_reduction(space.grad_compression, emit, "--emit", costs)
    if emit is not None and output is not None:
        from pptune.plan.emit import file_names

        check_folder(output, file_names(emit, versions), force)
    elif output is not None:
        check_output(output, "-o", costs.input_files(), PLANS)
    run = planning.recommend(req)
    from pptune.plan.fewer import fewer_gpus_note

    hint = fewer_gpus_note(req, run)  # a whole recommend again, where the bubble is large
    run.result.notes += [hint] if hint else []
    for note in [*version_notes, *run.notes]:
        _say(note)
    from pptune.report.plans import plan_file

    if emit is not None:
        _emit(run, emit, plan_rank, output, force, versions)
        if output is not None:  # stdout is free of the files: the report, as without --emit
            _show_plans(run, train_tokens, out)
        return
    doc = plan_file(run.result, run.names, run.global_batch, run.origin, run.request,
                    train_tokens=train_tokens, model_flops_per_step=run.model_flops_per_step,
                    peak_flops=run.peak_flops,
                    cost_notes=run.costs.notes if run.costs is not None else ())
    text = doc.model_dump_json(indent=2)
    if output is not None and run.result.plans:  # no plan: the file is left as it was
        from pptune.schemas import write_atomic

        _wrote(write_atomic(output, text + "\n"))
    elif output is not None:
        _say(f"{output} not written: no plan fits")
    if out.as_json:  # with no plan too: its rejections and notes say why (exit 1 below)
        typer.echo(text)
    if not run.result.plans:
        from pptune.plan.unfit import no_plan_message

        for note in run.result.notes:
            _say(f"note: {note}")
        raise NoFeasiblePlan(no_plan_message(run))
    if not out.as_json:
        _show_plans(run, train_tokens, out)


def _show_plans(run: Any, train_tokens: float | None, out: OutputOptions) -> None:
    from pptune.report.plans import plans_table, rejected_line, why_lines

    console = _out()
    console.print(plans_table(run.result, run.global_batch * run.table.seq_len, train_tokens,
                              width=console.width, model_flops_per_step=run.model_flops_per_step,
                              peak_flops=run.peak_flops))
    plans = run.result.plans  # the gradient bytes the winner was priced with
    factor = run.request_for(plans[0].key).grad_bytes_factor if plans else 1.0
    for line in why_lines(run.result, factor):
        console.print(line, highlight=False, markup=False)
    console.print(rejected_line(run.result), highlight=False, markup=False)
    for note in run.result.notes:
        console.print(f"note: {note}", highlight=False, markup=False)
    if out.timeline:
        from pptune.costmodel.search import evaluate
        from pptune.plan.emit import listed_job
        from pptune.report.timeline import timeline_text

        w = run.result.plans[0]
        job = listed_job(run, w)  # its own cost key, priced as listed (--framework: as run)
        full = evaluate(job.table, job.request, w.spec, keep_events=True)
        from pptune.report.plans import timeline_windows

        for label, window in timeline_windows(full.sim, w.pp, w.num_microbatches):
            head = f"timeline of plan 1 (one pipeline, {w.pp} GPU{'s' * (w.pp > 1)})"
            console.print(f"{head}, {label}:" if label else f"{head}:", highlight=False,
                          markup=False)
            console.print(timeline_text(window, width=out.width))


def _emit(run: Any, framework: str, rank: int, output: Path | None, force: bool,
          versions: Any = None) -> None:
    from pptune.plan import emit as emit_mod

    if not run.result.plans:
        from pptune.plan.unfit import no_plan_message

        for note in run.result.notes:
            _say(f"note: {note}")
        raise NoFeasiblePlan(no_plan_message(run))
    emitted = emit_mod.emit(framework, run, rank, output, versions)
    for note in emitted.notes:
        _say(note)
    _say(emitted.summary())
    if output is None:
        for name, text in emitted.files.items():
            typer.echo(f"# ----- {name}")
            typer.echo(text.rstrip("\n"))
        return
    for written in emit_mod.write(emitted, output, force):
        _wrote(written)


# --------------------------------------------------------------------------- presets / schema

@app.command("presets", help="List the built-in model and GPU presets with their numbers.\n\n  pptune presets --json")
@_guard
def presets_cmd(as_json: bool = typer.Option(False, "--json", help="machine-readable")) -> None:
    from pptune.report.presets import presets_json, presets_tables

    if as_json:
        typer.echo(dumps_json(presets_json(), indent=2))
        return
    out = _out()
    for table in presets_tables():
        _show(out, table)


SCHEMA_HELP = """Print the JSON Schema of a file pptune reads or writes.

\b
  pptune schema profile     (what pptune probe writes and --profile reads)
  pptune schema plan        (what pptune recommend --json / -o writes)
  pptune schema config      (pptune's own training config for check-config)
"""


@app.command("schema", help=SCHEMA_HELP)
@_guard
def schema_cmd(kind: str = typer.Argument(..., help="profile, plan or config")) -> None:
    from pptune import schemas

    models: dict[str, Any] = {
        "profile": schemas.Profile, "plan": schemas.PlanFile, "config": schemas.TrainingConfig,
    }
    if kind not in models:
        raise BadInput(f"unknown schema {kind!r}; choose one of: {', '.join(models)}")
    typer.echo(dumps_json(models[kind].model_json_schema(), indent=2))


def _register_modules() -> None:
    """Commands that live in their own modules (each imports its heavy parts lazily)."""
    from pptune.cli import calibrate as cli_calibrate
    from pptune.cli import check as cli_check
    from pptune.cli import observe as cli_observe
    from pptune.cli import probe as cli_probe
    from pptune.cli import tune as cli_tune
    from pptune.cli import validate as cli_validate

    app.command("check-config", help=cli_check.CHECK_HELP)(_guard(cli_check.check_config))
    app.command("probe", help=cli_probe.HELP)(_guard(cli_probe.probe))
    app.command("validate", help=cli_validate.HELP)(_guard(cli_validate.validate))
    app.command("trace-report", help=cli_observe.TRACE_REPORT_HELP)(_guard(cli_observe.trace_report))
    app.command("monitor", help=cli_observe.MONITOR_HELP)(_guard(cli_observe.monitor))
    app.command("tune", help=cli_tune.HELP)(_guard(cli_tune.tune))
    app.command("calibrate", help=cli_calibrate.HELP, cls=cli_calibrate.InOrder)(
        _guard(cli_calibrate.calibrate))


_register_modules()


def main() -> None:
    try:
        app()
    except PptuneError as exc:  # raised outside a guarded command
        print(f"pptune: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
