"""torchtitan's training log: the metrics line of each logged step.

``MetricsProcessor.log`` in torchtitan/components/metrics.py (pytorch/
torchtitan v0.2.2, lines 461-470; the same keys at b5bcd76, lines 527-536)
prints, every ``metrics.log_freq`` steps and at step 1, through the
``[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s`` logger
(torchtitan/tools/logging.py), in colour (torchtitan/tools/utils.py Color):

    [titan] 2025-07-15 13:49:37,000 - root - INFO - step: 10  loss:  7.1234
    grad_norm:  1.2345  memory: 30.12GiB(38.05%)  tps: 5,678  tflops: 123.45
    mfu: 39.12%

(one line). ``tps`` is tokens per second per GPU over the interval,
``memory`` the interval's peak reserved memory (``reserved_bytes.all.peak``)
in GiB, ``mfu`` "N/A" under FP8/MX since 2025. ``validate step:`` lines are
not training steps.

The world size: ``ParallelDims.build_mesh`` (torchtitan/distributed/
parallel_dims.py; torchtitan/parallelisms/parallel_dims.py in early 2025) logs
the mesh it builds,

    Building 1-D device mesh with ['dp_shard'], [8]

and its ``_validate`` asserts that the dimensions multiply to the world size
(a dimension of 1 is left out, so ``[]`` is one GPU); from 0.2.1 it logs the degrees,

    Building device mesh with parallelism: pp=1, dp_replicate=1, dp_shard=32, cp=1, tp=8, ep=1, etp=1

whose pp x dp_replicate x dp_shard x cp x tp is the world. The GPU: the trainer logs
its device's name and memory once (torchtitan/train.py),

    CUDA capacity: NVIDIA H200 with 139.83GiB memory

Those lines start a run: a log with several runs is split at them
(logruns.py). A step whose loss is nan is marked as no steady measurement.
"""

from __future__ import annotations

import math
import re

from pptune.frameworks.common.fields import MAX_DEVICES
from pptune.frameworks.common.joblog import GIB, JobLog, LoggedStep, clean, number
from pptune.frameworks.common.logruns import Steps

TITLE = "torchtitan"
STEP = re.compile(r"\bstep:\s*(\d+)\s")
TPS = re.compile(r"\btps:\s*([\d,]+(?:\.\d+)?)")
TFLOPS = re.compile(r"\btflops:\s*([\d,]+(?:\.\d+)?)")
MFU = re.compile(r"\bmfu:\s*([\d.]+)%")
QUANTIZED = re.compile(r"\bmfu:\s*N/A\b")  # components/metrics.py: has_quantization
MEMORY = re.compile(r"\bmemory:\s*([\d.]+)\s*GiB")
NAN_LOSS = re.compile(r"\bloss:\s*[-+]?(?:nan|inf)\b", re.IGNORECASE)
MESH = re.compile(r"Building \d+-D device mesh with \[[^\]]*\], \[([\d, ]{0,200})\]")
# torchtitan 0.2.1 and later (ParallelDims.build_mesh): "Building device mesh with
# parallelism: pp=1, dp_replicate=1, dp_shard=32, cp=1, tp=8, ep=1, etp=1"; the world is
# pp x dp_replicate x dp_shard x cp x tp (ep and etp are carved from those)
DEGREES = re.compile(r"Building device mesh with parallelism:((?:\s*\w+=\d+,?){1,12})")
WORLD_DIMS = ("pp", "dp_replicate", "dp_shard", "cp", "tp")
DEVICE = re.compile(r"\b[A-Z]+ capacity: (\S.{0,79}?) with [\d.]+\s*GiB memory")


def _step(line: str) -> re.Match[str] | None:
    if "validate step:" in line:
        return None
    m = STEP.search(line)
    return m if m and TPS.search(line) else None


def detect(text: str) -> bool:
    return any(_step(clean(line)) for line in text.splitlines())


def read(text: str) -> JobLog:
    steps = Steps()
    quantized = False  # a step line printed mfu: N/A (QUANTIZED)
    device = None
    for raw in text.splitlines():
        line = clean(raw)
        named = DEVICE.search(line)
        if named:
            steps.start()
            device = device or named.group(1)
            continue
        mesh = MESH.search(line)
        if mesh:
            steps.start(_world(math.prod(int(d) for d in mesh.group(1).replace(",", " ").split())))
            continue
        degrees = DEGREES.search(line)
        if degrees:
            said = dict(re.findall(r"(\w+)=(\d+)", degrees.group(1)))
            steps.start(_world(math.prod(int(said.get(dim, 1)) for dim in WORLD_DIMS)))
            continue
        m = _step(line)
        if not m:
            continue
        tps = TPS.search(line)
        tflops = TFLOPS.search(line)
        mfu = MFU.search(line)
        quantized = quantized or QUANTIZED.search(line) is not None
        mem = MEMORY.search(line)
        steps.step(LoggedStep(
            int(m.group(1)),
            tokens_per_s_per_gpu=number(tps.group(1)) if tps else None,
            tflops_per_gpu=number(tflops.group(1)) if tflops else None,
            mfu=number(mfu.group(1)) / 100 if mfu else None,
            memory_bytes=number(mem.group(1)) * GIB if mem else None,
            unsteady="a nan loss" if NAN_LOSS.search(line) else "",
        ))
    peak = steps.peak()
    return JobLog("torchtitan", TITLE, tuple(steps.steps), peak,
                  "peak reserved (memory: GiB) of the ranks logged" if peak is not None else "",
                  world_size=steps.world, world_what="the log's device-mesh line", device=device,
                  unit="step", quantized=quantized)


def _world(n: int) -> int | None:
    return n if 1 <= n <= MAX_DEVICES else None
