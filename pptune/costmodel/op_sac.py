"""torchtitan's per-op selective activation checkpointing, priced on a dense block.

``[activation_checkpoint] mode = "selective"`` with ``selective_ac_option = "op"``
(torchtitan's default option in its Llama 3 configs) wraps every block in
torch.utils.checkpoint with a policy by aten op (torchtitan
torchtitan/models/llama3/parallelize_llama.py ``_save_list`` at commit e7c0cae,
2025-06; the same rule in torchtitan/distributed/activation_checkpoint.py,
``SelectiveAC``, 2026):

- **saved**: the outputs of ``aten.mm`` except every second one in the block
  (the policy counts the block's mms from 1 and recomputes the even ones), of
  scaled-dot-product (flash) attention, of ``reduce_scatter_tensor`` and of
  ``aten.max`` (the amax of dynamic float8 scaling: scalars);
- **recomputed**: everything else, rerun from the block's input before its
  backward: norms, rotary, the activation, residual adds, the even mms, the
  all-gathers of tensor parallelism.

The block's mms run in its forward order: ``wq, wk, wv, wo, w1, w3, w2`` (a
gated MLP: ``w2(silu(w1 x) * w3 x)``) or ``wq, wk, wv, wo, w1, w2``, so the
saved ones are ``wq, wv, w1, w2`` and the recomputed ``wk, wo, w3`` (torchtitan
llama3 model.py order). Float8 linears keep the pattern: torchao's float8
training calls ``torch.mm`` on its float8 tensor subclass, so the policy's
dispatch mode sees ``aten.mm`` before the subclass lowers it to
``aten._scaled_mm``, and saves the same bf16 outputs; torchtitan's own tables
show it (docs/performance.md, Tables 1 and 3: 77.0 and 62.0 GiB under BF16 with
torch.compile, 76.8 and 61.8 GiB with float8 added). The casts to float8 rerun
with the rest; the recomputed GEMMs run at the float8 rate.

Per micro-batch on one rank (T tokens after context parallelism, t-way tensor
parallelism with sequence parallelism as torchtitan's plan applies it, so the
block input holds ``T / t`` tokens), the bytes kept are the block input
``2 h T/t``, the attention output ``2 q T/t`` and its fp32 log-sum-exp ``4 (a/t) T``,
the saved mm outputs ``2 T n`` for each (``n`` its output width on the rank: a
column-parallel GEMM ``n/t``, a row-parallel one the whole ``h`` before its
reduce-scatter), and under tensor parallelism the two reduce-scatter outputs
``2 h T/t`` each. The backward pays the recomputed forward: every forward op of
the block but attention and the saved GEMMs (its norms, rotary, activation,
residuals and float8 casts), the recomputed GEMMs, and the all-gather half of
each tensor-parallel forward collective (an all-gather moves the bytes its
reduce-scatter does).
"""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.ops import (
    BF16_BYTES,
    Kind,
    OpCost,
    Parallel,
    Phase,
    Rates,
    _split,
    linear,
    rerun,
)
from pptune.costmodel.presets import ModelShape

OP_SAC = "op_sac"  # the recompute-module name pptune gives the policy
FP32_BYTES = 4


def block_mms(m: ModelShape, t: int) -> list[tuple[str, int, int]]:
    """The block's mms in forward order: (name, k, n), the output width n on the rank
    (column-parallel ones split by t, row-parallel ones the whole h)."""
    h, q, kv, f = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim, m.ffn
    mms = [("wq", h, _split(q, t)), ("wk", h, _split(kv, t)), ("wv", h, _split(kv, t)),
           ("wo", _split(q, t), h), ("w1", h, _split(f, t))]
    if m.gated_mlp:
        mms.append(("w3", h, _split(f, t)))
    return [*mms, ("w2", _split(f, t), h)]


def saved_bytes(m: ModelShape, b: int, par: Parallel) -> float:
    """Bytes one block keeps for backward under the policy (module docstring)."""
    t = par.tp
    tokens = b * m.seq_len // par.cp
    rep = tokens / t if par.sequence_parallel else float(tokens)
    q = m.heads * m.head_dim
    out = BF16_BYTES * m.hidden * rep  # the block input
    out += BF16_BYTES * tokens * _split(q, t) + FP32_BYTES * tokens * _split(m.heads, t)
    # the odd aten.mm outputs of the block (bf16 under float8 too)
    out += sum(BF16_BYTES * tokens * n for i, (_, _, n) in enumerate(block_mms(m, t))
               if i % 2 == 0)
    if t > 1 and par.sequence_parallel:
        out += 2 * BF16_BYTES * m.hidden * rep  # the two reduce-scatter outputs
    return out


def recompute_ops(ops: list[OpCost], attention: set[str], m: ModelShape, b: int,
                  rates: Rates, par: Parallel) -> list[OpCost]:
    """The backward's rerun of the block's forward ``ops`` under the policy: its
    forward memory ops but the attention's (``attention``: their names), the even
    mms of the block (at the block's GEMM precision), half of each tensor-parallel
    forward collective (its all-gather)."""
    tokens = b * m.seq_len // par.cp
    fwd = [o for o in ops if o.phase is Phase.F and o.name not in attention]
    gathers = [replace(o, flops=o.flops / 2, hbm_bytes=o.hbm_bytes / 2, time_s=o.time_s / 2)
               for o in fwd if o.kind is Kind.COMM and o.name.startswith("tp_")]
    mms = [linear(name, tokens, k, n, rates, par.fp8)[0]
           for i, (name, k, n) in enumerate(block_mms(m, par.tp)) if i % 2]
    return rerun([o for o in fwd if o.kind is Kind.MEMORY] + gathers + mms)
