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
"""

from __future__ import annotations

import re

from pptune.frameworks.common.joblog import GIB, JobLog, LoggedStep, clean, number

TITLE = "DeepSpeed"
PIPE = re.compile(r"\bsteps:\s*(\d+)\b.*?iter time \(s\):\s*([\d.eE+-]+)")
TIMER = re.compile(r"global_step=(\d+),.*?CurrSamplesPerSec=([\d.eE+-]+)")
MAX_ALLOCATED = re.compile(r"MaxMemAllocated=([\d.]+)GB")


def detect(text: str) -> bool:
    return any(PIPE.search(line) or TIMER.search(line) for line in text.splitlines())


def read(text: str) -> JobLog:
    pipe: dict[int, LoggedStep] = {}
    timer: dict[int, LoggedStep] = {}
    peak = None
    for raw in text.splitlines():
        line = clean(raw)
        m = PIPE.search(line)
        if m:
            pipe[int(m.group(1))] = LoggedStep(int(m.group(1)), step_s=number(m.group(2)))
            continue
        t = TIMER.search(line)
        if t:
            timer[int(t.group(1))] = LoggedStep(int(t.group(1)), samples_per_s=number(t.group(2)))
            mem = MAX_ALLOCATED.search(line)
            if mem:
                b = number(mem.group(1)) * GIB
                peak = b if peak is None else max(peak, b)
    steps = pipe or timer  # the engine's own step time when it printed one
    return JobLog("deepspeed", TITLE, tuple(steps[i] for i in sorted(steps)), peak,
                  "max allocated (tensors only: DeepSpeed prints no reserved figure)"
                  if peak is not None else "")
