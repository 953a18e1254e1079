"""Event-level execution of per-device op orders.

Each device runs its ops strictly in the order ``schedules.op_orders`` gives,
one at a time; an op starts when the device is free and its input has
arrived. Stages form pipelines (``schedules.stage_chains``: one over all
stages, or dualpipe's two directions):

- ``F`` of micro-batch i on a stage needs ``F`` of i on the stage before it
  in its pipeline, plus the point-to-point transfer of that stage's output
  when the two stages sit on different devices;
- ``B`` (or a whole backward ``BW``) of i on a stage needs ``B``/``BW`` of i
  on the stage after it (plus the transfer of the input-gradient back), or,
  on a pipeline's last stage, its own ``F`` (the loss);
- ``W`` of i on a stage needs ``B`` of i on that stage;
- an overlapped pair ``F&B`` needs both its halves' inputs and delivers
  both outputs when it ends.

Op times come from each stage's ``StageCost`` (sim_records.py: a plain op
adds the communication its compute waits on; an overlapped ``F&B`` pair
hides one chunk's communication behind the other's compute).

A transfer is ``latency + bytes / bandwidth`` (the alpha-beta model, see
comm.py) and queues FIFO on its directed link. By default it runs on a
separate stream and overlaps the sender's next compute; with
``blocking_send`` the sender waits for it. The data-parallel gradient
all-reduce of a stage starts once that stage's last backward op is done and
runs on the device's communication stream, so it overlaps the cool-down of
other stages and only its exposed tail lengthens the step.

Bubble rate = total idle time / (p * makespan), the idle share of the step
(Huang et al. 2019; Narayanan et al. 2021 sec. 2.2): a device idles while it
waits on another. Communication its compute waits on is busy time, wherever
it runs: inside an op, or once a step (a gather before its first op, the
data-parallel traffic after its last backward) as far as no wait on another
device covers it: past its first input's arrival, past the pipeline's last op.
Activation memory: a
micro-batch's activations on a stage are held from its ``F`` until its
backward is complete (``B`` where backward is not split; ``W``, ``BW`` or
the backward half of an ``F&B`` where it is, an upper bound for the split
case); in a pair the forward's activations count before the backward's are
freed (both are alive while the pair runs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from pptune.costmodel.schedule_ops import to_op
from pptune.costmodel.schedules import (
    OVERLAPPED,
    SPLIT_BACKWARD,
    Schedule,
    chunks_per_device,
    raw_orders,
    stage_device,
    stage_devices,
)
from pptune.costmodel.sim_loop import OpCosts, RunState, execute, full_runs, probe_runs
from pptune.costmodel.sim_plan import CompiledOrder, compiled_order
from pptune.costmodel.sim_records import (
    FREE_LINK,
    DeadlockError,
    DeviceStats,
    Event,
    Link,
    SimResult,
    StageCost,
    Transfer,
    overlapped_pair_s,
    uniform_stages,
)

__all__ = [
    "FREE_LINK", "DeadlockError", "DeviceStats", "Event", "Link", "SimResult", "StageCost",
    "Transfer", "overlapped_pair_s", "simulate", "simulate_steady", "uniform_stages",
    "with_allreduce",
]


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
    combined: bool = False,
) -> SimResult:
    """Run ``schedule`` over ``stages`` (one StageCost per global stage).

    ``link(src, dst)`` gives the link between two devices (free by default).
    ``dp_allreduce_s[k]`` is stage k's gradient all-reduce time (0 by default).
    ``device_start_s[d]``: when device d may start its first op (e.g. after a
    once-per-step parameter all-gather; 0 by default). ``combined``: the
    order with overlapped steady pairs (schedules.COMBINABLE).
    """
    schedule = Schedule(schedule)
    order = compiled_order(schedule, p, m, v, combined)
    costs = _op_costs(schedule, p, v, stages, link, order)
    n_stages = len(stages)
    allreduce = list(dp_allreduce_s) if dp_allreduce_s is not None else [0.0] * n_stages
    state = RunState(p, n_stages, order.n_outputs, device_start_s)
    events: list[Event] = []
    transfers: list[Transfer] = []
    raw = raw_orders(schedule, p, m, v, combined) if keep_events else None
    runs, stopped = full_runs(schedule, p, m, v, combined)
    execute(state, runs, costs, blocking_send, raw, events, transfers)
    base = _result(schedule, p, m, v, combined, order, state, stopped, device_start_s, events,
                   transfers)
    return with_allreduce(base, allreduce)


def _op_costs(schedule: Schedule, p: int, v: int, stages: Sequence[StageCost],
              link: Callable[[int, int], Link] | None, order: CompiledOrder) -> OpCosts:
    """The loop's view of the stage costs (sim_loop.OpCosts); the same for every m."""
    n_stages = p * chunks_per_device(schedule, v)
    if len(stages) != n_stages:
        raise ValueError(
            f"{schedule.value} with pp={p} needs {n_stages} stage costs, got {len(stages)}"
        )
    split = schedule in SPLIT_BACKWARD
    get_link = link or (lambda _s, _d: FREE_LINK)
    dev_of, prev_of, send_to = stage_devices(schedule, p, n_stages), order.prev_of, order.send_to
    # op time and its compute part by (raw kind, stage), flat: kind * n_stages + stage;
    # pairs priced on first use
    comm_b = [st.bwd_comm_s for st in stages]
    comp_of = [
        [st.fwd_s for st in stages],
        [st.split_b_s if split else st.bwd_s + st.wgrad_s for st in stages],
        [st.split_w_s for st in stages],
        [st.bwd_s + st.wgrad_s for st in stages],
    ]
    cost_of = [
        [st.fwd_s + st.fwd_comm_s for st in stages],
        [c + a for c, a in zip(comp_of[1], comm_b, strict=True)],
        comp_of[2],
        [c + a for c, a in zip(comp_of[3], comm_b, strict=True)],
    ]
    # each stage's output transfer time, by send slot out * n_stages + stage (0: none)
    send_s = [0.0] * (2 * n_stages)
    for k in range(n_stages):
        if send_to[0][k] >= 0:
            send_s[k] = get_link(dev_of[k], send_to[0][k]).time_s(stages[k].out_bytes)
        if send_to[1][k] >= 0:
            send_s[n_stages + k] = get_link(dev_of[k], send_to[1][k]).time_s(
                stages[prev_of[k]].out_bytes)
    return OpCosts(
        stages, [c for row in cost_of for c in row],
        [c - x for cs, xs in zip(cost_of, comp_of, strict=True)
         for c, x in zip(cs, xs, strict=True)],
        comp_of[0], comp_of[3], [st.act_bytes for st in stages], send_s)


def _result(schedule: Schedule, p: int, m: int, v: int, combined: bool, order: CompiledOrder,
            state: RunState, stopped: Sequence[int], device_start_s: Sequence[float] | None,
            events: list[Event], transfers: list[Transfer]) -> SimResult:
    """The finished run's result, without the data-parallel traffic (``with_allreduce``);
    ``stopped``: where each device's runs ended."""
    if any(stopped[d] < len(order.ops[d]) for d in range(p)):
        plan = raw_orders(schedule, p, m, v, combined)
        stuck = [f"dev{d}@{to_op(plan[d][stopped[d]])}" for d in range(p)
                 if stopped[d] < len(plan[d])]
        raise DeadlockError(f"{schedule.value} order deadlocks: " + ", ".join(stuck))
    arrival = state.arrival
    stats = []
    for d, (free, busy, exposed, _, _, peak_inflight, peak_act) in enumerate(state.devices):
        if device_start_s is not None:
            # a device waiting on its gather past its first op's input is busy with it
            # (the module docstring); until that input arrives it waits on the others
            j, j2 = order.ops[d][0][:2] if order.ops[d] else (-1, -1)
            waited = device_start_s[d] - max(arrival[j] if j >= 0 else 0.0,
                                             arrival[j2] if j2 >= 0 else 0.0)
            if waited > 0.0:
                busy += waited
                exposed += waited
        stats.append(DeviceStats(busy_s=busy, compute_end_s=free, peak_inflight=peak_inflight,
                                 peak_activation_bytes=peak_act, exposed_comm_s=exposed))
    return SimResult(schedule, p, m, v, 0.0, 0.0, stats,
                     sorted(events, key=lambda e: (e.device, e.start_s)), transfers,
                     state.grads_done)


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
    ops_end = max(d.compute_end_s for d in sim.devices) if p else 0.0
    makespan = max(ops_end, max(comm_free)) if p else 0.0
    # a device's own traffic past the pipeline's last op keeps it busy (the module
    # docstring); before that op it waits on the others anyway: the bubble
    tails = [max(0.0, comm_free[i] - ops_end) for i in range(p)]
    devices = [
        DeviceStats(
            busy_s=d.busy_s - d.dp_tail_s + tails[i],
            idle_s=makespan - (d.busy_s - d.dp_tail_s + tails[i]),
            compute_end_s=d.compute_end_s,
            allreduce_end_s=comm_free[i],
            peak_inflight=d.peak_inflight,
            peak_activation_bytes=d.peak_activation_bytes,
            exposed_comm_s=d.exposed_comm_s - d.dp_tail_s + tails[i],
            dp_tail_s=tails[i],
        )
        for i, d in enumerate(sim.devices)
    ]
    bubble = sum(x.idle_s for x in devices) / (p * makespan) if makespan > 0 else 0.0
    return SimResult(sim.schedule, p, sim.m, sim.v, makespan, bubble, devices, sim.events,
                     sim.transfers, done)


# Past the warm-up every schedule repeats one period per micro-batch (per p
# micro-batches for interleaved-1f1b), so the step grows linearly in m.
LINEAR_PROBES = 3


def simulate_steady(
    schedule: Schedule | str, p: int, m: int, stages: Sequence[StageCost], v: int = 1,
    link: Callable[[int, int], Link] | None = None, blocking_send: bool = False,
    device_start_s: Sequence[float] | None = None, combined: bool = False,
) -> SimResult:
    """``simulate`` without events and without traffic tails, for large m in
    O(warm-up) instead of O(m): three runs past the warm-up, ``p`` micro-batches
    apart (an even number, in line with m, for the DualPipes); when every device's end, busy time and activation peak and every
    stage's last backward grow by the same step between them (a periodic
    steady state) and no device's end grows slower than its busy time (its idle
    still shrinking: not a steady state however linear the three look), the result
    at ``m`` is extrapolated; otherwise, or when m is small, the full run."""
    schedule = Schedule(schedule)
    base = 2 * p * max(v, 2)  # schedules.inflight_saturation: warm-up is over
    step = p
    if schedule in OVERLAPPED:
        # their pairs alternate the two chunks' roles: the step can repeat
        # every two micro-batches only, so probe an even distance apart,
        # in line with m
        step = p if p % 2 == 0 else 2 * p
        base += (m - base) % step
    probes = [base + i * step for i in range(LINEAR_PROBES)]
    # interleaved with m not a multiple of p groups its micro-batches otherwise than the
    # probes do (schedule_orders.microbatch_group): no common period to extrapolate
    regrouped = schedule is Schedule.INTERLEAVED and m % p != 0
    if m <= probes[-1] + step or regrouped:
        return simulate(schedule, p, m, stages, v=v, link=link, blocking_send=blocking_send,
                        keep_events=False, device_start_s=device_start_s, combined=combined)
    runs = _probes(schedule, p, tuple(probes), stages, v, link, blocking_send, device_start_s,
                   combined)

    def series(r: SimResult) -> list[float]:
        return ([d.compute_end_s for d in r.devices] + [d.busy_s for d in r.devices]
                + [d.peak_activation_bytes for d in r.devices]
                + [d.exposed_comm_s for d in r.devices] + list(r.stage_grads_done_s))

    a, b, c = (series(r) for r in runs)
    # a device's end cannot grow slower than its busy time for long (its idle time
    # would fall below zero): where it does, the warm-up's idle is still being
    # absorbed and the probes are not in the steady state yet (seen with ZBV)
    filling = any(c[d] - b[d] < c[p + d] - b[p + d] - 1e-12 * max(1.0, abs(c[d]))
                  for d in range(p))
    if filling or any(
            not math.isclose(y - x, z - y, rel_tol=1e-9, abs_tol=1e-12 * max(1.0, abs(z)))
            for x, y, z in zip(a, b, c, strict=True)):
        return simulate(schedule, p, m, stages, v=v, link=link, blocking_send=blocking_send,
                        keep_events=False, device_start_s=device_start_s, combined=combined)
    scale = (m - probes[-1]) / step
    out = [z + (z - y) * scale for y, z in zip(b, c, strict=True)]
    last = runs[-1]
    devices = [
        DeviceStats(busy_s=out[p + d], compute_end_s=out[d],
                    peak_inflight=last.devices[d].peak_inflight
                    if schedule is not Schedule.GPIPE else m,
                    peak_activation_bytes=out[2 * p + d], exposed_comm_s=out[3 * p + d])
        for d in range(p)
    ]
    steady = SimResult(schedule, p, m, v, 0.0, 0.0, devices, [], [], out[4 * p:])
    return with_allreduce(steady, [0.0] * len(stages))


def _probes(schedule: Schedule, p: int, ms: tuple[int, ...], stages: Sequence[StageCost],
            v: int, link: Callable[[int, int], Link] | None, blocking_send: bool,
            device_start_s: Sequence[float] | None, combined: bool) -> list[SimResult]:
    """``simulate`` at each micro-batch count of ``ms`` (ascending) without events. The
    ops all their orders begin with are run once, then each order in turn runs on from a
    copy of the state while the rest run on to the start they still share
    (sim_loop.probe_runs): the same results, each shared op simulated once."""
    orders = [compiled_order(schedule, p, m, v, combined) for m in ms]
    costs = _op_costs(schedule, p, v, stages, link, orders[0])
    shared = RunState(p, len(stages), max(o.n_outputs for o in orders), device_start_s)
    out = []
    for i, (m, order, (on, own, stopped)) in enumerate(zip(
            ms, orders, probe_runs(schedule, p, ms, v, combined), strict=True)):
        execute(shared, on, costs, blocking_send)
        state = shared.copy() if i < len(ms) - 1 else shared
        execute(state, own, costs, blocking_send)
        base = _result(schedule, p, m, v, combined, order, state, stopped, device_start_s, [],
                       [])
        out.append(with_allreduce(base, [0.0] * len(stages)))
    return out
