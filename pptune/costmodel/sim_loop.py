"""The simulator's loop (simulate.py): the op orders run in a fixed sequence of runs.

Each op's start and end follow from its device's previous op, the arrival of its
inputs and the queue of its device's own sends on a link, all fixed by the op
orders: the times come out the same in any sequence that runs an op after the ops
its inputs come from. Which ops can run before which never depends on the costs,
so the sequence is found once an order (``order_runs``: each device runs until it
waits on an input no op has given yet, then the devices that input releases: 2.5
ops a run on average in a DeepSeek-V3 search, 3.6 in a Llama 3.1 405B one) and every
simulation of the order only follows it (``execute``), never testing an input or
queueing a device.

A run may stop each device at a given op and go on later from a copy of its state:
orders that begin with the same ops (the steady-state probes of simulate_steady,
whose micro-batch counts differ only past the common start) are run that far once
(``probe_runs``).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from pptune.costmodel.schedule_ops import RawOp, to_op
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.sim_plan import CompiledOp, common_start, compiled_order
from pptune.costmodel.sim_records import Event, StageCost, Transfer, overlapped_pair_s

# A device's consecutive ops: (the device, its first op's place in its order, the place
# after its last op).
Run = tuple[int, int, int]
# A run as ``execute`` takes it: (the device, its first op's place, its ops). The runs
# are kept sliced (``full_runs``, ``probe_runs``): 3.2 ops a run on average in the
# searches, where slicing them anew in every simulation cost a twentieth of the loop.
Sliced = tuple[int, int, tuple[CompiledOp, ...]]


@dataclass(frozen=True)
class OpCosts:
    """What the loop reads of the stage costs, flat by cost slot kind * n_stages + stage
    (sim_plan.py): an op's time, its communication exposed, a stage's forward and whole
    backward compute (for an F&B pair's), a stage's activation bytes, a send's time by
    send slot (out * n_stages + stage)."""

    stages: Sequence[StageCost]
    cost: list[float]
    exposed: list[float]
    fwd_comp: list[float]
    bw_comp: list[float]
    act: list[float]
    send_s: list[float]
    pair_cost: dict[tuple[int, int], float] = field(default_factory=dict)  # priced on use


class RunState:
    """Where a run stands: per output its arrival; per directed link src * p + dst when
    it is next free; per device (when it is free, busy time, exposed communication,
    micro-batches and activation bytes held, their peaks); per stage when its last
    backward ended."""

    __slots__ = ("arrival", "devices", "grads_done", "link_free")

    def __init__(self, p: int, n_stages: int, n_outputs: int,
                 device_start_s: Sequence[float] | None = None) -> None:
        self.arrival = [-1.0] * n_outputs
        # only the links the stages send over get an entry (a pipeline's neighbours; a
        # p x p list is 80 GB at pp 100,000)
        self.link_free: defaultdict[int, float] = defaultdict(float)
        start = device_start_s if device_start_s is not None else [0.0] * p
        self.devices = [(start[d], 0.0, 0.0, 0, 0.0, 0, 0.0) for d in range(p)]
        self.grads_done = [0.0] * n_stages

    def copy(self) -> RunState:
        new = object.__new__(RunState)
        new.arrival, new.devices = list(self.arrival), list(self.devices)
        new.grads_done = list(self.grads_done)
        new.link_free = defaultdict(float, self.link_free)
        return new


def order_runs(orders: Sequence[Sequence[CompiledOp]], limit: Sequence[int],
               start: list[int], given: list[bool]) -> tuple[Run, ...]:
    """Runs that take each device from ``start[d]`` as far towards ``limit[d]`` as the
    ops before them allow, each op after those its inputs come from (``given``: per
    output, whether an op has given it). Updates ``start`` and ``given``."""
    p = len(start)
    waiting: dict[int, list[int]] = {}
    stack = list(range(p - 1, -1, -1))
    runs = []
    while stack:
        d = stack.pop()
        ops = orders[d]
        i = first = start[d]
        while i < limit[d]:
            j, j2, _, _, _, _, g, _, _, more = ops[i]
            blocked = j if j >= 0 and not given[j] else j2 if j2 >= 0 and not given[j2] else -1
            if blocked >= 0:
                waiting.setdefault(blocked, []).append(d)
                break
            for out in (g, *(give[0] for give in more)) if more else (g,):
                if out >= 0:
                    given[out] = True
                    stack.extend(waiting.pop(out, ()))
            i += 1
        if i > first:
            runs.append((d, first, i))
        start[d] = i
    return tuple(runs)


@functools.lru_cache(maxsize=128)
def full_runs(schedule: Schedule, p: int, m: int, v: int,
              combined: bool) -> tuple[tuple[Sliced, ...], tuple[int, ...]]:
    """(``order_runs`` of the whole order from its start, sliced, where each device
    stopped: short of its order's end only where the order deadlocks)."""
    order = compiled_order(schedule, p, m, v, combined)
    start = [0] * p
    runs = order_runs(order.ops, [len(ops) for ops in order.ops], start,
                      [False] * order.n_outputs)
    return sliced(order.ops, runs), tuple(start)


@functools.lru_cache(maxsize=128)
def probe_runs(schedule: Schedule, p: int, ms: tuple[int, ...], v: int, combined: bool
               ) -> tuple[tuple[tuple[Sliced, ...], tuple[Sliced, ...], tuple[int, ...]], ...]:
    """Per micro-batch count of ``ms`` in turn: (the runs that take the state shared with
    the counts after it on to the start their orders still share, none for the last;
    the runs from there to its own order's end; where each device stopped), sliced."""
    orders = [compiled_order(schedule, p, m, v, combined) for m in ms]
    start, given = [0] * p, [False] * max(o.n_outputs for o in orders)
    out = []
    for i, order in enumerate(orders):
        ends = [len(ops) for ops in order.ops]
        shared: tuple[Run, ...] = ()
        if i < len(ms) - 1:
            shared = order_runs(order.ops, common_start(schedule, p, ms[i:], v, combined),
                                start, given)
        own_start = list(start)
        own = order_runs(order.ops, ends, own_start, list(given))
        out.append((sliced(order.ops, shared), sliced(order.ops, own), tuple(own_start)))
    return tuple(out)


def sliced(orders: Sequence[Sequence[CompiledOp]], runs: Sequence[Run]) -> tuple[Sliced, ...]:
    """``runs`` with their ops (``Sliced``)."""
    return tuple((d, first, tuple(orders[d][first:end])) for d, first, end in runs)


def execute(state: RunState, runs: Sequence[Sliced], costs: OpCosts,
            blocking_send: bool = False, raw: Sequence[Sequence[RawOp]] | None = None,
            events: list[Event] | None = None, transfers: list[Transfer] | None = None) -> None:
    """Run ``runs`` (``order_runs``, sliced) on ``state``. ``raw``: the raw orders, to
    record ``events`` and ``transfers`` (None: record nothing)."""
    arrival, link_free, devices, grads_done = (state.arrival, state.link_free, state.devices,
                                               state.grads_done)
    cost_flat, exposed_flat, act_of, send_s = costs.cost, costs.exposed, costs.act, costs.send_s
    fwd_comp, bw_comp, pair_cost, stages = (costs.fwd_comp, costs.bw_comp, costs.pair_cost,
                                            costs.stages)
    p = len(devices)
    # what records nothing tests one local an op (every search simulation)
    trace = raw is not None and (events is not None or transfers is not None)
    raw_ops = raw if raw is not None else ()
    named = None
    # The loop below is the planner's hot path: no closures (their cells slow every
    # local access), every index precomputed (sim_plan.py), a device's figures in locals
    # while it runs, an op's first output in the op (a pair's second after the first).
    for d, i, ops in runs:
        free, busy, exposed, inflight, act_now, peak_inflight, peak_act = devices[d]
        i -= 1  # the op's place in its raw order, counted where it is recorded
        for j, j2, slot, grows, frees_k, b_k, g, send, lk, more in ops:
            start = free
            if j >= 0:
                ready = arrival[j]
                if ready > start:
                    start = ready
            if j2 >= 0:
                ready = arrival[j2]
                if ready > start:
                    start = ready
            if b_k >= 0:  # an F&B pair: slot is its forward's stage
                cost = pair_cost.get((slot, b_k))
                if cost is None:
                    cost = pair_cost[(slot, b_k)] = overlapped_pair_s(stages[slot], stages[b_k])
                exposed += cost - fwd_comp[slot] - bw_comp[b_k]
            else:
                cost = cost_flat[slot]
                exposed += exposed_flat[slot]
            end = start + cost
            busy += cost
            free = end
            if trace:
                i += 1
                named = to_op(raw_ops[d][i])
                if named is not None and events is not None:
                    events.append(Event(d, named, start, end))
            if grows >= 0:
                inflight += 1
                act_now += act_of[grows]
                if inflight > peak_inflight:
                    peak_inflight = inflight
                if act_now > peak_act:
                    peak_act = act_now
            if frees_k >= 0:
                inflight -= 1
                act_now -= act_of[frees_k]
                # the stage's last backward (each stage's run on one device, in order)
                grads_done[frees_k] = end
            if g >= 0:  # its first output (a pair's forward's, out 0)
                if lk < 0:
                    arrival[g] = end
                else:
                    t0 = link_free[lk]
                    if end > t0:
                        t0 = end
                    t1 = t0 + send_s[send]
                    link_free[lk] = t1
                    arrival[g] = t1
                    if trace and named is not None and transfers is not None:
                        half = named.halves()[0] if b_k >= 0 else named
                        transfers.append(Transfer(d, lk - d * p, half, t0, t1))
                    if blocking_send and t1 > free:
                        free = t1
            if more:  # a pair's backward output
                for g, send, lk, out in more:
                    if lk < 0:
                        arrival[g] = end
                    else:
                        t0 = link_free[lk]
                        if end > t0:
                            t0 = end
                        t1 = t0 + send_s[send]
                        link_free[lk] = t1
                        arrival[g] = t1
                        if trace and named is not None and transfers is not None:
                            transfers.append(Transfer(d, lk - d * p, named.halves()[out], t0,
                                                      t1))
                        if blocking_send and t1 > free:
                            free = t1
        devices[d] = (free, busy, exposed, inflight, act_now, peak_inflight, peak_act)
