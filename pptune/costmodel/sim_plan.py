"""Op orders compiled for the simulator's loop (simulate.py).

Which output an op waits on, which it gives and to which device, where it adds and
frees activations: all of it follows from the schedule's op order and its stage
placement, never from the stage costs. It is worked out here once per order, as
flat indices, and shared by every run over that order (a search simulates one
order under many stage costs); the loop only looks the numbers up.

An output (0 forward / 1 backward, micro-batch, stage) is one index,
``(2 * mb + out) * n_stages + stage``: every order names micro-batches 0..m-1
(tests/costmodel/test_schedules.py checks it for every schedule). An op compiles
to the same numbers whatever m is, so orders for several m that begin with the
same ops begin with the same compiled ops (``common_start``).
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from pptune.costmodel.inflight import releases
from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB, RAW_W, RawOp
from pptune.costmodel.schedules import (
    Schedule,
    chunks_per_device,
    raw_orders,
    stage_chains,
    stage_devices,
)

# An output an op gives: (its index, its send slot out * n_stages + stage, the directed
# link it is sent on, src * p + dst, or -1 (nowhere, or the same device), 0 forward /
# 1 backward).
Give = tuple[int, int, int, int]
# One op: (the output it waits on or -1, a pair's second input or -1, its cost slot
# kind * n_stages + stage (a pair: its forward's stage), the stage it adds activations
# to or -1, the stage whose activations it frees or -1, a pair's backward stage or -1,
# the first output it gives as its index (-1: none), send slot and link, the outputs it
# gives after that). The first output sits in the op itself: all but a pair give one
# output (a pair's first is its forward's, 0), and the loop reads it without iterating
# a tuple (a fifth of the loop's time).
CompiledOp = tuple[int, int, int, int, int, int, int, int, int, tuple[Give, ...]]


@dataclass(frozen=True)
class CompiledOrder:
    ops: tuple[tuple[CompiledOp, ...], ...]  # per device, in its order
    n_outputs: int
    # per global stage: the stage before it in its pipeline (-1: none), and the device
    # its output is sent to forward and backward (-1: none, or its own device)
    prev_of: tuple[int, ...]
    send_to: tuple[tuple[int, ...], tuple[int, ...]]


@functools.lru_cache(maxsize=128)
def compiled_order(schedule: Schedule, p: int, m: int, v: int, combined: bool) -> CompiledOrder:
    """``raw_orders(schedule, p, m, v, combined)`` compiled. Kept for the 128 orders last
    used (about 0.3 KB an op: a search of GPT-3 175B on 512 GPUs peaks near 0.9 GB; the
    orders of one schedule, depth and chunks share their compiled ops)."""
    plan = raw_orders(schedule, p, m, v, combined)
    compiler = _compiler(schedule, p, v, combined)
    memo, make = compiler.memo, compiler.compile
    n = compiler.n
    return CompiledOrder(tuple(tuple([memo.get(op) or make(op) for op in ops]) for ops in plan),
                         2 * m * n, compiler.prev_of, compiler.send_to)


class _Compiler:
    """What an op of one schedule, depth, chunks and order compiles to: the same for
    every m (the module docstring), so each is compiled once and kept (``memo``)."""

    def __init__(self, schedule: Schedule, p: int, v: int, combined: bool) -> None:
        n = self.n = p * chunks_per_device(schedule, v)
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
        self.prev_of = tuple(prev_of)
        self.send_to = (tuple(send_to[0]), tuple(send_to[1]))
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
        # per cost slot kind * n + stage, what does not depend on the micro-batch: the
        # input's index and the output's, less 2 * mb * n (-1: none), the output's send
        # slot and link
        self.wait_at: list[int] = []
        self.give_at: list[int] = []
        self.send_at: list[int] = []
        self.dest: list[int] = []
        for kind in range(4):
            out = _GIVES_OUT[kind]
            for k in range(n):
                ds = dep_stage[kind][k]
                self.wait_at.append(dep_out[kind][k] * n + ds if ds >= 0 else -1)
                self.give_at.append(out * n + k if out >= 0 else -1)
                self.send_at.append(out * n + k)
                dest = send_to[out][k] if out >= 0 else -1
                self.dest.append(dev_of[k] * p + dest if dest >= 0 else -1)
        self.grows = [k if kind == RAW_F else -1 for kind in range(4) for k in range(n)]
        self.freed = [k if frees[kind] else -1 for kind in range(4) for k in range(n)]
        self.memo: dict[RawOp, CompiledOp] = {}

    def compile(self, op: RawOp) -> CompiledOp:
        n = self.n
        wait_at = self.wait_at
        kind, off = op[0], op[1] * 2 * n
        if kind == RAW_FB:
            # a pair's halves: its forward's and its backward's (BW) cost slots
            k, b_k, b_off = op[2], op[4], op[3] * 2 * n
            wf, wb = wait_at[RAW_F * n + k], wait_at[RAW_BW * n + b_k]
            done: CompiledOp = (wf + off if wf >= 0 else -1, wb + b_off if wb >= 0 else -1, k,
                                k, b_k, b_k, off + k, k, self.dest[k],
                                ((b_off + n + b_k, n + b_k, self.dest[n + b_k], 1),))
        else:
            slot = kind * n + op[2]
            w, g = wait_at[slot], self.give_at[slot]
            gives, send, dest = ((g + off, self.send_at[slot], self.dest[slot]) if g >= 0
                                 else (-1, -1, -1))
            done = (w + off if w >= 0 else -1, -1, slot, self.grows[slot], self.freed[slot], -1,
                    gives, send, dest, ())
        self.memo[op] = done
        return done


_GIVES_OUT = (0, 1, -1, 1)  # the output a plain op of each raw kind gives (-1: none, W)


@functools.lru_cache(maxsize=32)
def _compiler(schedule: Schedule, p: int, v: int, combined: bool) -> _Compiler:
    return _Compiler(schedule, p, v, combined)


@functools.lru_cache(maxsize=128)
def common_start(schedule: Schedule, p: int, ms: tuple[int, ...], v: int,
                 combined: bool) -> tuple[int, ...]:
    """Per device, how many ops its orders for every micro-batch count in ``ms`` begin
    with in common (raw_orders; compiled alike, ``compiled_order``)."""
    orders = [raw_orders(schedule, p, m, v, combined) for m in ms]
    return tuple(_common_length([o[d] for o in orders]) for d in range(p))


def _common_length(seqs: list[tuple[RawOp, ...]], chunk: int = 256) -> int:
    """How many items all of ``seqs`` begin with in common: compared a chunk at a time,
    then the chunk that differs bisected (equal starts of a length have equal starts
    of every shorter length; tuples compare in C)."""
    first, rest = seqs[0], seqs[1:]
    n = min(map(len, seqs))

    def same(lo: int, hi: int) -> bool:
        return all(s[lo:hi] == first[lo:hi] for s in rest)

    low = 0
    while low < n and same(low, min(n, low + chunk)):
        low = min(n, low + chunk)
    high = min(n, low + chunk) - 1  # the first difference lies in [low, high]
    while low < high:
        mid = (low + high + 1) // 2
        if same(low, mid):
            low = mid
        else:
            high = mid - 1
    return low
