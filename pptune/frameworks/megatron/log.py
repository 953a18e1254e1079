"""Megatron-LM's training log: iteration lines and memory reports.

``training_log`` in megatron/training/training.py (NVIDIA/Megatron-LM at
d98e8a6, lines 3567-3620; the same keys since Megatron-LM v2) prints, every
``--log-interval`` iterations (and after the first, "to document
initialization overhead"), one line on the last rank:

    [2026-08-22 15:22:22.123456] iteration      100/    5000 | consumed samples:
    102400 | elapsed time per iteration (ms): 1234.5 | throughput per GPU
    (TFLOP/s/GPU): 456.7 | learning rate: 1.000000E-04 | global batch size:
    1024 | lm loss: 5.123456E+00 | loss scale: 1.0 | grad norm: 1.234 | number
    of skipped iterations:   0 | number of nan iterations:   0 |

(one line; the timestamp came in 2024, throughput with ``--log-throughput``),
the elapsed time being the mean over the interval. ``report_memory``
(megatron/training/utils/common_utils.py, lines 313-334) prints, on the first
data-parallel rank of every model-parallel rank, after the first logged
iterations:

    [Rank 0] (after 10 iterations) memory (MB) | allocated: 1234.56 | max
    allocated: 2345.67 | reserved: 3456.00 | max reserved: 3456.00

The peak memory is the largest ``max reserved`` printed (what the caching
allocator held, MB = 2^20 bytes). The world size is the one ``validate_args``
(megatron/training/arguments.py) prints on rank 0 at start-up,

    using world size: 16, data-parallel size: 8, context-parallel size: 1, ...

or the argument dump's ``world_size ........ 16`` line (``_print_args``, the same
file); Megatron-DeepSpeed prints both alike. The same two state the job's other sizes
(tensor-, pipeline- and context-parallel, ``seq_length``, ``micro_batch_size``), which
calibrate holds against the config (``JobLog.stated``). Those lines, and the one
``_load_base_checkpoint`` (megatron/training/checkpointing.py) prints on
resuming,

     loading distributed checkpoint from /ckpt at iteration 12000

start a run: a log with several runs is split at them (logruns.py).

With ``--timing-log-level`` 1 or 2, ``training_log`` then logs its timers
(``timers.log(timers_to_log, normalizer=args.log_interval)``: ms an iteration
over the interval; megatron/core/timers.py ``get_all_timers_string``, NVIDIA/
Megatron-LM 00caa53), by ``--timing-log-option`` minmax (the default), max or all:

    (min, max) time across ranks (ms):
        forward-backward ...............................: (1234.56, 1240.12)
        all-grads-sync .................................: (80.00, 95.50)

    max time across ranks (ms):
        forward-backward ...............................: 1240.12

    times across ranks (ms):
      forward-backward:
         rank  0: 1234.56

Each timer's slowest rank (what the step waits for) goes to the iteration line
before the block; the block ends at the first line of another form.

From megatron-core 0.16 (core_v0.16.0; training.py ``should_reset = not
is_first_iteration``) the line printed after a run's first iteration does not reset
the interval's timer, its iteration counts nor its timers, so the next line's mean
includes that first iteration (start-up, compilation, the allocator's first growth).
Where the run's first line is at no multiple of the log interval (the argument dump's
``log_interval``, else the spacing of the later lines), it is that line, and the next
line's time is taken as its interval's without it, exactly: ``(n t_next - t_first) /
(n - 1)``, ``n`` the iterations the next line's mean covers; its timers and TFLOP/s
likewise (its timers are divided by ``log_interval`` whatever the iterations they
cover: ``log_interval (T_next - T_first) / (n - 1)``). Where the interval is 1 the
release cannot be told from the lines, and the run's second line is left out as the
first's neighbour.

A line whose ``lm loss`` (or any ``... loss``) is nan, or whose interval
counted skipped or nan iterations (``number of skipped iterations: N``,
``number of nan iterations: N``; ``training_log`` resets both after each
line), is marked as no steady measurement; ``global batch size`` is the
batch the line ran (it grows during ``--rampup-batch-size``).
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from pptune.frameworks.common.joblog import CLAUSE, MIB, JobLog, LoggedStep, clean, fields, number
from pptune.frameworks.common.logruns import Steps, runs

TITLE = "Megatron-LM"
ITERATION = re.compile(r"\biteration\s+(\d+)\s*/\s*\d+\s*\|(.*)$")
MEMORY = re.compile(r"\[Rank (\d+)\].*memory \(MB\)\s*\|(.*)$")
ELAPSED = "elapsed time per iteration (ms)"
TFLOPS = "throughput per GPU (TFLOP/s/GPU)"
WORLD = re.compile(r"using world size:\s*(\d{1,9})\b")
# the world-size line's other sizes (arguments.py validate_args)
WORLD_SIZES = {"tp": re.compile(r"tensor-model-parallel size:\s*(\d{1,9})\b"),
               "pp": re.compile(r"pipeline-model-parallel size:\s*(\d{1,9})\b"),
               "cp": re.compile(r"(?<!hierarchical )context-parallel size:\s*(\d{1,9})\b")}
ARG = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*\.+\s*(\d{1,9})\s*$")  # _print_args: name .... value
ARGS = {"tensor_model_parallel_size": "tp", "pipeline_model_parallel_size": "pp",
        "context_parallel_size": "cp", "seq_length": "seq_len",
        "micro_batch_size": "micro_batch_size"}
RESUME = re.compile(r"\bloading (?:distributed )?checkpoint from \S.* at iteration \d+")
BATCH = "global batch size"
TIMERS = re.compile(r"\btimes? across ranks \(ms\):\s*$")
TIMER = re.compile(r"(?:^|\s)([a-z][a-z0-9-]*) \.+: (?:\(([\d.]+), ([\d.]+)\)|([\d.]+))\s*$")
TIMER_NAME = re.compile(r"(?:^|\s)([a-z][a-z0-9-]*):\s*$")  # --timing-log-option all
TIMER_RANK = re.compile(r"\brank\s+\d+: ([\d.]+)\s*$")
COUNTS = (("number of skipped iterations", "skipped iterations"),
          ("number of nan iterations", "nan iterations"))


def detect(text: str) -> bool:
    return any(ITERATION.search(clean(line)) and ELAPSED in line for line in text.splitlines())


def read(text: str, core_016: bool = True) -> JobLog:
    """The log's lines; ``core_016``: the first iteration's line resets nothing (module
    docstring), False for Megatron-DeepSpeed's training loop (Megatron-LM's of 2021-2022)."""
    steps = Steps()
    ranks = set()
    timers = _Timers(steps)
    interval = None
    stated: dict[str, int] = {}
    for raw in text.splitlines():
        line = clean(raw)
        if timers.read(line):
            continue
        arg = ARG.search(line)
        if arg and arg.group(1) == "log_interval":
            interval = int(arg.group(2)) or None
            continue
        if arg and arg.group(1) in ARGS:
            stated[ARGS[arg.group(1)]] = int(arg.group(2))
            continue
        said = WORLD.search(line)
        if said:
            stated.update((k, int(m.group(1))) for k, r in WORLD_SIZES.items()
                          if (m := r.search(line)))
        count = int(said.group(1)) if said else (
            int(arg.group(2)) if arg and arg.group(1) == "world_size" else None)
        if count is not None or RESUME.search(line):
            steps.start(count)
            continue
        it = ITERATION.search(line)
        if it and ELAPSED in line:
            kv = fields(it.group(2))
            try:
                ms = number(kv[ELAPSED])
                tflops = number(kv[TFLOPS]) if TFLOPS in kv else None
                batch = int(number(kv[BATCH])) if BATCH in kv else None
            except (KeyError, ValueError):
                continue
            steps.step(LoggedStep(int(it.group(1)), step_s=ms / 1e3, tflops_per_gpu=tflops,
                                  global_batch=batch, unsteady=_unsteady(kv)))
            continue
        mem = MEMORY.search(line)
        if mem:
            kv = fields(mem.group(2))
            try:
                reserved = number(kv["max reserved"]) * MIB
            except (KeyError, ValueError):
                continue
            ranks.add(int(mem.group(1)))
            steps.memory(reserved)
    timers.close()
    peak = steps.peak()
    what = (f"max reserved, the largest of {len(ranks)} rank(s) reported"
            if peak is not None else "")
    world = steps.world
    lines, notes = first_iteration(steps.steps, interval) if core_016 \
        else (tuple(steps.steps), ())
    return JobLog("megatron", TITLE, lines, peak, what, notes=notes, world_size=world or None,
                  world_what="the world size its log prints" if world else "",
                  stated=tuple(stated.items()))


def first_iteration(steps: list[LoggedStep], interval: int | None
                    ) -> tuple[tuple[LoggedStep, ...], tuple[str, ...]]:
    """Each run's (logruns.runs) second iteration's line without the run's first iteration
    in its mean (module docstring), and a note for the last run's, the one calibrated."""
    out: list[LoggedStep] = []
    notes: list[str] = []
    parts = runs(steps)
    for k, part in enumerate(parts):
        fixed, note = _without_first(part, interval)
        out += fixed
        notes += [note] if note and k == len(parts) - 1 else []
    return tuple(out), tuple(notes)


def _without_first(part: list[LoggedStep], interval: int | None
                   ) -> tuple[list[LoggedStep], str]:
    """One run's lines, each copy of its second iteration's line taken without the first
    iteration (every rank's copy alike), and the note ("" where nothing changed)."""
    its = sorted({s.iteration for s in part})
    if len(its) < 2:
        return part, ""
    first = next(s for s in part if s.iteration == its[0])
    gap = its[1] - its[0]
    every = interval or (its[2] - its[1] if len(its) > 2 else gap)
    if every > 1 and its[0] % every == 0:  # a line at the interval: no first-iteration line
        return part, ""
    if every == 1:  # the release cannot be told: the first line's neighbour left out
        # a whole clause about the line (joblog.CLAUSE), without the ", " that joins kinds
        said = (f"{CLAUSE}averages in iteration {its[0]} too: megatron-core 0.16 on does not "
                "reset the interval timer after the run's first line (training.py "
                "should_reset)")
        return [replace(s, unsteady=", ".join(filter(None, [s.unsteady, said])))
                if s.iteration == its[1] else s for s in part], ""
    n = gap + 1  # iterations from the run's first to the second line
    second = next(s for s in part if s.iteration == its[1])
    if first.step_s is None or second.step_s is None:
        return part, ""
    alone = (n * second.step_s - first.step_s) / (n - 1)
    if not alone > 0:
        return part, ""
    timers = dict(first.timers_ms)

    def taken(s: LoggedStep) -> LoggedStep:
        scale = (s.step_s or alone) / alone
        return replace(
            s, step_s=alone,
            tflops_per_gpu=s.tflops_per_gpu * scale if s.tflops_per_gpu else None,
            # timers.log divides by --log-interval whatever the iterations it covers
            timers_ms=tuple((name, every * (ms - timers[name]) / (n - 1) if name in timers
                             else ms) for name, ms in s.timers_ms))
    return [taken(s) if s.iteration == its[1] else s for s in part], (
        f"iteration {its[1]}'s mean includes the run's first, {its[0]} (megatron-core 0.16 "
        f"on does not reset its timers after that line): taken as ({n} x "
        f"{second.step_s * 1e3:.1f} - {first.step_s * 1e3:.1f}) / {n - 1} = "
        f"{alone * 1e3:.1f} ms")


class _Timers:
    """A timer block after an iteration line (module docstring), fed line by line."""

    def __init__(self, steps: Steps) -> None:
        self.steps = steps
        self.open = False
        self.name: str | None = None  # --timing-log-option all: the timer whose ranks follow
        self.ranks: list[float] = []

    def read(self, line: str) -> bool:
        """Whether the line belongs to a timer block (then it is taken)."""
        if TIMERS.search(line):
            self._flush()
            self.open = True
            return True
        if not self.open:
            return False
        flat = TIMER.search(line)
        if flat:
            self._flush()
            high = flat.group(3) or flat.group(4)
            self.steps.timer(flat.group(1), float(high))
            return True
        rank = TIMER_RANK.search(line)
        if rank and self.name is not None:
            self.ranks.append(float(rank.group(1)))
            return True
        name = TIMER_NAME.search(line)
        if name:
            self._flush()
            self.name = name.group(1)
            return True
        self._flush()
        self.open = False
        return False

    def close(self) -> None:
        """The log ended (an --timing-log-option all block may end it)."""
        self._flush()
        self.open = False

    def _flush(self) -> None:
        if self.name is not None and self.ranks:
            self.steps.timer(self.name, max(self.ranks))
        self.name, self.ranks = None, []


def _unsteady(kv: dict[str, str]) -> str:
    """Why an iteration line is no steady measurement (module docstring); "" if it is."""
    why = [name for key, name in COUNTS if kv.get(key, "0").strip() not in ("0", "")]
    if any(key.endswith("loss") and not math.isfinite(_float(value))
           for key, value in kv.items()):
        why.append("a nan loss")
    return ", ".join(why)


def _float(text: str) -> float:
    try:
        return number(text)
    except ValueError:
        return 0.0
