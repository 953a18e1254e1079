"""``pptune simulate``: one schedule event by event, textbook times or per-layer costs.

Parse -> call ``pptune.plan.whatif`` -> render; no arithmetic here.
"""

from __future__ import annotations

from pathlib import Path

import typer

from pptune.cli.options import Use, option_for, uses
from pptune.cli.util import check_width
from pptune.cli.util import out_console as _out
from pptune.cli.util import say as _say
from pptune.cli.util import show as _show
from pptune.cli.util import wrote as _wrote
from pptune.costmodel.layout_grammar import is_layout
from pptune.errors import BadInput
from pptune.files import SVG, TRACE, check_output, dumps_json, same_file
from pptune.options import CostOptions, OutputOptions, PlanSpace
from pptune.options.kinds import parse_split

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
    split: str | None = typer.Option(None, "--split", help="layers per stage, e.g. 6,6,6,6 or 5,4x14,3 (NxM: M stages of N layers; default even), or a Megatron-LM --pipeline-model-parallel-layout such as 'Et|(tt|)*30mL'"),
    gpus: int | None = typer.Option(None, "--gpus", help="the job's GPUs, whose slowest sets the compute pace as recommend --gpus prices it: a multiple of one pipeline's pp x tp x cp [default: one pipeline's]"),
    costs: CostOptions,
    blocking_send: bool = option_for(PlanSpace, "blocking_send"),
    out: OutputOptions,
    trace: Path | None = typer.Option(None, "--trace", help="write Chrome trace JSON (Perfetto)"),
    svg: Path | None = typer.Option(None, "--svg", help="write the timeline as SVG"),
) -> None:
    from pptune.plan import whatif as simulation

    check_width(out.width)
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
        micro_batch_size=micro_batch_size,
        # E, t, m, L or |: Megatron-LM's layout (its symbols), else layers per stage
        split=None if is_layout(split) else parse_split(split, "--split"),
        layout=split if is_layout(split) else None,
        blocking_send=blocking_send, gpus=gpus,
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
