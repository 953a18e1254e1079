"""`pptune trace-report` and `pptune monitor`: what a real run measured.

Parse -> call -> render -> exit code; the arithmetic lives in
``pptune.observe.trace_report`` and ``pptune.observe.monitor``. Exit 0 when every
device is busy enough, 1 when one is flagged (a finding), 2 on bad input or no
GPU to monitor. Tables and ``--json`` go to stdout, findings and progress to
stderr.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from pptune import limits
from pptune.cli.util import out_console, show
from pptune.errors import EXIT_FINDINGS, BadInput
from pptune.files import dumps_json
from pptune.report.fmt import fmt_pct, fmt_seconds

TRACE_REPORT_HELP = """\
Measured busy, communication and idle share per rank from torch.profiler traces.

Reads Chrome traces written by torch.profiler's export_chrome_trace (plain or
gzipped): one file per rank, or one merged file whose ranks are distinct pids.
Busy is the union of the rank's GPU kernels over all its streams, or of its
top-level CPU ops when the trace has no kernels; NCCL and gloo kernels and ops
are communication, shown apart and never counted as busy. The window runs from
the first to the last event of all traces, or over the last N ProfilerStep#k
annotations (--steps N), or between --window-start-us and --window-end-us
(microseconds from the first event, as trace viewers show them). A rank busy
less than --min-busy of the window (default 0.6) is flagged: its pipeline
bubble is too large.

Idle is the window less busy, so it holds the exposed comm: the time the rank's
communication runs while none of its compute does (JSON exposed_comm_s).
pptune's predicted bubble counts communication that compute waits on as busy:
compare it with idle less exposed comm (a receive waiting on its sender runs
as communication too, so a measured bubble lies between that and idle).

Exit codes: 0 every rank busy enough, 1 a rank flagged, 2 unreadable or invalid
input.

\b
Examples:
  pptune trace-report rank0.json rank1.json rank2.json rank3.json --steps 3
  pptune trace-report merged_trace.json.gz --json
"""

MONITOR_HELP = """\
Sample GPU utilisation and memory through NVML while a training job runs.

Reads nvmlDeviceGetUtilizationRates (the share of time a kernel was running)
and memory used on every GPU each --interval seconds for --duration seconds,
then prints per GPU the average and lowest utilisation and the peak memory.
A GPU averaging under --min-util (default 0.6) is flagged: the pipeline bubble
is too large. Ctrl-C stops early and reports what was sampled.

Exit codes: 0 every GPU busy enough, 1 a GPU flagged, 2 bad flags or no GPU
(NVML not available).

\b
Example, in a second shell while training runs:
  pptune monitor --interval 0.5 --duration 30
  pptune monitor --duration 60 --json > util.json
"""


# samples a monitor run keeps: a week at one per second
MAX_SAMPLES = 7 * 24 * 3600


def _print(renderable: object) -> None:
    out = out_console()
    show(out, renderable)


def _fraction(flag: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise BadInput(f"{flag} must be a fraction in [0, 1] (got {value:g}); e.g. {flag} 0.6")


def trace_report(
    traces: Annotated[
        list[Path],
        typer.Argument(
            help="Chrome trace files (.json or .json.gz): one per rank, or one merged file.",
            metavar="TRACE.json",
            show_default=False,
        ),
    ],
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts instead of the table.")
    ] = False,
    min_busy: Annotated[
        float, typer.Option("--min-busy", help="Flag a rank busy less than this share (0-1).")
    ] = 0.6,
    window_start_us: Annotated[
        float | None,
        typer.Option(
            "--window-start-us", help="Window start, microseconds from the first event.",
            show_default=False,
        ),
    ] = None,
    window_end_us: Annotated[
        float | None,
        typer.Option(
            "--window-end-us", help="Window end, microseconds from the first event.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        int | None,
        typer.Option(
            "--steps", help="Measure over the last N ProfilerStep#k annotations.",
            show_default=False,
        ),
    ] = None,
) -> None:
    from pptune.observe.render import trace_report_table
    from pptune.observe.trace_report import analyze, load_trace

    _fraction("--min-busy", min_busy)
    for flag, value in (("--window-start-us", window_start_us), ("--window-end-us", window_end_us)):
        if value is not None and not math.isfinite(value):
            raise BadInput(f"{flag} must be a finite number of microseconds (got {value})")
    from pptune.files import distinct_inputs
    from pptune.observe.trace_file import MAX_TRACE_BYTES

    traces, twice = distinct_inputs(traces, "trace", MAX_TRACE_BYTES, "one trace is one "
                                    "rank's, or one merged file of every rank's")
    report = analyze(
        [load_trace(p) for p in traces],
        min_busy=min_busy,
        window_start_us=window_start_us,
        window_end_us=window_end_us,
        steps=steps,
    )
    for note in (*twice, *report.notes):
        typer.echo(f"pptune: {note}", err=True)
    if json_output:
        typer.echo(dumps_json(report.to_json(), indent=2))
    else:
        _print(trace_report_table(report))
    for d in report.devices:
        if d.flagged:
            typer.echo(
                f"pptune: finding: rank {d.rank} busy {fmt_pct(d.busy_share)} of "
                f"{fmt_seconds(report.window_s)}, under {fmt_pct(report.min_busy)} "
                f"(idle {fmt_seconds(d.idle_s)}, of it exposed comm "
                f"{fmt_seconds(d.exposed_comm_s)}; comm {fmt_seconds(d.comm_s)}): the pipeline "
                "bubble or exposed communication is too large; try more micro-batches or an "
                "interleaved / zero-bubble schedule",
                err=True,
            )
    if report.flagged:
        raise typer.Exit(EXIT_FINDINGS)


def monitor(
    interval: Annotated[
        float, typer.Option("--interval", help="Seconds between samples.")
    ] = 0.5,
    duration: Annotated[
        float, typer.Option("--duration", help="Seconds to sample for.")
    ] = 10.0,
    min_util: Annotated[
        float,
        typer.Option("--min-util", help="Flag a GPU averaging under this utilisation (0-1)."),
    ] = 0.6,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print JSON for scripts instead of the table.")
    ] = False,
) -> None:
    from pptune.observe.monitor import collect, n_samples, summarize
    from pptune.observe.nvml import nvml_gpus
    from pptune.observe.render import monitor_table

    if not interval > 0:
        raise BadInput(f"--interval must be > 0 seconds (got {interval:g})")
    if not duration > 0:
        raise BadInput(f"--duration must be > 0 seconds (got {duration:g})")
    found = limits.problems(
        limits.problem("--interval", interval, 0, limits.MAX_TIMEOUT_S, lo_open=True),
        limits.problem("--duration", duration, 0, limits.MAX_TIMEOUT_S, lo_open=True),
    )
    if found:
        raise BadInput("; ".join(found))
    if duration / interval > MAX_SAMPLES:  # every sample is kept in memory
        raise BadInput(f"--duration {duration:g} / --interval {interval:g} is over "
                       f"{MAX_SAMPLES:,} samples; sample less often")
    _fraction("--min-util", min_util)
    with nvml_gpus() as gpus:
        typer.echo(
            f"pptune: sampling {len(gpus.names)} GPU(s) every {fmt_seconds(interval)}, "
            f"{n_samples(interval, duration)} samples (Ctrl-C stops early)",
            err=True,
        )
        samples, elapsed_s, stopped = collect(gpus.read_sample, interval, duration)
        if not samples:
            raise BadInput("stopped before the first sample: nothing to report")
        report = summarize(
            samples,
            gpus.names,
            mem_total_bytes=gpus.mem_total_bytes,
            min_util=min_util,
            interval_s=interval,
            elapsed_s=elapsed_s,
            stopped_early=stopped,
        )
    if json_output:
        typer.echo(dumps_json(report.to_json(), indent=2))
    else:
        _print(monitor_table(report))
    for g in report.gpus:
        if g.flagged:
            typer.echo(
                f"pptune: finding: GPU {g.index} ({g.name}) averaged "
                f"{fmt_pct(g.avg_util_share)} utilisation, under {fmt_pct(report.min_util)}: "
                "the pipeline bubble is too large; try more micro-batches or an "
                "interleaved / zero-bubble schedule",
                err=True,
            )
    if report.flagged:
        raise typer.Exit(EXIT_FINDINGS)
