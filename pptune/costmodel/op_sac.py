"""torchtitan's per-op selective activation checkpointing, priced on a block.

``[activation_checkpoint] mode = "selective"`` with ``selective_ac_option = "op"``
(torchtitan's default option in its Llama 3 and DeepSeek-V3 configs) wraps every
block in torch.utils.checkpoint with a policy by aten op (torchtitan
torchtitan/models/llama3/parallelize_llama.py ``_save_list`` at commit e7c0cae,
2025-06; models/deepseek_v3/infra/parallelize.py ``_op_sac_save_list`` and
``per_op_sac_force_recompute_mm_shapes_by_fqns`` at v0.2.2; the same rule in
torchtitan/distributed/activation_checkpoint.py, ``SelectiveAC``, 2026):

- **saved**: the outputs of ``aten.mm`` except every second one in the block
  (the policy counts the block's mms from 1 and recomputes the even ones), of
  scaled-dot-product (flash) attention, of ``reduce_scatter_tensor``, of
  ``all_to_all_single`` (the expert-parallel dispatch and combine) and of
  ``aten.max`` (the amax of dynamic float8 scaling: scalars);
- **recomputed**: everything else, rerun from the block's input before its
  backward: norms, rotary, the activation, residual adds, the even mms, the
  all-gathers of tensor parallelism, and in a MoE block the router (its gate's
  mm is force-recomputed outside the count: the option's default
  ``moe.router.gate``), the permutations and the routed experts' grouped GEMMs
  (``torch._grouped_mm`` is not in the list).

The block's mms run in its forward order (torchtitan's model.py files):
attention ``wq, wk, wv, wo``, or under multi-head latent attention ``wq_a, wq_b``
(``wq`` without a query latent), ``wkv_a, wkv_b, wo``; then a dense block's MLP
``w1, w3, w2`` (a gated MLP: ``w2(silu(w1 x) * w3 x)``) or ``w1, w2``, a MoE block's
shared experts the same way (after the routed experts, torchtitan's MoE.forward).
So a Llama block saves ``wq, wv, w1, w2`` and reruns ``wk, wo, w3``. Under tensor
parallelism torchtitan runs MLA's ``wq_a`` and ``wkv_a`` unsplit on the gathered
tokens (``NoParallel``), the up projections column-wise and ``wo`` row-wise.
Float8 linears keep the pattern: torchao's float8 training calls ``torch.mm`` on
its float8 tensor subclass, so the policy's dispatch mode sees ``aten.mm`` before
the subclass lowers it to ``aten._scaled_mm``, and saves the same bf16 outputs;
torchtitan's own tables show it (docs/performance.md, Tables 1 and 3: 77.0 and
62.0 GiB under BF16 with torch.compile, 76.8 and 61.8 GiB with float8 added).
The casts to float8 rerun with the rest; the recomputed GEMMs run at the float8
rate.

Per micro-batch on one rank (T tokens after context parallelism, t-way tensor
parallelism with sequence parallelism as torchtitan's plan applies it, so the
block input holds ``T / t`` tokens), the bytes kept are the block input
``2 h T/t``, the attention output ``2 o T`` (``o`` its width on the rank: query
heads x head or value dimension, over t) and its fp32 log-sum-exp ``4 (a/t) T``,
the saved mm outputs ``2 T n`` for each (``n`` its output width on the rank: a
column-parallel GEMM ``n/t``, a row-parallel one the whole ``h`` before its
reduce-scatter), under tensor parallelism the two reduce-scatter outputs
``2 h T/t`` each, and under expert parallelism the rows each all-to-all receives
(the dispatch at its element width, the combine in bf16). The backward pays the
recomputed forward: every forward op of the block but attention, the saved
GEMMs and the all-to-alls, the recomputed GEMMs, and the all-gather half of each
tensor-parallel forward collective (an all-gather moves the bytes its
reduce-scatter does).

Not priced: GPT-OSS-style attention (sliding windows with sinks under flex
attention, projections with biases that dispatch as ``aten.addmm``, outside
torchtitan 0.2.2's list and its mm count): ``unpriced`` says so.
"""

from __future__ import annotations

from dataclasses import replace

from pptune.costmodel.attention import mla_core_ops, mla_part
from pptune.costmodel.moe import ExpertParallel, local_tokens, moe_part
from pptune.costmodel.ops import (
    BF16_BYTES,
    BlockPart,
    Kind,
    OpCost,
    Parallel,
    Phase,
    Rates,
    _split,
    attention_ops,
    attention_part,
    block_ops,
    linear,
    mlp_part,
    rerun,
)
from pptune.costmodel.presets import ModelShape

OP_SAC = "op_sac"  # the recompute-module name pptune gives the policy
FP32_BYTES = 4
# a MoE block's forward GEMMs that are not mms of the count: the router's gate
# (force-recomputed) and the routed experts' grouped GEMMs (moe.py's names)
UNCOUNTED_GEMMS = ("router", "expert_fc1", "expert_fc2")


def unpriced(m: ModelShape) -> str | None:
    """Why the policy is not priced on ``m``'s blocks (module docstring), or None."""
    if m.sliding_window:
        return ("GPT-OSS-style attention (sliding windows with sinks, biased projections "
                "that dispatch as aten.addmm outside the policy's mm count)")
    return None


def block_mms(m: ModelShape, t: int, moe: bool = False) -> list[tuple[str, int, int]]:
    """The block's mms in forward order: (name, k, n), the output width n on the rank
    (column-parallel ones split by t, row-parallel ones the whole h, MLA's down
    projections unsplit); ``moe``: a MoE block, whose MLP mms are its shared experts'."""
    h = m.hidden
    if m.mla:
        heads, dr = m.heads, m.qk_rope_head_dim
        q_cols = _split(heads * (m.qk_nope_head_dim + dr), t)
        mms = ([("wq_a", h, m.q_lora_rank), ("wq_b", m.q_lora_rank, q_cols)]
               if m.q_lora_rank else [("wq", h, q_cols)])
        mms += [("wkv_a", h, m.kv_lora_rank + dr),
                ("wkv_b", m.kv_lora_rank, _split(heads * (m.qk_nope_head_dim + m.v_head_dim), t)),
                ("wo", _split(heads * m.v_head_dim, t), h)]
    else:
        q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
        mms = [("wq", h, _split(q, t)), ("wk", h, _split(kv, t)), ("wv", h, _split(kv, t)),
               ("wo", _split(q, t), h)]
    f = m.shared_ffn if moe else m.ffn
    if not f:
        return mms
    return [*mms, ("w1", h, _split(f, t)), *([("w3", h, _split(f, t))] if m.gated_mlp else []),
            ("w2", _split(f, t), h)]


def saved_bytes(m: ModelShape, b: int, par: Parallel, moe: bool = False,
                ex: ExpertParallel | None = None) -> float:
    """Bytes one block keeps for backward under the policy (module docstring)."""
    t = par.tp
    tokens = b * m.seq_len // par.cp
    rep = tokens / t if par.sequence_parallel else float(tokens)
    width = m.heads * (m.v_head_dim if m.mla else m.head_dim)
    out = BF16_BYTES * m.hidden * rep  # the block input
    out += BF16_BYTES * tokens * _split(width, t) + FP32_BYTES * tokens * _split(m.heads, t)
    # the odd aten.mm outputs of the block (bf16 under float8 too)
    out += sum(BF16_BYTES * tokens * n for i, (_, _, n) in enumerate(block_mms(m, t, moe))
               if i % 2 == 0)
    if t > 1 and par.sequence_parallel:
        out += 2 * BF16_BYTES * m.hidden * rep  # the two reduce-scatter outputs
    if moe and ex is not None and ex.ep > 1:  # the rows each all-to-all receives
        copies = local_tokens(m, b, par) * m.top_k * ex.imbalance
        out += (ex.dispatch_bytes + BF16_BYTES) * m.hidden * copies
    return out


def attention(m: ModelShape, b: int, rates: Rates, par: Parallel, window: int = 0) -> BlockPart:
    """The block's attention sub-layer: MLA's or (sliding-window) attention."""
    return mla_part(m, b, rates, par) if m.mla else attention_part(m, b, rates, par, window)


def recompute_ops(ops: list[OpCost], attention_core: set[str], m: ModelShape, b: int,
                  rates: Rates, par: Parallel, moe: bool = False) -> list[OpCost]:
    """The backward's rerun of the block's forward ``ops`` under the policy: its
    forward memory ops but the attention's (``attention_core``: their names), the
    router and expert GEMMs and the expert tensor-parallel gather of a MoE block, the
    even mms of the block (at the block's GEMM precision), half of each
    tensor-parallel forward collective (its all-gather)."""
    tokens = b * m.seq_len // par.cp
    fwd = [o for o in ops if o.phase is Phase.F and o.name not in attention_core]
    gathers = [replace(o, flops=o.flops / 2, hbm_bytes=o.hbm_bytes / 2, time_s=o.time_s / 2)
               for o in fwd if o.kind is Kind.COMM and o.name.startswith("tp_")]
    experts = [o for o in fwd if (o.kind is Kind.GEMM and o.name in UNCOUNTED_GEMMS)
               or (o.kind is Kind.COMM and o.name == "etp_gather")]
    mms = [linear(name, tokens, k, n, rates, par.fp8)[0]
           for i, (name, k, n) in enumerate(block_mms(m, par.tp, moe)) if i % 2]
    return rerun([o for o in fwd if o.kind is Kind.MEMORY] + gathers + experts + mms)


def block(m: ModelShape, b: int, rates: Rates, par: Parallel, moe: bool, window: int,
          ex: ExpertParallel) -> tuple[list[OpCost], float]:
    """A block's ops with the policy's rerun, and the bytes it keeps (``window``: its
    sliding attention window, 0 for full attention)."""
    mlp = moe_part(m, b, rates, par, ex) if moe else mlp_part(m, b, rates, par)
    ops = block_ops(m, b, rates, par, attention(m, b, rates, par, window), mlp)
    core = mla_core_ops(m, b, rates, par) if m.mla else attention_ops(m, b, rates, par, window)
    return (ops + recompute_ops(ops, {o.name for o in core}, m, b, rates, par, moe),
            saved_bytes(m, b, par, moe, ex))
