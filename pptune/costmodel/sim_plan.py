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

from pptune.costmodel.inflight import releases
from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB, RAW_W
from pptune.costmodel.schedules import (
    Schedule,
    chains,
    chunks_per_device,
    raw_orders,
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
    n_outputs: int
    runs: int  # micro-batches each stage runs (m / chains)
    # per global stage: the stage before it in its pipeline (-1: none), and the device
    # its output is sent to forward and backward (-1: none, or its own device)
    prev_of: tuple[int, ...]
    send_to: tuple[tuple[int, ...], tuple[int, ...]]


@functools.lru_cache(maxsize=128)
def compiled_order(schedule: Schedule, p: int, m: int, v: int, combined: bool) -> CompiledOrder:
    """``raw_orders(schedule, p, m, v, combined)`` compiled. Kept for the 128 orders last
    used (about 0.3 KB an op: a search of GPT-3 175B on 512 GPUs peaks near 0.9 GB)."""
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
    # per cost slot kind * n + stage, what does not depend on the micro-batch: the input's
    # index and the output's, less mb * n (-1: none), the output's send slot and device
    mn = m * n
    wait_at, give_at, send_at, dest = [], [], [], []
    for kind in range(4):
        out = gives_out[kind]
        for k in range(n):
            ds = dep_stage[kind][k]
            wait_at.append(dep_out[kind][k] * mn + ds if ds >= 0 else -1)
            give_at.append(out * mn + k if out >= 0 else -1)
            send_at.append(out * n + k)
            dest.append(send_to[out][k] if out >= 0 else -1)
    grows = [k if kind == RAW_F else -1 for kind in range(4) for k in range(n)]
    freed = [k if frees[kind] else -1 for kind in range(4) for k in range(n)]
    f_at, bw_at = RAW_F * n, RAW_BW * n  # a pair's halves: its forward's, its backward's

    devices = []
    for ops in plan:
        out_ops: list[CompiledOp] = []
        add = out_ops.append
        for op in ops:
            kind, off = op[0], op[1] * n
            if kind == RAW_FB:
                k, b_k, b_off = op[2], op[4], op[3] * n
                fs, bs = f_at + k, bw_at + b_k
                wf, wb = wait_at[fs], wait_at[bs]
                add((wf + off if wf >= 0 else -1, wb + b_off if wb >= 0 else -1, k, k, b_k, b_k,
                     ((off + k, k, send_to[0][k], 0),
                      (mn + b_off + b_k, n + b_k, send_to[1][b_k], 1))))
            else:
                slot = kind * n + op[2]
                w, g = wait_at[slot], give_at[slot]
                add((w + off if w >= 0 else -1, -1, slot, grows[slot], freed[slot], -1,
                     ((g + off, send_at[slot], dest[slot], gives_out[kind]),) if g >= 0 else ()))
        devices.append(tuple(out_ops))
    return CompiledOrder(tuple(devices), 2 * m * n, m // chains(schedule), tuple(prev_of),
                         (tuple(send_to[0]), tuple(send_to[1])))
