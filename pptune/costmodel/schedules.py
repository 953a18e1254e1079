"""Per-device op orders for each pipeline schedule.

An op (schedule_ops.py) is ``F`` (forward), ``B`` (backward; input-gradient
only in schedules that split it, the whole backward otherwise), ``W``
(weight-gradient), ``BW`` (a whole backward where the others are split) or
``F&B`` (an overlapped forward and whole backward) of micro-batch ``mb`` on
pipeline stage ``stage`` (a global index over the model chunks). ``op_orders(
name, p, m, v)`` returns, for each of the ``p`` devices, the ordered list of
ops it executes; nothing here knows about time. The simulator turns an
order into a timeline.

Stage-to-device placement:
- one chunk per device (gpipe, 1f1b, zb-h1): stage ``s`` on device ``s``;
- interleaved-1f1b ("loop" placement, Megatron-LM): stage ``c*p + d`` is
  chunk ``c`` of device ``d``;
- zbv and dualpipev ("V" placement, Qi et al. 2024; torch's style="v"):
  device ``d`` holds stages ``d`` and ``2p-1-d``, so the last stage sits on
  device 0 beside the first;
- dualpipe (bidirectional, DeepSeek-AI 2024): two pipelines over the same
  devices, down (stages 0..p-1, stage ``s`` on device ``s``) and up (stages
  p..2p-1, stage ``p+j`` on device ``p-1-j``), each fed half the
  micro-batches; stages ``c`` and ``p+c`` run the same model chunk.

Example, 1f1b with p=3, m=4 (Narayanan et al. 2021, fig. 4)::

    dev0: F0 F1 F2 B0 F3 B1 B2 B3
    dev1: F0 F1 B0 F2 B1 F3 B2 B3
    dev2: F0 B0 F1 B1 F2 B2 F3 B3
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from enum import Enum
from fractions import Fraction

from pptune.costmodel import schedule_orders as orders
from pptune.costmodel.dualpipe import dualpipe_rank, dualpipev_rank
from pptune.costmodel.schedule_ops import (
    Op,
    OpKind,
    RawOp,
    parse_op,
    to_op,
)

__all__ = ["Op", "OpKind", "RawOp", "parse_op"]


class Schedule(str, Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"
    ZB_H1 = "zb-h1"
    ZBV = "zbv"
    DUALPIPE = "dualpipe"
    DUALPIPEV = "dualpipev"


# What recommend searches when --schedules is not given: every schedule the
# simulator runs (the DualPipes too: a planner should say which wins for the
# user's costs rather than leave it to a trial on the cluster).
DEFAULT_SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)

# Schedules that split backward into B (input-grad) and W (weight-grad).
SPLIT_BACKWARD = frozenset({Schedule.ZB_H1, Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV})
# Schedules with overlapped F&B pairs (and whole backwards, BW, beside split ones).
OVERLAPPED = frozenset({Schedule.DUALPIPE, Schedule.DUALPIPEV})
# Schedules with a combined order (``combined=True``): Megatron-LM's EP
# all-to-all overlap pairs each steady forward with a backward
# (schedule_orders.combined).
COMBINABLE = frozenset({Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED})
# Two stages per device numbered as a V: device d runs stages d and 2p-1-d
# (dualpipe numbers its up direction p..2p-1 from the last device back).
_V_SHAPED = frozenset({Schedule.ZBV, Schedule.DUALPIPE, Schedule.DUALPIPEV})


class ScheduleError(ValueError):
    """A schedule cannot be built for these parameters; ``count``: the micro-batch count
    its fix names, where it names one (check-config says it in the file's settings)."""

    def __init__(self, message: str, count: int | None = None) -> None:
        super().__init__(message)
        self.count = count


def chunks_per_device(schedule: Schedule, v: int) -> int:
    """Stages each device runs: v for interleaved, 2 for zbv and the DualPipes, else 1."""
    if schedule is Schedule.INTERLEAVED:
        return v
    if schedule in _V_SHAPED:
        return 2
    return 1


def stage_device(schedule: Schedule, p: int, stage: int) -> int:
    """Device that runs global stage ``stage``."""
    if schedule in _V_SHAPED:
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def device_stages(schedule: Schedule, p: int, v: int = 1) -> list[list[int]]:
    """Global stages held by each device, in chunk order."""
    n = p * chunks_per_device(schedule, v)
    out: list[list[int]] = [[] for _ in range(p)]
    for s in range(n):
        out[stage_device(schedule, p, s)].append(s)
    return out


def stage_chains(schedule: Schedule, p: int, v: int = 1) -> list[list[int]]:
    """The pipelines a micro-batch runs through, each a list of stages in order:
    one over every stage, or dualpipe's two (down 0..p-1, up p..2p-1)."""
    n = p * chunks_per_device(schedule, v)
    if schedule is Schedule.DUALPIPE:
        return [list(range(p)), list(range(p, n))]
    return [list(range(n))]


def model_chunk(schedule: Schedule, p: int, stage: int) -> int:
    """Which slice of the model's layers global stage ``stage`` runs: the
    stage itself, except under dualpipe where up stage p+c runs chunk c."""
    return stage % p if schedule is Schedule.DUALPIPE else stage


def model_chunks(schedule: Schedule, p: int, v: int = 1) -> int:
    """How many slices the model's layers are cut into (dualpipe: p, run twice):
    the entries of a plan's ``stage_layers``."""
    return p if schedule is Schedule.DUALPIPE else p * chunks_per_device(schedule, v)


def stage_chunk_map(schedule: Schedule, p: int, v: int = 1) -> list[int]:
    """For each global stage, the model chunk it runs (``model_chunk``): how
    per-chunk costs become the simulator's per-stage costs."""
    return list(_stage_chunk_map(schedule, p, v))


@functools.lru_cache(maxsize=1024)
def _stage_chunk_map(schedule: Schedule, p: int, v: int) -> tuple[int, ...]:
    return tuple(model_chunk(schedule, p, k) for k in range(p * chunks_per_device(schedule, v)))


@functools.lru_cache(maxsize=1024)
def stage_devices(schedule: Schedule, p: int, n_stages: int) -> tuple[int, ...]:
    """``stage_device`` of global stages 0..n_stages-1 (the search asks it per candidate)."""
    return tuple(stage_device(schedule, p, k) for k in range(n_stages))


def chains(schedule: Schedule) -> int:
    """How many pipelines share the micro-batches: 2 for dualpipe (half each way), else 1."""
    return 2 if schedule is Schedule.DUALPIPE else 1


def param_share_per_device(schedule: Schedule, p: int, v: int = 1) -> Fraction:
    """Share of the model's parameters a device holds with equal chunks: 1/p
    for every schedule but dualpipe, whose devices hold two distinct chunks
    of p (2/p, the "2x" of DeepSeek's README table)."""
    held = {model_chunk(schedule, p, s) for s in device_stages(schedule, p, v)[0]}
    return Fraction(len(held), model_chunks(schedule, p, v))


def validate(schedule: Schedule, p: int, m: int, v: int = 1, combined: bool = False) -> None:
    """Raise ScheduleError with the values and the knob when (p, m, v) is invalid;
    ``combined``: the order with overlapped steady pairs (COMBINABLE only)."""
    if combined and schedule not in COMBINABLE:
        raise ScheduleError(
            f"{schedule.value} has no combined order (the all-to-all overlap pairs of "
            f"Megatron-LM run 1f1b and interleaved-1f1b)"
        )
    if p < 1:
        raise ScheduleError(f"pipeline depth must be >= 1 (got pp={p})")
    if m < 1:
        raise ScheduleError(f"number of micro-batches must be >= 1 (got {m})")
    if schedule is Schedule.INTERLEAVED:
        if v < 2:
            raise ScheduleError(
                f"interleaved-1f1b needs >= 2 virtual stages per device (got {v}); "
                "use 1f1b for one chunk per device"
            )
        if orders.microbatch_group(p, m) is None:
            # megatron-core 0.16 pipeline_parallel/schedules.py (interleaved):
            # the micro-batch group per virtual stage (default pp) must lie in
            # [PP, M] and "The remainder of M ... divided by N ... should be 0,
            # or larger than or equal to the pipeline-parallel size". pptune
            # builds Megatron-LM's order, with the least such group
            # (schedule_orders.microbatch_group); torch 2.13 relaxes the rule (m a
            # multiple of max(1, m // pp)) with an order of its own.
            raise ScheduleError(
                f"interleaved-1f1b needs at least as many micro-batches ({m}) as "
                f"pipeline depth ({p}), as Megatron-LM requires for the order pptune "
                f"simulates; try {p}"
            )
        if combined and m % p:
            raise ScheduleError(
                f"the combined interleaved order needs micro-batches ({m}) to be a multiple "
                f"of pipeline depth ({p}); try "
                + (f"{m - m % p} or " if m > p else "") + f"{m + p - m % p}"
            )
    elif schedule in _V_SHAPED:
        if v not in (1, 2):
            raise ScheduleError(
                f"{schedule.value} always holds 2 chunks per device (got virtual stages {v})"
            )
        if schedule is Schedule.DUALPIPEV and m < 2 * p:
            # torch 2.13 ScheduleDualPipeV.__init__, verbatim
            raise ScheduleError(
                "DualPipeV requires at least as many microbatches as stages, but got "
                f"{m} microbatches and {2 * p} stages. (dualpipev with pp={p} runs "
                f"{2 * p} stages: use {2 * p} micro-batches or more)", 2 * p
            )
        if schedule is Schedule.DUALPIPE:
            _validate_dualpipe(p, m)
    elif v != 1:
        raise ScheduleError(
            f"{schedule.value} runs one chunk per device; virtual stages must be 1 (got {v})"
        )


def _validate_dualpipe(p: int, m: int) -> None:
    # DeepSeek's dualpipe/dualpipe.py, DualPipe.step: "assert num_ranks % 2 == 0"
    # and "assert num_chunks > 0 and num_chunks % 2 == 0 and num_chunks >=
    # num_ranks * 2" (asserts, without words of their own).
    if p % 2:
        raise ScheduleError(
            f"dualpipe needs an even pipeline depth (got pp={p}): it pairs rank r with "
            f"rank pp-1-r (DeepSeek's DualPipe asserts num_ranks % 2 == 0); "
            f"use pp={p + 1}, or dualpipev"
        )
    if m % 2 or m < 2 * p:
        raise ScheduleError(
            f"dualpipe needs an even number of micro-batches, at least 2 x pp = {2 * p} "
            f"(got {m}): half enter at each end (DeepSeek's DualPipe asserts num_chunks "
            f"% 2 == 0 and num_chunks >= num_ranks * 2); use {max(2 * p, m + m % 2)}",
            max(2 * p, m + m % 2)
        )


def op_orders(schedule: Schedule | str, p: int, m: int, v: int = 1,
              combined: bool = False) -> list[list[Op]]:
    """Ordered ops per device for ``schedule`` with depth p, m micro-batches, v chunks
    (``combined``: with Megatron-LM's overlapped steady pairs, schedule_orders.combined)."""
    return [[to_op(raw) for raw in ops] for ops in raw_orders(schedule, p, m, v, combined)]


def raw_orders(schedule: Schedule | str, p: int, m: int, v: int = 1,
               combined: bool = False) -> tuple[tuple[RawOp, ...], ...]:
    """``op_orders`` as plain int tuples (schedule_ops.RawOp; the fast path), read-only
    and shared: a search simulates the same orders under many stage costs."""
    return _raw_orders(Schedule(schedule), p, m, v, combined)


@functools.lru_cache(maxsize=512)
def _raw_orders(schedule: Schedule, p: int, m: int, v: int,
                combined: bool) -> tuple[tuple[RawOp, ...], ...]:
    validate(schedule, p, m, v, combined)
    build = orders.combined if combined else _BUILDERS[schedule]
    return tuple(tuple(build(p, m, v if schedule is Schedule.INTERLEAVED else 1, d))
                 for d in range(p))


def format_orders(orders: list[list[Op]]) -> str:
    """One line per device, e.g. ``dev0: F0 F1 B0 B1`` (stage shown when v > 1)."""
    multi = len({op.stage for ops in orders for op in ops}) > len(orders)
    lines = []
    for d, ops in enumerate(orders):
        lines.append(f"dev{d}: " + " ".join(op.label(with_stage=multi) for op in ops))
    return "\n".join(lines)


# builder(p, m, v, device) -> that device's raw ops
_BUILDERS: dict[Schedule, Callable[[int, int, int, int], list[RawOp]]] = {
    Schedule.GPIPE: orders.gpipe,
    Schedule.ONE_F_ONE_B: orders.one_f_one_b,
    Schedule.INTERLEAVED: orders.interleaved,
    Schedule.ZB_H1: orders.zb_h1,
    Schedule.ZBV: orders.zbv,
    Schedule.DUALPIPE: lambda p, m, v, d: dualpipe_rank(p, m, d),
    Schedule.DUALPIPEV: lambda p, m, v, d: dualpipev_rank(p, m, d),
}
