"""The layers at the two ends of the model: the embedding (token, and GPT-style
position, lookup) and the head (final norm, LM head GEMM and cross-entropy),
priced by the per-op model (ops.py's docstring has their bytes per token)."""

from __future__ import annotations

from pptune.costmodel.loss import BYTES, KERNELS
from pptune.costmodel.ops import (
    BF16_BYTES,
    OpCost,
    Parallel,
    Phase,
    Rates,
    _split,
    grad_add,
    linear,
    memory,
    tp_collective,
)
from pptune.costmodel.presets import ModelShape


def embedding_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Token (and, GPT-style, position) embedding: a gather, its scatter-add."""
    tokens, h = b * m.seq_len // par.cp, m.hidden
    gather = (7 if m.dropout else 4) * h * tokens  # + position add and dropout
    return [
        memory("embed", Phase.F, gather, rates, kernels=3 if m.dropout else 1),
        tp_collective("tp_embed", Phase.F, BF16_BYTES * tokens * h, par),
        memory("embed.wgrad", Phase.W, (15 if m.dropout else 10) * h * tokens, rates,
               kernels=2 if m.dropout else 1),
    ]


def head_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Final norm, LM head GEMM and the (vocabulary-parallel) cross-entropy, its bytes
    per logit as ``par.cross_entropy``'s kernels move them (loss.py)."""
    t, h, v = par.tp, m.hidden, m.vocab
    tokens = b * m.seq_len // par.cp  # the LM head stays BF16 (precision.py)
    rep = tokens / t if par.sequence_parallel else float(tokens)
    logits = tokens * v / t
    lm = linear("lm_head", tokens, h, _split(v, t), rates, accum=par.wgrad_accum)
    (fwd, bwd), (k_fwd, k_bwd) = BYTES[par.cross_entropy], KERNELS[par.cross_entropy]
    return [
        memory("final_norm", Phase.F, 4 * h * rep, rates), lm[0],
        memory("cross_entropy", Phase.F, fwd * logits, rates, kernels=k_fwd),
        memory("cross_entropy.bwd", Phase.B, bwd * logits, rates, kernels=k_bwd), lm[1],
        tp_collective("tp_head.bwd", Phase.B, BF16_BYTES * tokens * h, par),
        memory("final_norm.bwd", Phase.B, 6 * h * rep, rates), lm[2],
        *grad_add("lm_head", h * _split(v, t), rates, par.wgrad_accum),
    ]


def mtp_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
            block: list[OpCost]) -> list[OpCost]:
    """An MTP module: its embedding, the two norms and the projection 2h -> h,
    its block, and its LM head with the loss (analytic.py's docstring)."""
    h, t = m.hidden, par.tp
    tokens = b * m.seq_len // par.cp
    rep = tokens / t if par.sequence_parallel else float(tokens)
    proj = linear("mtp_proj", tokens, 2 * h, -(-h // t), rates, accum=par.wgrad_accum)
    act = 2.0 * tokens * h
    pre = [
        *embedding_ops(m, b, rates, par),
        memory("mtp_norms", Phase.F, 2 * 4 * h * rep, rates, kernels=2), proj[0],
        tp_collective("tp_mtp", Phase.F, act, par, proj[0]),
        memory("mtp_norms.bwd", Phase.B, 2 * 6 * h * rep, rates, kernels=2), proj[1],
        tp_collective("tp_mtp.bwd", Phase.B, act, par, proj[1]), proj[2],
        *grad_add("mtp_proj", 2 * h * -(-h // t), rates, par.wgrad_accum),
    ]
    return pre + block + head_ops(m, b, rates, par)
