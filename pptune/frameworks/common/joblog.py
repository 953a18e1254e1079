"""What a training job's own log says: iterations, their time or throughput, peak memory.

Each framework's adapter reads its own log format (``Adapter.read_log``, in
``pptune/frameworks/<name>/log.py``) into a ``JobLog``: one ``LoggedStep``
per line the framework prints for an iteration (or for the last
``log_interval`` iterations, averaged: Megatron-LM and torchtitan print the
mean over the interval), with whatever the line states, the largest peak
memory the log printed and, where it prints it, the job's world size.
``steady_step_s`` turns the steps into one time per step: the median over the
steady iterations (an iteration several ranks printed counted once), the
warm-up left out, and the lines that are no steady
measurement left out with a note: an interval that counted skipped or nan
iterations, or whose loss is nan (Megatron-LM's ``number of skipped
iterations`` and ``number of nan iterations`` count the iterations of the
interval the line closes: ``training_log`` resets them after each line), and
a line whose global batch is not the job's (a batch-size ramp-up; when no line
states the job's batch, the log is of another job and is refused). A log of
several runs is first cut to its last (``logruns.last_run``).

A line that states no time but a throughput is converted with the job's
batch (``JobSize``): torchtitan's ``tps`` is tokens per second per GPU
(``ntokens_since_last_log / (time_delta * non_data_parallel_size)`` with
the local batch's tokens, torchtitan/components/metrics.py), so a step is
``global_batch * seq_len / (gpus * tps)``; DeepSpeed's ``CurrSamplesPerSec``
is the global batch over the step (deepspeed/utils/timer.py).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from pptune.errors import BadInput

MIB = 1024**2
GIB = 1024**3
ANSI = re.compile(r"\x1b\[[0-9;]*m")  # colour codes (torchtitan's Color)
# an unsteady kind that begins so is a whole clause about the line's figure (Megatron-LM's
# second line at --log-interval 1: "its figure averages in iteration 1 too: ..."); the
# others say what its interval counted ("skipped iterations", "a nan loss")
CLAUSE = "its figure "


@dataclass(frozen=True)
class LoggedStep:
    """One iteration line: its iteration number and what it states."""

    iteration: int
    step_s: float | None = None  # seconds per iteration
    tokens_per_s_per_gpu: float | None = None
    samples_per_s: float | None = None  # the whole job's
    tflops_per_gpu: float | None = None  # as the framework counts model FLOPs
    mfu: float | None = None  # fraction of the GPU's peak, as the framework counts it
    global_batch: int | None = None  # samples a step, where the line states it
    # why the line is no steady measurement, what its interval counts: "skipped
    # iterations, a nan loss" ("" when it is one)
    unsteady: str = ""
    # where the log's runs are told apart (logruns.Steps): the start-up lines printed
    # before the line, the world size last stated, the peak memory printed with or after it
    start: int = 0
    world_size: int | None = None
    memory_bytes: float | None = None
    # the framework's own timers of the step's parts, ms an iteration, the slowest rank's
    # (Megatron-LM's forward-backward, all-grads-sync, optimizer, ...); () when not printed
    timers_ms: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class JobLog:
    framework: str  # the adapter's name
    title: str  # the framework's name in messages
    steps: tuple[LoggedStep, ...]
    peak_memory_bytes: float | None = None  # the largest the log printed
    memory_what: str = ""  # what that figure is ("max reserved over the ranks printed")
    notes: tuple[str, ...] = ()
    world_size: int | None = None  # the GPUs the job ran on, where the log states them
    world_what: str = ""  # the line that states them ("torchtitan's device-mesh line")
    device: str | None = None  # the GPU's name as the log prints it ("NVIDIA H200")
    # no iteration lines: the lines expected and what the log has instead (one clause)
    missing: str = ""
    earlier: str = ""  # the runs before the last, left out (logruns.last_run); "" for one run
    # what the framework calls a line's unit in its own log: Megatron-LM prints
    # "iteration 10/ 100", torchtitan "step: 10", DeepSpeed's engine "step=10"
    unit: str = "iteration"
    # the job's sizes the log states, the last printed (Megatron-LM's argument dump and
    # world-size line): ("tp", 2), ("pp", 4), ("cp", 1), ("seq_len", 8192),
    # ("micro_batch_size", 1); () where it prints none
    stated: tuple[tuple[str, int], ...] = ()
    # the lines say the run's linears were quantized (torchtitan main prints "mfu: N/A"
    # for a run with a quantization converter: components/metrics.py has_quantization)
    quantized: bool = False


@dataclass(frozen=True)
class LogFlops:
    """How a framework's throughput lines count the FLOPs of a token: 6 per matmul
    parameter and the attention products over every key a query has (``causal``: half of
    them), windows not discounted (``pptune.costs.flops.counted_flops_per_token``)."""

    causal: bool
    release: str  # the framework's releases that count so ("Megatron-LM before core_r0.12.0")
    source: str  # the function that counts so, in its file

    @property
    def counts(self) -> str:
        """What this count is, as messages say it."""
        mask = "causal attention halved" if self.causal else "attention's full square"
        return f"{self.release}: {mask}, {self.source}"


@dataclass(frozen=True)
class JobSize:
    """What converts a throughput into seconds per step."""

    global_batch: int  # samples per optimizer step
    seq_len: int  # tokens per sample
    gpus: int


@dataclass(frozen=True)
class SteadyStep:
    step_s: float
    used: tuple[int, ...]  # the iterations whose lines gave the median
    skipped: tuple[int, ...]  # warm-up
    notes: list[str] = field(default_factory=list)


def numbered(unit: str, numbers: Sequence[int]) -> str:
    """``step 20``, ``steps 20, 40`` or ``steps 60-120 (7 lines)``: some lines' numbers
    in the log's own word (``JobLog.unit``), for a message."""
    if len(numbers) == 1:
        return f"{unit} {numbers[0]}"
    if len(numbers) <= 4:
        return f"{unit}s {', '.join(map(str, numbers))}"
    return f"{unit}s {numbers[0]}-{numbers[-1]} ({len(numbers)} lines)"


def clean(line: str) -> str:
    return ANSI.sub("", line).rstrip("\r\n")


def number(text: str) -> float:
    """A number as logs print it: ``5,678``, ``1.2E+01``."""
    return float(text.replace(",", ""))


def seconds_of(step: LoggedStep, size: JobSize | None) -> float | None:
    """The line's seconds per step, from its time or its throughput."""
    if step.step_s is not None:
        return step.step_s
    if size is None:
        return None
    if step.tokens_per_s_per_gpu:
        return size.global_batch * size.seq_len / (size.gpus * step.tokens_per_s_per_gpu)
    if step.samples_per_s:
        return size.global_batch / step.samples_per_s
    return None


def _why(kinds: list[str], where: str) -> str:
    """Why lines are left out: what their intervals counted (``in {where}`` after them,
    where given), then each whole clause (``CLAUSE``)."""
    counted = [k for k in kinds if not k.startswith(CLAUSE)]
    said = (f"{', '.join(counted[:-1])} or {counted[-1]}" if len(counted) > 1
            else "".join(counted))
    return "; ".join([*([said + (f" in {where}" if where else "")] if counted else []),
                      *(k for k in kinds if k.startswith(CLAUSE))])


def steady_step_s(log: JobLog, size: JobSize | None, where: str,
                  warmup: int | None = None) -> SteadyStep:
    """The median seconds per step over the steady lines (module docstring).

    Warm-up: the first line printed (it holds start-up, compilation and the
    allocator's first growth; Megatron-LM prints iteration 1 on purpose "to
    document initialization overhead", torchtitan logs step 1), or, with
    ``warmup``, every line up to iteration ``warmup``. Then the lines of another
    batch and those that are no steady measurement are left out, with a note.
    BadInput when nothing steady is left, or when no line states the job's batch."""
    lines = sorted(log.steps, key=lambda s: s.iteration)
    if not lines:
        raise BadInput(f"{where}: no {log.title} {log.unit} lines found")
    unit = log.unit
    notes: list[str] = []
    lines = _once_each(lines, notes, unit)
    if warmup is None:
        skip = {lines[0].iteration}
        rule = "the first line printed"
    else:
        skip = {s.iteration for s in lines if s.iteration <= warmup}
        rule = f"{unit}s up to {warmup} (--warmup)"
    steady = [s for s in lines if s.iteration not in skip]
    if not steady:
        last = f" (the log's last run; left out: {log.earlier})" if log.earlier else ""
        fix = ("a longer log (the first line holds the start-up, not a step: --warmup 0 "
               "would calibrate on it)" if warmup is None else "a longer log or a smaller "
               "--warmup")
        raise BadInput(f"{where}: its {len(lines)} {log.title} {unit} line(s) are all "
                       f"warm-up ({rule}){last}; give {fix}")
    steady = _of_the_batch(steady, size, log, where, notes)
    bad = [s for s in steady if s.unsteady]
    steady = [s for s in steady if not s.unsteady]
    kinds = list(dict.fromkeys(k for s in bad for k in s.unsteady.split(", ")))
    if not steady:
        if any(k.startswith(CLAUSE) for k in kinds):
            raise BadInput(f"{where}: every steady {log.title} line is left out "
                           f"({_why(kinds, 'its interval')}); give a longer log, or the step "
                           "as --step-s")
        raise BadInput(f"{where}: every steady {log.title} line counts "
                       f"{_why(kinds, '')} in its interval; "
                       f"give a log of {unit}s that ran cleanly, or the step as --step-s")
    if bad:
        where_ = "its interval" if len(bad) == 1 else "their intervals"
        notes.append(f"{numbered(unit, [s.iteration for s in bad])} left out "
                     f"({_why(kinds, where_)})")
    times = [(s.iteration, seconds_of(s, size)) for s in steady]
    known = [(i, t) for i, t in times if t is not None]
    if not known:
        raise BadInput(f"{where}: its {log.title} lines state neither a time nor a throughput "
                       "pptune can turn into seconds per step")
    bad_t = [(i, t) for i, t in known if not t > 0]
    if bad_t:
        raise BadInput(f"{where}: {unit} {bad_t[0][0]} states a step of {bad_t[0][1]:g} s; "
                       "a step takes a positive time")
    if len(known) == 1:
        notes.append(f"the step is one line's, {unit} {known[0][0]}, not a median over "
                     "several: a longer log gives a steadier figure")
    return SteadyStep(statistics.median(t for _, t in known), tuple(i for i, _ in known),
                      tuple(sorted(skip)), notes)


def steady_timers_ms(log: JobLog, used: Sequence[int]) -> dict[str, float]:
    """Each timer's median ms over the steady lines ``used`` (SteadyStep.used) that
    printed it; {} when none did."""
    by: dict[str, list[float]] = {}
    wanted = set(used)
    for s in log.steps:
        if s.iteration in wanted:
            for name, ms in s.timers_ms:
                by.setdefault(name, []).append(ms)
    return {name: statistics.median(values) for name, values in by.items()}


def _once_each(lines: list[LoggedStep], notes: list[str], unit: str) -> list[LoggedStep]:
    """One line per iteration, the first printed (``lines`` sorted stably by iteration):
    the same iteration printed by several ranks (each rank's launcher prefix, ``tee``
    of every rank's output) is one step, not several; a note says so."""
    kept = [s for k, s in enumerate(lines) if k == 0 or s.iteration != lines[k - 1].iteration]
    if len(kept) < len(lines):
        notes.append(f"{len(lines) - len(kept)} line(s) repeat {unit}s already printed "
                     f"(several ranks' output): each {unit} counted once")
    return kept


def warm_up_left_out(skipped: Sequence[int], warmup: int | None,
                     unit: str = "iteration") -> str:
    """What ``steady_step_s`` left out as warm-up, as a run's step source says it:
    ``the warm-up line, iteration 10, left out``."""
    if not skipped:
        return f"no warm-up left out: --warmup {warmup}"
    n = len(skipped)
    if n == 1:
        text = f"the warm-up line, {unit} {skipped[0]}, left out"
    elif n <= 4:
        text = f"the warm-up lines, {unit}s {', '.join(map(str, skipped))}, left out"
    else:
        text = f"{n} warm-up lines, {unit}s {skipped[0]} to {skipped[-1]}, left out"
    return text + (f": --warmup {warmup}" if warmup is not None else "")


def _of_the_batch(steady: list[LoggedStep], size: JobSize | None, log: JobLog, where: str,
                  notes: list[str]) -> list[LoggedStep]:
    """The lines whose global batch is the job's (or unstated); the others (a ramp-up)
    left out with a note; BadInput when every line that states one states another."""
    if size is None:
        return steady
    batch = size.global_batch

    def another(s: LoggedStep) -> bool:
        return s.global_batch is not None and s.global_batch != batch

    other = [s for s in steady if another(s)]
    if not other:
        return steady
    kept = [s for s in steady if not another(s)]
    if not any(s.global_batch == batch for s in kept):
        raise BadInput(f"{where}: its {log.title} lines state a global batch size of "
                       f"{other[-1].global_batch}, but the config's job has {size.global_batch} "
                       "(samples a step): the log is of another job; give the log of the job "
                       "the config describes, or --global-batch where the config leaves the "
                       "batch open")
    notes.append(f"{numbered(log.unit, [s.iteration for s in other])} left out: their global batch size, "
                 f"{', '.join(dict.fromkeys(str(s.global_batch) for s in other))}, is not the "
                 f"job's {size.global_batch} (a batch-size ramp-up)")
    return kept


def fields(text: str, separator: str = "|") -> dict[str, str]:
    """``key: value`` pairs of a line, split at ``separator``."""
    out = {}
    for part in text.split(separator):
        key, colon, value = part.partition(":")
        if colon:
            out[key.strip()] = value.strip()
    return out


def first_of(steps: Sequence[LoggedStep]) -> int | None:
    return min((s.iteration for s in steps), default=None)
