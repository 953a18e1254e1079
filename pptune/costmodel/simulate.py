"""Event-level execution of per-device op orders.

Each device runs its ops strictly in the order ``schedules.op_orders`` gives,
one at a time; an op starts when the device is free and its input has
arrived:

- ``F`` of micro-batch i on stage k needs ``F`` of i on stage k-1, plus the
  point-to-point transfer of stage k-1's output when the two stages sit on
  different devices;
- ``B`` of i on stage k needs ``B`` of i on stage k+1 (plus the transfer of
  the input-gradient back), or, on the last stage, its own ``F`` (the loss);
- ``W`` of i on stage k needs ``B`` of i on stage k.

A transfer is ``latency + bytes / bandwidth`` (the alpha-beta model, see
comm.py) and queues FIFO on its directed link. By default it runs on a
separate stream and overlaps the sender's next compute; with
``blocking_send`` the sender waits for it. The data-parallel gradient
all-reduce of a stage starts once that stage's last backward op is done and
runs on the device's communication stream, so it overlaps the cool-down of
other stages and only its exposed tail lengthens the step.

Bubble rate = total idle time / (p * makespan), the idle share of the step
(Huang et al. 2019; Narayanan et al. 2021 sec. 2.2). Activation memory: a
micro-batch's activations on a stage are held from its ``F`` until its
backward is complete (``B`` where backward is not split, ``W`` where it is,
an upper bound for the split case).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pptune.costmodel.schedules import (
    SPLIT_BACKWARD,
    Op,
    OpKind,
    Schedule,
    chunks_per_device,
    raw_orders,
    stage_device,
)


@dataclass(frozen=True)
class StageCost:
    """Costs of one pipeline stage for one micro-batch."""

    fwd_s: float
    bwd_s: float  # input-gradient part of backward
    wgrad_s: float = 0.0  # weight-gradient part of backward
    act_bytes: float = 0.0  # activations kept from F until backward completes
    out_bytes: float = 0.0  # sent to the next stage (the gradient back has the same size)

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.wgrad_s


@dataclass(frozen=True)
class Link:
    """Alpha-beta link: ``latency_s + bytes / bytes_per_s``."""

    latency_s: float = 0.0
    bytes_per_s: float = math.inf

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


FREE_LINK = Link()


class Event(NamedTuple):
    device: int
    op: Op
    start_s: float
    end_s: float


class Transfer(NamedTuple):
    src: int
    dst: int
    op: Op  # the op whose output is sent
    start_s: float
    end_s: float


@dataclass
class DeviceStats:
    busy_s: float = 0.0
    idle_s: float = 0.0
    compute_end_s: float = 0.0
    allreduce_end_s: float = 0.0
    peak_inflight: int = 0
    peak_activation_bytes: float = 0.0


@dataclass
class SimResult:
    schedule: Schedule
    p: int
    m: int
    v: int
    step_time_s: float
    bubble_rate: float
    devices: list[DeviceStats]
    events: list[Event] = field(repr=False)
    transfers: list[Transfer] = field(repr=False)
    stage_grads_done_s: list[float] = field(default_factory=list, repr=False)

    @property
    def busiest_s(self) -> float:
        return max(d.busy_s for d in self.devices)


class DeadlockError(RuntimeError):
    """The op orders wait on each other (a schedule bug, never user input)."""


def simulate(
    schedule: Schedule | str,
    p: int,
    m: int,
    stages: Sequence[StageCost],
    v: int = 1,
    link: Callable[[int, int], Link] | None = None,
    blocking_send: bool = False,
    dp_allreduce_s: Sequence[float] | None = None,
    keep_events: bool = True,
    device_start_s: Sequence[float] | None = None,
) -> SimResult:
    """Run ``schedule`` over ``stages`` (one StageCost per global stage).

    ``link(src, dst)`` gives the link between two devices (free by default).
    ``dp_allreduce_s[k]`` is stage k's gradient all-reduce time (0 by default).
    ``device_start_s[d]``: when device d may start its first op (e.g. after a
    once-per-step parameter all-gather; 0 by default).
    """
    schedule = Schedule(schedule)
    plan = raw_orders(schedule, p, m, v)
    n_stages = p * chunks_per_device(schedule, v)
    if len(stages) != n_stages:
        raise ValueError(
            f"{schedule.value} with pp={p} needs {n_stages} stage costs, got {len(stages)}"
        )
    split = schedule in SPLIT_BACKWARD
    get_link = link or (lambda _s, _d: FREE_LINK)
    allreduce = list(dp_allreduce_s) if dp_allreduce_s is not None else [0.0] * n_stages
    dev_of = [stage_device(schedule, p, k) for k in range(n_stages)]
    last = n_stages - 1
    kinds = (OpKind.F, OpKind.B, OpKind.W)
    # op cost by (kind, stage); B carries the weight-grad where backward is not split
    cost_of = [
        [st.fwd_s for st in stages],
        [st.bwd_s if split else st.bwd_s + st.wgrad_s for st in stages],
        [st.wgrad_s for st in stages],
    ]
    act_of = [st.act_bytes for st in stages]
    # where each op's output goes (None: nowhere, or the same device) and its transfer time
    send_to: list[list[int | None]] = [[None] * n_stages for _ in range(3)]
    send_s: list[list[float]] = [[0.0] * n_stages for _ in range(3)]
    for k in range(n_stages):
        if k < last and dev_of[k + 1] != dev_of[k]:
            send_to[0][k] = dev_of[k + 1]
            send_s[0][k] = get_link(dev_of[k], dev_of[k + 1]).time_s(stages[k].out_bytes)
        if k > 0 and dev_of[k - 1] != dev_of[k]:
            send_to[1][k] = dev_of[k - 1]
            send_s[1][k] = get_link(dev_of[k], dev_of[k - 1]).time_s(stages[k - 1].out_bytes)
    release = 2 if split else 1

    arrival: dict[tuple[int, int, int], float] = {}  # output available to its consumer
    waiting: dict[tuple[int, int, int], list[int]] = {}
    link_free: dict[tuple[int, int], float] = {}
    ptr = [0] * p
    dev_free = list(device_start_s) if device_start_s is not None else [0.0] * p
    busy = [0.0] * p
    inflight = [0] * p
    act_now = [0.0] * p
    peak_inflight = [0] * p
    peak_act = [0.0] * p
    bwd_left = [m * (2 if split else 1) for _ in range(n_stages)]
    stage_grads_done = [0.0] * n_stages
    events: list[Event] = []
    transfers: list[Transfer] = []

    stack = list(range(p - 1, -1, -1))
    while stack:
        d = stack.pop()
        order = plan[d]
        n_ops = len(order)
        i = ptr[d]
        free = dev_free[d]
        while i < n_ops:
            op = order[i]
            kind, mb, k = op
            # dependency: F on F of the stage before; B on B of the stage
            # after (or this stage's F on the last stage); W on its B
            if kind == 0:
                dep = (0, mb, k - 1) if k > 0 else None
            elif kind == 1:
                dep = (0, mb, k) if k == last else (1, mb, k + 1)
            else:
                dep = (1, mb, k)
            start = free
            if dep is not None:
                ready = arrival.get(dep)
                if ready is None:
                    waiting.setdefault(dep, []).append(d)
                    break
                start = max(start, ready)
            cost = cost_of[kind][k]
            end = start + cost
            busy[d] += cost
            free = end
            if keep_events:
                events.append(Event(d, Op(kinds[kind], mb, k), start, end))
            if kind == 0:
                inflight[d] += 1
                act_now[d] += act_of[k]
                peak_inflight[d] = max(peak_inflight[d], inflight[d])
                peak_act[d] = max(peak_act[d], act_now[d])
            else:
                if kind == release:
                    inflight[d] -= 1
                    act_now[d] -= act_of[k]
                bwd_left[k] -= 1
                if bwd_left[k] == 0:
                    stage_grads_done[k] = end
            if kind != 2:
                consumer = send_to[kind][k]
                if consumer is None:
                    arrival[op] = end
                else:
                    lk = (d, consumer)
                    t0 = link_free.get(lk, 0.0)
                    t0 = max(t0, end)
                    t1 = t0 + send_s[kind][k]
                    link_free[lk] = t1
                    arrival[op] = t1
                    if keep_events:
                        transfers.append(Transfer(d, consumer, Op(kinds[kind], mb, k), t0, t1))
                    if blocking_send:
                        free = t1
                woken = waiting.pop(op, None)
                if woken:
                    stack.extend(woken)
            i += 1
        ptr[d] = i
        dev_free[d] = free

    if any(ptr[d] < len(plan[d]) for d in range(p)):
        stuck = [f"dev{d}@{plan[d][ptr[d]]}" for d in range(p) if ptr[d] < len(plan[d])]
        raise DeadlockError(f"{schedule.value} order deadlocks: " + ", ".join(stuck))

    base = SimResult(
        schedule, p, m, v, 0.0, 0.0,
        [DeviceStats(busy_s=busy[d], compute_end_s=dev_free[d], peak_inflight=peak_inflight[d],
                     peak_activation_bytes=peak_act[d]) for d in range(p)],
        sorted(events, key=lambda e: (e.device, e.start_s)), transfers, stage_grads_done,
    )
    return with_allreduce(base, allreduce)


def with_allreduce(sim: SimResult, dp_allreduce_s: Sequence[float]) -> SimResult:
    """``sim`` with each stage's gradient all-reduce (or other once-per-step
    data-parallel traffic) run on its device's communication stream, in the
    order the stages finish their backward; the op timeline is unchanged."""
    p = sim.p
    comm_free = [0.0] * p
    done = sim.stage_grads_done_s
    for k in sorted(range(len(done)), key=lambda k: done[k]):
        if dp_allreduce_s[k] > 0:
            dk = stage_device(sim.schedule, p, k)
            comm_free[dk] = max(comm_free[dk], done[k]) + dp_allreduce_s[k]
    makespan = max(max(d.compute_end_s for d in sim.devices), max(comm_free)) if p else 0.0
    devices = [
        DeviceStats(
            busy_s=d.busy_s,
            idle_s=makespan - d.busy_s,
            compute_end_s=d.compute_end_s,
            allreduce_end_s=comm_free[i],
            peak_inflight=d.peak_inflight,
            peak_activation_bytes=d.peak_activation_bytes,
        )
        for i, d in enumerate(sim.devices)
    ]
    bubble = sum(x.idle_s for x in devices) / (p * makespan) if makespan > 0 else 0.0
    return SimResult(sim.schedule, p, sim.m, sim.v, makespan, bubble, devices, sim.events,
                     sim.transfers, done)


def uniform_stages(
    n: int, fwd_s: float, bwd_s: float, wgrad_s: float = 0.0, act_bytes: float = 0.0,
    out_bytes: float = 0.0,
) -> list[StageCost]:
    """``n`` identical stages (the textbook what-if)."""
    return [StageCost(fwd_s, bwd_s, wgrad_s, act_bytes, out_bytes) for _ in range(n)]


# Past the warm-up every schedule repeats one period per micro-batch (per p
# micro-batches for interleaved-1f1b), so the step grows linearly in m.
LINEAR_PROBES = 3


def simulate_steady(
    schedule: Schedule | str, p: int, m: int, stages: Sequence[StageCost], v: int = 1,
    link: Callable[[int, int], Link] | None = None, blocking_send: bool = False,
    device_start_s: Sequence[float] | None = None,
) -> SimResult:
    """``simulate`` without events and without traffic tails, for large m in
    O(warm-up) instead of O(m): three runs past the warm-up, ``p`` micro-batches
    apart; when every device's end, busy time and activation peak and every
    stage's last backward grow by the same step between them (a periodic
    steady state), the result at ``m`` is extrapolated; otherwise, or when m
    is small, the full run."""
    schedule = Schedule(schedule)
    base = 2 * p * max(v, 2)  # schedules.inflight_saturation: warm-up is over
    probes = [base + i * p for i in range(LINEAR_PROBES)]
    if m <= probes[-1] + p:
        return simulate(schedule, p, m, stages, v=v, link=link, blocking_send=blocking_send,
                        keep_events=False, device_start_s=device_start_s)
    runs = [simulate(schedule, p, k, stages, v=v, link=link, blocking_send=blocking_send,
                     keep_events=False, device_start_s=device_start_s) for k in probes]

    def series(r: SimResult) -> list[float]:
        return ([d.compute_end_s for d in r.devices] + [d.busy_s for d in r.devices]
                + [d.peak_activation_bytes for d in r.devices] + list(r.stage_grads_done_s))

    a, b, c = (series(r) for r in runs)
    if any(not math.isclose(y - x, z - y, rel_tol=1e-9, abs_tol=1e-12 * max(1.0, abs(z)))
           for x, y, z in zip(a, b, c, strict=True)):
        return simulate(schedule, p, m, stages, v=v, link=link, blocking_send=blocking_send,
                        keep_events=False, device_start_s=device_start_s)
    scale = (m - probes[-1]) / p
    out = [z + (z - y) * scale for y, z in zip(b, c, strict=True)]
    last = runs[-1]
    devices = [
        DeviceStats(busy_s=out[p + d], compute_end_s=out[d],
                    peak_inflight=last.devices[d].peak_inflight
                    if schedule is not Schedule.GPIPE else m,
                    peak_activation_bytes=out[2 * p + d])
        for d in range(p)
    ]
    steady = SimResult(schedule, p, m, v, 0.0, 0.0, devices, [], [], out[3 * p:])
    return with_allreduce(steady, [0.0] * len(stages))
