"""`pptune probe`: parse flags -> run the probe -> write the profile -> render.

The measuring lives in pptune.probe (which imports torch lazily); this module
only turns flags into ``ProbeOptions``, shows progress on stderr, writes the
file atomically and prints the summary (or ``--json``) on stdout.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from pptune import limits
from pptune.cli.util import out_console, show, wrote
from pptune.errors import BadInput
from pptune.files import PROFILE, check_output
from pptune.options.kinds import parse_ints, preset_name
from pptune.probe.options import DEFAULT_OUTPUT, DeviceChoice, DType
from pptune.probe.units import parse_bytes

if TYPE_CHECKING:
    from rich.progress import Progress

# where stderr is no terminal, a progress line at most this often (seconds): a CI log
# shows the probe alive without a line per layer of a fast one
PLAIN_EVERY_S = 30.0
# how often the plain lines' thread looks whether a step has run ``PLAIN_EVERY_S`` without
# a line (seconds): a line comes at most this late; the thread stops within it, or at once
# when the phase ends (an Event wakes it)
PLAIN_POLL_S = 1.0

HELP = """Measure per-layer costs and link bandwidth on this machine; write a profile.

For every layer of the model and every micro-batch size: forward time,
backward split into input-gradient (B) and weight-gradient (W) time,
parameter, activation and output bytes (medians over repeats, with their
spread). Then point-to-point and all-reduce sweeps between local processes
(NCCL on GPUs, gloo on CPU), fitted to latency + bytes / bandwidth, and the
GPU inventory through NVML. Under torchrun it joins the job and also measures
the link to another node; rank 0 writes the file.

Examples:

\b
  pptune probe --quick -o profile.json
  pptune probe --model gpt-small --micro-batch-sizes 1,2,4,8
  pptune probe --hf-config llama/config.json --seq-len 2048 --no-comm
  pptune probe --module mymodel:layers --nccl-tests ar.txt --nccl-tests sr.txt
  torchrun --nnodes 2 --nproc-per-node 8 $(which pptune) probe -o profile.json
"""


class RichReporter:
    """Progress and warnings on stderr; never touches stdout. On a terminal rich's bar;
    elsewhere (a CI log, a file) rich draws the bar once, at its end, so a long phase (a
    CPU probe of a large MoE: minutes a layer) looked hung: plain lines instead, at the
    start, after the first step (its pace), then at most one every ``every_s`` seconds,
    and at the end. One step can take minutes by itself (the trial's R7: six silent
    minutes on a MoE block): a daemon thread (``beating``) looks every ``poll_s`` seconds
    and says a step still running once it has run ``every_s`` seconds without a line
    (``beat``); ``finish`` stops and joins it, so nothing is said after the phase."""

    def __init__(self, console: Console, every_s: float = PLAIN_EVERY_S,
                 clock: Callable[[], float] = time.monotonic,
                 poll_s: float = PLAIN_POLL_S) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: Any = None
        self.every_s, self.clock, self.poll_s = every_s, clock, poll_s
        self.plain: _Plain | None = None
        self.beating: threading.Thread | None = None  # the plain lines' thread, while one runs
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the plain state and its lines, between the threads

    def warn(self, message: str) -> None:
        self.console.print(Text(f"pptune: {message}"), soft_wrap=True)

    def start(self, label: str, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.finish()
        if not self.console.is_terminal:
            with self._lock:
                self.plain = _Plain(label, total, self.clock())
                self._line(f"0/{total} ...")
            self._stop.clear()
            self.beating = threading.Thread(target=self._beat, name="pptune-probe-progress",
                                            daemon=True)
            self.beating.start()
            return
        self.progress = Progress(
            TextColumn("{task.fields[label]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
            transient=False,
            refresh_per_second=4,
        )
        self.progress.start()
        self.task = self.progress.add_task("", total=total, label=label)

    def begin(self, description: str) -> None:
        """What the step now running measures (said if it is still running)."""
        with self._lock:
            if self.plain is not None:
                self.plain.running = description

    def advance(self, description: str | None = None) -> None:
        with self._lock:
            if self.plain is not None:
                plain, now = self.plain, self.clock()
                plain.done += 1
                plain.step_began, plain.running = now, None
                if plain.done == 1 or now - plain.said >= self.every_s:
                    plain.said = now
                    self._line(f"{plain.done}/{plain.total}, {now - plain.began:.0f} s"
                               + (f", {description}" if description else ""))
        if self.progress is not None:
            self.progress.update(self.task, advance=1, description=description or "")

    def beat(self) -> None:
        """Say the step running, if it has run ``every_s`` seconds and no line came in as
        long (the thread's tick)."""
        with self._lock:
            plain = self.plain
            if plain is None or plain.done >= plain.total:
                return
            now = self.clock()
            ran = now - plain.step_began
            if ran >= self.every_s and now - plain.said >= self.every_s:
                plain.said = now
                self._line(f"{plain.done + 1}/{plain.total}"
                           + (f" ({plain.running})" if plain.running else "")
                           + f": still running after {ran:.0f} s")

    def _beat(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.beat()

    def finish(self) -> None:
        if self.beating is not None:
            self._stop.set()
            self.beating.join()
            self.beating = None
        with self._lock:
            if self.plain is not None:
                plain = self.plain
                self._line(f"{plain.done}/{plain.total} done, "
                           f"{self.clock() - plain.began:.0f} s")
                self.plain = None
        if self.progress is not None:
            self.progress.update(self.task, description="done")
            self.progress.stop()
            self.progress = None

    def _line(self, text: str) -> None:
        assert self.plain is not None
        self.console.print(Text(f"pptune: {self.plain.label}: {text}"), soft_wrap=True)


@dataclass
class _Plain:
    """A phase reported in plain lines: its label and size, the steps done, when it
    began, when a line last said it and when the step running began (clock seconds),
    and what that step measures (``RichReporter.begin``; None: not said)."""

    label: str
    total: int
    began: float
    done: int = 0
    said: float = 0.0
    step_began: float = 0.0
    running: str | None = None

    def __post_init__(self) -> None:
        self.said = self.step_began = self.began


def _sizes(text: str | None) -> list[int] | None:
    return parse_ints(text, "--micro-batch-sizes")  # the comma lists' one rule


def _check_numbers(timeout: float | None, repeats: int | None, warmup: int | None,
                   threads: int | None, seq_len: int | None) -> None:
    """Non-finite values and the caps; the probe's own options check the lower bounds."""
    found = limits.problems(*(
        limits.problem(flag, value, -math.inf, hi) for flag, value, hi in (
            ("--timeout", timeout, limits.MAX_TIMEOUT_S), ("--repeats", repeats, limits.MAX_STEPS),
            ("--warmup", warmup, limits.MAX_STEPS), ("--threads", threads, 4096),
            ("--seq-len", seq_len, limits.MAX_SEQ_LEN),
        ) if value is not None
    ))
    if found:
        raise BadInput("; ".join(found))


def probe(
    model: str | None = typer.Option(
        None, "--model", metavar="NAME", help="built-in model preset (default gpt-small, the CPU demo size)"
    ),
    hf_config: Path | None = typer.Option(
        None, "--hf-config", help="Hugging Face config.json: measure standard decoder blocks of that shape"
    ),
    module: str | None = typer.Option(
        None, "--module", metavar="PKG.MOD:FACTORY",
        help="your layers: 'pkg.mod:factory', factory() -> (list of nn.Module, sample input "
        "for micro-batch 1); see pptune.probe.models",
    ),
    micro_batch_sizes: str | None = typer.Option(
        None, "--micro-batch-sizes", metavar="1,2,4", help="comma-separated micro-batch sizes [default: 1,2,4]"
    ),
    repeats: int | None = typer.Option(None, "--repeats", help="timed repeats per measurement [default: 10]"),
    warmup: int | None = typer.Option(None, "--warmup", help="untimed warm-up runs [default: 3]"),
    no_comm: bool = typer.Option(False, "--no-comm", help="skip the bandwidth sweeps (links get noted defaults)"),
    nccl_tests: list[Path] = typer.Option(
        [], "--nccl-tests", metavar="FILE",
        help="read links from nccl-tests output (all_reduce_perf, sendrecv_perf) instead of "
        "measuring; repeat the flag for several files",
    ),
    max_bytes: str | None = typer.Option(
        None, "--max-bytes", metavar="SIZE", help="largest message of the sweeps, e.g. 64M [default: 64M on CPU, 256M on GPU]"
    ),
    timeout: float | None = typer.Option(
        None, "--timeout", help="seconds a rank may stay silent before the probe gives up [default: 120]"
    ),
    quick: bool = typer.Option(
        False, "--quick", help="CI smoke run: gpt-small on CPU, micro-batch 1,2, 5 repeats, 4 MiB sweeps"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the profile JSON on stdout instead of the tables"),
    output: Path = typer.Option(DEFAULT_OUTPUT, "-o", "--output", help="profile file to write"),
    seq_len: int | None = typer.Option(None, "--seq-len", help="override the model's sequence length"),
    device: DeviceChoice | None = typer.Option(
        None, "--device", help="where to measure [default: auto = cuda if available, else cpu]"
    ),
    dtype: DType = typer.Option(DType.AUTO, "--dtype", help="parameter dtype for presets and --hf-config (auto: fp32 on CPU, bf16 on CUDA)"),
    threads: int | None = typer.Option(
        None, "--threads",
        help="torch threads on CPU [default: 1, one core per pipeline rank as in the 2-rank gloo runs]",
    ),
) -> None:
    stderr = Console(stderr=True)
    _check_numbers(timeout, repeats, warmup, threads, seq_len)
    check_output(output, "-o", [("--hf-config", hf_config),  # before the measurement
                                *(("--nccl-tests", n) for n in nccl_tests)], PROFILE)
    from pptune.probe.build import ProbeOptions, run_probe
    from pptune.schemas import write_atomic

    try:
        opts = ProbeOptions(
            model=preset_name(model),
            hf_config=hf_config,
            module=module,
            micro_batch_sizes=_sizes(micro_batch_sizes),
            repeats=repeats,
            warmup=warmup,
            comm=not no_comm,
            nccl_tests=list(nccl_tests),
            max_bytes=parse_bytes(max_bytes) if max_bytes is not None else None,
            timeout_s=timeout,
            quick=quick,
            device=device,
            dtype=dtype,
            threads=threads,
            seq_len=seq_len,
        )
        outcome = run_probe(opts, RichReporter(stderr))
        if outcome.profile is None:
            typer.echo(
                f"pptune: rank {outcome.rank}: bandwidth sweeps done; rank 0 writes the profile",
                err=True,
            )
            return
        text = outcome.profile.model_dump_json(indent=2)
        wrote(write_atomic(output, text + "\n"), "profile written to")
    except KeyboardInterrupt:
        typer.echo("pptune: interrupted; no profile written", err=True)
        raise typer.Exit(130) from None
    if as_json:
        typer.echo(text)
        return
    from pptune.probe.summary import summary

    out = out_console()
    for part in summary(outcome.profile):
        show(out, part)
