"""One log, several runs: a log appended to by relaunches or restarts, split at each.

A job's log file often holds more than one run: a relaunch with other sizes
appended to the same file, or a restart from a checkpoint that replays
iterations the file already has. Their steps are not one job's: the earlier
run may be of another GPU count, and a restart's first line is a warm-up
(start-up, checkpoint loading, the allocator's first growth) like the first
line of any run. So the steps are kept in the order printed, each with the
start-up it follows (``Steps``), and ``last_run`` splits the log

- at a start-up line printed after iteration lines (each adapter names its
  own: Megatron-LM's ``using world size`` line, its argument dump's
  ``world_size`` and its `` loading checkpoint from ... at iteration N`` line;
  torchtitan's device-mesh and ``CUDA capacity`` lines), and
- wherever an iteration number is lower than the one printed before it (a
  restart from an earlier checkpoint, or a new run from iteration 1).

The same iteration printed twice in a row is one iteration printed by
several ranks, not a restart. The last run is the job as it runs now: it is
kept, with its own world size and peak memory, and a note names what was
left out; its first line is then the warm-up ``steady_step_s`` leaves out. A
last run of one line (a restart that has just begun: its warm-up alone) gives
way to the run before it where both state the same world size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from itertools import pairwise

from pptune.frameworks.common.joblog import JobLog, LoggedStep


class Steps:
    """A log's step lines in the order printed, each with the start-up it follows, the
    world size last stated and the peak memory printed with or after it (before the
    next step line)."""

    def __init__(self) -> None:
        self.steps: list[LoggedStep] = []
        self.starts = 0  # start-up lines printed after a step line: a new run each
        self.world: int | None = None
        self._memory: float | None = None  # printed before this run's first step line

    def start(self, world: int | None = None) -> None:
        """A start-up line (stating the world size where it does): a new run when step
        lines came before it; several start-up lines in a row are one start-up."""
        if self.steps and self.steps[-1].start == self.starts:
            self.starts += 1
            self._memory = None
        if world is not None:
            self.world = world

    def step(self, s: LoggedStep) -> None:
        self.steps.append(dataclasses.replace(
            s, start=self.starts, world_size=self.world,
            memory_bytes=_larger(s.memory_bytes, self._memory)))
        self._memory = None

    def memory(self, nbytes: float) -> None:
        """A peak memory report: the last step line's, or the next one's before any."""
        if self.steps and self.steps[-1].start == self.starts:
            last = self.steps[-1]
            self.steps[-1] = dataclasses.replace(
                last, memory_bytes=_larger(last.memory_bytes, nbytes))
        else:
            self._memory = _larger(self._memory, nbytes)

    def timer(self, name: str, ms: float) -> None:
        """A timer printed after this run's last step line (ignored before any)."""
        if self.steps and self.steps[-1].start == self.starts:
            last = self.steps[-1]
            self.steps[-1] = dataclasses.replace(last, timers_ms=(*last.timers_ms, (name, ms)))

    def peak(self) -> float | None:
        return max((s.memory_bytes for s in self.steps if s.memory_bytes is not None),
                   default=None)


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


def runs(steps: Sequence[LoggedStep]) -> list[list[LoggedStep]]:
    """The steps split into runs (module docstring)."""
    out: list[list[LoggedStep]] = []
    for s in steps:
        if out and s.start == out[-1][-1].start and s.iteration >= out[-1][-1].iteration:
            out[-1].append(s)
        else:
            out.append([s])
    return out


def _describe(run: Sequence[LoggedStep], unit: str) -> str:
    first, last = run[0].iteration, run[-1].iteration
    its = f"{unit} {first}" if first == last else f"{unit}s {first}-{last}"
    world = f" on {run[0].world_size} GPUs" if run[0].world_size else ""
    return f"{its}{world} ({len(run)} line(s))"


def _why(before: Sequence[LoggedStep], after: Sequence[LoggedStep], unit: str) -> str:
    if after[0].start != before[-1].start:
        return "a start-up line"
    return f"{unit} {after[0].iteration} after {before[-1].iteration}"


def last_run(log: JobLog) -> JobLog:
    """The log's last run (module docstring), with a note naming the runs left out; the
    log itself when it holds one."""
    parts = runs(log.steps)
    if len(parts) < 2:
        return log
    at = _latest_steady(parts)
    kept = parts[at]
    why = ", ".join(dict.fromkeys(_why(a, b, log.unit) for a, b in pairwise(parts)))
    earlier = "; ".join(_describe(p, log.unit) for k, p in enumerate(parts) if k != at)
    which = "the last" if at == len(parts) - 1 else (
        f"the one before the last, whose {_describe(parts[-1], log.unit)} is only its "
        "warm-up so far, on the same GPUs")
    note = (f"it holds {len(parts)} runs (split at {why}): calibrating {which}, "
            f"{_describe(kept, log.unit)}; left out: {earlier}")
    attributed = any(s.memory_bytes is not None for s in log.steps)
    peak = (max((s.memory_bytes for s in kept if s.memory_bytes is not None), default=None)
            if attributed else log.peak_memory_bytes)
    stated = any(s.world_size is not None for s in log.steps)
    world = kept[0].world_size if stated else log.world_size
    return dataclasses.replace(
        log, steps=tuple(kept), peak_memory_bytes=peak,
        memory_what=log.memory_what if peak is not None else "", world_size=world,
        world_what=log.world_what if world is not None else "",
        notes=(*log.notes, note), earlier=earlier)


def _latest_steady(parts: list[list[LoggedStep]]) -> int:
    """The run to calibrate: the last, unless it holds one line alone (its warm-up: a
    restart that has just begun) and the run before it ran on the same GPUs and holds
    more; then that one (a restart's job is the same job). Where the log states no world
    size, the GPUs cannot be told the same: the last run is kept."""
    before, last = parts[-2][0].world_size, parts[-1][0].world_size
    if len(parts[-1]) > 1 or len(parts[-2]) < 2 or before is None or before != last:
        return len(parts) - 1
    return len(parts) - 2

