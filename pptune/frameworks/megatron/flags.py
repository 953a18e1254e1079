"""Megatron-LM's command line: the flags pptune reads, and an argparse-style parser.

Flag names follow megatron/training/arguments.py (argparse with
``allow_abbrev=False``, so only exact names count; the last of a repeated
flag wins). A flag for a new dimension is added here (to VALUE_FLAGS or
BOOL_FLAGS) and read in ``reader._fields``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pptune.frameworks.common.fields import MAX_COUNT, Ctx, whole_text
from pptune.frameworks.common.shell_state import holds_unresolved, unresolved

# Megatron-LM flags read here (mapped in _fields / _pipeline); others are noted as ignored
VALUE_FLAGS: tuple[str, ...] = (
    "--pipeline-model-parallel-size",
    "--tensor-model-parallel-size",
    "--context-parallel-size",
    "--num-layers",
    "--encoder-num-layers",  # num_layers without --num-layers (required.py)
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--micro-batch-size",
    "--global-batch-size",
    "--hidden-size",
    "--seq-length",
    "--num-attention-heads",
    "--ffn-hidden-size",
    "--hidden-dropout",
    "--attention-dropout",
    "--num-query-groups",
    "--cross-entropy-fusion-impl",
    "--vocab-size",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--recompute-granularity",
    "--recompute-method",
    "--recompute-num-layers",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--transformer-impl",
    "--attention-backend",
    "--pipeline-model-parallel-layout",
    "--mtp-num-layers",
    # context parallelism and FP8 (cp_fp8.py)
    "--cp-comm-type",
    "--hierarchical-context-parallel-sizes",
    "--fp8-format",
    "--fp8-recipe",
    "--fp4-format",
    "--fp4-recipe",
    # the precision-aware optimizer's state widths (widths.read_widths)
    "--main-grads-dtype",
    "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--max-position-embeddings",  # checked against --seq-length (reader._positions)
)
# flags that take every following word up to the next flag (argparse nargs="+"; the
# words kept space-separated)
LIST_FLAGS = ("--recompute-modules", "--cp-comm-type", "--hierarchical-context-parallel-sizes",
              "--cuda-graph-scope")
PASSTHROUGH = frozenset({"$@", "$*", "${@}", "${*}"})
BOOL_FLAGS: tuple[str, ...] = (
    "--use-distributed-optimizer",
    "--sequence-parallel",
    "--use-tp-pp-dp-mapping",
    "--bf16",
    "--fp16",
    "--swiglu",
    "--group-query-attention",
    "--recompute-activations",
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--use-flash-attn",
    "--no-overlap-p2p-communication",
    "--use-torch-fsdp2",
    "--overlap-grad-reduce",
    "--overlap-param-gather",
    "--overlap-moe-expert-parallel-comm",
    "--fp8-param-gather",
    "--fp4-param-gather",
    "--use-precision-aware-optimizer",
    "--grad-reduce-in-bf16",  # the gradient buffer in BF16 (widths.read_widths)
    "--cross-entropy-loss-fusion",
    "--no-bias-swiglu-fusion",
    "--no-gradient-accumulation-fusion",  # weight gradients unfused (reader._fields)
    "--tp-comm-overlap",  # Transformer Engine's TP overlap (reader._tp_comm_overlap)
)
# Mixture of experts, MTP and MLA (read in moe.py)
MOE_VALUE_FLAGS = (
    "--num-experts",
    "--expert-model-parallel-size",
    "--expert-tensor-parallel-size",
    "--moe-router-topk",
    "--moe-ffn-hidden-size",
    "--moe-shared-expert-intermediate-size",
    "--moe-layer-freq",
    "--moe-token-dispatcher-type",
    "--moe-router-load-balancing-type",
    "--moe-router-score-function",
    "--moe-expert-capacity-factor",
    "--moe-flex-dispatcher-backend",
    "--moe-deepep-num-sms",
    "--moe-router-num-groups",
    "--moe-router-group-topk",
    "--moe-router-dtype",  # the router's precision (moe_kernels.py: a note)
    "--q-lora-rank",
    "--kv-lora-rank",
    "--qk-head-dim",
    "--qk-pos-emb-head-dim",
    "--v-head-dim",
    "--kv-channels",
    "--position-embedding-type",
    "--normalization",
    "--window-size",  # sliding-window attention (window.py)
    "--window-attn-skip-freq",
)
MOE_BOOL_FLAGS = (
    "--moe-grouped-gemm",
    "--moe-permute-fusion",  # the fused (un)permutation pptune prices (moe.py)
    "--moe-pad-expert-input-to-capacity",
    "--moe-router-force-load-balancing",
    "--moe-shared-expert-overlap",
    "--moe-router-pre-softmax",
    "--moe-enable-deepep",
    "--multi-latent-attention",
    "--qk-layernorm",
    "--disable-bias-linear",
    "--add-qkv-bias",
    "--untie-embeddings-and-output-weights",
    "--moe-layer-recompute",  # deprecated: selective recomputation of the MoE layer
)
VALUE_FLAGS += MOE_VALUE_FLAGS
BOOL_FLAGS += MOE_BOOL_FLAGS
# CUDA graphs: megatron-core's --cuda-graph-impl (none, local, transformer_engine);
# --enable-cuda-graph and --external-cuda-graph are its older spellings of local and
# transformer_engine (graphs.py: not modelled, and Megatron-LM's refusals of them)
VALUE_FLAGS += ("--cuda-graph-impl", "--cuda-graph-scope", "--cuda-graph-warmup-steps")
BOOL_FLAGS += ("--enable-cuda-graph", "--external-cuda-graph",
               "--moe-pad-experts-for-cuda-graph-inference")
# the expert all-to-all overlap's companions (a2a.py) and the router's expert bias (moe.py)
BOOL_FLAGS += ("--delay-wgrad-compute", "--ep-overlap-early-attn-memory-release",
               "--moe-use-legacy-grouped-gemm", "--moe-router-enable-expert-bias")
# Megatron-FSDP and what validate_args checks beside it (fsdp.py)
VALUE_FLAGS += ("--data-parallel-sharding-strategy", "--ckpt-format", "--optimizer",
                "--check-weight-hash-across-dp-replicas-interval")
BOOL_FLAGS += ("--use-megatron-fsdp", "--hybrid-context-parallel",
               "--fsdp-manual-registration", "--use-nccl-ub",
               "--accumulate-allreduce-grads-in-fp32")

NOTED_FLAGS = {
    "--rampup-batch-size": "--rampup-batch-size ignored: checked at the final --global-batch-size",
}
# Megatron-FSDP's own state widths, flags of Megatron-LM releases after core_v0.16.1
# (megatron/training/arguments.py, "Megatron-FSDP Arguments")
_LATER = "not read (a Megatron-FSDP width of Megatron-LM releases after core_v0.16.1); "
_GRADS = (_LATER + "its gradients are priced at the width --bf16/--fp16 and --grad-reduce-in-bf16 "
          "give them (megatron/fsdp.py)")
UNMODELLED_FLAGS: dict[str, str] = {
    "--megatron-fsdp-main-grads-dtype": f"--megatron-fsdp-main-grads-dtype: {_GRADS}",
    "--megatron-fsdp-grad-comm-dtype": f"--megatron-fsdp-grad-comm-dtype: {_GRADS}",
    "--megatron-fsdp-main-params-dtype": "--megatron-fsdp-main-params-dtype: " + _LATER
    + "its main weights are priced in FP32",
    "--tp-comm-overlap-cfg": "--tp-comm-overlap-cfg: the file's userbuffers settings are not "
    "read; the overlap is priced with Transformer Engine's defaults (costmodel/tp_overlap.py)",
    # hybrid (Mamba) models, which the Hugging Face reader refuses: read, the rest of the
    # file is still checked, but its step and memory are not this model's
    **{flag: f"{flag}: hybrid models' Mamba (state-space) layers are not modelled; every "
       "layer is priced as a transformer block, so step and memory are not this model's"
       for flag in ("--is-hybrid-model", "--hybrid-override-pattern", "--hybrid-layer-pattern")},
    "--moe-latent-size": "--moe-latent-size: the experts' latent projection is not modelled; "
    "expert GEMMs are priced at the hidden size",
}
# the flags above that core_v0.16.1 does not define (known_flags.py)
LATER_FLAGS = frozenset({"--megatron-fsdp-main-grads-dtype", "--megatron-fsdp-grad-comm-dtype",
                         "--megatron-fsdp-main-params-dtype", "--hybrid-layer-pattern"})
# torchrun / torch.distributed.launch, and the deepspeed launcher (per node)
NODES_FLAGS = ("--nnodes", "--num_nodes", "--num-nodes")
PER_NODE_FLAGS = ("--nproc_per_node", "--nproc-per-node", "--num_gpus", "--num-gpus")


@dataclass
class Flagged:
    """Flags of one command: every occurrence's value (None for a bare flag)."""

    values: dict[str, list[str | None]] = field(default_factory=dict)
    unknown: list[str] = field(default_factory=list)

    def has(self, name: str) -> bool:
        return name in self.values


def forwards(words: list[str], bools: tuple[str, ...] = BOOL_FLAGS) -> bool:
    """Whether the command passes on words pptune cannot see: the script's own arguments
    ("$@") or an unresolved shell reference standing where a flag would (not a flag's
    value), which may expand to flags."""
    for i, word in enumerate(words):
        if not unresolved(word):
            continue
        before = words[i - 1] if i else ""
        if word in PASSTHROUGH or not before.startswith("--") or "=" in before \
                or before in bools:
            return True
    return False


def supplied_elsewhere(flags: Flagged, forwarded: bool) -> bool:
    """Whether flags the command does not show may still reach parse_args: words it
    forwards (``forwards``, or a model's settings for a launcher to source), a
    checkpoint's arguments (--use-checkpoint-args) or a --yaml-cfg."""
    return forwarded or flags.has("--use-checkpoint-args") or flags.has("--yaml-cfg")


def parse_flags(words: list[str], bools: tuple[str, ...] = BOOL_FLAGS) -> Flagged:
    """argparse-style: ``--flag value``, ``--flag=value``; a bare ``--flag`` is boolean."""
    out = Flagged()
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--") or word == "--":
            continue
        name, eq, inline = word.partition("=")
        value: str | None = None
        if eq:
            value = inline
        elif name in LIST_FLAGS:
            start = i
            # up to the next flag, or the script's own arguments ("$@", which a shell
            # expands to the flags it was called with)
            while i < len(words) and not words[i].startswith("--") and words[i] not in PASSTHROUGH:
                i += 1
            value = " ".join(words[start:i]) if i > start else None
        elif name not in bools and i < len(words) and not words[i].startswith("--"):
            value = words[i]
            i += 1
        seen = out.values.setdefault(name, [])
        seen.append(value)
        known = (name in VALUE_FLAGS or name in bools or name in NOTED_FLAGS
                 or name in UNMODELLED_FLAGS or name in LIST_FLAGS)
        if not known and len(seen) == 1:  # its first time (a list scan was quadratic)
            out.unknown.append(name)
    return out


class FlagReader:
    """Values of one command's flags, with the notes and errors a reader gives."""

    def __init__(self, ctx: Ctx, flags: Flagged) -> None:
        self.ctx = ctx
        self.flags = flags

    def text(self, name: str) -> str | None:
        """Last value of ``name``; None when absent or an unresolved shell reference."""
        seen = self.flags.values.get(name)
        if not seen:
            return None
        value = seen[-1]
        if value is None:
            raise self.ctx.bad(f"{name} has no value; expected {name} N")
        distinct = list(dict.fromkeys(v for v in seen if v is not None))
        if len(distinct) > 1:
            self.ctx.note(f"{name} given {len(seen)} times ({', '.join(distinct[:4])}); "
                          f"Megatron-LM uses the last, {value}")
        if holds_unresolved(value):
            self.ctx.note(f"{name} is {value[:40]}, which pptune cannot resolve without running "
                          "the script; left unset")
            return None
        return value

    def number(self, name: str, minimum: int = 1, maximum: int = MAX_COUNT,
               cap: int | None = None) -> int | None:
        value = self.text(name)
        if value is None:
            return None
        return whole_text(self.ctx, name, value, minimum=minimum, maximum=maximum,
                          fix=f"set {name} to a whole number >= {minimum}", cap=cap)
