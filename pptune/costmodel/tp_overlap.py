"""Transformer Engine's tensor-parallel communication overlap (userbuffers), as it runs.

With sequence parallelism every tensor-parallel linear layer of a block either
all-gathers its input before the GEMM (the column-parallel QKV and first MLP
GEMMs forward, the row-parallel output and second MLP GEMMs' data gradients) or
reduce-scatters its output after it (the row-parallel GEMMs forward). Megatron-LM
``--tp-comm-overlap`` / NeMo ``ub_tp_comm_overlap`` hand these to Transformer
Engine's userbuffers, which overlap each collective with a GEMM by one of three
methods, per GEMM (``ub_cfgs`` names: qkv_fprop, proj_fprop, fc1_fprop,
fc2_fprop, proj_dgrad, fc2_dgrad, qkv_dgrad, fc1_dgrad, qkv_wgrad, fc1_wgrad).
What each costs, read from Transformer Engine v1.13 (commit e5edd6cc3d5a868b,
transformer_engine/common/comm_gemm_overlap/comm_gemm_overlap.cpp and
transformer_engine/pytorch/module/base.py ``initialize_ub``):

``ring_exchange`` (``CommOverlapP2PBase::split_overlap_ag``): the GEMM runs as
    ``tp`` chunks of ``rows / tp`` rows; while chunk ``i`` computes, its input
    block is sent to the next rank and the following block received (copy
    engines, ``use_ce``: no SMs). A step lasts ``max(chunk GEMM, hop)``; the
    last chunk sends nothing. ``aggregate``: ``tp / 2`` steps of two blocks
    after one first exchange between neighbours, which nothing hides. As a
    reduce-scatter (``split_overlap_rs``): ``tp`` chunks of ``rows / tp``,
    each chunk's partial result sent on while the next computes, then the
    last hop and a reduction kernel over the ``tp`` received partials.
``pipeline`` (``CommOverlapBase::split_overlap_rs``): the GEMM's output
    columns in ``num_splits`` chunks; the reduce-scatter of chunk ``i - 1``
    (a userbuffers kernel on ``num_sm`` SMs) runs while chunk ``i``
    computes; the last chunk's reduce-scatter runs after it, exposed.
``bulk`` (``CommOverlapBase::bulk_overlap``): a whole collective of another
    tensor (the gathered norm output the weight gradient needs, the
    reduce-scatter of the data gradient) on ``num_sm`` SMs next to one whole
    GEMM.

``set_sm_margin`` launches the GEMM on ``sm_count - num_sm`` SMs
(``_math_sms = set_sm_margin ? sm_count - num_comm_sm : sm_count``); without
it the GEMM is launched on every SM and the communication kernel holds
``num_sm`` of them while it runs, so a GEMM of ``g`` seconds alone sharing
with ``c`` seconds of communication takes ``max(c, g + c num_sm / sm_count)``.
A GEMM on fewer SMs runs at the per-op model's rate for that many SMs (its
peak in proportion, the tile and wave quantisation recomputed, ops.gemm).

Defaults when a recipe names no configuration (``get_default_config`` in v1.13):
ring exchange for the four all-gather GEMMs (``num_sm`` 1, ``tp`` chunks),
pipeline with ``num_sm`` 16 and 4 splits for the two forward reduce-scatters,
bulk with ``num_sm`` 16 for the data- and weight-gradient collectives, no
SM margin, no aggregation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

# (rows, columns, reduction, SMs) -> seconds of one GEMM at the per-op model's rate
GemmTime = Callable[[int, int, int, int], float]
Seconds = Callable[[float], float]  # bytes -> seconds of one transfer


class Method(str, Enum):
    RING_EXCHANGE = "ring_exchange"
    PIPELINE = "pipeline"
    BULK = "bulk"


@dataclass(frozen=True)
class GemmOverlap:
    """How one GEMM overlaps its collective (one ``ub_cfgs`` entry)."""

    method: Method
    num_sm: int = 1
    set_sm_margin: bool = False
    num_splits: int = 4  # pipeline only; ring exchange runs tp chunks
    aggregate: bool = False  # ring exchange: two blocks a step

    def math_sms(self, sm_count: int) -> int:
        return sm_count - self.num_sm if self.set_sm_margin else sm_count


def _ring(num_sm: int = 1, set_sm_margin: bool = False, aggregate: bool = False) -> GemmOverlap:
    return GemmOverlap(Method.RING_EXCHANGE, num_sm, set_sm_margin, aggregate=aggregate)


def _pipe(num_sm: int = 16, set_sm_margin: bool = False, num_splits: int = 4) -> GemmOverlap:
    return GemmOverlap(Method.PIPELINE, num_sm, set_sm_margin, num_splits)


def _bulk(num_sm: int = 16, set_sm_margin: bool = False) -> GemmOverlap:
    return GemmOverlap(Method.BULK, num_sm, set_sm_margin)


@dataclass(frozen=True)
class TpOverlap:
    """One transformer layer's overlap configuration (Transformer Engine v1.13 defaults)."""

    qkv_fprop: GemmOverlap = field(default_factory=_ring)
    proj_fprop: GemmOverlap = field(default_factory=_pipe)
    fc1_fprop: GemmOverlap = field(default_factory=_ring)
    fc2_fprop: GemmOverlap = field(default_factory=_pipe)
    proj_dgrad: GemmOverlap = field(default_factory=_ring)
    fc2_dgrad: GemmOverlap = field(default_factory=_ring)
    qkv_dgrad: GemmOverlap = field(default_factory=_bulk)
    fc1_dgrad: GemmOverlap = field(default_factory=_bulk)
    qkv_wgrad: GemmOverlap = field(default_factory=_bulk)
    fc1_wgrad: GemmOverlap = field(default_factory=_bulk)

    @staticmethod
    def ring(num_sm: int = 1, set_sm_margin: bool = False,
             aggregate: bool = False) -> GemmOverlap:
        return _ring(num_sm, set_sm_margin, aggregate)

    @staticmethod
    def pipeline(num_sm: int, set_sm_margin: bool, num_splits: int = 4) -> GemmOverlap:
        return _pipe(num_sm, set_sm_margin, num_splits)

    @staticmethod
    def bulk(num_sm: int, set_sm_margin: bool = False) -> GemmOverlap:
        return _bulk(num_sm, set_sm_margin)


@dataclass(frozen=True)
class Overlapped:
    """One GEMM with its collective: the GEMM as it ran and what stayed exposed."""

    gemm_s: float  # the GEMM's chunks, slowed by the SMs they gave up or shared
    exposed_s: float  # communication nothing hid
    kernels: int  # GEMM launches (chunks)


def shared(gemm_s: float, comm_s: float, num_sm: int, sm_count: int) -> float:
    """A GEMM of ``gemm_s`` alone next to ``comm_s`` of communication holding
    ``num_sm`` of ``sm_count`` SMs: ``max(comm, gemm + comm num_sm / sm_count)``."""
    return max(comm_s, gemm_s + comm_s * num_sm / sm_count)


def _split_rows(rows: int, parts: int) -> int:
    return -(-rows // parts)


def gather_gemm(cfg: GemmOverlap, tp: int, rows: int, cols: int, k: int, gemm: GemmTime,
                sm_count: int, hop: Seconds, block_bytes: float) -> Overlapped:
    """All-gather of a ``rows x k`` input (``block_bytes`` a rank) by ring
    exchange, overlapped with the ``rows x cols x k`` GEMM that consumes it."""
    if cfg.method is not Method.RING_EXCHANGE:
        raise ValueError(f"an all-gather GEMM overlaps by ring exchange, not {cfg.method.value}")
    sms = cfg.math_sms(sm_count)
    pair = cfg.aggregate and tp % 2 == 0 and tp > 2
    steps = tp // 2 if pair else tp
    chunk = gemm(_split_rows(rows, steps), cols, k, sms)
    step_hop = hop(block_bytes * (2 if pair else 1))
    total = (steps - 1) * max(chunk, step_hop) + chunk + (hop(block_bytes) if pair else 0.0)
    return Overlapped(steps * chunk, total - steps * chunk, steps)


def gemm_scatter(cfg: GemmOverlap, tp: int, rows: int, cols: int, k: int, gemm: GemmTime,
                 sm_count: int, hop: Seconds, scatter: Seconds, reduce_s: Seconds,
                 out_bytes: float) -> Overlapped:
    """A ``rows x cols x k`` GEMM whose ``out_bytes`` output is reduce-scattered
    over ``tp`` ranks, by ``pipeline`` or ``ring_exchange``."""
    sms = cfg.math_sms(sm_count)
    if cfg.method is Method.PIPELINE:
        n = cfg.num_splits
        chunk = gemm(rows, _split_rows(cols, n), k, sms)
        rs = scatter(out_bytes / n)
        if cfg.set_sm_margin:  # the GEMM keeps to its own SMs: a step is the longer of the two
            step, slowed = max(chunk, rs), chunk
        else:  # the reduce-scatter of chunk i - 1 holds num_sm SMs while chunk i runs
            step, slowed = shared(chunk, rs, cfg.num_sm, sm_count), chunk + rs * cfg.num_sm / sm_count
        total = chunk + (n - 1) * step + rs
        gemm_part = chunk + (n - 1) * slowed
        return Overlapped(gemm_part, total - gemm_part, n)
    if cfg.method is Method.RING_EXCHANGE:
        chunk = gemm(_split_rows(rows, tp), cols, k, sms)
        block = out_bytes / tp
        total = chunk + (tp - 1) * max(chunk, hop(block)) + hop(block) + reduce_s(block)
        return Overlapped(tp * chunk, total - tp * chunk, tp)
    raise ValueError("a reduce-scatter GEMM overlaps by pipeline or ring exchange, not bulk")


def bulk_gemm(cfg: GemmOverlap, rows: int, cols: int, k: int, gemm: GemmTime, sm_count: int,
              comm_s: float) -> Overlapped:
    """A whole GEMM next to a whole collective of ``comm_s`` on ``num_sm`` SMs."""
    if cfg.method is not Method.BULK:
        raise ValueError(f"a bulk overlap, not {cfg.method.value}")
    if cfg.set_sm_margin:
        g = gemm(rows, cols, k, cfg.math_sms(sm_count))
        return Overlapped(g, max(0.0, comm_s - g), 1)
    alone = gemm(rows, cols, k, sm_count)
    slowed = alone + comm_s * cfg.num_sm / sm_count
    total = shared(alone, comm_s, cfg.num_sm, sm_count)
    return Overlapped(min(total, slowed), max(0.0, total - slowed), 1)
