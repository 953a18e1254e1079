"""Megatron-LM's mixture-of-experts and MLA flags -> TrainingConfig fields, and the rules
Megatron-LM applies to them (Megatron-LM core_v0.16.1; megatron-core 0.16.1).

Flags and defaults (megatron/training/arguments.py; most MoE flags are generated
from megatron-core's ``TransformerConfig`` fields by ``ArgumentGroupFactory``, so
their defaults are the dataclass's):

- ``--num-experts`` (None: dense; 0 means None, validate_args), ``--moe-router-topk``
  (2), ``--moe-ffn-hidden-size`` (default ``--ffn-hidden-size``, validate_args),
  ``--moe-shared-expert-intermediate-size`` (None: no shared expert),
  ``--moe-layer-freq`` (1: every block; N: block i is MoE when i % N == 0; or a
  Python list expression such as ``([0]*3+[1]*58)``, one entry per block:
  megatron/core/models/gpt/gpt_layer_specs.py), ``--mtp-num-layers``;
- ``--expert-model-parallel-size`` (1), ``--expert-tensor-parallel-size`` (None:
  the tensor-parallel size, validate_args ``args.expert_tensor_parallel_size =
  args.tensor_model_parallel_size``);
- ``--moe-grouped-gemm`` (off: one GEMM per local expert, ``SequentialMLP``),
  ``--moe-token-dispatcher-type`` (``allgather``; ``alltoall``, ``flex``) with
  ``--moe-flex-dispatcher-backend`` (``deepep``; ``hybridep``) or the deprecated
  ``--moe-enable-deepep``, priced as pptune's allgather, alltoall and deepep
  dispatchers (costmodel/dispatch.py; HybridEP as DeepEP, with a warning),
  ``--moe-router-num-groups`` / ``--moe-router-group-topk`` (group-limited routing),
  ``--moe-router-load-balancing-type`` (``aux_loss``), ``--moe-expert-capacity-factor``
  with ``--moe-pad-expert-input-to-capacity`` (every expert gets exactly its capacity:
  the routing imbalance pptune prices is the capacity factor);
- ``--multi-latent-attention`` with ``--q-lora-rank`` (None: queries projected
  directly), ``--kv-lora-rank`` (32), ``--qk-head-dim`` (128), ``--qk-pos-emb-head-dim``
  (64), ``--v-head-dim`` (128); ``--kv-channels``, ``--qk-layernorm``.

What Megatron-LM refuses is an error finding citing its source; what pptune does
not price (HybridEP's own kernels, irregular layer patterns) is a warning naming
the flag, and so is what megatron-core itself warns about.
"""

from __future__ import annotations

import ast
from typing import Any

from pptune.frameworks.common.fields import CAPS
from pptune.frameworks.megatron.flags import FlagReader
from pptune.frameworks.megatron.moe_kernels import kernels_noted
from pptune.limits import MAX_LAYERS

DISPATCHERS = ("allgather", "alltoall", "flex")
FLEX_BACKENDS = ("deepep", "hybridep")
LOAD_BALANCING = ("aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none")
CITE_ARGS = "(Megatron-LM megatron/training/arguments.py validate_args)"
CITE_CONFIG = "(megatron-core megatron/core/transformer/transformer_config.py __post_init__)"


def read_moe(r: FlagReader, fields: dict[str, Any]) -> None:
    """The MoE, MTP and attention-variant fields, and Megatron-LM's refusals of them."""
    ctx, flags = r.ctx, r.flags
    fields["kv_channels"] = r.number("--kv-channels")
    fields["qk_norm"] = flags.has("--qk-layernorm") or None
    _mla(r, fields)
    mtp = r.number("--mtp-num-layers", minimum=0)
    if mtp is not None or flags.has("--num-experts") or flags.has("--multi-latent-attention"):
        fields["mtp_layers"] = mtp or 0  # none unless stated: a preset's own MTP is not built
    position = r.text("--position-embedding-type") or "learned_absolute"
    if mtp and position not in ("rope", "none"):
        ctx.refuse("megatron-mtp-position",
                   f"--mtp-num-layers {mtp} with --position-embedding-type {position}: "
                   "Megatron-LM asserts 'Multi-Token Prediction (MTP) is not supported with "
                   f"{position} position embedding type' {CITE_ARGS}; set "
                   "--position-embedding-type rope")
    experts = r.number("--num-experts", minimum=0)
    ep = r.number("--expert-model-parallel-size", cap=CAPS["ep"]) or 1
    if flags.has("--use-torch-fsdp2") and ep > 1:
        ctx.refuse("megatron-fsdp2-ep",
                   f"--use-torch-fsdp2 with --expert-model-parallel-size {ep}: Megatron-LM "
                   f"asserts '--use-torch-fsdp2 is not supported with expert parallelism' "
                   f"{CITE_ARGS}")
    fields["ep"] = ep
    tp = fields["tp"] or 1
    _pad_rule(r)
    if not experts and ep > 1:
        ctx.refuse("megatron-ep-dense",
                   f"--expert-model-parallel-size {ep} without --num-experts: Megatron-LM "
                   "asserts 'num_experts must be non None to use expert model parallelism' "
                   f"{CITE_ARGS}; add --num-experts or drop the expert-parallel size")
    if not experts:  # 0 means None (validate_args)
        for name in ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-grouped-gemm",
                     "--expert-tensor-parallel-size"):
            if flags.has(name):
                ctx.note(f"{name} ignored: no --num-experts (a dense model)")
        return
    fields["num_experts"] = experts
    fields["etp"] = r.number("--expert-tensor-parallel-size", cap=CAPS["etp"]) or (
        fields["tp"] or 1)
    if fields["etp"] > 1 and not flags.has("--disable-bias-linear"):
        ctx.refuse("megatron-moe-bias",
                   f"experts with linear biases (no --disable-bias-linear) and expert tensor "
                   f"parallel size {fields['etp']}: megatron-core asserts 'Bias in Moe is only "
                   f"supported when ETP==1' {CITE_CONFIG}; add --disable-bias-linear or set "
                   "--expert-tensor-parallel-size 1")
    top_k = r.number("--moe-router-topk") or 2
    fields["moe_top_k"] = top_k
    fields["moe_ffn_hidden_size"] = r.number("--moe-ffn-hidden-size")
    fields["moe_shared_ffn_hidden_size"] = r.number("--moe-shared-expert-intermediate-size")
    fields["moe_grouped_gemm"] = flags.has("--moe-grouped-gemm")
    kernels_noted(r, fields)
    _layer_freq(r, fields)
    if fields["num_experts"] and tp > 1 and not flags.has("--sequence-parallel"):
        ctx.refuse("megatron-moe-sequence-parallel",
                   f"MoE layers with tensor parallel size {tp} and no --sequence-parallel "
                   f"(expert parallel size {ep}): megatron-core raises 'During training, "
                   "performance may degrade if MoE and tensor parallelism are enabled without "
                   "also enabling sequence parallelism.' (megatron/core/transformer/moe/"
                   "moe_layer.py MoELayer.forward); add --sequence-parallel")
    dispatcher = _choice(r, "--moe-token-dispatcher-type", DISPATCHERS, "allgather")
    balancing = _choice(r, "--moe-router-load-balancing-type", LOAD_BALANCING, "aux_loss")
    _routing(r, fields, balancing)
    _router_rules(r, top_k, balancing, dispatcher)
    _group_routing(r, fields, experts)
    fields["moe_dispatcher"] = _dispatcher(r, fields, dispatcher, tp * ep)
    if r.text("--moe-token-dispatcher-type") is None and ep * fields["etp"] > 1:
        ctx.note("--moe-token-dispatcher-type unset: priced as Megatron-LM's default, the "
                 "allgather dispatcher (every rank gathers the tokens of its ep x etp group; "
                 "alltoall or flex, with DeepEP, move only the routed copies)")


def _dispatcher(r: FlagReader, fields: dict[str, Any], dispatcher: str, tp_ep: int) -> str:
    """pptune's dispatcher for the flags (module docstring), with DeepEP's SMs
    (``--moe-deepep-num-sms``) into ``fields``, and megatron-core's refusals of the flex
    dispatcher's backends (transformer_config.py __post_init__, token_dispatcher.py
    MoEFlexTokenDispatcher)."""
    ctx, flags = r.ctx, r.flags
    backend = _choice(r, "--moe-flex-dispatcher-backend", FLEX_BACKENDS, "deepep")
    if flags.has("--moe-enable-deepep"):
        if dispatcher != "flex":
            ctx.refuse("megatron-deepep-flex",
                       f"--moe-enable-deepep with --moe-token-dispatcher-type {dispatcher}: "
                       "megatron-core raises 'DeepEP backend is only supported with flex token "
                       f"dispatcher.' {CITE_CONFIG}; add --moe-token-dispatcher-type flex")
        if backend == "hybridep":
            ctx.refuse("megatron-deepep-flex",
                       "--moe-enable-deepep with --moe-flex-dispatcher-backend hybridep: "
                       "megatron-core raises 'Only one backend is supported for flex token "
                       f"dispatcher.' {CITE_CONFIG}")
        backend = "deepep"
    if dispatcher != "flex":
        return dispatcher
    sms = r.number("--moe-deepep-num-sms")
    if sms is not None and backend == "deepep":
        fields["moe_dispatcher_sms"] = sms
    if tp_ep <= 1:
        ctx.refuse("megatron-flex-tp-ep",
                   "--moe-token-dispatcher-type flex with tensor x expert parallel size 1: "
                   "megatron-core asserts 'Flex token dispatcher requires TPxEP > 1' "
                   "(megatron/core/transformer/moe/token_dispatcher.py); use alltoall")
    if backend == "deepep" and flags.has("--moe-pad-expert-input-to-capacity"):
        ctx.refuse("megatron-deepep-capacity",
                   "--moe-pad-expert-input-to-capacity with the flex dispatcher's deepep "
                   "backend: megatron-core raises 'Flex token dispatcher with deepep backend "
                   f"does not support moe_pad_expert_input_to_capacity' {CITE_CONFIG}")
    if backend == "hybridep":
        ctx.unmodelled("megatron-unmodelled-flag",
                       "--moe-flex-dispatcher-backend hybridep: priced as DeepEP's kernels (a "
                       "token once a node across the network, once a rank over NVLink); "
                       "HybridEP's own are not modelled")
    return "deepep"


def _group_routing(r: FlagReader, fields: dict[str, Any], experts: int) -> None:
    """--moe-router-num-groups / --moe-router-group-topk, and megatron-core's checks of
    them (transformer_config.py __post_init__)."""
    groups = r.number("--moe-router-num-groups")
    chosen = r.number("--moe-router-group-topk")
    if not chosen:
        return
    if not groups:
        r.ctx.refuse("megatron-group-routing",
                     f"--moe-router-group-topk {chosen} without --moe-router-num-groups: "
                     "megatron-core raises 'When using group limited routing, "
                     f"moe_router_num_groups must be specified.' {CITE_CONFIG}")
        return
    if experts % groups or chosen > groups:
        r.ctx.refuse("megatron-group-routing",
                     f"--moe-router-num-groups {groups} / --moe-router-group-topk {chosen} "
                     f"with {experts} experts: megatron-core asserts the groups divide the "
                     f"experts and the chosen groups are at most the groups {CITE_CONFIG}")
        return
    fields["moe_router_num_groups"] = groups
    fields["moe_router_group_topk"] = chosen


def _mla(r: FlagReader, fields: dict[str, Any]) -> None:
    """--multi-latent-attention and its dimensions (argparse defaults, _add_mla_args)."""
    flags = r.flags
    if not flags.has("--multi-latent-attention"):
        return
    if flags.has("--group-query-attention"):
        r.ctx.refuse("megatron-mla-gqa",
                     "--multi-latent-attention with --group-query-attention: Megatron-LM "
                     "asserts 'Group query attention is mutually exclusive with multi latent "
                     f"attention' {CITE_ARGS}; drop --group-query-attention")
    fields["q_lora_rank"] = r.number("--q-lora-rank")
    fields["kv_lora_rank"] = r.number("--kv-lora-rank") or 32
    fields["qk_nope_head_dim"] = r.number("--qk-head-dim") or 128
    fields["qk_rope_head_dim"] = r.number("--qk-pos-emb-head-dim") or 64
    fields["v_head_dim"] = r.number("--v-head-dim") or 128


def _choice(r: FlagReader, name: str, choices: tuple[str, ...], default: str) -> str:
    value = r.text(name)
    if value is None:
        return default
    if value not in choices:
        raise r.ctx.bad(f"{name} is {value[:40]!r}; Megatron-LM accepts {', '.join(choices)}")
    return value


def _routing(r: FlagReader, fields: dict[str, Any], balancing: str) -> None:
    """The routing imbalance priced: the capacity factor when inputs are padded to it."""
    ctx, flags = r.ctx, r.flags
    capacity = capacity_factor(r)
    if capacity is not None and balancing == "sinkhorn":
        ctx.refuse("megatron-capacity-balancing",
                   "--moe-expert-capacity-factor with --moe-router-load-balancing-type "
                   "sinkhorn: megatron-core raises 'moe_expert_capacity_factor only works with "
                   f"aux_loss, seq_aux_loss, global_aux_loss or none load balancing' "
                   f"{CITE_CONFIG}")
    if capacity is not None and flags.has("--moe-pad-expert-input-to-capacity"):
        fields["moe_routing_imbalance"] = max(1.0, capacity)
        ctx.note(f"every expert's input padded to its capacity: routing priced with "
                 f"imbalance {max(1.0, capacity):g} (--moe-expert-capacity-factor)")
        return
    if flags.has("--moe-router-force-load-balancing"):
        ctx.note("routing forced to balance (--moe-router-force-load-balancing: megatron-core "
                 "routes on random logits, a benchmarking setting): priced with imbalance 1.0")
        return
    said = ctx.semantics.balanced_routing = (
        "routing priced as balanced (imbalance 1.0): tokens of the busiest expert under "
        f"{balancing} load balancing are not known from the script; "
        "--moe-expert-capacity-factor with --moe-pad-expert-input-to-capacity holds every "
        "expert at its capacity")
    ctx.note(said)


def capacity_factor(r: FlagReader) -> float | None:
    """--moe-expert-capacity-factor; None when unset or negative (TransformerConfig)."""
    text = r.text("--moe-expert-capacity-factor")
    if text is None:
        return None
    try:
        capacity = float(text)
    except ValueError:
        raise r.ctx.bad(f"--moe-expert-capacity-factor is {text[:40]!r}; expected a "
                        "number such as 1.0") from None
    return None if capacity < 0 or capacity != capacity else capacity


def _pad_rule(r: FlagReader) -> None:
    """megatron-core raises on padding to a capacity no factor sets (any model:
    TransformerConfig.__post_init__ checks it whatever the experts)."""
    if r.flags.has("--moe-pad-expert-input-to-capacity") and capacity_factor(r) is None:
        r.ctx.refuse("megatron-moe-capacity",
                     "--moe-pad-expert-input-to-capacity without a --moe-expert-capacity-factor "
                     "(unset or negative): megatron-core raises 'moe_expert_capacity_factor must "
                     f"be set to use moe_pad_expert_input_to_capacity' {CITE_CONFIG}; add "
                     "--moe-expert-capacity-factor (e.g. 1.0) or drop the padding")


def _router_rules(r: FlagReader, top_k: int, balancing: str, dispatcher: str) -> None:
    ctx, flags = r.ctx, r.flags
    score = r.text("--moe-router-score-function") or "softmax"
    if (top_k == 1 and score == "softmax" and not flags.has("--moe-router-pre-softmax")
            and balancing != "sinkhorn"):
        ctx.refuse("megatron-topk1-softmax",
                   "--moe-router-topk 1 with the softmax score function: megatron-core raises "
                   f"'Please use --moe-router-pre-softmax when topk is 1.' {CITE_CONFIG}")
    if flags.has("--moe-router-enable-expert-bias") and score != "sigmoid":
        ctx.refuse("megatron-expert-bias",
                   f"--moe-router-enable-expert-bias with the {score} score function: "
                   "megatron-core raises 'Expert bias for aux-loss-free routing only supports "
                   f"sigmoid score function.' {CITE_CONFIG}; add --moe-router-score-function "
                   "sigmoid")
    if flags.has("--moe-shared-expert-overlap") and dispatcher != "alltoall":
        ctx.refuse("megatron-shared-overlap",
                   f"--moe-shared-expert-overlap with the {dispatcher} dispatcher: megatron-core "
                   "raises 'moe_shared_expert_overlap only works with alltoall token "
                   f"dispatcher.' {CITE_CONFIG}")


def _layer_freq(r: FlagReader, fields: dict[str, Any]) -> None:
    """--moe-layer-freq as (leading dense blocks, every, offset)."""
    ctx = r.ctx
    text = r.text("--moe-layer-freq")
    if text is None:
        return
    stripped = text.strip().strip("'\"")
    if "[" not in stripped:
        fields["moe_layer_freq"] = r.number("--moe-layer-freq")
        return
    pattern = eval_pattern(r, stripped)
    layers = fields.get("num_layers")
    if layers is not None and len(pattern) != layers:
        ctx.refuse("megatron-moe-layer-freq",
                   f"--moe-layer-freq {stripped[:40]} lists {len(pattern)} layers for "
                   f"--num-layers {layers}: megatron-core asserts 'Invalid length of "
                   "moe_layer_pattern' (megatron/core/models/gpt/gpt_layer_specs.py)")
        return
    first = next((i for i, v in enumerate(pattern) if v), len(pattern))
    hits = [i for i, v in enumerate(pattern) if v]
    if not hits:
        ctx.unmodelled("megatron-unmodelled-flag",
                       f"--moe-layer-freq {stripped[:40]} makes no layer MoE; priced as a "
                       "dense model")
        fields["num_experts"] = None
        return
    every = hits[1] - hits[0] if len(hits) > 1 else len(pattern) - hits[0]
    offset = hits[0] % every
    if any(bool(v) != (i % every == offset) for i, v in enumerate(pattern) if i >= first):
        ctx.unmodelled("megatron-unmodelled-flag",
                       f"--moe-layer-freq {stripped[:40]} places MoE layers irregularly; pptune "
                       f"prices the {first} leading dense layers then every layer as MoE")
        every, offset = 1, 0
    fields.update(moe_first_dense_layers=first, moe_layer_freq=every, moe_layer_offset=offset)


def eval_pattern(r: FlagReader, text: str, flag: str = "--moe-layer-freq") -> list[int]:
    """Megatron-LM's ``_eval_pattern`` (digits, commas, brackets, + and *), evaluated
    without eval: lists of integers, concatenated and repeated."""
    bad = r.ctx.bad(f"{flag} {text[:40]!r} is not a list expression of 0s and 1s "
                    "such as ([0]*3+[1]*58); Megatron-LM accepts digits, commas, [ ], ( ), + "
                    "and *")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError, RecursionError):
        raise bad from None

    def value(node: ast.AST) -> list[int] | int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return int(node.value)
        if isinstance(node, ast.List):
            entries = [value(e) for e in node.elts]
            flat = [e for e in entries if isinstance(e, int)]
            if len(flat) != len(entries):
                raise bad
            return flat
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            a, b = value(node.left), value(node.right)
            if isinstance(node.op, ast.Add) and isinstance(a, list) and isinstance(b, list):
                out = a + b
            elif isinstance(node.op, ast.Mult) and isinstance(a, list) and isinstance(b, int):
                out = _repeat(a, b, bad)
            elif isinstance(node.op, ast.Mult) and isinstance(a, int) and isinstance(b, list):
                out = _repeat(b, a, bad)
            else:
                raise bad
            if len(out) > 4 * MAX_LAYERS:
                raise bad
            return out
        raise bad

    try:
        result = value(tree)
    except RecursionError:
        raise bad from None
    if not isinstance(result, list) or any(v not in (0, 1) for v in result):
        raise bad
    return result


def _repeat(items: list[int], times: int, bad: Exception) -> list[int]:
    if not 0 <= times <= MAX_LAYERS or len(items) * times > 4 * MAX_LAYERS:
        raise bad
    return items * times
