"""``--overlap-moe-expert-parallel-comm`` and the flags that go with it, as megatron-core
0.16.1 judges them (its ModelParallelConfig fields ``overlap_moe_expert_parallel_comm``,
``delay_wgrad_compute`` and ``ep_overlap_early_attn_memory_release``, checked by
``TransformerConfig.__post_init__``, megatron/core/transformer/transformer_config.py;
Megatron-LM core_v0.16.1 validate_args, megatron/training/arguments.py).

pptune prices the overlap as megatron-core's combined 1F1B order (schedule_orders.py
``combined``): each steady step's forward and backward run as one F&B pair whose
all-to-alls hide behind the other micro-batch's compute, weight gradients included
(sim_records.py ``overlapped_pair_s``). That bound is the order ``--delay-wgrad-compute``
gives megatron-core: ``TransformerLayerSchedulePlan.run``
(megatron/core/models/common/model_chunk_schedule_plan.py) runs the experts' weight
gradients (``mlp.backward_dw``) after launching the dispatch all-to-all's backward, which
without the flag waits for them inside the MLP backward. The pipeline and recomputation
asserts are rules.a2a_overlap_rule's; the CUDA graph one graphs.py's; the
CUDA_DEVICE_MAX_CONNECTIONS rules rules.connections_rule's.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.megatron.flags import FlagReader

OVERLAP = "--overlap-moe-expert-parallel-comm"
DELAY = "--delay-wgrad-compute"
CITE_CONFIG = "(megatron-core megatron/core/transformer/transformer_config.py __post_init__)"
SCHEDULE_PLAN = ("megatron/core/models/common/model_chunk_schedule_plan.py "
                 "TransformerLayerSchedulePlan.run")


def read_a2a_overlap(r: FlagReader, fields: dict[str, Any]) -> None:
    """megatron-core's refusals of the overlap and of the flags that need it, for any model
    (TransformerConfig checks them whatever the experts), and what pptune prices of them."""
    flags = r.flags
    overlap = flags.has(OVERLAP)
    dispatcher = r.text("--moe-token-dispatcher-type") or "allgather"
    ep = fields.get("ep") or 1
    if overlap:
        _overlap_rules(r, dispatcher, ep, fields.get("mtp_layers"))
    delay = flags.has(DELAY)
    if delay and not overlap:
        r.ctx.refuse("megatron-delay-wgrad",
                     f"{DELAY} without {OVERLAP}: megatron-core asserts "
                     "'overlap_moe_expert_parallel_comm must be enabled when enabling "
                     f"delay_wgrad_compute' {CITE_CONFIG}; add {OVERLAP} or drop {DELAY}")
    if delay and flags.has("--moe-use-legacy-grouped-gemm"):
        r.ctx.refuse("megatron-delay-wgrad",
                     f"{DELAY} with --moe-use-legacy-grouped-gemm: megatron-core asserts "
                     "'delay_wgrad_compute is not supported with legacy groupedgemm "
                     f"implementation' {CITE_CONFIG}; drop --moe-use-legacy-grouped-gemm")
    impl = r.text("--transformer-impl") or "transformer_engine"
    if delay and impl != "transformer_engine":
        r.ctx.refuse("megatron-delay-wgrad",
                     f"{DELAY} with --transformer-impl {impl}: Megatron-LM validate_args "
                     "asserts 'Delaying wgrad compute is only supported with transformer_engine "
                     "implementation' (megatron/training/arguments.py)")
    if flags.has("--ep-overlap-early-attn-memory-release") and not overlap:
        r.ctx.refuse("megatron-delay-wgrad",
                     f"--ep-overlap-early-attn-memory-release without {OVERLAP}: megatron-core "
                     "asserts 'overlap_moe_expert_parallel_comm must be enabled when enabling "
                     f"ep_overlap_early_attn_memory_release' {CITE_CONFIG}")
    if not overlap or not fields.get("num_experts") or ep <= 1:
        return
    if delay:
        r.ctx.note(f"{DELAY}: priced within the F&B pairs of {OVERLAP}, whose all-to-alls "
                   "hide behind the other micro-batch's compute, weight gradients included: "
                   "the order this flag gives megatron-core (the experts' weight gradients "
                   f"beside the dispatch all-to-all's backward, {SCHEDULE_PLAN}); the output "
                   "gradients it keeps until then are not counted in memory")
        return
    r.ctx.unmodelled("megatron-unmodelled-flag",
                     f"{OVERLAP} without {DELAY}: megatron-core then computes the experts' "
                     "weight gradients inside the MLP backward, so the dispatch all-to-all's "
                     "backward waits for them and hides behind the next forward MLP alone "
                     f"({SCHEDULE_PLAN}); pptune prices each F&B pair as if the other "
                     "micro-batch's whole compute hid the all-to-alls, so the predicted step "
                     f"may be optimistic; megatron-core's MoE README enables {OVERLAP} "
                     f"{DELAY} together")


def _overlap_rules(r: FlagReader, dispatcher: str, ep: int, mtp: int | None) -> None:
    """megatron-core's asserts on the experts, the dispatcher, MTP and precision."""
    problems = []
    if ep <= 1:
        problems.append("'overlap_moe_expert_parallel_comm is only supported with expert model "
                        "parallelism'")
    if dispatcher not in ("alltoall", "flex"):
        problems.append("'overlap_moe_expert_parallel_comm is supported with alltoall/flex "
                        "token dispatcher'")
    if mtp and mtp > 1:
        problems.append("'MTP layernum only supports 1 when enabling "
                        "overlap_moe_expert_parallel_comm.'")
    if r.flags.has("--moe-shared-expert-overlap"):
        problems.append("'disable moe_shared_expert_overlap when enabling "
                        "overlap_moe_expert_parallel_comm'")
    # the model's dtype (self.bf16 or self.fp16), which FP8 compute on a --bf16 model keeps
    if not (r.flags.has("--bf16") or r.flags.has("--fp16")):
        problems.append("'overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 "
                        "model'")
    for text in problems:
        r.ctx.refuse("megatron-moe-overlap", f"{OVERLAP}: megatron-core asserts {text} "
                     f"{CITE_CONFIG}")
