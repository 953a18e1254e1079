"""Per-layer costs from a model shape and a GPU spec, without hardware.

Layers: ``embedding``, ``block0`` .. ``block{n-1}``, ``head`` (final norm, LM head and
loss), the structure ``pptune probe`` writes from measurements.

Compute: per-op costs (ops.py): every GEMM by a roofline with a shape-dependent
efficiency, attention by the flash-attention cost (or the unfused GEMMs and softmax with
``flash_attention=False``), the elementwise ops by the bytes they move, a launch cost per
kernel, and the tensor-parallel collectives inside the layer (two per block in forward
and two in B, Shoeybi et al. 2019 sec. 3). F, B and W are each the sum of their own ops;
W is the weight GEMMs and their gradients' accumulation (rates.Accumulation).

FLOPs per token of a block's forward pass, for hidden h, heads a, KV heads
g, head dim d = h/a, FFN f, sequence s (Narayanan et al. 2021, "Efficient
Large-Scale Language Model Training on GPU Clusters", appendix: each GEMM
of m x k by k x n costs 2mkn; the attention score and value products cost
2 * 2 s h per token):

    gemm  = 2 h (h + 2 g d) + 2 h h + 2 h f * (3 if gated else 2)
    attn  = 4 s h, halved for a causal mask under flash attention

(the model-FLOPs count used to report TFLOP/s; the times come from ops.py).

Activation memory kept for backward, in bytes, per block and micro-batch of b samples,
follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", sec. 4.1, eq. 1-2), which for a GPT block without parallelism gives ``s b h (34
+ 5 a s / h)`` and with t-way tensor parallelism ``s b h (10 + 24 / t + 5 a s / (h
t))``. Their term-by-term accounting is generalised here to grouped-query attention, any
FFN width, gated MLPs and models without dropout; with flash attention (Dao et al. 2022)
the ``5 a s / h`` score term is not stored. The LM head keeps the fp32 logits for the
loss, ``4 s b V / t`` (Korthikanti et al. 2022, sec. 4.3).

Block types: each block is priced as it is built. Its attention is the
model's grouped-query attention (ops.attention_part), a sliding window
(GPT-OSS's every other block, ``ModelShape.sliding_block``) or multi-head
latent attention (attention.py); its MLP a dense one of ``ffn`` or, where
``ModelShape.moe_block`` says so, a router with routed and shared experts
(moe.py), whose dispatch and combine all-to-all are the layer's own figures
(``fwd_a2a_s``, ``bwd_a2a_s``) and whose routed-expert parameters are counted
apart (``expert_param_bytes``: sharded over expert and expert-data
parallelism, not data parallelism). DeepSeek-V3's multi-token-prediction
modules (sec. 2.2 of its report) follow the last block as layers ``mtp0`` ..:
each embeds the shifted tokens again, normalises them and the hidden state,
projects their concatenation (2h -> h) and runs one block of the model's kind;
its LM head and loss run on the head, and the hidden states so far travel
together (ends.py). Megatron-core keeps a copy of the embedding on the MTP
stage (gpt_model.py: ``if self.pre_process or self.mtp_process``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pptune.costmodel import block_style as style
from pptune.costmodel import op_sac, precision
from pptune.costmodel.act_bytes import block_act_bytes as block_act_bytes  # re-exported
from pptune.costmodel.attention import MLA_UP_PROJ, mla_act_bytes, mla_params, mla_part
from pptune.costmodel.context import CpComm, CpLinks
from pptune.costmodel.ends import embedding_ops, head_act_bytes, head_ops, mtp_act_bytes, mtp_ops
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memo import ByKey
from pptune.costmodel.moe import ExpertParallel, check_experts, moe_act_bytes, moe_params, moe_part
from pptune.costmodel.ops import (
    BlockPart,
    OpCost,
    Parallel,
    Phase,
    Rates,
    attention_part,
    block_ops,
    mlp_part,
    norm_reruns,
    phase_s,
    split_a2a,
)
from pptune.costmodel.partition import MTP
from pptune.costmodel.parts import PartTimes, layer_parts
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.costmodel.rates import MAIN_GRAD_BYTES, Swiglu, WgradAccum
from pptune.costmodel.tp_overlap import TpOverlap

BF16_BYTES = 2


@dataclass(frozen=True)
class LayerSpec:
    """One layer's analytic costs at one micro-batch size."""

    fwd_s: float
    bwd_s: float
    wgrad_s: float
    act_bytes: float
    out_bytes: float
    fwd_a2a_s: float = 0.0  # expert dispatch and combine all-to-all, forward (moe.py)
    bwd_a2a_s: float = 0.0  # the same in the backward
    # the same seconds split by what the ops are (parts.py: gemm, attention,
    # memory-bound, launch, each communication group); they sum to the above
    parts: tuple[PartTimes, ...] = ()


@dataclass(frozen=True)
class AnalyticLayer:
    name: str
    param_bytes: float
    per_micro_batch: dict[int, LayerSpec]
    expert_param_bytes: float = 0.0  # the routed experts' part of param_bytes


# Megatron-core --recompute-modules this model prices (selective recomputation):
# "mla_up_proj" (attention.py), "mlp", the dense MLP of non-MoE blocks
# (transformer_layer.py: ``if "mlp" in recompute_modules: if not self.is_moe_layer``),
# "moe_act", the routed experts' activation (moe/experts.py: its output discarded
# after the forward and recomputed before fc2's backward; moe.py), "moe" and
# "shared_experts", the whole MoE sub-layer or its shared experts checkpointed
# (moe_layer.py), and "layernorm", the norms that are modules of their own (output
# discarded, norm rerun; transformer_layer.py), which gpt_layer_specs.py builds for
# MLA's input and a MoE layer's pre-MLP norm (the others are fused into the next
# linear, Transformer Engine's LayerNormLinear).
RECOMPUTE_MLP = "mlp"
RECOMPUTE_MOE_ACT = "moe_act"
RECOMPUTE_MOE = "moe"
RECOMPUTE_SHARED = "shared_experts"
RECOMPUTE_NORM = "layernorm"
# and torchtitan's per-op selective checkpointing (op_sac.py)
RECOMPUTE_MODULES = frozenset({MLA_UP_PROJ, RECOMPUTE_MLP, RECOMPUTE_MOE_ACT, RECOMPUTE_MOE,
                               RECOMPUTE_SHARED, RECOMPUTE_NORM, op_sac.OP_SAC})


def block_flops_per_token(m: ModelShape, causal_skip: bool = False) -> tuple[float, float]:
    """(GEMM FLOPs, attention-product FLOPs) of one block's forward, per token.

    ``causal_skip``: count only the causal half of the attention products, as
    a flash-attention kernel with a causal mask computes them.
    """
    h, f, d = m.hidden, m.ffn, m.head_dim
    q = m.heads * d
    gemm = 2 * h * (q + 2 * m.kv_heads * d) + 2 * q * h + 2 * h * f * (3 if m.gated_mlp else 2)
    attn = 4 * m.seq_len * q * (0.5 if causal_skip else 1.0)
    return float(gemm), float(attn)


def block_params(m: ModelShape) -> float:
    """Parameters of a dense block (grouped-query attention, an MLP of ``ffn``)."""
    h, f, d = m.hidden, m.ffn, m.head_dim
    q = m.heads * d
    attn = h * (q + 2 * m.kv_heads * d) + q * h
    mlp = h * f * (3 if m.gated_mlp else 2)  # norms and biases: block_style.py
    return float(attn + mlp + 2 * style.norm_params(m) + style.bias_params(m))


def attention_params(m: ModelShape, tp: int = 1) -> float:
    """One rank's attention parameters (QKV and output projections; MLA's
    attention.mla_params; Qwen3's per-head q and k norms)."""
    if m.mla:
        return mla_params(m, tp)
    h, d, q = m.hidden, m.head_dim, m.heads * m.head_dim
    norms = 2 * d if m.qk_norm else 0
    return (h * (q + 2 * m.kv_heads * d) + q * h) / tp + norms + style.attention_bias_params(m, tp)


def layer_params(m: ModelShape, i: int, tp: int = 1,
                 experts: ExpertParallel | None = None) -> tuple[float, float]:
    """(dense, routed-expert) parameters of block i on one rank: attention,
    the two norms (block_style.py) and a dense MLP or the MoE part (moe.moe_params)."""
    norms = 2 * style.norm_params(m)
    attn = attention_params(m, tp)
    if m.moe_block(i):
        dense, expert = moe_params(m, tp, experts or ExpertParallel())
        return attn + norms + dense, expert
    mlp = m.hidden * m.ffn * (3 if m.gated_mlp else 2) / tp + style.mlp_bias_params(m, m.ffn, tp)
    return attn + norms + mlp, 0.0


def mtp_extra_params(m: ModelShape, tp: int = 1) -> float:
    """An MTP module's parameters besides its block: the projection 2h -> h, the
    norms of the embedding, the hidden state and its output, and the copy of the
    embedding its stage keeps."""
    h = m.hidden
    return 2 * h * h / tp + 3 * h + m.vocab * h / tp


def model_params(m: ModelShape, active: bool = False) -> float:
    """Every parameter of the model: blocks, MTP modules, embedding and LM head
    (a dense model: ``num_blocks x block_params + 2 V h``). ``active``: the
    parameters one token uses, the routed experts counted top_k / experts."""
    emb = m.vocab * m.hidden
    if not (m.moe or m.mla or m.mtp_layers or m.qk_norm):
        return m.num_blocks * block_params(m) + 2 * emb
    total = 0.0
    share = m.top_k / m.experts if active and m.moe else 1.0
    for i in range(m.num_blocks + m.mtp_layers):
        dense, expert = layer_params(m, i)
        total += dense + expert * share
    h = m.hidden
    total += m.mtp_layers * (2 * h * h + 3 * h)  # MTP projections and norms (embedding shared)
    return total + 2 * emb


def analytic_layers(
    m: ModelShape,
    gpu: GpuSpec,
    micro_batch_sizes: list[int],
    tp: int = 1,
    efficiency: float | None = None,
    flash_attention: bool = True,
    tp_allreduce: tuple[float, float] = (20e-6, 450e9),
    sequence_parallel: bool = False,
    tp_comm_overlap: bool = False,
    experts: ExpertParallel | None = None,
    recompute_modules: frozenset[str] = frozenset(),
    cp: int = 1,
    cp_comm: CpComm = CpComm.P2P,
    cp_links: CpLinks | None = None,
    gemm_precision: Precision = Precision.BF16,
    tp_overlap: TpOverlap | None = None,
    tp_p2p: tuple[float, float] = (10e-6, 396.4e9),
    cross_entropy: CrossEntropy = CrossEntropy.FUSED,
    swiglu: Swiglu = Swiglu.FUSED,
    fp8_kernels: precision.Fp8Kernels = precision.Fp8Kernels.TE,
    fp8_params: bool = False,
    wgrad_accum: WgradAccum = WgradAccum.BF16,
    torchao_recipe: precision.TorchaoRecipe = precision.TorchaoRecipe.TENSORWISE,
    fp8_recipe: precision.Fp8Recipe = precision.Fp8Recipe.DELAYED,
    main_grad_bytes: float = MAIN_GRAD_BYTES,
    fp8_casts: precision.Fp8Casts = precision.Fp8Casts.FUSED,
    shared: ByKey | None = None,
) -> list[AnalyticLayer]:
    """Embedding, blocks (and MTP modules) and head with costs for each micro-batch size.

    ``efficiency``: one fraction of peak for every GEMM instead of the shape-dependent
    one. ``tp_allreduce`` is (latency_s, bus bytes/s) of the tensor-parallel group;
    ``tp_comm_overlap`` hides its collectives behind their GEMMs (ops.tp_collective).
    ``experts``: how MoE blocks are placed (moe.ExpertParallel; default one rank,
    balanced routing). ``recompute_modules``: Megatron-core's selective recomputation of
    ``mla_up_proj``, ``mlp`` (dense MLPs), ``moe_act`` (the routed experts' activation),
    ``moe``, ``shared_experts`` and ``layernorm`` (RECOMPUTE_MODULES), and torchtitan's
    per-op policy ``op_sac`` (op_sac.py; not on GPT-OSS-style attention,
    ``op_sac.unpriced``), priced into the layers.
    ``cp``: context parallelism over ``cp`` ranks exchanging K/V by ``cp_comm``
    over ``cp_links`` (context.py); ``gemm_precision``: the block GEMMs'
    precision (precision.py). ``tp_overlap``: Transformer Engine's per-GEMM
    overlap configuration (tp_overlap.py; None: its defaults) where
    ``tp_comm_overlap`` and sequence parallelism are on, its ring exchange over
    ``tp_p2p`` (latency_s, bytes/s: a pairwise NVLink copy); ``cross_entropy``: the
    loss's kernels (loss.py); ``swiglu``: a gated MLP's activation kernels (rates.Swiglu);
    ``fp8_kernels``, ``fp8_params``, ``torchao_recipe``, ``fp8_recipe``, ``fp8_casts``: whose
    FP8 linears, FP8 weights, torchao's and TE's scaling, torchao's casts (precision.py);
    ``wgrad_accum``, ``main_grad_bytes``: rates.Accumulation. ``shared``: the layers of
    other calls given it (memo.ByKey), reused where they are priced alike."""
    if efficiency is not None and not 0 < efficiency <= 1:
        raise ValueError(f"efficiency must be in (0, 1], got {efficiency}")
    unknown = set(recompute_modules) - RECOMPUTE_MODULES
    if unknown:
        raise ValueError(f"recompute modules {sorted(unknown)} are not modelled; "
                         f"choose from {sorted(RECOMPUTE_MODULES)}")
    ex = experts or ExpertParallel()
    check_experts(m, ex)
    rates = Rates.of(gpu, efficiency, gemm_precision)
    par = Parallel(tp, sequence_parallel, flash_attention, *tp_allreduce, tp_comm_overlap,
                   cp, cp_comm, cp_links, gemm_precision, tp_overlap, *tp_p2p, cross_entropy,
                   swiglu, fp8_kernels, fp8_params, wgrad_accum, torchao_recipe, fp8_recipe,
                   main_grad_bytes, fp8_casts)
    s, h, v = m.seq_len // cp, m.hidden, m.vocab
    saved = par.saved_input_bytes
    redo_up = MLA_UP_PROJ in recompute_modules and m.mla
    redo_mlp = RECOMPUTE_MLP in recompute_modules
    redo_act = RECOMPUTE_MOE_ACT in recompute_modules and m.moe
    redo_moe = RECOMPUTE_MOE in recompute_modules
    redo_shared = RECOMPUTE_SHARED in recompute_modules
    redo_norm = RECOMPUTE_NORM in recompute_modules
    by_op = op_sac.OP_SAC in recompute_modules
    # what prices the layers, but the experts' placement: a block without experts, the
    # attention and the ends cost the same at every expert parallelism
    priced = (shared or ByKey()).group((m, rates, par, recompute_modules)).of

    def spec(ops: list[OpCost], act_bytes: float, out_bytes: float) -> LayerSpec:
        fwd, fwd_a2a = split_a2a(ops, Phase.F, rates)
        bwd, bwd_a2a = split_a2a(ops, Phase.B, rates)
        return LayerSpec(fwd, bwd, phase_s(ops, Phase.W, rates), act_bytes, out_bytes,
                         fwd_a2a, bwd_a2a, layer_parts(ops, rates))

    plain = not (m.moe or m.mla or m.sliding_window or m.mtp_layers or redo_mlp or by_op)

    def kind(i: int) -> tuple[bool, bool]:
        return m.moe_block(i), m.sliding_block(i)

    def block(i: int, b: int) -> tuple[list[OpCost], float]:
        """Block i's ops and saved bytes at micro-batch size b."""
        moe, sliding = kind(i)
        if plain:
            return block_ops(m, b, rates, par), block_act_bytes(
                m, b, tp, flash_attention, sequence_parallel, cp=cp, gemm_input_bytes=saved,
                swiglu=par.swiglu)
        if by_op and not op_sac.unpriced(m):  # torchtitan's per-op policy (op_sac.py)
            return op_sac.block(m, b, rates, par, moe, m.sliding_window if sliding else 0, ex)
        attn: BlockPart | None = None
        attn_bytes: float | None = None
        if m.mla:
            attn = priced(("mla", b), mla_part, m, b, rates, par, redo_up)
            attn_bytes = mla_act_bytes(m, b, par, redo_up)
        elif sliding:
            attn = attention_part(m, b, rates, par, window=m.sliding_window)
        mlp_bytes: float | None = None
        if moe and redo_moe:  # checkpointed: only its input is kept; its forward reruns
            mlp, mlp_bytes = moe_part(m, b, rates, par, ex).checkpointed(), 0.0
        elif moe:
            mlp = moe_part(m, b, rates, par, ex, redo_act, redo_shared)
            mlp_bytes = moe_act_bytes(m, b, par, ex, redo_act, redo_shared)
        else:
            mlp = mlp_part(m, b, rates, par)
            if redo_mlp:
                mlp, mlp_bytes = mlp.checkpointed(), 0.0
        # "layernorm": the norms of their own (MLA's input, a MoE layer's pre-MLP)
        kept = (not (redo_norm and m.mla), not (redo_norm and moe))
        ops = block_ops(m, b, rates, par, attn, mlp) + norm_reruns(m, b, rates, par, kept)
        return ops, block_act_bytes(m, b, tp, flash_attention, sequence_parallel,
                                    attn_bytes=attn_bytes, mlp_bytes=mlp_bytes, cp=cp,
                                    kept_inputs=kept, gemm_input_bytes=saved, swiglu=par.swiglu)


    def end_spec(b: int, send_bytes: float) -> LayerSpec:  # the embedding's
        return spec(embedding_ops(m, b, rates, par), 0.0, send_bytes)

    def block_spec(i: int, b: int, send_bytes: float) -> LayerSpec:
        return spec(*block(i, b), send_bytes)

    def mtp_spec(b: int) -> LayerSpec:
        ops, act = block(m.num_blocks, b)
        return spec(mtp_ops(m, b, rates, par, ops), act + mtp_act_bytes(m, b, par), 0.0)

    def head_spec(b: int) -> LayerSpec:  # the loss scalar leaves the head
        return spec(head_ops(m, b, rates, par), head_act_bytes(m, b, par), 4.0)

    emb: dict[int, LayerSpec] = {}
    blocks: dict[tuple[bool, bool], dict[int, LayerSpec]] = {}
    mtp: list[dict[int, LayerSpec]] = [{} for _ in range(m.mtp_layers)]
    head: dict[int, LayerSpec] = {}
    first = {kind(i): i for i in reversed(range(m.num_blocks))}
    for b in micro_batch_sizes:
        tokens = b * s
        hidden_bytes = tokens * h * BF16_BYTES
        send_bytes = hidden_bytes / tp  # scatter/gather optimisation, Narayanan et al. sec. 4.1
        emb[b] = priced(("embedding", b), end_spec, b, send_bytes)
        for k, i in first.items():
            # a MoE block reads the experts' placement (so does torchtitan's per-op policy)
            placed = ex if k[0] or by_op else None
            blocks.setdefault(k, {})[b] = priced(("block", k, b, placed), block_spec, i, b,
                                                 send_bytes)
        if m.mtp_layers:
            own = priced(("mtp", b, ex), mtp_spec, b)
            for j in range(m.mtp_layers):  # it sends the hidden states so far (ends.py)
                mtp[j][b] = replace(own, out_bytes=(j + 2) * send_bytes)
        head[b] = priced(("head", b), head_spec, b)
    emb_params = (v * h + (m.seq_len * h if m.dropout else 0)) / tp  # GPT adds learned positions
    layers = [AnalyticLayer("embedding", emb_params * BF16_BYTES, emb)]
    for i in range(m.num_blocks):
        if plain:
            rank = (block_params(m) - style.bias_params(m)) / tp + style.bias_params(m, tp)
            layers.append(AnalyticLayer(f"block{i}", rank * BF16_BYTES, blocks[kind(i)]))
            continue
        dense, expert = layer_params(m, i, tp, ex)
        layers.append(AnalyticLayer(f"block{i}", (dense + expert) * BF16_BYTES,
                                    blocks[kind(i)], expert * BF16_BYTES))
    for j in range(m.mtp_layers):
        dense, expert = layer_params(m, m.num_blocks + j, tp, ex)
        dense += mtp_extra_params(m, tp)
        layers.append(AnalyticLayer(f"{MTP}{j}", (dense + expert) * BF16_BYTES, mtp[j],
                                    expert * BF16_BYTES))
    layers.append(AnalyticLayer("head", (v * h / tp + h) * BF16_BYTES, head))
    return layers
