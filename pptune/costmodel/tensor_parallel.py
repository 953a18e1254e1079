"""The two linears of a transformer sub-layer with their tensor-parallel
communication: exposed NCCL collectives, or Transformer Engine's userbuffers
overlap (tp_overlap.py) where sequence parallelism and ``--tp-comm-overlap`` are on.

Under sequence parallelism (Korthikanti et al. 2022, sec. 4.2.2) the
column-parallel GEMM (QKV, first MLP GEMM) consumes the all-gathered norm
output and the row-parallel GEMM (attention output, second MLP GEMM)
reduce-scatters its result; backward, the row-parallel data gradient consumes
the all-gathered output gradient, and the column-parallel data gradient is
reduce-scattered, while its weight gradient needs the norm output gathered
again. Overlapped (Transformer Engine v1.13, ``initialize_ub``'s layer names):

    forward   qkv_fprop / fc1_fprop    all-gather into the GEMM
              proj_fprop / fc2_fprop   GEMM into the reduce-scatter
    B         proj_dgrad / fc2_dgrad   all-gather of dy into the GEMM
              qkv_dgrad / fc1_dgrad    bulk all-gather of the norm output
                                       beside the data-gradient GEMM
    W         qkv_wgrad / fc1_wgrad    bulk reduce-scatter of the data
                                       gradient beside the weight-gradient GEMM

A hop of the ring exchange is a pairwise NVLink copy (``par.tp_p2p_*``); a
reduce-scatter or all-gather of an ``n``-byte array takes ``latency + (t - 1) /
t * n / busbw`` on the group's NCCL-achieved link; the ring-exchange
reduce-scatter's final reduction reads the ``t`` received partials and writes
one (HBM). All-gathered buffers hold FP8 (1 byte) under FP8 (``fp8_buf``,
Transformer Engine's default for the all-gather layers); reduce-scatters move
BF16.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel import tp_overlap
from pptune.costmodel.kernels import (
    BF16_BYTES,
    Kind,
    OpCost,
    Phase,
    gemm,
    grad_add,
    linear,
    memory,
    tp_collective,
)
from pptune.costmodel.rates import Parallel, Rates


@dataclass(frozen=True)
class TpPair:
    """A column-parallel linear (QKV, first MLP GEMM) and the row-parallel one
    after it, each as (forward, data gradient, weight gradient), with the
    tensor-parallel communication their sub-layer exposes in F, B and W."""

    col: tuple[OpCost, OpCost, OpCost]
    row: tuple[OpCost, OpCost, OpCost]
    fwd_comm: OpCost
    bwd_comm: OpCost
    wgrad_comm: tuple[OpCost, ...] = ()  # the bulk reduce-scatter beside a weight gradient
    wgrad_add: tuple[OpCost, ...] = ()  # unfused: both gradients added into main_grad


def tp_pair(name: str, col: str, row: str, tokens: int, h: int, col_n: int, row_k: int,
            rates: Rates, par: Parallel, kind: str) -> TpPair:
    """The two linears of a sub-layer (``kind`` "attn": qkv/proj, "mlp": fc1/fc2
    in Transformer Engine's names) and their collectives: exposed NCCL
    collectives (tp_collective), or with sequence parallelism and
    ``par.tp_comm_overlap`` Transformer Engine's userbuffers overlap
    (tp_overlap.py): all-gathers by ring exchange into the column-parallel GEMM
    (forward) and the row-parallel data gradient, the forward reduce-scatter by
    pipeline or ring exchange, the bulk gather of the norm output beside the
    column-parallel data gradient and the bulk reduce-scatter of that gradient
    beside its weight gradient."""
    fp8, accum = par.fp8, par.accumulation
    a = linear(col, tokens, h, col_n, rates, fp8, accum, fp8_wgrad=par.fp8_wgrad)
    r = linear(row, tokens, row_k, h, rates, fp8, accum, fp8_wgrad=par.fp8_wgrad)
    add = (*grad_add(col, h * col_n, rates, accum), *grad_add(row, row_k * h, rates, accum))
    act = BF16_BYTES * tokens * h
    if not (par.tp_comm_overlap and par.sequence_parallel and par.tp > 1):
        return TpPair(a, r, tp_collective(f"tp_{name}", Phase.F, act, par, r[0]),
                      tp_collective(f"tp_{name}.bwd", Phase.B, act, par, a[1]), wgrad_add=add)
    t, sms = par.tp, rates.sm_count
    cfg = par.tp_overlap or tp_overlap.TpOverlap()
    c = {"attn": (cfg.qkv_fprop, cfg.proj_fprop, cfg.proj_dgrad, cfg.qkv_dgrad, cfg.qkv_wgrad),
         "mlp": (cfg.fc1_fprop, cfg.fc2_fprop, cfg.fc2_dgrad, cfg.fc1_dgrad, cfg.fc1_wgrad)}[kind]
    gathered = par.gemm_input_bytes * tokens * h  # FP8 buffers: 1 byte (and block scales)

    def g(phase: Phase) -> tp_overlap.GemmTime:
        out = accum.out_bytes if phase is Phase.W else BF16_BYTES
        low = par.fp8_wgrad if phase is Phase.W else fp8
        return lambda m_, n_, k_, n_sm: gemm("", phase, m_, n_, k_, rates.with_sms(n_sm),
                                              fp8=low, out_bytes=out).time_s

    def hop(nbytes: float) -> float:
        return par.tp_p2p_latency_s + nbytes / par.tp_p2p_bytes_per_s

    def coll(nbytes: float) -> float:  # one reduce-scatter or all-gather of an nbytes array
        return par.tp_latency_s + (t - 1) / t * nbytes / par.tp_busbw_bytes_per_s

    def reduce(block: float) -> float:  # ring-exchange reduce-scatter: t partials in, one out
        return (t + 1) * block / rates.hbm_bytes_per_s

    col_f = tp_overlap.gather_gemm(c[0], t, tokens, col_n, h, g(Phase.F), sms, hop, gathered / t)
    row_f = tp_overlap.gemm_scatter(c[1], t, tokens, h, row_k, g(Phase.F), sms, hop, coll,
                                    reduce, act)
    row_b = tp_overlap.gather_gemm(c[2], t, tokens, row_k, h, g(Phase.B), sms, hop, gathered / t)
    col_b = tp_overlap.bulk_gemm(c[3], tokens, h, col_n, g(Phase.B), sms, coll(gathered))
    col_w = tp_overlap.bulk_gemm(c[4], h, col_n, tokens, g(Phase.W), sms, coll(act))

    def timed(op: OpCost, ov: tp_overlap.Overlapped) -> OpCost:
        return OpCost(op.name, op.phase, op.kind, op.flops, op.hbm_bytes, ov.gemm_s, ov.kernels)

    def comm(suffix: str, phase: Phase, nbytes: float, *ovs: tp_overlap.Overlapped) -> OpCost:
        return OpCost(f"tp_{name}{suffix}", phase, Kind.COMM, 0.0, nbytes,
                      sum(o.exposed_s for o in ovs), 0)

    return TpPair((timed(a[0], col_f), timed(a[1], col_b), timed(a[2], col_w)),
                  (timed(r[0], row_f), timed(r[1], row_b), r[2]),
                  comm("", Phase.F, gathered + act, col_f, row_f),
                  comm(".bwd", Phase.B, 2 * gathered, row_b, col_b),
                  (comm(".wgrad", Phase.W, act, col_w),), add)


def replicated_kv(tokens: int, qkv_n: int, kv_heads: int, rates: Rates,
                  par: Parallel) -> tuple[list[OpCost], list[OpCost]]:
    """(forward, B) ops of megatron-core's key/value heads under a tp above them
    (megatron-core 0.16.1 attention.py ``SelfAttention.get_query_key_value_tensors``):
    each rank's share of the QKV output (``qkv_n`` columns in all, BF16) is all-gathered
    over tp and the rank slices out its query group, one whole key/value head and its
    query heads; backward the gradient is reduce-scattered back (mappings.py
    ``all_gather_last_dim_from_tensor_parallel_region``). Each way one NCCL collective
    moving (t - 1) / t of the gathered bytes, not overlapped (no userbuffers), and the
    copy that reorders its chunks along the last dimension (``_gather_along_last_dim``'s
    ``torch.cat``, ``_reduce_scatter_along_last_dim``'s): a read and a write of them.
    Nothing where tp divides the heads."""
    t = par.tp
    if t <= kv_heads:
        return [], []
    nbytes = BF16_BYTES * tokens * qkv_n
    coll_s = par.tp_latency_s + (t - 1) / t * nbytes / par.tp_busbw_bytes_per_s
    return ([OpCost("tp_kv_gather", Phase.F, Kind.COMM, 0.0, nbytes, coll_s, 0),
             memory("kv_gather_cat", Phase.F, 2 * nbytes, rates)],
            [memory("kv_gather_cat.bwd", Phase.B, 2 * nbytes, rates),
             OpCost("tp_kv_gather.bwd", Phase.B, Kind.COMM, 0.0, nbytes, coll_s, 0)])
