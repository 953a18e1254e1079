"""Op orders compiled for the simulator's loop (simulate.py).

Which output an op waits on, which it gives and to which device, where it adds and
frees activations: all of it follows from the schedule's op order and its stage
placement, never from the stage costs. It is worked out here once per order, as
flat indices, and shared by every run over that order (a search simulates one
order under many stage costs); the loop only looks the numbers up.

An output (0 forward / 1 backward, micro-batch, stage) is one index,
``(out * m + mb) * n_stages + stage``: every order names micro-batches 0..m-1
(tests/costmodel/test_schedules.py checks it for every schedule).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB, RAW_W
from pptune.costmodel.schedules import (
    Schedule,
    chains,
    chunks_per_device,
    raw_orders,
    releases,
    stage_chains,
    stage_devices,
)

# An output an op gives: (its index, its send slot out * n_stages + stage, the device
# it is sent to or -1 (nowhere, or the same device), 0 forward / 1 backward).
Give = tuple[int, int, int, int]
# One op: (the output it waits on or -1, a pair's second input or -1, its cost slot
# kind * n_stages + stage (a pair: its forward's stage), the stage it adds activations
# to or -1, the stage whose activations it frees or -1, a pair's backward stage or -1,
# the outputs it gives).
CompiledOp = tuple[int, int, int, int, int, int, tuple[Give, ...]]


@dataclass(frozen=True)
class CompiledOrder:
    ops: tuple[tuple[CompiledOp, ...], ...]  # per device, in its order
    n_stages: int
    n_outputs: int
    runs: int  # micro-batches each stage runs (m / chains)
    device_of: tuple[int, ...]  # per global stage
    prev_of: tuple[int, ...]  # per global stage, the stage before it in its pipeline or -1
    next_of: tuple[int, ...]  # the stage after it or -1


@functools.lru_cache(maxsize=64)
def compiled_order(schedule: Schedule, p: int, m: int, v: int, combined: bool) -> CompiledOrder:
    plan = raw_orders(schedule, p, m, v, combined)
    n = p * chunks_per_device(schedule, v)
    dev_of = stage_devices(schedule, p, n)
    prev_of, next_of = [-1] * n, [-1] * n
    for chain in stage_chains(schedule, p, v):
        for a, b in itertools.pairwise(chain):
            next_of[a], prev_of[b] = b, a
    # where each stage's output goes: the next stage's device (forward), the one
    # before's (backward), -1 when there is none or it is the same device
    send_to = [[-1] * n for _ in range(2)]
    for k in range(n):
        nxt, prv = next_of[k], prev_of[k]
        if nxt >= 0 and dev_of[nxt] != dev_of[k]:
            send_to[0][k] = dev_of[nxt]
        if prv >= 0 and dev_of[prv] != dev_of[k]:
            send_to[1][k] = dev_of[prv]
    # per (raw kind, stage): the output it waits on as (0 fwd / 1 bwd, stage), stage -1
    # for none: F on F of the stage before; B/BW on B of the stage after (or this
    # stage's F on a pipeline's last stage); W on its B
    dep_out = [[0] * n for _ in range(4)]
    dep_stage = [[-1] * n for _ in range(4)]
    for k in range(n):
        dep_stage[RAW_F][k] = prev_of[k]
        for kind in (RAW_B, RAW_BW):
            nxt = next_of[k]
            dep_out[kind][k], dep_stage[kind][k] = (0, k) if nxt < 0 else (1, nxt)
        dep_out[RAW_W][k], dep_stage[RAW_W][k] = 1, k
    frees = tuple(releases(schedule, kind) for kind in range(4))
    gives_out = (0, 1, -1, 1)  # the output a plain op of each raw kind gives (-1: none, W)

    def give(out: int, mb: int, k: int) -> Give:
        return ((out * m + mb) * n + k, out * n + k, send_to[out][k], out)

    def waits(kind: int, mb: int, k: int) -> int:
        ds = dep_stage[kind][k]
        return (dep_out[kind][k] * m + mb) * n + ds if ds >= 0 else -1

    devices = []
    for ops in plan:
        out_ops: list[CompiledOp] = []
        for op in ops:
            kind, mb, k = op[0], op[1], op[2]
            if kind == RAW_FB:
                b_mb, b_k = op[3], op[4]
                out_ops.append((waits(RAW_F, mb, k), waits(RAW_BW, b_mb, b_k), k, k, b_k, b_k,
                                (give(0, mb, k), give(1, b_mb, b_k))))
            else:
                out = gives_out[kind]
                out_ops.append((waits(kind, mb, k), -1, kind * n + k,
                                k if kind == RAW_F else -1, k if frees[kind] else -1, -1,
                                (give(out, mb, k),) if out >= 0 else ()))
        devices.append(tuple(out_ops))
    return CompiledOrder(tuple(devices), n, 2 * m * n, m // chains(schedule), dev_of,
                         tuple(prev_of), tuple(next_of))
