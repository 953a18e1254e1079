"""DeepSpeed's training log: the pipeline engine's step lines and the throughput timer's.

``PipelineEngine.train_batch`` (deepspeed/runtime/pipe/engine.py,
deepspeedai/DeepSpeed at edaa722, lines 398-409) prints on global rank 0
every ``steps_per_print`` steps:

    steps: 100 loss: 2.3456 iter time (s): 0.512 samples/sec: 125.000

(``iter time`` is the mean over the last ``steps_per_print`` steps).
``ThroughputTimer.stop`` (deepspeed/utils/timer.py, lines 263-272) logs, with
``wall_clock_breakdown`` or ``flops_profiler`` off or on alike:

    [2026-08-22 12:19:04,000] [INFO] [timer.py:264:stop] epoch=0/micro_step=100/
    global_step=100, RunningAvgSamplesPerSec=120.5, CurrSamplesPerSec=125.6,
    MemAllocated=12.3GB, MaxMemAllocated=23.4GB

(one line), ``CurrSamplesPerSec`` being the global batch over that step and
``MaxMemAllocated`` the allocator's peak of live tensors in GiB
(``max_memory_allocated() / 1024**3``; the reserved pool is not printed).

Megatron-DeepSpeed (a DeepSpeed config with Megatron's training loop) prints
the timer's lines and, on its last rank, Megatron-LM's iteration lines
(``elapsed time per iteration (ms): 14287.5``; read as
pptune/frameworks/megatron/log.py reads them). The timer measures from the
engine's ``start`` to its ``stop`` inside the step; Megatron's elapsed time
is the whole iteration, what the job takes a step (an ALCF Polaris log:
14.29 s against the 12.52 s its ``CurrSamplesPerSec`` gives), so a log with
both is timed from Megatron's lines; its world size and, where printed, its
``max reserved`` come from them too.
"""

from __future__ import annotations

import re

from pptune.frameworks.common.joblog import GIB, JobLog, LoggedStep, clean, number
from pptune.frameworks.common.logruns import Steps
from pptune.frameworks.megatron import log as megatron_log

TITLE = "DeepSpeed"
PIPE = re.compile(r"\bsteps:\s*(\d+)\b.*?iter time \(s\):\s*([\d.eE+-]+)")
TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=([\d.eE+-]+)")
MAX_ALLOCATED = re.compile(r"MaxMemAllocated=([\d.]+)GB")
# the Hugging Face Trainer's summary dict and tqdm bar (seconds per iteration)
HF_SUMMARY = re.compile(r"'train_samples_per_second':\s*([\d.]+)")
HF_BAR = re.compile(r"\[[\d:]+<[\d:?]+,\s*([\d.]+)s/it\]")


def detect(text: str) -> bool:
    return any(PIPE.search(line) or TIMER.search(line) for line in text.splitlines())


def read(text: str) -> JobLog:
    pipe, timer = Steps(), Steps()  # in the order printed (logruns.py)
    for raw in text.splitlines():
        line = clean(raw)
        m = PIPE.search(line)
        if m:
            pipe.step(LoggedStep(int(m.group(1)), step_s=number(m.group(2))))
            continue
        t = TIMER.search(line)
        if t:
            mem = MAX_ALLOCATED.search(line)
            timer.step(LoggedStep(int(t.group(1)), samples_per_s=number(t.group(2)),
                                  memory_bytes=number(mem.group(1)) * GIB if mem else None))
    peak = timer.peak()
    what = ("max allocated (tensors only: DeepSpeed prints no reserved figure)"
            if peak is not None else "")
    megatron = megatron_log.read(text, core_016=False)  # Megatron-DeepSpeed: the old loop
    if megatron.steps:  # Megatron-DeepSpeed: the whole iteration (module docstring)
        return JobLog("deepspeed", "Megatron-DeepSpeed", megatron.steps,
                      megatron.peak_memory_bytes or peak, megatron.memory_what or what,
                      ("the step from Megatron-DeepSpeed's iteration lines (elapsed time per "
                       "iteration, the whole step), not DeepSpeed's throughput timer",),
                      megatron.world_size, megatron.world_what, stated=megatron.stated)
    steps = pipe.steps or timer.steps  # the engine's own step time when it printed one
    return JobLog("deepspeed", TITLE, tuple(steps), peak, what,
                  missing="" if steps else _missing(text), unit="step")


def _missing(text: str) -> str:
    """The lines expected, and the Hugging Face Trainer's where the log has only those
    (a Trainer run with a DeepSpeed config prints its own progress and summary)."""
    expected = ("expected the pipeline engine's 'steps: N loss: ... iter time (s): ...' or "
                "the throughput timer's 'global_step=N, ... CurrSamplesPerSec=...' lines")
    summary = HF_SUMMARY.findall(text)
    bar = HF_BAR.findall(text)
    if not summary and not bar:
        return expected
    found = []
    if summary:
        found.append(f"train_samples_per_second {number(summary[-1]):g} (the whole run's "
                     "average, start-up included)")
    if bar:
        found.append(f"a progress bar at {number(bar[-1]):g} s/it (its last)")
    return (f"{expected}; it has the Hugging Face Trainer's lines only: {' and '.join(found)}, "
            "which give no steady step: pass the seconds per optimizer step as --step-s")
