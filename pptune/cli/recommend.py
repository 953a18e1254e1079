"""``pptune recommend``: search the plans, rank them, explain the winner, write files.

Parse -> call ``pptune.plan.recommend`` -> render (the table, --json, -o, --emit); the
search and every number live in ``pptune.plan``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer

from pptune import limits
from pptune.cli.emit_flags import check_emit_flags, framework_versions, given
from pptune.cli.file_flags import framework_version_option
from pptune.cli.options import Use, uses
from pptune.cli.util import check_width
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import wrote as _wrote
from pptune.errors import BadInput, NoFeasiblePlan
from pptune.files import PLANS, check_folder, check_output
from pptune.options import CostOptions, OutputOptions, PlanSpace

RECOMMEND_HELP = """Find the fastest pipeline plan that fits, and explain it.

\b
  pptune recommend --gpus 8
  pptune recommend --gpus 64 --model llama3-70b --tp 8 --json -o plans.json
  pptune recommend --gpus 8 --emit megatron -o launch/
  pptune recommend --gpus 8 --framework torchtitan
  pptune recommend --gpus 8 --emit torchtitan \\
      --framework-version torchtitan=0.3.0

Costs come from --profile, else --model/--gpu presets, else ./pptune-profile.json,
else the embedded default (llama3-8b on h100-sxm). Exit 1 when no plan fits.
"""


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
    check_width(out.width)
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
