"""Op orders of the one-direction schedules: GPipe, 1F1B, interleaved 1F1B,
ZB-H1 and ZB-V, one function per schedule, ``builder(p, m, v, d)`` -> device
d's raw ops (schedule_ops.RawOp), and ``combined``: 1F1B and interleaved
1F1B with each steady forward and backward overlapped as Megatron-LM runs
them to hide the expert all-to-all. Placement and validation live in
schedules.py; DualPipe and DualPipeV in dualpipe.py.
"""

from __future__ import annotations

from pptune.costmodel.schedule_ops import RAW_B as _B
from pptune.costmodel.schedule_ops import RAW_F as _F
from pptune.costmodel.schedule_ops import RAW_FB as _FB
from pptune.costmodel.schedule_ops import RAW_W as _W
from pptune.costmodel.schedule_ops import RawOp


def gpipe(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # Huang et al. 2019: all forwards, then all backwards (in micro-batch
    # order, as torch.distributed.pipelining's ScheduleGPipe runs them).
    ops: list[RawOp] = [(_F, i, d) for i in range(m)]
    return ops + [(_B, i, d) for i in range(m)]


def one_f_one_b(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # PipeDream-Flush / Megatron-LM non-interleaved 1F1B: p-d-1 warm-up
    # forwards, then alternate one forward and one backward, then drain.
    warmup = min(p - d - 1, m)
    ops: list[RawOp] = [(_F, i, d) for i in range(warmup)]
    for i in range(m - warmup):
        ops.append((_F, warmup + i, d))
        ops.append((_B, i, d))
    ops += [(_B, i, d) for i in range(m - warmup, m)]
    return ops


def microbatch_group(p: int, m: int) -> int | None:
    """The micro-batches an interleaved pipeline runs through one chunk before the next
    (Megatron-LM's --microbatch-group-size-per-virtual-pipeline-stage, default p): p
    where it divides m, else the least N in [p, m] whose remainder m % N is 0 or at
    least p, as megatron-core 0.16 requires (schedules.py,
    forward_backward_pipelining_with_interleaving); None where no N is valid (m < p)."""
    if m % p == 0:
        return p
    return next((n for n in range(p + 1, m + 1) if m % n == 0 or m % n >= p), None)


def interleaved(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # Megatron-LM forward_backward_pipelining_with_interleaving: the micro-batches in
    # groups of N (microbatch_group), each group through chunk 0, then chunk 1, ...
    # (get_schedule_table; the last group holds the rest); backward visits chunks in
    # reverse. Warm-up is (p - d - 1) * 2 + (v - 1) * N forwards. With N = p this is
    # virtual micro-batch k on chunk (k // p) % v, micro-batch (k // (p*v)) * p + k % p.
    total = m * v
    n = microbatch_group(p, m) or p
    table = [(mb, chunk) for start in range(0, m, n)
             for chunk in range(v) for mb in range(start, m if start + n >= m else start + n)]

    def fwd(k: int) -> RawOp:
        mb, chunk = table[k]
        return (_F, mb, chunk * p + d)

    def bwd(k: int) -> RawOp:
        mb, chunk = table[k]
        return (_B, mb, (v - 1 - chunk) * p + d)

    warmup = min((p - d - 1) * 2 + (v - 1) * n, total)
    ops = [fwd(k) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append(fwd(warmup + k))
        ops.append(bwd(k))
    ops += [bwd(k) for k in range(total - warmup, total)]
    return ops


def zb_h1(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism", sec. 3.1),
    # ordered as torch's ScheduleInterleavedZeroBubble does with one stage
    # per rank: p-d-1 warm-up forwards, then F,B pairs; the W of each
    # micro-batch is issued d steps after its B (device 0 at once, the last
    # device latest, filling its cool-down), then the remaining Ws drain.
    warmup = min(p - d - 1, m)
    ops: list[RawOp] = [(_F, i, d) for i in range(warmup)]
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


def zbv(p: int, m: int, v: int, d: int) -> list[RawOp]:
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


def combined(p: int, m: int, v: int, d: int) -> list[RawOp]:
    # Megatron-LM's EP all-to-all overlap (--overlap-moe-expert-parallel-comm,
    # megatron-core 0.16 pipeline_parallel/combined_1f1b.py): the 1F1B order
    # (interleaved with v > 1) with one more warm-up forward ("we schedule one
    # extra micro-batch forward step before the 1f1b stages ... to ensure the
    # forward and backward computations are independent in all 1f1b steps",
    # schedules.py get_pp_rank_microbatches), then each steady step's forward
    # and backward run as one overlapped pair (combined_forward_backward_step),
    # then the cool-down backwards alone. Virtual micro-batches map to chunks
    # as in ``interleaved``; with v = 1 (megatron-core allows it only at pp = 1,
    # combined_1f1b_schedule_for_no_pipelining) each device has one chunk.
    total = m * v
    group = p * v

    def chunk_mb(k: int, forward: bool) -> tuple[int, int]:
        c = (k // p) % v
        return (k // group) * p + k % p, (c if forward else v - 1 - c) * p + d

    base = (p - d - 1) * 2 + (v - 1) * p if v > 1 else p - d - 1
    warmup = min(base + 1, total)
    ops: list[RawOp] = [(_F, *chunk_mb(k, True)) for k in range(warmup)]
    for k in range(total - warmup):
        ops.append((_FB, *chunk_mb(warmup + k, True), *chunk_mb(k, False)))
    ops += [(_B, *chunk_mb(k, False)) for k in range(total - warmup, total)]
    return ops
