"""Per-op costs of a transformer block, its embedding and its LM head.

Each op is one kernel (or a few, ``kernels``) with the FLOPs it computes and
the bytes it moves through HBM; its time is a roofline:

    GEMM       max(FLOPs / (peak * gemm_efficiency(shape)), bytes / HBM)
    attention  flash: FLOPs / (peak * attention_fraction); eager: two
               batched GEMMs plus the softmax and dropout over HBM
    memory     bytes / HBM (norms, activations, residual adds, rotary,
               dropout, cross-entropy, embedding gather and scatter)

plus ``launch_s`` per kernel. HBM here is the *achieved* bandwidth, the
datasheet figure times the GPU's measured fraction (presets.py). One kernel's
cost (the GEMM roofline with its tile and wave quantisation, memory ops, the
tensor-parallel collectives) is kernels.py's; the two linears of a sub-layer
with their tensor-parallel communication, overlapped or not, tensor_parallel.py's.

Split of backward (Qi et al. 2024, Zero Bubble, sec. 2): B computes the
input gradients: every GEMM's data gradient, attention's backward and every
elementwise op's backward; W computes the weight gradients, which are the
weight GEMMs only (norm and bias gradients are reductions fused into the
kernels of B or of the weight GEMMs). Forward, B and W each list exactly
their own ops.

Bytes per token of the elementwise ops, 2 bytes per bf16 element, h hidden,
f FFN width, t tensor-parallel size (everything under tensor parallelism is
split by t except the norms, residuals and dropouts, which sequence
parallelism splits too, Korthikanti et al. 2022 sec. 4.2.2):

    norm            F: read x, write y: 4h;  B: read x, dy, write dx: 6h
    residual add    F: 2 reads, 1 write: 6h; B: the gradient sum, 6h
    bias-dropout-add (GPT)  F: read x, bias, residual, write y, 1-byte
                    mask: 7h;  B: dropout's backward (read dy and the
                    mask, write dx: 5h) and the gradient sum (6h)
    rotary          F and B: read and write q and k: 4 (a d + g d) / t
    QK norm (Qwen3) F: read q and k, write them: 4 (a d + g d) / t;
                    B: read them and the gradient, write it: 6 (a d + g d) / t
    GeLU            F: read, write 4f/t;  B: read x, dy, write dx: 6f/t
    SwiGLU          F: read gate, up, write: 6f/t;  B: read gate, up, dy,
                    write two: 10f/t (one fused kernel each way)
    SwiGLU, eager   F: silu (read gate, write 4f/t), mul (read both, write
                    6f/t): 10f/t in 2 kernels;  B: mul's two products (read
                    dy and an operand, write: 12f/t), silu's backward (read
                    its gradient and input, write: 6f/t): 18f/t in 3 kernels
    cross-entropy   one pass each way: F read bf16 logits, write fp32
                    probabilities 6V/t; B read them, write the bf16 gradient
                    6V/t (loss.py: more for megatron-core's kernels)
    embedding       F: gather a row 4h (+ positions and dropout 7h, GPT);
                    W: read the gradient 2h, accumulate fp32 rows 8h; and per
                    table element (not token): its BF16 gradient zeroed, 2, and
                    added into a main_grad where there is one (ends.py)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from pptune.costmodel import context, nvfp4_ops, precision
from pptune.costmodel.context import AttentionRates, CpShape
from pptune.costmodel.kernels import BF16_BYTES as BF16_BYTES
from pptune.costmodel.kernels import GEMM_TILES as GEMM_TILES
from pptune.costmodel.kernels import Kind as Kind
from pptune.costmodel.kernels import OpCost as OpCost
from pptune.costmodel.kernels import Phase as Phase
from pptune.costmodel.kernels import gemm as gemm
from pptune.costmodel.kernels import gemm_efficiency as gemm_efficiency
from pptune.costmodel.kernels import grad_add as grad_add
from pptune.costmodel.kernels import linear as linear
from pptune.costmodel.kernels import memory as memory
from pptune.costmodel.kernels import phase_s as phase_s
from pptune.costmodel.kernels import tp_collective as tp_collective
from pptune.costmodel.kernels import wave_utilisation as wave_utilisation
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.rates import Accumulation as Accumulation
from pptune.costmodel.rates import Parallel as Parallel
from pptune.costmodel.rates import Rates as Rates
from pptune.costmodel.rates import Swiglu as Swiglu
from pptune.costmodel.rates import WgradAccum as WgradAccum
from pptune.costmodel.tensor_parallel import replicated_kv, tp_pair


class Attention(str, Enum):
    FLASH = "flash"  # fused kernel (FlashAttention-2, PyTorch SDPA)
    # cuDNN's fused kernel: Transformer Engine's FusedAttention, which it prefers on Hopper
    # and later (Megatron-LM, NeMo); priced at cuDNN's rates (presets.GpuSpec)
    CUDNN = "cudnn"
    EAGER = "eager"  # score and value GEMMs, softmax and dropout over HBM
    SDPA = "sdpa"  # torch 2.13's SDPA: cuDNN's on Hopper/Blackwell (GpuSpec.priced_kernel)

    @property
    def fused(self) -> bool:
        """One fused kernel (flash or cuDNN), not the score matrix over HBM."""
        return self is not Attention.EAGER


def attention_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
                  window: int = 0) -> list[OpCost]:
    """Core attention (scores, softmax, weighted sum) for the local heads.

    ``window`` > 0: each query attends to at most the last ``window`` keys
    (sliding-window attention); a flash kernel skips the tiles outside it, so
    the causal ``s^2 / 2`` query-key pairs become ``s w - w^2 / 2`` (w <= s).
    Eager attention computes the whole masked score matrix either way."""
    s, d, heads = m.seq_len, m.head_dim, m.heads // par.tp
    if par.flash_attention and 0 < window < s:
        if par.cp > 1:
            raise ValueError("context parallelism with sliding-window attention is not modelled")
        fwd_flops = 4.0 * d * heads * b * (s * window - window * window / 2)
        rate = rates.attention().rate(window, causal=True)  # each query's keys: one window
        return [
            OpCost("flash_attn", Phase.F, Kind.ATTENTION, fwd_flops, 0.0, fwd_flops / rate),
            OpCost("flash_attn.bwd", Phase.B, Kind.ATTENTION, 2.5 * fwd_flops, 0.0,
                   2.5 * fwd_flops / rate, kernels=3),
        ]
    if par.flash_attention:
        shape = CpShape(s, d, heads, max(1, m.kv_heads // par.tp), b)
        return fused_attention_ops(shape, rates.attention(), rates, par)
    if par.cp > 1:
        raise ValueError("context parallelism needs flash (fused) attention")
    bh = b * heads
    scores = float(s * s * bh)  # elements of the score matrix
    drop = m.dropout
    ops = [
        gemm("qk", Phase.F, s, s, d, rates, bh),
        memory("softmax", Phase.F, 2 * BF16_BYTES * scores, rates),  # scale+mask+softmax fused
        gemm("pv", Phase.F, s, d, s, rates, bh),
        gemm("pv.dgrad_p", Phase.B, s, s, d, rates, bh),
        gemm("pv.dgrad_v", Phase.B, s, d, s, rates, bh),
        memory("softmax.bwd", Phase.B, 3 * BF16_BYTES * scores, rates),
        gemm("qk.dgrad_q", Phase.B, s, d, s, rates, bh),
        gemm("qk.dgrad_k", Phase.B, s, d, s, rates, bh),
    ]
    if drop:
        ops.insert(2, memory("attn_dropout", Phase.F, (2 * BF16_BYTES + 1) * scores, rates))
        ops.insert(6, memory("attn_dropout.bwd", Phase.B, (2 * BF16_BYTES + 1) * scores, rates))
    return ops


def fused_attention_ops(shape: CpShape, att_rates: AttentionRates, rates: Rates,
                        par: Parallel) -> list[OpCost]:
    """A fused (flash or cuDNN) attention kernel of this rank's heads, forward and
    backward, at ``att_rates``; under context parallelism (``par.cp`` > 1) with its K/V
    exchange and the ring's merge kernels (context.py)."""
    att = context.attention(shape, par.cp, par.cp_comm, att_rates, par.cp_links)
    ops = [
        OpCost("flash_attn", Phase.F, Kind.ATTENTION, att.fwd_flops, 0.0, att.fwd_compute_s,
               kernels=att.steps),
        OpCost("flash_attn.bwd", Phase.B, Kind.ATTENTION, att.bwd_flops, 0.0,
               att.bwd_compute_s, kernels=3 * att.steps),
    ]
    if par.cp > 1:
        ops.insert(1, OpCost("cp_kv", Phase.F, Kind.COMM, 0.0, att.fwd_bytes,
                             att.fwd_comm_s, 0))
        ops.append(OpCost("cp_kv.bwd", Phase.B, Kind.COMM, 0.0, att.bwd_bytes,
                          att.bwd_comm_s, 0))
        if att.fwd_merge_bytes:
            ops.insert(2, memory("cp_merge", Phase.F, att.fwd_merge_bytes, rates,
                                 kernels=par.cp + 2))
            ops.append(memory("cp_merge.bwd", Phase.B, att.bwd_merge_bytes, rates,
                              kernels=3 * par.cp))
    return ops


def _split(n: int, t: int) -> int:
    """One rank's share of n columns (rounded up, as frameworks pad)."""
    return -(-n // t)


@dataclass(frozen=True)
class BlockPart:
    """One sub-layer of a block (attention, MLP or MoE): its ops by phase, in
    the order they run."""

    fwd: list[OpCost]
    bwd: list[OpCost]
    wgrad: list[OpCost]

    def checkpointed(self) -> BlockPart:
        """The sub-layer keeping only its input, its forward rerun before its backward
        (megatron-core's selective recomputation of a module; Chen et al. 2016)."""
        return BlockPart(self.fwd, rerun(self.fwd) + self.bwd, self.wgrad)


def rerun(ops: list[OpCost]) -> list[OpCost]:
    """Forward ops run again in the backward (B), as recomputation does."""
    return [OpCost(o.name + ".recompute", Phase.B, o.kind, o.flops, o.hbm_bytes, o.time_s,
                   o.kernels) for o in ops]


def attention_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
                   window: int = 0) -> BlockPart:
    """Grouped-query (or multi-head) attention: QKV and output projections,
    rotary, core attention and the tensor-parallel collective around them.
    Queries and outputs are ``heads x head_dim`` wide (the hidden size unless
    the model sets its head dimension, e.g. Qwen3 and GPT-OSS)."""
    t, h = par.tp, m.hidden
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    q = m.heads * m.head_dim
    kv = m.kv_heads * m.head_dim
    kept = max(m.kv_heads, t) * m.head_dim  # times tp: one whole head a rank at least
    pair = tp_pair("attn", "qkv", "attn_out", tokens, h, _split(q + 2 * kv, t), _split(q, t),
                   rates, par, "attn")
    qkv, proj = pair.col, pair.row
    gather_f, gather_b = replicated_kv(tokens, q + 2 * kv, m.kv_heads, rates, par)
    rotary = 4 * tokens * (q + kept) / t
    qk_norm = [memory("qk_norm", Phase.F, 4 * tokens * (q + kept) / t, rates)] if m.qk_norm else []
    qk_norm_b = ([memory("qk_norm.bwd", Phase.B, 6 * tokens * (q + kept) / t, rates)]
                 if m.qk_norm else [])
    core = attention_ops(m, b, rates, par, window)
    cast_f, cast_b = linear_casts("attn", tokens, [(h, _split(q + 2 * kv, t)), (_split(q, t), h)],
                                  rates, par, parts=3)
    return BlockPart(
        fwd=[qkv[0], *gather_f, *qk_norm,
             *([memory("rotary", Phase.F, rotary, rates)] if m.rotary else []),
             *[o for o in core if o.phase is Phase.F], *cast_f, proj[0], pair.fwd_comm],
        bwd=[*cast_b, proj[1], *[o for o in core if o.phase is Phase.B],
             *([memory("rotary.bwd", Phase.B, rotary, rates)] if m.rotary else []),
             *qk_norm_b, *gather_b, qkv[1], pair.bwd_comm],
        wgrad=[qkv[2], proj[2], *pair.wgrad_add, *pair.wgrad_comm],
    )


def mlp_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
             ffn: int | None = None, name: str = "mlp") -> BlockPart:
    """A dense MLP of width ``ffn`` (default the model's): up (gate and up for
    SwiGLU), activation, down, and its tensor-parallel collective."""
    t, h, f = par.tp, m.hidden, m.ffn if ffn is None else ffn
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    up_n = f * (2 if m.gated_mlp else 1)
    pair = tp_pair(name, f"{name}_up", f"{name}_down", tokens, h, _split(up_n, t), _split(f, t),
                   rates, par, "mlp")
    up, down = pair.col, pair.row
    prefix = "" if name == "mlp" else f"{name}_"
    act_f, act_b = activation_ops(f"{prefix}activation", m.gated_mlp, par.swiglu,
                                  f * tokens / t, rates)
    cast_f, cast_b = linear_casts(name, tokens, [(h, _split(up_n, t)), (_split(f, t), h)],
                                  rates, par, parts=2 if m.gated_mlp else 1)
    return BlockPart(
        fwd=[up[0], act_f, *cast_f, down[0], pair.fwd_comm],
        bwd=[*cast_b, down[1], act_b, up[1], pair.bwd_comm],
        wgrad=[up[2], down[2], *pair.wgrad_add, *pair.wgrad_comm],
    )


def activation_ops(name: str, gated: bool, swiglu: Swiglu, columns: float,
                   rates: Rates) -> tuple[OpCost, OpCost]:
    """The MLP activation's forward and backward over ``columns`` (tokens x FFN width
    on the rank), at the module docstring's bytes: GeLU, SwiGLU fused or eager."""
    if not gated:
        fwd, bwd, k_fwd, k_bwd = 4, 6, 1, 1
    elif swiglu is Swiglu.EAGER:
        fwd, bwd, k_fwd, k_bwd = 10, 18, 2, 3
    else:
        fwd, bwd, k_fwd, k_bwd = 6, 10, 1, 1
    return (memory(name, Phase.F, fwd * columns, rates, kernels=k_fwd),
            memory(f"{name}.bwd", Phase.B, bwd * columns, rates, kernels=k_bwd))


def mlp_inner_bytes(gated: bool, swiglu: Swiglu, low: float = 0.0) -> float:
    """Bytes an MLP keeps for backward a token and FFN column, its input aside: a gated
    one gate and up (2 + 2: the fused SwiGLU's input; megatron-core's bias_swiglu_impl
    saves its input only and reruns the SiLU in its backward) and under ``--swiglu
    eager`` the SiLU's output too (2), a GeLU one its input (2); then the activation's
    output, the down GEMM's input (2, less ``low`` when FP8 saves it narrower)."""
    first = (4 + (2 if swiglu is Swiglu.EAGER else 0)) if gated else 2
    return first + 2 - low


def norm_reruns(m: ModelShape, b: int, rates: Rates, par: Parallel,
                kept: tuple[bool, bool]) -> list[OpCost]:
    """The norms whose outputs a block does not keep (``kept``: the attention's input,
    the MLP's), rerun before its backward at a norm's forward bytes (block_ops); under
    FP8 the attention's input is cast again for its linears' weight gradients."""
    tokens = b * m.seq_len // par.cp
    rep = tokens / par.tp if par.sequence_parallel else float(tokens)
    out = []
    if not kept[0]:  # (torchao casts the input again anyway: torchao_casts)
        te = par.fp8_kernels is precision.Fp8Kernels.TE
        out += [memory("norm1.recompute", Phase.B, 4 * m.hidden * rep, rates),
                *fp8_casts("norm1.recompute", Phase.B, tokens, [m.hidden], rates,
                           par.fp8 and te, par.cast_bytes)]
    if not kept[1]:
        out.append(memory("norm2.recompute", Phase.B, 4 * m.hidden * rep, rates))
    return out


def linear_casts(name: str, tokens: int, linears: list[tuple[int, int]], rates: Rates,
                 par: Parallel, parts: int = 1) -> tuple[list[OpCost], list[OpCost]]:
    """(forward, backward) FP8 casts of a sub-layer's two linears, ``linears`` their
    (input, output) widths on the rank, first then second: Transformer Engine's
    (fp8_casts: the second's input forward, the fused norm casting the first's; both
    output gradients backward) or torchao's, compiled (torchao_casts) or eager
    (torchao_eager_casts; ``parts``: the modules the first linear is there); NVFP4's."""
    if par.nvfp4:  # every input cast, none by a norm (nvfp4_ops.py)
        return nvfp4_ops.linear_casts(name, tokens, linears, rates)
    if par.fp8 and par.fp8_kernels is precision.Fp8Kernels.TORCHAO:
        if precision.eager_casts(par.precision, par.torchao_recipe, par.fp8_casts):
            return torchao_eager_casts(name, tokens, [(*linears[0], parts), (*linears[1], 1)],
                                       rates, par.fp8_params)
        return torchao_casts(name, tokens, linears, rates, par.fp8_params, par.torchao_recipe)
    return (fp8_casts(f"{name}_out" if name == "attn" else f"{name}_down", Phase.F, tokens,
                      [linears[1][0]], rates, par.fp8, par.cast_bytes),
            fp8_casts(name, Phase.B, tokens, [n for _, n in reversed(linears)], rates, par.fp8,
                      par.cast_bytes))


def torchao_casts(name: str, tokens: int, linears: list[tuple[int, int]], rates: Rates,
                  fp8_weights: bool,
                  recipe: precision.TorchaoRecipe = precision.TorchaoRecipe.TENSORWISE
                  ) -> tuple[list[OpCost], list[OpCost]]:
    """torchao's float8 casts of linears of (input, output) widths under ``recipe``, by its
    own roofline (precision.TORCHAO_CAST_BYTES): forward each input, and each weight
    (tensorwise: abs-max in two stages, then the cast); backward each output gradient,
    each weight again (and rowwise each input's transpose); no weight casts when the
    linears get FP8 weights (FSDP's float8 all-gather, tensorwise only)."""
    w = 0 if fp8_weights else 1
    in_f, in_b, grad, w_fwd, w_bwd = precision.TORCHAO_CAST_BYTES[recipe]
    fwd = sum(in_f * tokens * i + w * w_fwd * i * o for i, o in linears)
    bwd = sum(in_b * tokens * i + grad * tokens * o + w * w_bwd * i * o for i, o in linears)
    n, tensorwise = len(linears), recipe is precision.TorchaoRecipe.TENSORWISE
    # kernels a linear: tensorwise's weight cast is three (two abs-max stages, the cast)
    k_fwd = 1 + (3 if tensorwise else 1) * w
    k_bwd = 3 + 2 * w if recipe is precision.TorchaoRecipe.ROWWISE else 1 + w
    return ([memory(f"fp8_cast.{name}", Phase.F, fwd, rates, kernels=k_fwd * n)],
            [memory(f"fp8_cast.{name}.bwd", Phase.B, bwd, rates, kernels=k_bwd * n)])


def torchao_eager_casts(name: str, tokens: int, linears: list[tuple[int, int, int]],
                        rates: Rates, fp8_weights: bool) -> tuple[list[OpCost], list[OpCost]]:
    """torchao's tensorwise float8 casts run eager (torchao v0.16.0 float8/float8_linear.py
    matmul_with_hp_or_float8_args), each cast ``TORCHAO_EAGER_CAST_BYTES`` an element in
    ``TORCHAO_EAGER_CAST_KERNELS`` kernels (precision.py), of linears of (input, output)
    widths made of ``k`` nn.Linear modules on one input (torchtitan's models project q, k
    and v by three, wq wk wv, and a gated MLP's gate and up by two, w1 w3): forward, each
    module casts its input and its weight; backward, its output gradient twice (for the
    input gradient and for the weight gradient), its weight and its input again, and
    float8_ops.py preprocess_addmm copies the weight (its transpose is row-major), the
    output gradient's transpose and the input (``TORCHAO_EAGER_TRANSPOSE_BYTES``). No
    weight casts when the linears get FP8 weights (FSDP's float8 all-gather)."""
    w = 0 if fp8_weights else 1
    cast, launches = precision.TORCHAO_EAGER_CAST_BYTES, precision.TORCHAO_EAGER_CAST_KERNELS
    fwd_elements = sum(k * tokens * i + w * i * o for i, o, k in linears)
    bwd_elements = sum(2 * tokens * o + w * i * o + k * tokens * i for i, o, k in linears)
    copied = sum(i * o + tokens * o + k * tokens * i for i, o, k in linears)
    modules = sum(k for _, _, k in linears)
    fwd = cast * fwd_elements
    bwd = cast * bwd_elements + precision.TORCHAO_EAGER_TRANSPOSE_BYTES * copied
    return ([memory(f"fp8_cast.{name}", Phase.F, fwd, rates,
                    kernels=(1 + w) * launches * modules)],
            [memory(f"fp8_cast.{name}.bwd", Phase.B, bwd, rates,
                    kernels=(3 + w) * launches * modules + 3 * modules)])


def fp8_casts(name: str, phase: Phase, tokens: int, widths: list[int], rates: Rates,
              fp8: bool, per_element: float = precision.CAST_BYTES_PER_ELEMENT
              ) -> list[OpCost]:
    """Transformer Engine's FP8 cast-transposes (precision.py), ``per_element`` bytes an
    element (Parallel.cast_bytes: more under block scaling): forward, the inputs no norm
    writes in FP8 (attention output, second MLP GEMM); backward, every GEMM's output grad."""
    if not fp8:
        return []
    per = per_element * tokens
    return [memory(f"fp8_cast.{name}" + (".bwd" if phase is Phase.B else ""), phase,
                   per * sum(widths), rates, kernels=len(widths))]


def block_ops(m: ModelShape, b: int, rates: Rates, par: Parallel,
              attn: BlockPart | None = None, mlp: BlockPart | None = None) -> list[OpCost]:
    """Every op of one transformer block's forward, B and W, in that order: the
    norms and residuals around its attention and its MLP (default: the model's
    attention and a dense MLP; analytic.py passes MLA, sliding-window and MoE
    parts for blocks of those types)."""
    h = m.hidden
    tokens = b * m.seq_len // par.cp
    rep = tokens / par.tp if par.sequence_parallel else float(tokens)  # tokens of the unsplit parts
    attn = attn or attention_part(m, b, rates, par)
    mlp = mlp or mlp_part(m, b, rates, par)
    norm_f, norm_b = 4 * h * rep, 6 * h * rep
    res_f, res_b = (7 * h * rep, 11 * h * rep) if m.dropout else (6 * h * rep, 6 * h * rep)
    fwd = [
        memory("norm1", Phase.F, norm_f, rates), *attn.fwd,
        memory("residual1", Phase.F, res_f, rates), memory("norm2", Phase.F, norm_f, rates),
        *mlp.fwd, memory("residual2", Phase.F, res_f, rates),
    ]
    bwd = [
        memory("residual2.bwd", Phase.B, res_b, rates), *mlp.bwd,
        memory("norm2.bwd", Phase.B, norm_b, rates),
        memory("residual1.bwd", Phase.B, res_b, rates), *attn.bwd,
        memory("norm1.bwd", Phase.B, norm_b, rates),
    ]
    return fwd + bwd + attn.wgrad + mlp.wgrad


def split_a2a(ops: list[OpCost], phase: Phase, rates: Rates) -> tuple[float, float]:
    """(the phase's time without its all-to-alls, the all-to-alls' time)."""
    rest = [o for o in ops if o.kind is not Kind.ALL_TO_ALL]
    a2a = [o for o in ops if o.kind is Kind.ALL_TO_ALL]
    return phase_s(rest, phase, rates), phase_s(a2a, phase, rates)
