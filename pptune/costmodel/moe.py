"""Mixture-of-experts layers: what one MoE block costs, op by op.

A MoE block replaces the dense MLP with a router and routed experts (and,
in DeepSeek's and Llama 4's designs, shared experts that see every token).
Megatron-core's all-to-all token dispatcher runs it as (megatron/core/
transformer/moe/token_dispatcher.py, ``MoEAlltoAllTokenDispatcher``):

    router -> permute -> A2A(EP) -> AG(ETP) -> experts -> RS(ETP) -> A2A(EP) -> unpermute

Per micro-batch of b sequences of s tokens, on one rank of tensor-parallel
size t (sequence parallelism: the rank holds T = b s / t of the tokens; Megatron
runs MoE with sequence parallelism whenever t > 1), with E routed experts,
top-k routing, expert FFN width f, expert-parallel size ep, expert
tensor-parallel size etp and routing imbalance r (tokens of the busiest expert
over the mean; 1.0 when routing is forced to balance, as benchmarks do):

- **router**: a GEMM T x h by h x E, then scores and top-k over HBM: forward
  reads the bf16 logits and writes fp32 scores (2E + 4E bytes a token), top-k
  reads them and writes k fp32 weights and k int64 indices (4E + 12k);
  backward reads the k weight gradients and the scores and writes the logit
  gradients (4k + 4E + 2E).
- **sort by local expert** (the dispatcher's "Permutation 2", token_dispatcher.py:
  ``sort_chunks_by_idxs``, or a transpose-copy when dropping and padding): with more
  than one local expert the received rows, grouped by source rank, are reordered by
  expert before the experts and back before the combine, each pass reading and
  writing the ``T k r etp`` rows (in the dispatch precision before the experts,
  BF16 after), and their gradients the same way back.
- **permute / unpermute** (moe_utils.permute and unpermute): forward permute
  reads each token once and writes its k copies, ``2h T (1 + k)`` bytes;
  unpermute reads the k expert outputs and writes their sum, the same bytes;
  their backward passes move the same bytes in reverse. The routing weights
  scale the activation inside the experts (megatron/core/transformer/moe/
  experts.py: ``permuted_probs`` into the "scaled activation",
  ``weighted_bias_swiglu_impl``), so unpermute's sum is unweighted.
- **experts**: each rank holds E / ep experts, each split etp ways along f.
  After the all-gather over the etp group an expert sees
  ``m = T k r ep etp / E`` tokens (every rank of the expert's ep x etp group
  sends it its share). Their GEMMs (fc1: m x h by h x 2f/etp for a gated MLP,
  fc2: m x f/etp by f/etp x h) run as one grouped GEMM over the local experts
  (``--moe-grouped-gemm``; one launch, its tiles in common waves) or one GEMM
  per expert; the efficiency comes from the per-expert m through the same
  tile and wave model as every GEMM (ops.gemm_efficiency). The activation
  moves ``6 f/etp`` bytes a row forward and ``10 f/etp`` backward (SwiGLU; GeLU
  4 and 6), over ``T k r etp`` rows.
- **expert tensor parallelism** (etp > 1): the dispatched tokens are
  all-gathered over the etp group before the experts and the outputs
  reduce-scattered after (forward), and the same for the gradients (backward):
  ``(etp - 1)/etp`` of ``etp T k r h`` bf16 elements each way (comm.py's
  reduce-scatter / all-gather time).
- **FP8 casts** (FP8 GEMMs, as Transformer Engine runs them; ops.fp8_casts,
  precision.py: read BF16, write FP8 and its transpose): the experts' fc1
  input (``R h``; with an FP8 dispatch the ``T k r`` copies are cast before
  they leave instead) and fc2 input (``R f/etp``) forward, the two output
  gradients (``R h`` and ``R 2f/etp``, gated) backward, as in a dense MLP but
  for fc1's input, which no norm writes in FP8 here.
- **dispatch and combine all-to-all**: each rank sends ``T k r`` token copies
  of h elements to the ranks of its ep group, 2 bytes each in BF16 or
  ``1 + 4/128`` in FP8 with one fp32 scale per 128 elements (DeepSeek-V3
  report sec. 3.3: dispatched activations in FP8 with 1 x 128 tile scales,
  combine in BF16); combine and both backward all-to-alls move BF16. The time
  is comm.all_to_all_s over the ep group's placement (NVLink for the members
  on the rank's node, its NIC for the rest, concurrently); the DeepEP and
  allgather dispatchers move other copies (dispatch.py). The all-to-all is
  its own figure (``fwd_a2a_s``, ``bwd_a2a_s``) so that a schedule or framework
  that overlaps it can hide it; the others sum into the block's F, B and W.
- **shared experts**: a dense MLP of their combined width over the block's
  tokens, split by tensor parallelism like any MLP (ops.mlp_part).
- **the experts' precision** (``ExpertParallel.precision``; None: the block's): the
  routed experts' GEMMs, their FP8 casts and saved inputs at their own precision where a
  framework converts them apart from the linears (torchtitan 0.2.2: the
  ``quantize.linear.float8`` converter swaps nn.Linear modules only, its
  ``quantize.grouped_mm.float8`` converter the experts' grouped GEMMs,
  torchtitan/components/quantization/float8.py); the router and shared experts are
  linears, at the block's.

Activation bytes kept for backward by the MoE part of a block (2 bytes an
element unless stated), with ``R = T k r etp`` rows on the rank after the
all-gather: the fp32 router scores ``4 E T``, the permuted expert inputs
``2h R`` (fc1's input), fc1's output (gate and up, ``2 x 2 f/etp`` a row; GeLU
``2 f/etp``) which the fused weighted SwiGLU keeps instead of its
intermediates, its output (fc2's input, ``2 f/etp``) and the fp32 routing
weights (``4 R``); under FP8 the two GEMM inputs are kept as their FP8 casts
(1 byte an element, MXFP8 ``1 + 1/32``: Transformer Engine saves the cast
input for the weight gradient, precision.py), as in a dense block; the expert outputs are not kept, the unpermute being an
unweighted sum; plus the shared experts' inner tensors as a dense MLP's
(analytic.py). With megatron-core's ``--recompute-modules moe_act`` the
activation's output (fc2's input) is discarded after the forward and the
activation reruns before fc2's backward (its forward bytes once more in B).
"""

from __future__ import annotations

import math
from dataclasses import replace

from pptune.costmodel.block_style import mlp_bias_params

# ExpertParallel (how the experts are placed and fed) lives beside the dispatchers
from pptune.costmodel.dispatch import ExpertParallel as ExpertParallel
from pptune.costmodel.dispatch import route
from pptune.costmodel.ops import (
    BF16_BYTES,
    Accumulation,
    BlockPart,
    Kind,
    OpCost,
    Parallel,
    Phase,
    Rates,
    activation_ops,
    fp8_casts,
    gemm,
    grad_add,
    linear,
    memory,
    mlp_inner_bytes,
    mlp_part,
)
from pptune.costmodel.presets import ModelShape

FP32_BYTES = 4
INDEX_BYTES = 8  # int64 expert indices (torch.topk)
# FP8 dispatch: one byte an element plus one fp32 scale per 128 (DeepSeek-V3 sec. 3.3)
FP8_DISPATCH_BYTES = 1 + FP32_BYTES / 128


def check_experts(m: ModelShape, ex: ExpertParallel) -> None:
    """The frameworks' own rules for placing the model's experts (ValueError)."""
    if not m.moe:
        return
    if m.experts % ex.ep:
        raise ValueError(f"ep {ex.ep} must divide the {m.experts} routed experts "
                         f"(each rank holds experts / ep of them)")
    if m.expert_ffn % ex.etp:
        raise ValueError(f"etp {ex.etp} must divide the expert FFN width {m.expert_ffn}")


def local_tokens(m: ModelShape, b: int, par: Parallel) -> float:
    """Tokens of a micro-batch on one rank as the MoE layer sees them."""
    tokens = b * m.seq_len // par.cp  # this context-parallel rank's share
    return tokens / par.tp if par.sequence_parallel else float(tokens)


def tokens_per_expert(m: ModelShape, b: int, par: Parallel, ex: ExpertParallel) -> int:
    """m of each local expert's GEMMs: ``T k r ep etp / E`` (rounded up)."""
    t_loc = local_tokens(m, b, par)
    return math.ceil(t_loc * m.top_k * ex.imbalance * ex.ep * ex.etp / m.experts)


def _expert_gemms(name: str, phase: Phase, m_tok: int, n: int, k: int, experts: int,
                  rates: Rates, grouped: bool, fp8: bool = False,
                  out_bytes: float = BF16_BYTES) -> OpCost:
    """``experts`` GEMMs of m_tok x k by k x n: one grouped launch or one each
    (``fp8``: FP8 inputs at the FP8 rate; ``out_bytes``: an output element's, ops.gemm)."""
    if grouped:
        return gemm(name, phase, m_tok, n, k, rates, batch=experts, fp8=fp8,
                    out_bytes=out_bytes)
    one = gemm(name, phase, m_tok, n, k, rates, fp8=fp8, out_bytes=out_bytes)
    return OpCost(name, phase, Kind.GEMM, one.flops * experts, one.hbm_bytes * experts,
                  one.time_s * experts, kernels=experts)


def expert_linear(name: str, m_tok: int, k: int, n: int, experts: int, rates: Rates,
                  grouped: bool, fp8: bool = False, accum: Accumulation = Accumulation()
                  ) -> tuple[OpCost, OpCost, OpCost]:
    """F, B (data gradient) and W (weight gradient, its output as ``accum`` says:
    rates.Accumulation) of the local experts' y = x W."""
    return (
        _expert_gemms(name, Phase.F, m_tok, n, k, experts, rates, grouped, fp8),
        _expert_gemms(name + ".dgrad", Phase.B, m_tok, k, n, experts, rates, grouped, fp8),
        _expert_gemms(name + ".wgrad", Phase.W, k, n, m_tok, experts, rates, grouped, fp8,
                      accum.out_bytes),
    )


def experts_parallel(par: Parallel, ex: ExpertParallel) -> Parallel:
    """``par`` at the routed experts' precision (module docstring)."""
    if ex.precision is None or ex.precision is par.precision:
        return par
    return replace(par, precision=ex.precision)


def moe_part(m: ModelShape, b: int, rates: Rates, par: Parallel,
             ex: ExpertParallel, recompute_act: bool = False,
             recompute_shared: bool = False) -> BlockPart:
    """The MoE sub-layer of a block: router, permutation, dispatch, experts,
    combine, unpermutation and the shared experts (the module docstring's ops).
    ``recompute_act``: megatron-core's ``--recompute-modules moe_act``, the experts'
    activation rerun before fc2's backward (its output not kept: moe_act_bytes);
    ``recompute_shared``: ``shared_experts``, the shared experts checkpointed."""
    h, e, k, r = m.hidden, m.experts, m.top_k, ex.imbalance
    t_loc = local_tokens(m, b, par)
    copies = t_loc * k * r  # routed token copies this rank sends and receives
    rows = copies * ex.etp  # rows on this rank after the etp all-gather
    f_loc = m.expert_ffn // ex.etp
    n_local = e // ex.ep
    m_tok = tokens_per_expert(m, b, par, ex)
    router = linear("router", math.ceil(t_loc), h, e, rates)
    # the router stays BF16 (DeepSeek-V3 report sec. 3.3.1: gating in BF16); its gradient
    # is added into a main_grad unfused, the experts' as par.accumulation says (one each)
    fp8 = experts_parallel(par, ex).fp8  # the routed experts' GEMMs and casts
    per = par.cast_bytes  # a cast's bytes an element (more under block scaling)
    accum, fc1_n = par.accumulation, f_loc * (2 if m.gated_mlp else 1)
    fc1 = expert_linear("expert_fc1", m_tok, h, fc1_n, n_local, rates, ex.grouped_gemm,
                        fp8, accum)
    fc2 = expert_linear("expert_fc2", m_tok, f_loc, h, n_local, rates, ex.grouped_gemm, fp8,
                        accum)
    adds = [*grad_add("router", h * e, rates, accum.unfused()),
            *grad_add("expert_fc1", h * fc1_n * n_local, rates, accum, n_local),
            *grad_add("expert_fc2", f_loc * h * n_local, rates, accum, n_local)]
    act_f, act_b = activation_ops("expert_activation", m.gated_mlp, par.swiglu, f_loc * rows,
                                  rates)
    scores_f = t_loc * ((2 + 4) * e + 4 * e + (FP32_BYTES + INDEX_BYTES) * k)
    scores_b = t_loc * (FP32_BYTES * k + FP32_BYTES * e + BF16_BYTES * e)

    r_int = math.ceil(rows)
    fp8_dispatch = ex.dispatch_bytes < BF16_BYTES
    # FP8 casts of the expert GEMMs' inputs and output gradients (ops.fp8_casts): an
    # FP8 dispatch casts its copies before they leave, else fc1 casts the rows it gets
    cast_in = (fp8_casts("dispatch", Phase.F, math.ceil(copies), [h], rates, fp8, per)
               if fp8_dispatch else [])
    cast_fc1 = [] if fp8_dispatch else fp8_casts("expert_fc1", Phase.F, r_int, [h], rates,
                                                 fp8, per)
    cast_fc2 = fp8_casts("expert_fc2", Phase.F, r_int, [f_loc], rates, fp8, per)
    cast_grads = fp8_casts("expert", Phase.B, r_int,
                           [h, f_loc * (2 if m.gated_mlp else 1)], rates, fp8, per)
    into, out_of, out_bwd, into_bwd = route(m, t_loc, rows, n_local, rates, ex, cast_in)
    fwd = [
        router[0], memory("router_topk", Phase.F, scores_f, rates, kernels=3), *into, *cast_fc1,
        fc1[0], act_f, *cast_fc2, fc2[0],
        *out_of,
    ]
    bwd = [
        *out_bwd,
        *([replace(act_f, name="expert_activation.recompute", phase=Phase.B)]
          if recompute_act else []),
        *cast_grads, fc2[1], act_b, fc1[1],
        *into_bwd,
        memory("router_topk.bwd", Phase.B, scores_b, rates, kernels=2), router[1],
    ]
    wgrad = [router[2], fc1[2], fc2[2], *adds]
    if m.shared_ffn:
        shared = mlp_part(m, b, rates, par, ffn=m.shared_ffn, name="shared")
        if recompute_shared:
            shared = shared.checkpointed()
        fwd += shared.fwd
        bwd = shared.bwd + bwd
        wgrad += shared.wgrad
    return BlockPart(fwd, bwd, wgrad)


def moe_act_bytes(m: ModelShape, b: int, par: Parallel, ex: ExpertParallel,
                  recompute_act: bool = False, recompute_shared: bool = False) -> float:
    """Bytes the MoE sub-layer keeps for backward per micro-batch (module docstring),
    the shared experts' inner tensors included; ``recompute_act`` (megatron-core's
    ``moe_act``, output-discarding checkpointing): without the activation's output;
    ``recompute_shared`` (``shared_experts``): without the shared experts' tensors."""
    h, e, k, r = m.hidden, m.experts, m.top_k, ex.imbalance
    t_loc = local_tokens(m, b, par)
    rows = t_loc * k * r * ex.etp
    f_loc = m.expert_ffn // ex.etp
    # fc1's and fc2's inputs: FP8 casts under TE's FP8, at the experts' precision
    saved = experts_parallel(par, ex).saved_input_bytes
    # an MLP's inner tensors a row (ops.mlp_inner_bytes; fc2's input FP8 under FP8); with
    # moe_act's checkpoint fc1's output alone (gate and up, or GeLU's input)
    low = BF16_BYTES - saved
    inner = ((4 if m.gated_mlp else 2) if recompute_act
             else mlp_inner_bytes(m.gated_mlp, par.swiglu, low)) * f_loc * rows
    total = FP32_BYTES * e * t_loc + saved * h * rows + inner + FP32_BYTES * rows
    if m.shared_ffn and not recompute_shared:
        tokens = b * m.seq_len // par.cp
        dense_low = BF16_BYTES - par.saved_input_bytes  # linears: the block's precision
        total += (mlp_inner_bytes(m.gated_mlp, par.swiglu, dense_low)
                  * m.shared_ffn * tokens / par.tp)  # a dense MLP's (analytic.py)
    return total


def moe_params(m: ModelShape, tp: int, ex: ExpertParallel) -> tuple[float, float]:
    """(dense, expert) parameters of one rank's MoE sub-layer: the router (h E,
    replicated over tensor parallelism) and shared experts (split by tp) are
    dense; the routed experts ``E / ep`` per rank, each split etp ways. With
    ``mlp_bias`` each expert's projections carry biases (block_style.py; GPT-OSS's
    ``gate_up_proj_bias`` and ``down_proj_bias``); the router's own bias is left out."""
    mats = 3 if m.gated_mlp else 2
    shared = mlp_bias_params(m, m.shared_ffn, tp) if m.shared_ffn else 0.0
    dense = m.hidden * m.experts + mats * m.hidden * m.shared_ffn / tp + shared
    expert = m.experts / ex.ep * mats * m.hidden * m.expert_ffn / ex.etp
    biases = mlp_bias_params(m, m.expert_ffn, ex.etp)
    return float(dense), float(expert + (m.experts / ex.ep * biases if biases else 0.0))
