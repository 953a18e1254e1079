"""The cross-entropy loss over the LM head's logits, as each implementation moves them.

The loss is memory-bound: per logit on a rank (tokens x vocabulary / tp), its
kernels read and write the logits some number of times. How many depends on
the implementation (bytes per logit; bf16 2, fp32 4):

``fused`` (one pass each way: a single-kernel loss such as Transformer Engine's
    or Liger's, or ``torch.compile`` of the loss): forward reads the bf16
    logits and writes the fp32 softmax kept for the backward, 2 + 4 = 6;
    backward reads it and writes the bf16 gradient, 4 + 2 = 6.
``native`` (megatron-core's ``fused_vocab_parallel_cross_entropy``,
    Megatron-LM ``--cross-entropy-loss-fusion``, NeMo
    ``cross_entropy_loss_fusion: true``; megatron/core/fusions/
    fused_cross_entropy.py, its three ``jit_fuser`` functions forward and one
    backward): the cast to fp32 with the max, written out (2 + 4); the
    subtraction, exp and sum (4 + 4); the division into the softmax (4 + 4):
    22 forward; backward, the in-place update and scaling of the saved softmax
    written back (4 + 4) and its bf16 copy (2): 10.
``unfused`` (megatron-core's ``vocab_parallel_cross_entropy``, Megatron-LM's
    default without the flag; megatron/core/tensor_parallel/cross_entropy.py,
    one kernel per line): ``.float()`` (2 + 4), ``max`` (4), ``-= max``
    (4 + 4), ``exp`` (4 + 4), ``sum`` (4), ``div_`` (4 + 4): 38 forward;
    backward, ``mul_`` by the incoming gradient (4 + 4) and autograd's cast of
    the fp32 gradient to the bf16 logits' dtype (4 + 2): 14.

``eager`` (PyTorch's ``F.cross_entropy`` on the logits cast to fp32, as torchtitan
    runs its loss without ``torch.compile``: torchtitan components/loss.py; the
    kernels of aten/src/ATen/native/cuda/SoftMax.cu and LossNLL.cu): ``.float()``
    (2 + 4) and log-softmax, whose ``cunn_SoftMaxForward`` reads a row three times
    (max, sum of exps, the write pass) and writes it once (4 x 3 + 4): 22 forward;
    backward, nll-loss's gradient zero-filled (4), ``cunn_SoftMaxBackward`` reading
    the gradient twice and the output once and writing (4 x 3 + 4), and the cast back
    to bf16 (4 + 2): 26.

The kernels each launches (the small index and mask ops of the target lookup
included) are counted for their launch time. Both files are the same at
Megatron-LM f2e5db40 (July 2024) and at its 2026 head.
"""

from __future__ import annotations

from enum import Enum


class CrossEntropy(str, Enum):
    FUSED = "fused"
    NATIVE = "native"
    UNFUSED = "unfused"
    EAGER = "eager"


# bytes per logit (forward, backward) and kernels (forward, backward)
BYTES: dict[CrossEntropy, tuple[float, float]] = {
    CrossEntropy.FUSED: (6.0, 6.0),
    CrossEntropy.NATIVE: (22.0, 10.0),
    CrossEntropy.UNFUSED: (38.0, 14.0),
    CrossEntropy.EAGER: (22.0, 26.0),
}
KERNELS: dict[CrossEntropy, tuple[int, int]] = {
    CrossEntropy.FUSED: (4, 2),
    CrossEntropy.NATIVE: (4, 2),
    CrossEntropy.UNFUSED: (10, 3),
    CrossEntropy.EAGER: (3, 4),
}
