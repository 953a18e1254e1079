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
    """Token (and, GPT-style, position) embedding: a gather; in W its scatter-add into
    a dense BF16 gradient of the whole table, zeroed first, and that gradient's add into
    the ``main_grad``.

    The embedding's weight gradient is no GEMM: megatron-core's VocabParallelEmbedding
    (tensor_parallel/layers.py) looks rows up with ``F.embedding``, whose CUDA backward
    (PyTorch aten/src/ATen/native/cuda/Embedding.cu ``embedding_dense_backward_cuda`` and
    EmbeddingBackwardKernel.cu ``embedding_backward_cuda_kernel``) allocates the gradient
    as ``at::zeros({num_weights, dim}, grad.options())``, a BF16 table of the rank's
    ``vocab / tp`` rows (and, GPT-style, megatron-core's unsplit position table,
    ``seq_len`` rows: LanguageModelEmbedding), written once with zeros (2 bytes an
    element), then sums the tokens' rows into it (``embed.wgrad``: read a row 2h, FP32
    partial sums 8h a token). So gradient accumulation fusion never reaches it: under
    Megatron-LM's ``main_grad`` (fused or not) DDP's hook adds that BF16 table into
    ``main_grad`` every micro-batch, as it does the router's (rates.Accumulation.unfused:
    2 + 4 + 4 bytes an element, 2 + 2 + 2 into a BF16 ``main_grad``); autograd's BF16
    gradient (``bf16``) has no add. An MTP module's embedding prices its own zeroing and
    add: exact where its table is used once on its rank (one MTP module on a stage without
    the embedding, DeepSeek-V3's); where k uses share a rank's table, autograd sums their
    k gradients (6 bytes an element each) before the one add, priced here as k adds."""
    tokens, h = b * m.seq_len // par.cp, m.hidden
    gather = (7 if m.dropout else 4) * h * tokens  # + position add and dropout
    tables = 2 if m.dropout else 1  # GPT-style: the position table beside the tokens'
    table = (_split(m.vocab, par.tp) + (m.seq_len if m.dropout else 0)) * h
    return [
        memory("embed", Phase.F, gather, rates, kernels=3 if m.dropout else 1),
        tp_collective("tp_embed", Phase.F, BF16_BYTES * tokens * h, par),
        memory("embed.grad_zero", Phase.W, BF16_BYTES * table, rates, kernels=tables),
        memory("embed.wgrad", Phase.W, (15 if m.dropout else 10) * h * tokens, rates,
               kernels=2 if m.dropout else 1),
        *grad_add("embed", table, rates, par.accumulation.unfused(), kernels=tables),
    ]


def head_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """Final norm, LM head GEMM and the (vocabulary-parallel) cross-entropy, its bytes
    per logit as ``par.cross_entropy``'s kernels move them (loss.py)."""
    t, h, v = par.tp, m.hidden, m.vocab
    tokens = b * m.seq_len // par.cp  # the LM head stays BF16 (precision.py)
    rep = tokens / t if par.sequence_parallel else float(tokens)
    logits = tokens * v / t
    lm = linear("lm_head", tokens, h, _split(v, t), rates, accum=par.accumulation)
    (fwd, bwd), (k_fwd, k_bwd) = BYTES[par.cross_entropy], KERNELS[par.cross_entropy]
    return [
        memory("final_norm", Phase.F, 4 * h * rep, rates), lm[0],
        memory("cross_entropy", Phase.F, fwd * logits, rates, kernels=k_fwd),
        memory("cross_entropy.bwd", Phase.B, bwd * logits, rates, kernels=k_bwd), lm[1],
        tp_collective("tp_head.bwd", Phase.B, BF16_BYTES * tokens * h, par),
        memory("final_norm.bwd", Phase.B, 6 * h * rep, rates), lm[2],
        *grad_add("lm_head", h * _split(v, t), rates, par.accumulation),
    ]


def mtp_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
            block: list[OpCost]) -> list[OpCost]:
    """An MTP module: its embedding, the two norms and the projection 2h -> h,
    its block, and its LM head with the loss (analytic.py's docstring)."""
    h, t = m.hidden, par.tp
    tokens = b * m.seq_len // par.cp
    rep = tokens / t if par.sequence_parallel else float(tokens)
    proj = linear("mtp_proj", tokens, 2 * h, -(-h // t), rates, accum=par.accumulation)
    act = 2.0 * tokens * h
    pre = [
        *embedding_ops(m, b, rates, par),
        memory("mtp_norms", Phase.F, 2 * 4 * h * rep, rates, kernels=2), proj[0],
        tp_collective("tp_mtp", Phase.F, act, par, proj[0]),
        memory("mtp_norms.bwd", Phase.B, 2 * 6 * h * rep, rates, kernels=2), proj[1],
        tp_collective("tp_mtp.bwd", Phase.B, act, par, proj[1]), proj[2],
        *grad_add("mtp_proj", 2 * h * -(-h // t), rates, par.accumulation),
    ]
    return pre + block + head_ops(m, b, rates, par)
