"""Op orders of DualPipe and DualPipeV (DeepSeek-AI 2024; Sea AI Lab's
"cut-in-half" DualPipeV), as their reference implementations run them.

DualPipeV, as torch 2.13 runs it (``ScheduleDualPipeV.
_calculate_single_rank_operations`` in torch/distributed/pipelining/
schedules.py, itself ported from DeepSeek's dualpipe/dualpipev.py): rank r of
p holds stages r and 2p-1-r (a V: the micro-batch goes down the ranks and
back up) and runs, with phase 0 = stage r and phase 1 = stage 2p-1-r:

1. ``2(p-r-1)`` forwards of phase 0;
2. ``r+1`` times: F phase 0, F phase 1;
3. ``p-r-1`` times: input-grad B of phase 1, its W at once, F phase 1;
4. ``m-2p+r+1`` times: the overlapped pair F phase 0 & B phase 1 (on the
   last rank the first of these runs unpaired: F, then a whole backward),
   then the pair F phase 1 & B phase 0;
5. ``p-r-1`` times: whole backward of phase 1, pair F phase 1 & B phase 0;
6. ``r+1`` times: backward phase 1, backward phase 0 -- whole backwards
   for the first half of them, input-grad only (W deferred) from
   ``(r+1)//2`` on;
7. ``p-r-1`` times: the oldest deferred W, input-grad B of phase 0;
8. ``r+1`` deferred Ws, oldest first.

Every backward inside an overlapped pair is whole (``BW``). Each phase
takes its micro-batches in order.

DualPipe (DeepSeek's dualpipe/dualpipe.py, ``DualPipe.step``) is the same
eight steps run by the two halves of an even number p of ranks, mirrored:
rank r plays half-rank h = min(r, p-1-r) of H = p/2, and the m micro-batches
are cut into two halves of m/2 fed from both ends. Here the down direction
is stages 0..p-1 (stage s on rank s, micro-batches 0..m/2-1) and the up
direction stages p..2p-1 (stage p+j on rank p-1-j, micro-batches
m/2..m-1). Each rank's phase 0 is the direction that enters nearest to it
(down on ranks < p/2, up on the others). The same model chunk c runs as
down stage c and as up stage p+c, so every rank holds two chunks' weights.
"""

from __future__ import annotations

from pptune.costmodel.schedule_ops import RAW_B, RAW_BW, RAW_F, RAW_FB, RAW_W, RawOp


def dual_steps(half_ranks: int, h: int, chunks: int, phase0: tuple[int, int],
               phase1: tuple[int, int]) -> list[RawOp]:
    """One rank's ops: ``half_ranks`` ranks per V, this rank's place ``h`` in it,
    ``chunks`` micro-batches per phase; ``phaseN`` = (stage, first micro-batch)."""
    stage_of = {0: phase0[0], 1: phase1[0]}
    base = {0: phase0[1], 1: phase1[1]}
    f_next = [0, 0]
    b_next = [0, 0]
    w_queue: list[RawOp] = []  # deferred weight-grads, oldest first (torch's weight_queue)
    ops: list[RawOp] = []

    def fwd(ph: int) -> tuple[int, int]:
        mb = base[ph] + f_next[ph]
        f_next[ph] += 1
        return mb, stage_of[ph]

    def bwd(ph: int) -> tuple[int, int]:
        mb = base[ph] + b_next[ph]
        b_next[ph] += 1
        return mb, stage_of[ph]

    def f(ph: int) -> None:
        ops.append((RAW_F, *fwd(ph)))

    def b_whole(ph: int) -> None:
        ops.append((RAW_BW, *bwd(ph)))

    def b_input(ph: int) -> None:
        mb, stage = bwd(ph)
        ops.append((RAW_B, mb, stage))
        w_queue.append((RAW_W, mb, stage))

    def w() -> None:
        if w_queue:  # torch's add_weight_action_if_pending: nothing when none is due
            ops.append(w_queue.pop(0))

    def pair(f_ph: int, b_ph: int) -> None:
        ops.append((RAW_FB, *fwd(f_ph), *bwd(b_ph)))

    last = h == half_ranks - 1  # the bottom of the V
    for _ in range(2 * (half_ranks - h - 1)):  # step 1
        f(0)
    for _ in range(h + 1):  # step 2
        f(0)
        f(1)
    for _ in range(half_ranks - h - 1):  # step 3
        b_input(1)
        w()
        f(1)
    for i in range(chunks - 2 * half_ranks + h + 1):  # step 4
        if i == 0 and last:
            # "We don't overlap these two chunks to further reduce bubble size."
            f(0)
            b_whole(1)
        else:
            pair(0, 1)
        pair(1, 0)
    for _ in range(half_ranks - h - 1):  # step 5
        b_whole(1)
        pair(1, 0)
    split = False
    for i in range(h + 1):  # step 6
        if i == (h + 1) // 2 and h % 2 == 1:
            split = True
        (b_input if split else b_whole)(1)
        if i == (h + 1) // 2 and h % 2 == 0:
            split = True
        (b_input if split else b_whole)(0)
    for _ in range(half_ranks - h - 1):  # step 7
        w()
        (b_input if split else b_whole)(0)
    for _ in range(h + 1):  # step 8
        w()
    return ops


def dualpipev_rank(p: int, m: int, r: int) -> list[RawOp]:
    """Rank r of p under torch's ScheduleDualPipeV with m micro-batches."""
    return dual_steps(p, r, m, (r, 0), (2 * p - 1 - r, 0))


def dualpipe_rank(p: int, m: int, r: int) -> list[RawOp]:
    """Rank r of an even p under DeepSeek's DualPipe with m (even) micro-batches."""
    half = m // 2
    down, up = (r, 0), (2 * p - 1 - r, half)
    if r < p // 2:
        return dual_steps(p // 2, r, half, down, up)
    return dual_steps(p // 2, p - 1 - r, half, up, down)
