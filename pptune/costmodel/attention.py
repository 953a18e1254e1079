"""Multi-head latent attention (DeepSeek-V2/V3) and its saved activations.

MLA (DeepSeek-V3 technical report, arXiv 2412.19437, sec. 2.1.1, eq. 1-11)
compresses the queries through a latent of ``q_lora_rank`` (d_q) and the keys
and values through one of ``kv_lora_rank`` (d_c), with a rotary key of
``qk_rope_head_dim`` (d_r) shared by the heads. Per token, for a heads of
``qk_nope_head_dim`` (d_n) and ``v_head_dim`` (d_v), the GEMMs are

    q down   h -> d_q            q up    d_q -> a (d_n + d_r)
    kv down  h -> d_c + d_r      kv up   d_c -> a (d_n + d_v)
    out      a d_v -> h

with an RMSNorm on each latent. Megatron-core builds the down projections
duplicated on every tensor-parallel rank (``TELinear`` with ``parallel_mode=
"duplicated"``, megatron/core/transformer/multi_latent_attention.py), so they
run on the rank's sequence-parallel share of the tokens and their latents are
all-gathered over the tensor-parallel group; the up and output projections are
column- and row-parallel over the heads. Core attention multiplies queries and
keys of ``d_n + d_r`` and values of ``d_v`` per head: forward ``2 s^2 (d_n +
d_r + d_v)`` FLOPs per head and sample, halved by the causal mask (the ``4 s^2
d`` of ops.py when all three are d); backward 2.5x forward (ops.py). Megatron-core
hands core attention keys of ``d_n + d_r`` and values of ``d_v`` a head
(``MLASelfAttention``: ``k_channels=self.q_head_dim``, ``v_channels=v_head_dim``),
with context parallelism into Transformer Engine's exchange: those K and V, every
head its own, are what the ranks pass (context.py prices it as for any attention).

Saved for backward (2 bytes an element): the two latents and their normalised
copies (the up projections' inputs), Q and K (``a (d_n + d_r) / t`` each), V
(``a d_v / t``) and the attention output (``a d_v / t``, the output
projection's input). Megatron-core's ``--recompute-modules mla_up_proj``
discards the up projections' outputs and the rotary (Q, K, V) and reruns them
before the backward (output-discarding checkpointing).
"""

from __future__ import annotations

from pptune.costmodel.context import AttentionRates, CpShape
from pptune.costmodel.ops import (
    BF16_BYTES,
    BlockPart,
    OpCost,
    Parallel,
    Phase,
    Rates,
    _split,
    fused_attention_ops,
    gemm,
    grad_add,
    linear,
    memory,
    tp_collective,
)
from pptune.costmodel.presets import ModelShape

MLA_UP_PROJ = "mla_up_proj"  # Megatron-core's recompute module name


def _rep_tokens(m: ModelShape, b: int, par: Parallel) -> float:
    tokens = b * m.seq_len // par.cp
    return tokens / par.tp if par.sequence_parallel else float(tokens)


def mla_core_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Core attention of the local heads with MLA's head dimensions; a fused kernel at the
    GPU's flat attention share (presets.GpuSpec.with_attention_kernel), under context
    parallelism with K of ``d_n + d_r`` and V of ``d_v`` a head exchanged (context.py)."""
    s, heads = m.seq_len, m.heads // par.tp
    dqk, dv = m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim
    if par.flash_attention:
        shape = CpShape(s, dqk, heads, heads, b, dv)  # every head its own K and V
        flat = AttentionRates(rates.peak_flops, rates.attention_fraction)
        return fused_attention_ops(shape, flat, rates, par)
    if par.cp > 1:
        raise ValueError("context parallelism needs flash (fused) attention")
    bh = b * heads
    scores = float(s * s * bh)
    return [
        gemm("qk", Phase.F, s, s, dqk, rates, bh),
        memory("softmax", Phase.F, 2 * BF16_BYTES * scores, rates),
        gemm("pv", Phase.F, s, dv, s, rates, bh),
        gemm("pv.dgrad_p", Phase.B, s, s, dv, rates, bh),
        gemm("pv.dgrad_v", Phase.B, s, dv, s, rates, bh),
        memory("softmax.bwd", Phase.B, 3 * BF16_BYTES * scores, rates),
        gemm("qk.dgrad_q", Phase.B, s, dqk, s, rates, bh),
        gemm("qk.dgrad_k", Phase.B, s, dqk, s, rates, bh),
    ]


def mla_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
             recompute_up: bool = False) -> BlockPart:
    """MLA's ops by phase (module docstring). ``recompute_up``: the up
    projections and rotary run again before the backward (``mla_up_proj``)."""
    t, h, heads, fp8, fp8_w = par.tp, m.hidden, m.heads, par.fp8, par.fp8_wgrad
    tokens = b * m.seq_len // par.cp
    rep = _rep_tokens(m, b, par)
    rep_i = max(1, round(rep))
    dq, dc, dr = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    dn, dv = m.qk_nope_head_dim, m.v_head_dim
    q_cols = heads * (dn + dr)
    q_down: list[OpCost] = []
    q_norm: list[OpCost] = []
    adds: list[OpCost] = []  # unfused weight gradients added into main_grad

    def lin(name: str, rows: int, k: int, n: int) -> tuple[OpCost, OpCost, OpCost]:
        adds.extend(grad_add(name, k * n, rates, par.accumulation))
        return linear(name, rows, k, n, rates, fp8, par.accumulation, fp8_wgrad=fp8_w)

    if dq:
        q_down = list(lin("q_down", rep_i, h, dq))
        q_up = lin("q_up", tokens, dq, _split(q_cols, t))
        q_norm = [memory("q_norm", Phase.F, 4 * dq * rep, rates),
                  memory("q_norm.bwd", Phase.B, 6 * dq * rep, rates)]
    else:
        q_up = lin("q_proj", tokens, h, _split(q_cols, t))
    kv_down = lin("kv_down", rep_i, h, dc + dr)
    kv_up = lin("kv_up", tokens, dc, _split(heads * (dn + dv), t))
    kv_norm = (memory("kv_norm", Phase.F, 4 * dc * rep, rates),
               memory("kv_norm.bwd", Phase.B, 6 * dc * rep, rates))
    proj = lin("attn_out", tokens, _split(heads * dv, t), h)
    rotary = 4 * tokens * (heads * dr / t + dr)
    act = BF16_BYTES * tokens * h
    # with sequence parallelism the latents are all-gathered and the output
    # reduce-scattered: (t - 1)/t of both, an all-reduce-equivalent of their mean
    latent = BF16_BYTES * tokens * ((dq if dq else 0) + dc + dr)
    comm = (act + latent) / 2 if par.sequence_parallel else act
    core = mla_core_ops(m, b, rates, par)
    up_fwd = [q_up[0], kv_up[0], memory("rotary", Phase.F, rotary, rates)]
    redo = [OpCost(o.name + ".recompute", Phase.B, o.kind, o.flops, o.hbm_bytes, o.time_s,
                   o.kernels) for o in up_fwd] if recompute_up else []
    fwd = [*q_down[:1], *q_norm[:1], kv_down[0], kv_norm[0], *up_fwd,
           *[o for o in core if o.phase is Phase.F],
           proj[0], tp_collective("tp_attn", Phase.F, comm, par, proj[0])]
    bwd = [proj[1], *redo, *[o for o in core if o.phase is Phase.B],
           memory("rotary.bwd", Phase.B, rotary, rates), q_up[1], kv_up[1],
           tp_collective("tp_attn.bwd", Phase.B, comm, par, kv_up[1]),
           kv_norm[1], *q_norm[1:], kv_down[1], *q_down[1:2]]
    wgrad = [*q_down[2:], q_up[2], kv_down[2], kv_up[2], proj[2], *adds]
    return BlockPart(fwd, bwd, wgrad)


def mla_act_bytes(m: ModelShape, b: int, par: Parallel, recompute_up: bool = False) -> float:
    """Bytes MLA keeps for backward beyond the block's input and norm inputs
    (module docstring), per micro-batch."""
    t, heads = par.tp, m.heads
    tokens = b * m.seq_len // par.cp
    rep = _rep_tokens(m, b, par)
    dq, dc, dr = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    dn, dv = m.qk_nope_head_dim, m.v_head_dim
    saved = par.saved_input_bytes  # an FP8 GEMM's input: its FP8 cast under TE
    # the latents (the norms' inputs) and their normalised copies (the up projections')
    latents = BF16_BYTES * rep * (dq + dc + dr) + saved * tokens * (dq + dc)
    qkv = BF16_BYTES * tokens * heads * (2 * (dn + dr) + dv) / t
    out = saved * tokens * heads * dv / t  # the output projection's input
    return latents + out + (0.0 if recompute_up else qkv)


def mla_params(m: ModelShape, tp: int) -> float:
    """Parameters of one rank's MLA: the duplicated down projections and latent
    norms whole, the up and output projections split by tp."""
    h, heads = m.hidden, m.heads
    dq, dc, dr = m.q_lora_rank, m.kv_lora_rank, m.qk_rope_head_dim
    dn, dv = m.qk_nope_head_dim, m.v_head_dim
    down = h * (dq + dc + dr) + dq + dc
    q_up = (dq if dq else h) * heads * (dn + dr)
    up = q_up + dc * heads * (dn + dv) + heads * dv * h
    return float(down + up / tp)
