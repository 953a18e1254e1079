"""The parameters a block's style adds: its norms' vectors and its linear biases.

A norm over the hidden width ``h`` keeps one weight vector (RMSNorm, Zhang and
Sennrich 2019, eq. 4: ``g``) or a weight and a bias (LayerNorm, Ba et al. 2016,
eq. 15: ``g`` and ``b``): h or 2h parameters. Both read x and write y once each
way, so their time is the same bytes (ops.py's norm rows) and only the
parameter count differs.

A linear layer's bias has one entry per output column. Under tensor parallelism
(Shoeybi et al. 2019, sec. 3) a column-parallel layer (QKV, the MLP's up and
gate) splits its bias with its columns, ``n / t`` a rank; a row-parallel layer
(the attention output, the MLP's down) adds its bias after the all-reduce, so
every rank keeps all ``h`` of it (megatron-core ``RowParallelLinear``: its bias
is not partitioned). The bias add rides in the GEMM's epilogue or the
bias-dropout-add, and its gradient is a reduction fused into the kernels of B
or W (ops.py), so biases add parameters, their gradients and optimizer state,
not time.
"""

from __future__ import annotations

from pptune.costmodel.models import ModelShape, Norm


def norm_params(m: ModelShape) -> int:
    """One norm's parameters over the hidden width: h (RMSNorm), 2h (LayerNorm)."""
    return m.hidden * (2 if m.normalization is Norm.LAYERNORM else 1)


def attention_bias_params(m: ModelShape, tp: int = 1) -> float:
    """One rank's attention biases: Q, K and V's split by ``tp``, the output's whole."""
    if m.mla:  # latent attention's projections are priced without biases (attention.py)
        return 0.0
    qkv = (m.heads + 2 * m.kv_heads) * m.head_dim / tp if m.qkv_bias else 0.0
    return qkv + (m.hidden if m.attn_out_bias else 0.0)


def mlp_bias_params(m: ModelShape, ffn: int, split: int = 1) -> float:
    """One rank's biases of an MLP of width ``ffn`` split ``split`` ways: the up (and
    gate) projection's, split, and the down projection's, whole."""
    if not m.mlp_bias:
        return 0.0
    return ffn * (2 if m.gated_mlp else 1) / split + m.hidden


def bias_params(m: ModelShape, tp: int = 1) -> float:
    """One rank's biases of a dense block (attention and an MLP of ``ffn``)."""
    return attention_bias_params(m, tp) + mlp_bias_params(m, m.ffn, tp)
