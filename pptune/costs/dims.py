"""Which cost keys a command prices: the sizes of tensor, context, expert and
expert-tensor parallelism and the GEMM precisions (``keys.CostKey``).

``recommend`` searches every key the flags allow; a dimension the user does
not give is searched over the sizes a practitioner would try with analytic
costs (``DEFAULT_*`` below, a search policy, not a cost): tensor parallelism
1, 2, 4, 8 inside a node (NVIDIA's recipes keep TP inside the NVLink domain);
context parallelism in powers of two that leave at least ``MIN_CP_TOKENS``
tokens a rank (NVIDIA's Llama 3.1 recipes run CP2 at 8,192 tokens, Meta ran
CP16 at 131,072: 4,096 and 8,192 a rank); expert parallelism in the powers of
two that divide a mixture-of-experts model's routed experts; expert tensor
parallelism 1; BF16 (FP8 changes the numerics: the user asks for it). The
other commands price one key: one size each, 1 and BF16 by default.

A size the user gives that the model or the GPU cannot take is bad input (one
line naming the flag); a default size that does not fit is left out. Which
tensor-parallel sizes a model's key/value heads take is the framework's rule
(``KvHeads``): recommend and check-config follow the framework they write or
read, Megatron-LM's for the generic search. Some
limits bind tensor and context parallelism together (``pair_problem``): a
searched pair that breaks one is left out of the search, and only when no pair
is left is it bad input, one line naming the pairs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from enum import Enum

from pptune.costmodel import context, precision
from pptune.costmodel.context import CpComm
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.errors import BadInput
from pptune.options import CostOptions

DEFAULT_TP = (1, 2, 4, 8)
MIN_CP_TOKENS = 2048
MAX_DEFAULT_CP = 64
DEFAULT_PRECISION = (Precision.BF16,)


class KvHeads(str, Enum):
    """How a framework's tensor parallelism splits grouped-query attention's key/value
    heads, which decides the sizes it takes.

    ``replicate``: megatron-core 0.16.1 takes a tp that divides the query groups or is a
    multiple of them (transformer_config.py ``__post_init__``: "num_query_groups (G)
    must be a multiple or divisor of tensor_model_parallel_size (T)"); above them each
    rank keeps one whole key/value head, shared by tp / groups ranks (attention.py
    ``Attention.__init__``: ``num_query_groups_per_partition = 1``;
    ``SelfAttention.get_query_key_value_tensors`` all-gathers the QKV output and slices
    the rank's group, costmodel/ops.py prices it). DeepSpeed and pptune's own files
    follow it (the generic search's rule).
    ``split``: torchtitan 0.2.2 shards ``wk`` and ``wv`` column-wise
    (models/llama3/infra/parallelize.py ``ColwiseParallel``) and views each rank's
    columns as whole heads (models/llama3/model/model.py ``Attention.forward``:
    ``xk.view(bs, seqlen, -1, self.head_dim)``): a tp that does not divide the
    key/value heads leaves a rank part of a head, and the view fails at the first
    forward (Llama 3 70B at tp 16: 1,024 / 16 = 64 columns of a 128-wide head)."""

    REPLICATE = "replicate"
    SPLIT = "split"


def kv_problem(kv_heads: int, tp: int, rule: KvHeads, model: str) -> str | None:
    """Why tensor parallelism ``tp`` cannot split ``model``'s ``kv_heads`` key/value heads
    under ``rule`` (None: it can)."""
    if kv_heads % tp == 0:
        return None
    if rule is KvHeads.SPLIT:
        return (f"does not divide the {kv_heads} key/value heads of {model} (torchtitan "
                "shards wk and wv over tp and views each rank's columns as whole heads, "
                "models/llama3/model/model.py Attention.forward: a tp that does not divide "
                "them fails at the first forward); choose a tp that divides "
                f"{kv_heads}")
    if tp % kv_heads == 0:
        return None
    return (f"is neither a divisor nor a multiple of the {kv_heads} key/value heads of "
            f"{model} (megatron-core: num_query_groups must be a multiple or divisor of "
            "tensor_model_parallel_size, transformer_config.py)")


def single_key(opts: CostOptions, verb: str = "this command") -> CostKey:
    """The one key of a command that prices one layout (1 and BF16 by default)."""
    many = [flag for flag, values in (("--tp", opts.tp), ("--cp", opts.cp), ("--ep", opts.ep),
                                      ("--etp", opts.etp), ("--precision", opts.precision))
            if values is not None and len(values) > 1]
    if many:
        raise BadInput(f"{verb} prices one layout: give one value to {', '.join(many)} "
                       "(recommend searches lists)")
    return CostKey(tp=_one(opts.tp), cp=_one(opts.cp), ep=_one(opts.ep), etp=_one(opts.etp),
                   precision=(opts.precision or DEFAULT_PRECISION)[0])


def _one(values: tuple[int, ...] | None) -> int:
    return values[0] if values else 1


def search_keys(opts: CostOptions, shape: ModelShape, gpu: GpuSpec, gpus: int,
                gpus_per_node: int, kv: KvHeads = KvHeads.REPLICATE) -> tuple[CostKey, ...]:
    """Every key recommend searches for these flags (module docstring), in order; ``kv``:
    the framework's rule for tp and the key/value heads."""
    problems: list[str] = []
    tps = _given("--tp", opts.tp, lambda t: tp_problem(shape, t, gpus, kv), problems) or tuple(
        t for t in DEFAULT_TP if t <= gpus_per_node and not tp_problem(shape, t, gpus, kv))
    # given tensor-parallel sizes: the heads a2a splits are theirs (pair_problem); else
    # the model's, which no tensor-parallel size makes divisible when they are not
    cps = _given("--cp", opts.cp, lambda c: cp_problem(shape, c, opts, gpus, not opts.tp),
                 problems) or default_cp(shape, opts, gpus)
    eps = _given("--ep", opts.ep, lambda e: ep_problem(shape, e, gpus), problems) or (
        default_ep(shape, gpus))
    etps = _given("--etp", opts.etp, lambda e: etp_problem(shape, e), problems) or (1,)
    if not shape.moe:  # the MoE flags that have a non-default value set on a dense model
        problems += [f"{flag} {value}: {shape.name} has no experts to route" for flag, value in (
            ("--moe-imbalance", opts.moe_imbalance if opts.moe_imbalance != 1.0 else None),
            ("--moe-dispatcher", opts.dispatcher.value
             if opts.dispatcher is not Dispatcher.ALLTOALL else None)) if value]
    precs = opts.precision or DEFAULT_PRECISION
    for p in precs:
        problems += precision.problems(p, gpu)
    if problems:
        raise BadInput("; ".join(dict.fromkeys(problems)))
    pairs = [(tp, cp) for tp, cp in itertools.product(tps, cps) if gpus % (tp * cp) == 0]
    why = {(tp, cp): pair_problem(shape, tp, cp, opts) for tp, cp in pairs}
    if pairs and all(why.values()):
        raise BadInput("; ".join(f"tp {tp} x cp {cp}: {why[tp, cp]}" for tp, cp in pairs))
    keys = [CostKey(tp, cp, ep, etp, prec)
            for prec, (tp, cp), ep, etp in itertools.product(precs, pairs, eps, etps)
            if not why[tp, cp] and gpus % (ep * etp) == 0]
    if not keys:
        raise BadInput(no_layout(gpus, tps, cps, eps, etps))
    return tuple(keys)


def no_layout(gpus: int, tps: Sequence[int], cps: Sequence[int], eps: Sequence[int],
              etps: Sequence[int]) -> str:
    """Why no key fits ``gpus``, with the numbers: tp x cp must divide them, and a pipeline
    stage's ranks (tp x cp x dp, all of them at most) hold ep x etp groups."""
    why = []
    if all(gpus % (tp * cp) for tp in tps for cp in cps):
        why.append(f"no tp x cp from {{{', '.join(map(str, tps))}}} x "
                   f"{{{', '.join(map(str, cps))}}} divides them")
    if all(gpus % (ep * etp) for ep in eps for etp in etps):
        sizes = sorted({ep * etp for ep in eps for etp in etps})
        said = (f"ep x etp = {eps[0]} x {etps[0]} = {sizes[0]} does not divide them"
                if len(sizes) == 1 else
                f"no ep x etp from {{{', '.join(map(str, sizes))}}} divides them")
        why.append(f"{said} (the experts of a pipeline stage split over ep x etp of its tp x "
                   "cp x dp ranks, which divide the GPUs)")
    return (f"no layout of {gpus} GPUs: " + "; ".join(why)
            + f"; choose sizes whose product divides --gpus {gpus}")


def _given(flag: str, values: Sequence[int] | None, problem: object,
           problems: list[str]) -> tuple[int, ...] | None:
    if not values:
        return None
    for v in values:
        why = problem(v)  # type: ignore[operator]
        if why:
            problems.append(f"{flag} {v}: {why}")
    return tuple(values)


def tp_problem(shape: ModelShape, tp: int, gpus: int,
               kv: KvHeads = KvHeads.REPLICATE) -> str | None:
    if gpus % tp:
        return f"does not divide --gpus {gpus}"
    if shape.heads % tp:
        return f"does not divide the {shape.heads} attention heads of {shape.name}"
    if not shape.mla:
        return kv_problem(shape.kv_heads, tp, kv, shape.name)
    return None


def cp_problem(shape: ModelShape, cp: int, opts: CostOptions, gpus: int,
               heads: bool = True) -> str | None:
    """What stops ``cp`` at every tensor-parallel size (``heads``: the a2a exchange's
    heads checked as the model's, the most any tensor-parallel rank holds; False: left
    to ``pair_problem``, for the tensor-parallel sizes given)."""
    if gpus % cp:
        return f"does not divide --gpus {gpus}"
    if cp == 1:
        return None
    if shape.mla and opts.cp_comm in context.MLA_REFUSED:
        return mla_cp_comm_problem(shape.name, opts.cp_comm)
    if shape.sliding_window:
        return f"context parallelism with {shape.name}'s sliding windows is not modelled"
    if opts.attention is not None and not opts.attention.fused:
        return "context parallelism needs fused (flash or cudnn) attention"
    found = context.problems(shape.seq_len, shape.heads, max(1, shape.kv_heads), cp,
                             opts.cp_comm if heads else CpComm.P2P, tp=None)
    return "; ".join(found) or None


def mla_cp_comm_problem(model: str, comm: CpComm) -> str:
    """Why ``comm`` cannot exchange ``model``'s latent attention (context.MLA_REFUSED)."""
    return (f"--cp-comm {comm.value} with {model}'s latent attention: Transformer Engine 2.5 "
            "to 2.14 (megatron-core 0.16.1 pins 2.9 to 2.11) asserts 'Context parallelism "
            "does not support MLA with cp_comm_type' for a2a and all_gather; use p2p or "
            "a2a+p2p")


def pair_problem(shape: ModelShape, tp: int, cp: int, opts: CostOptions) -> str | None:
    """What stops tensor parallelism ``tp`` with context parallelism ``cp`` (None:
    nothing): Ulysses (``--cp-comm a2a``) splits each tensor-parallel rank's heads over
    cp (context.problems); with sequence parallelism each context-parallel rank's
    tokens are split over tp, which megatron-core asserts divides them
    (megatron/core/tensor_parallel/mappings.py ``_split_along_first_dim`` and
    ``_reduce_scatter_along_first_dim``: "First dimension of the tensor should be
    divisible by tensor parallel size", the embedding's [s / cp, b, h] output as
    language_model_embedding.py scatters it)."""
    found = []
    if opts.cp_comm is CpComm.A2A:
        found += context.problems(shape.seq_len, shape.heads // tp,
                                  max(1, shape.kv_heads // tp), cp, opts.cp_comm, tp=tp)
    if tp > 1 and opts.splits_sequence and shape.seq_len % cp == 0 \
            and (shape.seq_len // cp) % tp:
        multiple = math.lcm(2 * cp if cp > 1 else 1, cp * tp)
        found.append(f"sequence parallelism splits each context-parallel rank's "
                     f"{shape.seq_len // cp} tokens (sequence {shape.seq_len} / cp {cp}) over "
                     f"tp {tp}, which does not divide them (megatron-core asserts it); use a "
                     f"sequence that is a multiple of {multiple}, another tp or cp, or "
                     "--no-sequence-parallel")
    return "; ".join(found) or None


def _cp_policy(shape: ModelShape, gpus: int) -> list[int]:
    """The context-parallel sizes recommend tries when --cp is not given (module
    docstring), before any is checked."""
    out, cp = [], 1
    while cp <= min(MAX_DEFAULT_CP, gpus) and (cp == 1 or shape.seq_len // cp >= MIN_CP_TOKENS):
        out.append(cp)
        cp *= 2
    return out


def default_cp(shape: ModelShape, opts: CostOptions, gpus: int) -> tuple[int, ...]:
    return tuple(cp for cp in _cp_policy(shape, gpus)
                 if cp_problem(shape, cp, opts, gpus) is None) or (1,)


def cp_not_searched(shape: ModelShape, opts: CostOptions, gpus: int) -> str | None:
    """Why recommend, left to choose the context-parallel sizes, searched none above 1
    though the sequence and the GPUs leave room for some: every size it would try that
    divides the GPUs is refused (an odd sequence, sliding windows, unfused attention),
    said for the smallest. None when one is searched or none was in range."""
    tried = [cp for cp in _cp_policy(shape, gpus) if cp > 1 and gpus % cp == 0]
    why = [cp_problem(shape, cp, opts, gpus) for cp in tried]
    if not tried or not all(why):
        return None
    return f"context parallelism (cp > 1) was not searched: cp {tried[0]}: {why[0]}"


def fp8_flags_problem(opts: CostOptions, keys: Sequence[CostKey]) -> str | None:
    """The FP8 flags given (--fp8-recipe, --fp8-kernels, --fp8-param-gather) where none of
    ``keys`` prices FP8 or MXFP8 GEMMs: they would change nothing, so they can only be a
    mistake (as the MoE flags on a dense model, search_keys). None when they act."""
    precisions = list(dict.fromkeys(k.precision for k in keys))
    if any(p in precision.LOW_PRECISION for p in precisions):
        return None
    given = [f"{flag} {value}".strip() for flag, value, set_ in (
        ("--fp8-recipe", opts.fp8_recipe and opts.fp8_recipe.value, opts.fp8_recipe),
        ("--fp8-kernels", opts.fp8_kernels and opts.fp8_kernels.value, opts.fp8_kernels),
        ("--fp8-param-gather", "", opts.fp8_param_gather)) if set_]
    if not given:
        return None
    said = given[0] if len(given) == 1 else f"{', '.join(given[:-1])} and {given[-1]}"
    one = len(given) == 1
    return (f"{said} {'shapes' if one else 'shape'} FP8 plans only, and none is priced here "
            f"(precision {','.join(p.value for p in precisions)}): add fp8 to --precision "
            f"(recommend: a list such as bf16,fp8), or drop {'it' if one else 'them'}")


def ep_problem(shape: ModelShape, ep: int, gpus: int) -> str | None:
    if ep == 1:
        return None
    if not shape.moe:
        return f"{shape.name} has no experts to split"
    if shape.experts % ep:
        return f"does not divide the {shape.experts} routed experts of {shape.name}"
    if ep > gpus:
        return f"is more than --gpus {gpus}"
    return None


def default_ep(shape: ModelShape, gpus: int) -> tuple[int, ...]:
    if not shape.moe:
        return (1,)
    out, ep = [], 1
    while ep <= min(shape.experts, gpus):
        if shape.experts % ep == 0:
            out.append(ep)
        ep *= 2
    return tuple(out)


def etp_problem(shape: ModelShape, etp: int) -> str | None:
    if etp == 1:
        return None
    if not shape.moe:
        return f"{shape.name} has no experts to split"
    if shape.expert_ffn % etp:
        return f"does not divide the expert FFN width {shape.expert_ffn} of {shape.name}"
    return None
