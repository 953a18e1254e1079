"""The layers at the two ends of the model, the embedding (token, and GPT-style
position, lookup) and the head (final norm, LM head GEMM and cross-entropy), and
the multi-token-prediction modules between them, priced by the per-op model
(ops.py's docstring has their bytes per token).

Where an MTP module's ops run, as megatron-core 0.16.1 runs them: its embedding
lookup, its two norms (``enorm``, ``hnorm``), the projection 2h -> h (``eh_proj``),
its block and its final norm on the MTP layer (multi_token_prediction.py
``MultiTokenPredictionLayer``); its LM head GEMM and cross-entropy on the head, the
post-process stage (the loss ``L`` of a ``--pipeline-model-parallel-layout``), which
runs the output layer and the loss once for the main model and once for each MTP
module (gpt_model.py ``_postprocess``; "MTP loss is computed in post processing
stage, so the output_layer is not needed" on the MTP stage). DeepSeek-V3's modules
share the model's output head (arXiv 2412.19437 sec. 2.2). To get there the MTP
block passes the main hidden state and each module's output on together,
concatenated along the sequence (``MultiTokenPredictionBlock.forward``): MTP layer
j sends j + 2 hidden states (analytic.py), and the head keeps each prediction's
logits. Not priced: megatron-core runs the main model's final norm with the last
decoder layer when there are MTP layers (transformer_block.py
``has_final_layernorm_in_this_stage``); it stays on the head here, a norm's 4h and
6h bytes a token."""

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
    """The head: the final norm and the output layer for the main model's prediction
    and for each MTP module's (output_ops; the module docstring)."""
    h = m.hidden
    rep = _norm_tokens(m, b, par)
    ops = [memory("final_norm", Phase.F, 4 * h * rep, rates), *output_ops(m, b, rates, par),
           memory("final_norm.bwd", Phase.B, 6 * h * rep, rates)]
    for _ in range(m.mtp_layers):
        ops += output_ops(m, b, rates, par)
    return ops


def head_act_bytes(m: ModelShape, b: int, par: Parallel) -> float:
    """What the head keeps for backward: its input, its norm's output and the FP32
    logits (Korthikanti et al. 2022 sec. 4.3), and for each MTP module's prediction its
    normalised hidden state, sequence-parallel as the MTP stage sent it (megatron-core's
    ColumnParallelLinear saves its input before the gather), and its logits."""
    tokens = b * m.seq_len // par.cp
    hidden_bytes, logits_bytes = BF16_BYTES * tokens * m.hidden, 4 * tokens * m.vocab / par.tp
    mtp_bytes = BF16_BYTES * _norm_tokens(m, b, par) * m.hidden + logits_bytes
    return 2 * hidden_bytes + logits_bytes + m.mtp_layers * mtp_bytes


def output_ops(m: ModelShape, b: int, rates: Rates, par: Parallel) -> list[OpCost]:
    """The output layer on one prediction's normalised hidden state: the LM head GEMM
    and the (vocabulary-parallel) cross-entropy, its bytes per logit as
    ``par.cross_entropy``'s kernels move them (loss.py). Where weight gradients are added
    unfused, the k + 1 uses of the head's matrix are priced as k + 1 adds (as
    embedding_ops prices an MTP module's embedding)."""
    t, h, v = par.tp, m.hidden, m.vocab
    tokens = b * m.seq_len // par.cp  # the LM head stays BF16 (precision.py)
    logits = tokens * v / t
    lm = linear("lm_head", tokens, h, _split(v, t), rates, accum=par.accumulation)
    (fwd, bwd), (k_fwd, k_bwd) = BYTES[par.cross_entropy], KERNELS[par.cross_entropy]
    return [
        lm[0],
        memory("cross_entropy", Phase.F, fwd * logits, rates, kernels=k_fwd),
        memory("cross_entropy.bwd", Phase.B, bwd * logits, rates, kernels=k_bwd), lm[1],
        tp_collective("tp_head.bwd", Phase.B, BF16_BYTES * tokens * h, par), lm[2],
        *grad_add("lm_head", h * _split(v, t), rates, par.accumulation),
    ]


def mtp_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
            block: list[OpCost]) -> list[OpCost]:
    """An MTP module's own ops: its embedding, the two norms and the projection
    2h -> h, its block and its final norm (its LM head and loss: head_ops)."""
    h, t = m.hidden, par.tp
    tokens = b * m.seq_len // par.cp
    rep = _norm_tokens(m, b, par)
    proj = linear("mtp_proj", tokens, 2 * h, -(-h // t), rates, accum=par.accumulation)
    act = 2.0 * tokens * h
    return [
        *embedding_ops(m, b, rates, par),
        memory("mtp_norms", Phase.F, 2 * 4 * h * rep, rates, kernels=2), proj[0],
        tp_collective("tp_mtp", Phase.F, act, par, proj[0]),
        memory("mtp_norms.bwd", Phase.B, 2 * 6 * h * rep, rates, kernels=2), proj[1],
        tp_collective("tp_mtp.bwd", Phase.B, act, par, proj[1]), proj[2],
        *grad_add("mtp_proj", 2 * h * -(-h // t), rates, par.accumulation),
        *block,
        memory("mtp_final_norm", Phase.F, 4 * h * rep, rates),
        memory("mtp_final_norm.bwd", Phase.B, 6 * h * rep, rates),
    ]


def mtp_act_bytes(m: ModelShape, b: int, par: Parallel) -> float:
    """What an MTP module keeps for backward besides its block's: the inputs of its
    three norms and the projection's 2h input."""
    tokens = b * m.seq_len // par.cp
    return 3 * BF16_BYTES * m.hidden * _norm_tokens(m, b, par) + 2 * BF16_BYTES * tokens * m.hidden


def _norm_tokens(m: ModelShape, b: int, par: Parallel) -> float:
    """The tokens a rank's norm sees: under sequence parallelism its share."""
    tokens = b * m.seq_len // par.cp
    return tokens / par.tp if par.sequence_parallel else float(tokens)
