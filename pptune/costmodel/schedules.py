"""Per-device op orders for each pipeline schedule.

An op is ``F`` (forward), ``B`` (backward; input-gradient only in schedules
that split it, the whole backward otherwise) or ``W`` (weight-gradient) of
micro-batch ``mb`` on pipeline stage ``stage`` (a global index over the
``p * v`` model chunks). ``op_orders(name, p, m, v)`` returns, for each of
the ``p`` devices, the ordered list of ops it executes; nothing here knows
about time. The simulator turns an order into a timeline.

Stage-to-device placement:
- one chunk per device (gpipe, 1f1b, zb-h1): stage ``s`` on device ``s``;
- interleaved-1f1b ("loop" placement, Megatron-LM): stage ``c*p + d`` is
  chunk ``c`` of device ``d``;
- zbv ("V" placement, Qi et al. 2024): device ``d`` holds stages ``d`` and
  ``2p-1-d``, so the last stage sits on device 0 beside the first.

Example, 1f1b with p=3, m=4 (Narayanan et al. 2021, fig. 4)::

    dev0: F0 F1 F2 B0 F3 B1 B2 B3
    dev1: F0 F1 B0 F2 B1 F3 B2 B3
    dev2: F0 B0 F1 B1 F2 B2 F3 B3
"""

from __future__ import annotations

import functools
from enum import Enum
from typing import NamedTuple


class Schedule(str, Enum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved-1f1b"
    ZB_H1 = "zb-h1"
    ZBV = "zbv"


# What recommend searches when --schedules is not given (every schedule the
# simulator runs that a torch or Megatron-LM runtime can run as planned).
DEFAULT_SCHEDULES: tuple[Schedule, ...] = tuple(Schedule)


class OpKind(str, Enum):
    F = "F"
    B = "B"
    W = "W"


class Op(NamedTuple):
    kind: OpKind
    mb: int
    stage: int

    def __str__(self) -> str:
        return f"{self.kind.value}{self.mb}@{self.stage}"


class ScheduleError(ValueError):
    """A schedule cannot be built for these parameters."""


# Raw ops: (kind, micro-batch, stage) with kind 0=F, 1=B, 2=W.
RawOp = tuple[int, int, int]
_F, _B, _W = 0, 1, 2

# Schedules that split backward into B (input-grad) and W (weight-grad).
SPLIT_BACKWARD = frozenset({Schedule.ZB_H1, Schedule.ZBV})


def chunks_per_device(schedule: Schedule, v: int) -> int:
    """Model chunks each device holds: v for interleaved, 2 for zbv, else 1."""
    if schedule is Schedule.INTERLEAVED:
        return v
    if schedule is Schedule.ZBV:
        return 2
    return 1


def stage_device(schedule: Schedule, p: int, stage: int) -> int:
    """Device that runs global stage ``stage``."""
    if schedule is Schedule.ZBV:
        return stage if stage < p else 2 * p - 1 - stage
    return stage % p


def device_stages(schedule: Schedule, p: int, v: int = 1) -> list[list[int]]:
    """Global stages held by each device, in chunk order."""
    n = p * chunks_per_device(schedule, v)
    out: list[list[int]] = [[] for _ in range(p)]
    for s in range(n):
        out[stage_device(schedule, p, s)].append(s)
    return out


def validate(schedule: Schedule, p: int, m: int, v: int = 1) -> None:
    """Raise ScheduleError with the values and the knob when (p, m, v) is invalid."""
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
        if m % p != 0:
            raise ScheduleError(
                f"interleaved-1f1b needs micro-batches ({m}) to be a multiple of "
                f"pipeline depth ({p}), as Megatron-LM and torch require; "
                f"try {max(p, m - m % p)} or {m + p - m % p}"
            )
    elif v != 1 and schedule is not Schedule.ZBV:
        raise ScheduleError(
            f"{schedule.value} runs one chunk per device; virtual stages must be 1 (got {v})"
        )
    elif schedule is Schedule.ZBV and v not in (1, 2):
        raise ScheduleError(f"zbv always holds 2 chunks per device (got virtual stages {v})")


def op_orders(schedule: Schedule | str, p: int, m: int, v: int = 1) -> list[list[Op]]:
    """Ordered ops per device for ``schedule`` with depth p, m micro-batches, v chunks."""
    schedule = Schedule(schedule)
    validate(schedule, p, m, v)
    build = _BUILDERS[schedule]
    kinds = (OpKind.F, OpKind.B, OpKind.W)
    return [[Op(kinds[k], mb, st) for k, mb, st in build(p, m, v, d)] for d in range(p)]


def raw_orders(schedule: Schedule | str, p: int, m: int, v: int = 1) -> list[list[RawOp]]:
    """``op_orders`` as plain ``(kind, mb, stage)`` tuples, kind 0=F 1=B 2=W (fast path)."""
    schedule = Schedule(schedule)
    validate(schedule, p, m, v)
    return [_BUILDERS[schedule](p, m, v, d) for d in range(p)]


def format_orders(orders: list[list[Op]]) -> str:
    """One line per device, e.g. ``dev0: F0 F1 B0 B1`` (stage shown when v > 1)."""
    multi = len({op.stage for ops in orders for op in ops}) > len(orders)
    lines = []
    for d, ops in enumerate(orders):
        cells = [str(op) if multi else f"{op.kind.value}{op.mb}" for op in ops]
        lines.append(f"dev{d}: " + " ".join(cells))
    return "\n".join(lines)


def _gpipe(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # Huang et al. 2019: all forwards, then all backwards (in micro-batch
    # order, as torch.distributed.pipelining's ScheduleGPipe runs them).
    return [(_F, i, d) for i in range(m)] + [(_B, i, d) for i in range(m)]


def _one_f_one_b(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # PipeDream-Flush / Megatron-LM non-interleaved 1F1B: p-d-1 warm-up
    # forwards, then alternate one forward and one backward, then drain.
    warmup = min(p - d - 1, m)
    ops = [(_F, i, d) for i in range(warmup)]
    for i in range(m - warmup):
        ops.append((_F, warmup + i, d))
        ops.append((_B, i, d))
    ops += [(_B, i, d) for i in range(m - warmup, m)]
    return ops


def _interleaved(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # Megatron-LM forward_backward_pipelining_with_interleaving: virtual
    # micro-batch k maps to chunk (k // p) % v and micro-batch
    # (k // (p*v)) * p + k % p; backward visits chunks in reverse. Warm-up
    # is (p - d - 1) * 2 + (v - 1) * p forwards.
    total = m * v

    def fwd(k: int) -> RawOp:
        chunk = (k // p) % v
        return (_F, (k // (p * v)) * p + k % p, chunk * p + d)

    def bwd(k: int) -> RawOp:
        chunk = v - 1 - (k // p) % v
        return (_B, (k // (p * v)) * p + k % p, chunk * p + d)

    warmup = min((p - d - 1) * 2 + (v - 1) * p, total)
    ops = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append(fwd(warmup + k))
        ops.append(bwd(k))
    ops += [bwd(k) for k in range(total - warmup, total)]
    return ops


def _zb_h1(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1),
    # ordered as torch's ScheduleInterleavedZeroBubble does with one stage
    # per rank: p-d-1 warm-up forwards, then F,B pairs; the W of each
    # micro-batch is issued d steps after its B (device 0 at once, the last
    # device latest, filling its cool-down), then the remaining Ws drain.
    warmup = min(p - d - 1, m)
    ops = [(_F, i, d) for i in range(warmup)]
    next_w = 0
    for i in range(m):
        if warmup + i < m:
            ops.append((_F, warmup + i, d))
        ops.append((_B, i, d))
        if i - next_w >= d:
            ops.append((_W, next_w, d))
            next_w += 1
    ops += [(_W, i, d) for i in range(next_w, m)]
    return ops


def _zbv(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # ZB-V (Qi et al. 2024, "Pipeline Parallelism with Controllable Memory",
    # and the ZB paper's sec. 6), in the phase structure torch 2.13's
    # ScheduleZBVZeroBubble uses. Device d holds chunk a = stage d and chunk
    # b = stage 2p-1-d. The order is built for max(m, 2p-1) micro-batches and
    # then ops of micro-batches >= m are dropped, which keeps it valid for
    # small m.
    a, b = d, 2 * p - 1 - d
    n = max(m, 2 * p - 1)
    ops: list[RawOp] = []
    fa = fb = ba = bb = 0

    def emit(kind: int, mb: int, stage: int) -> None:
        ops.append((kind, mb, stage))

    # warm-up: forwards of chunk a, then alternate b/a, then b with its
    # backward and weight-grad at once (the bottom of the V).
    for _ in range(2 * (p - d) - 1):
        emit(_F, fa, a)
        fa += 1
    for _ in range(d):
        emit(_F, fb, b)
        fb += 1
        emit(_F, fa, a)
        fa += 1
    for _ in range(p - d):
        emit(_F, fb, b)
        fb += 1
        for kind in (_B, _W):
            emit(kind, bb, b)
        bb += 1
    # steady state: F/B/W on chunk a, then F/B/W on chunk b.
    while fb < fa or fa < n:
        if fa < n:
            emit(_F, fa, a)
            fa += 1
        emit(_B, ba, a)
        emit(_W, ba, a)
        ba += 1
        emit(_F, fb, b)
        fb += 1
        emit(_B, bb, b)
        emit(_W, bb, b)
        bb += 1
    # cool-down: input-grads first, weight-grads deferred into the tail.
    wa, wb = ba, bb
    for _ in range(d):
        emit(_B, ba, a)
        ba += 1
        emit(_B, bb, b)
        bb += 1
    for _ in range(p - d):
        emit(_B, ba, a)
        ba += 1
        emit(_W, wa, a)
        wa += 1
    ops += [(_W, i, b) for i in range(wb, bb)]
    ops += [(_W, i, a) for i in range(wa, ba)]
    return [op for op in ops if op[1] < m]


def peak_inflight_per_stage(schedule: Schedule | str, p: int, m: int, v: int = 1) -> list[int]:
    """Most micro-batches whose activations each stage holds at once.

    Follows only the op order (timing cannot change it): a micro-batch is
    in flight on a stage from its F until its backward completes (B, or W
    where backward is split). 1F1B gives ``min(m, p - s)``, GPipe ``m``.
    """
    schedule = Schedule(schedule)
    n_stages = p * chunks_per_device(schedule, v)
    if schedule is Schedule.GPIPE:
        return [m] * n_stages
    return list(_peak_inflight(schedule, p, min(m, inflight_saturation(p, v)), v))


def inflight_saturation(p: int, v: int) -> int:
    """A micro-batch count past which no schedule but GPipe holds more in flight.

    Warm-up phases are at most (p-1)*2 + (v-1)*p forwards long (interleaved)
    or 2p-1 (zbv), so past 2*p*max(v, 2) micro-batches the steady state only
    repeats; tests check the peaks agree with the full order beyond that.
    """
    return 2 * p * max(v, 2)


@functools.lru_cache(maxsize=1024)
def _peak_inflight(schedule: Schedule, p: int, m: int, v: int) -> tuple[int, ...]:
    orders = raw_orders(schedule, p, m, v)
    n_stages = p * chunks_per_device(schedule, v)
    release = _W if schedule in SPLIT_BACKWARD else _B
    now = [0] * n_stages
    peak = [0] * n_stages
    for ops in orders:
        for kind, _mb, stage in ops:
            if kind == _F:
                now[stage] += 1
                peak[stage] = max(peak[stage], now[stage])
            elif kind == release:
                now[stage] -= 1
    return tuple(peak)


_BUILDERS = {
    Schedule.GPIPE: _gpipe,
    Schedule.ONE_F_ONE_B: _one_f_one_b,
    Schedule.INTERLEAVED: _interleaved,
    Schedule.ZB_H1: _zb_h1,
    Schedule.ZBV: _zbv,
}
