"""A Megatron-LM block's style: its norm, linear biases and tied embeddings, read from
and written to its command line.

Megatron-LM's flags (megatron/training/arguments.py): ``--normalization`` (choices
LayerNorm, RMSNorm; default LayerNorm); ``--disable-bias-linear`` turns off
``add_bias_linear`` (on by default), the bias of every linear layer;
``--add-qkv-bias`` puts one back on the QKV projection only (megatron-core's
``linear_qkv`` has ``bias=add_bias_linear or add_qkv_bias``);
``--untie-embeddings-and-output-weights`` gives the output layer a matrix of its
own (tied by default). A flag left out is read as unsaid, so a script priced before
these flags were read is priced as it was (the model's own style).
"""

from __future__ import annotations

from typing import Any

from pptune.costmodel.models import ModelShape, Norm
from pptune.frameworks.megatron.flags import FlagReader

NORMS = {"LayerNorm": Norm.LAYERNORM, "RMSNorm": Norm.RMSNORM}


def read_style(r: FlagReader, fields: dict[str, Any]) -> None:
    """TrainingConfig's normalization, qkv_bias, attn_out_bias, mlp_bias and
    tied_embeddings from the flags the script gives (None where it gives none)."""
    norm = r.text("--normalization")
    if norm is not None and norm not in NORMS:
        raise r.ctx.bad(f"--normalization is {norm[:40]!r}; expected one of "
                        f"{', '.join(NORMS)} (Megatron-LM's choices)")
    fields["normalization"] = NORMS[norm].value if norm is not None else None
    if r.flags.has("--disable-bias-linear"):
        fields["qkv_bias"] = r.flags.has("--add-qkv-bias")
        fields["attn_out_bias"] = fields["mlp_bias"] = False
    elif r.flags.has("--add-qkv-bias"):
        fields["qkv_bias"] = True
    if r.flags.has("--untie-embeddings-and-output-weights"):
        fields["tied_embeddings"] = False


def style_args(shape: ModelShape, unsaid: list[str], etp: int = 1) -> list[str]:
    """The flags that build ``shape``'s style; in ``unsaid``, the biases Megatron-LM
    cannot state: one on the attention output or the MLP without biases everywhere, and
    experts' biases split over ``etp`` > 1 ranks (megatron-core TransformerConfig
    __post_init__: 'Bias in Moe is only supported when ETP==1')."""
    args = [f"--normalization {'RMSNorm' if shape.normalization is Norm.RMSNORM else 'LayerNorm'}"]
    if not shape.linear_bias or (shape.moe and etp > 1):
        args.append("--disable-bias-linear")
        if shape.qkv_bias:
            args.append("--add-qkv-bias")
        left = [name for name, on in (("the attention output's", shape.attn_out_bias),
                                      ("the MLP's", shape.mlp_bias)) if on]
        why = ("megatron-core takes no expert biases with --expert-tensor-parallel-size "
               f"{etp} ('Bias in Moe is only supported when ETP==1')" if shape.linear_bias else
               "Megatron-LM states biases on every linear layer or on QKV alone")
        if left:
            unsaid.append(f"{' and '.join(left)} biases are priced but left out: {why}")
    if not shape.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    return args
