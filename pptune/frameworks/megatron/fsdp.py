"""Megatron-FSDP (``--use-megatron-fsdp``): the state its strategy shards, the rules
Megatron-LM applies to it, and the flags a script states it with.

Megatron-LM core_v0.16.1: ``--data-parallel-sharding-strategy`` (megatron/training/
arguments.py, default no_shard) shards the optimizer state (optim), then the gradients
(optim_grads), then the weights (optim_grads_params) over dp. ``validate_args`` asserts
``--ckpt-format fsdp_dtensor`` (and refuses that format without Megatron-FSDP),
CUDA_DEVICE_MAX_CONNECTIONS other than 1 (so the tensor-parallel rule that wants it 1
only warns), no ``--check-weight-hash-across-dp-replicas-interval`` with
optim_grads_params, no ``--hybrid-context-parallel``, no Muon optimizer, and
``--fsdp-manual-registration`` only with Megatron-FSDP and ``--use-nccl-ub``; each is
an error finding quoting it. ``--overlap-param-gather`` and ``--fp8-param-gather`` take
Megatron-FSDP in place of the distributed optimizer (rules.py, cp_fp8.py).

Priced as pptune's own shardings (``MEGATRON_FSDP``). Megatron-FSDP keeps BF16 weights
(sharded by optim_grads_params), FP32 main weights and Adam's moments (sharded), and
gradients sharded from optim_grads on, FP32 unless validate_args leaves them 16-bit
(``sixteen_bit_grads``) (param_and_grad_buffer.py ``_init_each_parameter_group_buffers``):
with 16-bit gradients optim_grads and optim_grads_params hold exactly ZeRO-2's and
ZeRO-3's bytes (sharding.py), with FP32 ones optim_grads_params is priced as FSDP (FP32
main weights, gradients and moments) with the BF16 weight shard beside its main weights
(``fsdp_model_weights``: ``WEIGHT_BYTES``, 2 + 4 + 4 + 8 = 18 bytes a parameter over
dp). Under --no-gradient-accumulation-fusion its sharded gradient buffers take each
BF16 weight gradient by a copy (megatron_fsdp.py ``_grad_acc``), whose time is priced
without it (``COPIED``); with the fusion its wgrad GEMMs write their gradients into the
buffer rather than add (``overwrite_main_grad``): 16-bit, the 2 bytes an element of
autograd's BF16 gradient (priced ``bf16``, exact), FP32 priced as an accumulation
(``OVERWRITTEN``). Where the gradients are sharded (optim_grads on) their
destination is an unsharded bucket of the gradient's width, which a backward keeps until
its queued reduce-scatters pass ``--suggested-communication-unit-size`` elements (at
least 1e9 unless given: ``GRAD_QUEUE_ELEMENTS``; two layers' buckets with
``--fsdp-double-buffer`` or ``--use-nccl-ub`` under optim_grads_params): counted in
memory, the queue and two of the largest layer's buckets at most, the stage's every
gradient at most (``fsdp_grad_queue_elements``, costmodel/sharding.py). Each transformer
layer's weights are gathered in every micro-batch's forward and backward, under a
pipeline too (megatron_fsdp.py ``_register_fsdp_hooks``: an FSDP unit, a TransformerLayer,
releases its weights after its forward and after its backward), and from optim_grads on
the gradients are reduce-scattered after every backward (``grad_reduce_every_bprop``).
check-config says how it prices a strategy: an info finding (``megatron-fsdp-priced``)
where that is Megatron-FSDP's own state, gathers and buckets (optim_grads with 16-bit
gradients, optim_grads_params: what ``--emit megatron`` writes), a warning
(``megatron-unmodelled-flag``) where it leaves state out (optim_grads' FP32 gradient
shard) or prices no_shard and optim as Megatron-LM's own data parallelism.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pptune.costmodel.search import Sharding
from pptune.costmodel.sharding import BF16_BYTES, FSDP_WEIGHT_BYTES
from pptune.frameworks.megatron.flags import Flagged, FlagReader

# --data-parallel-sharding-strategy as pptune's shardings: the optimizer state, then the
# gradients, then the weights (gathered per use) sharded over dp; optim_grads_params is
# ZeRO-3 where the gradients are 16-bit (its weight, gradient and state shards are then
# ZeRO-3's: 2 + 2 + 12 bytes a parameter over dp), else FSDP (FP32 gradients, as FSDP's)
MEGATRON_FSDP = {"optim": "zero1", "optim_grads": "zero2", "optim_grads_params": "fsdp"}
# optim_grads_params priced as FSDP: the FP32 main weights and the BF16 weight shard
WEIGHT_BYTES = FSDP_WEIGHT_BYTES + BF16_BYTES
# megatron_fsdp.py MegatronFSDP.__init__: the reduce-scatter queue's capacity, in elements
# (suggested_RS_queue_capacity), is --suggested-communication-unit-size where given, else
# max(1_000_000_000, twice a layer's elements or the bucket size): 1e9 for layers under 5e8
GRAD_QUEUE_ELEMENTS = 1_000_000_000
# the strategy a plan's sharding is written with (Megatron-LM's own distributed optimizer
# states ZeRO-1)
STRATEGY = {Sharding.ZERO2: "optim_grads", Sharding.ZERO3: "optim_grads_params",
            Sharding.FSDP: "optim_grads_params"}
CKPT_FORMAT = "fsdp_dtensor"
ARGS = "(megatron/training/arguments.py validate_args)"
GATHERS = ("each layer's weights gathered in every micro-batch's forward and backward and "
           "its gradients reduce-scattered after each backward")
# what pricing Megatron-FSDP as pptune's sharding counts, and leaves out
PRICED = {
    "zero3": "pptune's zero3, the state Megatron-FSDP keeps with 16-bit gradients (BF16 "
             "weight and gradient shards, FP32 main weights and Adam's moments: 16 bytes a "
             f"parameter over dp), {GATHERS}",
    "fsdp": "pptune's fsdp (FP32 gradients, reduced in FP32) with the BF16 weight shard "
            "Megatron-FSDP keeps beside its FP32 main weights (2 + 4 + 4 + 8 = 18 bytes a "
            f"parameter over dp; with --grad-reduce-in-bf16 its state is ZeRO-3's), {GATHERS}",
    "zero2": "pptune's zero2 (BF16 weights whole; gradients, FP32 main weights and Adam's "
             "moments sharded over dp; gradients reduce-scattered after each backward, the "
             "weights gathered after the step)",
    "zero1": "the distributed optimizer's ZeRO-1",
    "none": "no sharding",
}
# --no-gradient-accumulation-fusion under a sharded gradient buffer: megatron_fsdp.py
# ``_grad_acc`` copies each BF16 weight gradient into its bucket (``main_grad.copy_``)
COPIED = ("; not counted: the copy of each BF16 weight gradient into its gradient bucket "
          "(--no-gradient-accumulation-fusion: 2 + 4 bytes a weight element a micro-batch, "
          "2 + 2 with 16-bit gradients; megatron_fsdp.py _grad_acc)")
# what a sharded-gradient strategy's memory counts of its buckets, and leaves out
QUEUED = ("counted: the unsharded gradient buckets a backward keeps for their "
          "reduce-scatters, up to {queue} and two layers' more (megatron_fsdp.py _grad_acc, "
          "param_and_grad_buffer.py GradReducePipeline); not modelled: its weights' prefetch "
          "beyond the next layer (all_gather_params) and its other communication buffers")
# gradient accumulation fusion under a sharded gradient buffer: megatron_fsdp.py sets
# ``param.overwrite_main_grad`` (Transformer Engine's wgrad GEMM then runs with
# accumulate=False) and tensor_parallel/layers.py writes ``torch.matmul(..., out=main_grad)``
OVERWRITTEN = ("; its FP32 weight gradients priced as accumulated into main_grad by their "
               "GEMMs (8 bytes an element), where Megatron-FSDP's GEMMs write them into its "
               "gradient buckets (4)")
WIDE_GRADS = ("; not counted: its FP32 gradient shard (2 bytes a parameter over dp more "
              "than pptune's ZeRO-2, twice the bytes reduce-scattered, and its gradient "
              "buckets at 4 bytes an element, counted at 2; --grad-reduce-in-bf16 makes them "
              "16-bit)")


def sixteen_bit_grads(flags: Flagged, fields: dict[str, Any]) -> bool:
    """Whether Megatron-LM keeps and reduces gradients at 16 bits: validate_args keeps
    them in the parameters' dtype under --fp16 unless --accumulate-allreduce-grads-in-fp32,
    and under --bf16 with --grad-reduce-in-bf16 (or --main-grads-dtype bf16), the
    ``main_grads_dtype`` widths.py read; training.py hands that to Megatron-FSDP as
    grad_reduce_in_fp32."""
    return fields.get("main_grads_dtype") in ("fp16", "bf16") or (
        flags.has("--fp16") and not flags.has("--accumulate-allreduce-grads-in-fp32"))


def grad_queue(r: FlagReader, strategy: str) -> int:
    """The elements of unsharded gradient buckets a backward keeps queued for their
    reduce-scatters (module docstring): 0 where optim_grads_params double-buffers them
    (param_and_grad_buffer.py: --use-nccl-ub turns fsdp_double_buffer on, and
    ``_enforce_double_buffer_limit`` keeps two FSDP units' buckets), else
    --suggested-communication-unit-size, else ``GRAD_QUEUE_ELEMENTS``."""
    double = r.flags.has("--fsdp-double-buffer") or r.flags.has("--use-nccl-ub")
    if double and strategy == "optim_grads_params":
        return 0
    given = r.number("--suggested-communication-unit-size", maximum=2**62)  # a Python int
    return GRAD_QUEUE_ELEMENTS if given is None else given


def read_sharding(r: FlagReader, fields: dict[str, Any]) -> None:
    """``sharding`` (and FSDP's resharding) as the script states them, after the state
    widths (widths.py): --use-distributed-optimizer shards the optimizer state over dp
    (ZeRO-1); torch FSDP2 and Megatron-FSDP shard what their strategy says."""
    ctx, flags = r.ctx, r.flags
    plain = "zero1" if flags.has("--use-distributed-optimizer") else "none"
    if flags.has("--use-megatron-fsdp"):
        strategy = r.text("--data-parallel-sharding-strategy") or "no_shard"
        if strategy not in (*MEGATRON_FSDP, "no_shard"):
            raise ctx.bad(f"--data-parallel-sharding-strategy is {strategy[:40]!r}; Megatron-LM "
                          f"takes no_shard, {', '.join(MEGATRON_FSDP)}")
        sharding = MEGATRON_FSDP.get(strategy, plain)
        sixteen = sixteen_bit_grads(flags, fields)
        priced = PRICED[sharding] + (WIDE_GRADS if sharding == "zero2" and not sixteen else "")
        if sharding == "fsdp" and sixteen:
            sharding, priced = "zero3", PRICED["zero3"]
        if sharding in ("zero2", "zero3"):  # their 16-bit gradients are the sharding's own
            fields["main_grads_dtype"] = None
        if sharding == "fsdp":  # released after each use, pipeline or not; its BF16 shard
            fields["fsdp_reshard_after_forward"] = fields["fsdp_model_weights"] = True
        if sharding in ("zero2", "zero3", "fsdp") and fields.get("wgrad_accum") == "unfused":
            fields["wgrad_accum"], priced = "bf16", priced + COPIED  # a copy, not an add
        elif sharding in ("zero2", "zero3", "fsdp") and fields.get("wgrad_accum") == "fused":
            # the fused GEMMs write their bucket, not add into it: 16-bit, BF16's 2 bytes
            if sixteen:
                fields["wgrad_accum"] = "bf16"
            else:
                priced += OVERWRITTEN
        rest = "Megatron-FSDP's communication buckets and buffers are not modelled"
        if sharding in ("zero2", "zero3", "fsdp"):  # gradients sharded: queued in buckets
            queue = fields["fsdp_grad_queue_elements"] = grad_queue(r, strategy)
            rest = QUEUED.format(queue=f"{queue:,} elements" if queue else
                                 "none queued (its double buffer)")
        fields["sharding"] = sharding
        said = (f"--use-megatron-fsdp with --data-parallel-sharding-strategy {strategy} is "
                f"priced as {priced}; {rest}")
        if sharding in ("zero3", "fsdp") or (sharding == "zero2" and sixteen):
            ctx.priced("megatron-fsdp-priced", said)  # its own state, gathers and buckets
        else:  # FP32 gradients beside ZeRO-2's; no_shard and optim as Megatron-LM's own
            ctx.unmodelled("megatron-unmodelled-flag", said)
        return
    if flags.has("--use-torch-fsdp2"):
        ctx.unmodelled("megatron-unmodelled-flag",
                       "--use-torch-fsdp2 (torch FSDP2 inside Megatron-LM) is modelled as FSDP "
                       "full sharding; Megatron-LM's own overlap is not modelled")
        fields["sharding"] = "fsdp"
        return
    fields["sharding"] = plain


def fsdp_rules(r: FlagReader, env: Mapping[str, str], supplied: bool) -> None:
    """What validate_args refuses of Megatron-FSDP (and FSDP2's shared
    CUDA_DEVICE_MAX_CONNECTIONS assertion); ``env``: the script's variables;
    ``supplied``: flags may come from words out of sight ("$@", a --yaml-cfg), so a
    missing --ckpt-format is not refused."""
    ctx, flags = r.ctx, r.flags
    on = flags.has("--use-megatron-fsdp")
    given = flags.has("--ckpt-format")
    ckpt = r.text("--ckpt-format") if given else None  # None: absent, or unresolved
    if on and (ckpt not in (None, CKPT_FORMAT) or not (given or supplied)):
        ctx.refuse("megatron-fsdp-ckpt-format",
                   f"--use-megatron-fsdp with --ckpt-format {ckpt or 'torch_dist (the default)'}"
                   ": Megatron-LM asserts 'Megatron FSDP only supports fsdp_dtensor "
                   f"checkpoint format' {ARGS}; add --ckpt-format {CKPT_FORMAT}")
    if not on and ckpt == CKPT_FORMAT:
        ctx.refuse("megatron-fsdp-ckpt-format",
                   f"--ckpt-format {CKPT_FORMAT} without --use-megatron-fsdp: Megatron-LM "
                   "asserts '--ckpt-format fsdp_dtensor is only tested with Megatron FSDP.' "
                   f"{ARGS}; add --use-megatron-fsdp or choose another --ckpt-format")
    fsdp2 = flags.has("--use-torch-fsdp2")
    if (on or fsdp2) and env.get("CUDA_DEVICE_MAX_CONNECTIONS", "").strip() == "1":
        which = "--use-megatron-fsdp" if on else "--use-torch-fsdp2"
        ctx.refuse("megatron-fsdp-cuda-connections",
                   f"{which} with CUDA_DEVICE_MAX_CONNECTIONS=1 in the script: Megatron-LM "
                   "asserts 'FSDP always requires CUDA_DEVICE_MAX_CONNECTIONS value large than "
                   f"one' {ARGS}; unset it (with tp or cp > 1 validate_args then only warns)")
    if flags.has("--fsdp-manual-registration"):
        for flag, rule in (("--use-megatron-fsdp", "Megatron FSDP"),
                           ("--use-nccl-ub", "nccl-ub option")):
            if not flags.has(flag):
                ctx.refuse("megatron-fsdp-manual-registration",
                           f"--fsdp-manual-registration without {flag}: Megatron-LM asserts "
                           f"'FSDP manual registration is only supported with {rule}' {ARGS}; "
                           f"add {flag} or drop --fsdp-manual-registration")
    if not on:
        return
    strategy = r.text("--data-parallel-sharding-strategy")
    if strategy == "optim_grads_params" and flags.has(
            "--check-weight-hash-across-dp-replicas-interval"):
        ctx.refuse("megatron-fsdp-weight-hash",
                   "--check-weight-hash-across-dp-replicas-interval with Megatron-FSDP's "
                   "optim_grads_params: Megatron-LM "
                   "asserts 'check_weight_hash_across_dp_replicas_interval is not supported "
                   f"with optim_grads_params' {ARGS}; drop the interval")
    if flags.has("--hybrid-context-parallel"):
        ctx.refuse("megatron-fsdp-hybrid-cp",
                   "--hybrid-context-parallel with --use-megatron-fsdp: Megatron-LM asserts "
                   f"'Hybrid context parallelism not supported with Megatron FSDP' {ARGS}")
    optimizer = r.text("--optimizer") or "adam"
    if "muon" in optimizer:
        ctx.refuse("megatron-fsdp-muon",
                   f"--optimizer {optimizer[:40]} with --use-megatron-fsdp: Megatron-LM asserts "
                   f"'Muon optimizer does not support Megatron-FSDP for now.' {ARGS}")


def write_args(sharding: Sharding, fp16: bool) -> list[str]:
    """The flags that run ``sharding`` (ZeRO-2, ZeRO-3 or FSDP) as Megatron-FSDP: the
    strategy; the gradients' width as priced (16-bit for ZeRO-2/3, FP32 for FSDP:
    ``sixteen_bit_grads``); what validate_args asserts beside it (--ckpt-format
    fsdp_dtensor) and what NVIDIA's Megatron-FSDP user guide lists as required with it
    (the distributed optimizer, which megatron-core builds over Megatron-FSDP's buffers,
    optimizer/__init__.py; no gradient accumulation fusion, which validate_args warns
    Transformer Engine must support); and the data-parallel overlap Megatron-FSDP turns on
    itself for these strategies (megatron_fsdp.py: the gradients' always, the weights'
    gather with optim_grads_params)."""
    strategy = STRATEGY[sharding]
    if sharding is Sharding.FSDP:
        width = ["--accumulate-allreduce-grads-in-fp32"] if fp16 else []
    else:
        width = [] if fp16 else ["--grad-reduce-in-bf16"]
    return ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}", *width,
            "--use-distributed-optimizer", f"--ckpt-format {CKPT_FORMAT}",
            "--no-gradient-accumulation-fusion", "--overlap-grad-reduce",
            *(["--overlap-param-gather"] if strategy == "optim_grads_params" else [])]
