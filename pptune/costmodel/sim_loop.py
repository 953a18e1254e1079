"""The simulator's loop (simulate.py) on a state that can be copied and run on.

Each op's start and end follow from its device's previous op, the arrival of its
inputs and the queue of its device's own sends on a link, all fixed by the op
orders: the times come out the same whatever order the loop visits the devices
in. So a run may stop each device at a given op (``advance``'s ``limit``) and go
on later from a copy of its state: orders that begin with the same ops (the
steady-state probes of simulate_steady, whose micro-batch counts differ only past
the common start) are run that far once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pptune.costmodel.schedule_ops import RawOp, to_op
from pptune.costmodel.sim_plan import CompiledOp
from pptune.costmodel.sim_records import Event, StageCost, Transfer, overlapped_pair_s


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
    """Where a run stands: per output its arrival (-1: not yet) and the devices blocked
    on it; per directed link src * p + dst when it is next free; per device its next
    op, when it is free and its running sums; per stage when its last backward ended."""

    __slots__ = ("act_now", "arrival", "busy", "dev_free", "exposed", "grads_done",
                 "inflight", "link_free", "peak_act", "peak_inflight", "ptr", "waiting")

    def __init__(self, p: int, n_stages: int, n_outputs: int,
                 device_start_s: Sequence[float] | None = None) -> None:
        self.arrival = [-1.0] * n_outputs
        # tuples, never changed in place: a copy of the state shares them
        self.waiting: list[tuple[int, ...] | None] = [None] * n_outputs
        self.link_free = [0.0] * (p * p)
        self.ptr = [0] * p
        self.dev_free = list(device_start_s) if device_start_s is not None else [0.0] * p
        self.busy = [0.0] * p
        self.exposed = [0.0] * p
        self.inflight = [0] * p
        self.act_now = [0.0] * p
        self.peak_inflight = [0] * p
        self.peak_act = [0.0] * p
        self.grads_done = [0.0] * n_stages

    def copy(self) -> RunState:
        new = object.__new__(RunState)
        for name in RunState.__slots__:
            setattr(new, name, list(getattr(self, name)))
        return new


def advance(state: RunState, orders: Sequence[Sequence[CompiledOp]], limit: Sequence[int],
            stack: list[int], costs: OpCosts, blocking_send: bool = False,
            raw: Sequence[Sequence[RawOp]] | None = None, events: list[Event] | None = None,
            transfers: list[Transfer] | None = None) -> None:
    """Run the devices on ``stack`` (and those they unblock) until each is blocked on an
    input or has run its ops up to ``limit[d]``. ``raw``: the raw orders, to record
    ``events`` and ``transfers`` (None: record nothing)."""
    arrival, waiting, link_free = state.arrival, state.waiting, state.link_free
    ptr, dev_free, grads_done = state.ptr, state.dev_free, state.grads_done
    cost_flat, exposed_flat, act_of, send_s = costs.cost, costs.exposed, costs.act, costs.send_s
    fwd_comp, bw_comp, pair_cost, stages = (costs.fwd_comp, costs.bw_comp, costs.pair_cost,
                                            costs.stages)
    p = len(ptr)
    # The loop below is the planner's hot path: no closures (their cells slow every
    # local access), every index precomputed (sim_plan.py), a device's sums in locals
    # while it runs; a pair's two outputs go through the same code as one op's one.
    while stack:
        d = stack.pop()
        ops = orders[d]
        n_ops = limit[d]
        i = ptr[d]
        free = dev_free[d]
        busy, exposed = state.busy[d], state.exposed[d]
        inflight, act_now = state.inflight[d], state.act_now[d]
        peak_inflight, peak_act = state.peak_inflight[d], state.peak_act[d]
        while i < n_ops:
            j, j2, slot, grows, frees_k, b_k, gives = ops[i]
            start = free
            blocked = -1
            if j >= 0:
                ready = arrival[j]
                if ready < 0.0:
                    blocked = j
                elif ready > start:
                    start = ready
            if j2 >= 0 and blocked < 0:
                ready = arrival[j2]
                if ready < 0.0:
                    blocked = j2
                elif ready > start:
                    start = ready
            if blocked >= 0:
                queue = waiting[blocked]
                waiting[blocked] = (d,) if queue is None else (*queue, d)
                break
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
            named = to_op(raw[d][i]) if raw is not None else None
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
            for g, send, lk, out in gives:
                if lk < 0:
                    arrival[g] = end
                else:
                    t0 = link_free[lk]
                    if end > t0:
                        t0 = end
                    t1 = t0 + send_s[send]
                    link_free[lk] = t1
                    arrival[g] = t1
                    if named is not None and transfers is not None:
                        half = named.halves()[out] if b_k >= 0 else named
                        transfers.append(Transfer(d, lk - d * p, half, t0, t1))
                    if blocking_send and t1 > free:
                        free = t1
                woken = waiting[g]
                if woken is not None:
                    waiting[g] = None
                    stack.extend(woken)
            i += 1
        ptr[d] = i
        dev_free[d] = free
        state.busy[d], state.exposed[d] = busy, exposed
        state.inflight[d], state.act_now[d] = inflight, act_now
        state.peak_inflight[d], state.peak_act[d] = peak_inflight, peak_act
