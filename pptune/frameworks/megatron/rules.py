"""Megatron-LM's schedule rules, as check-config applies them (core_r0.16).

The non-interleaved schedule clamps its warm-up (``get_pp_rank_microbatches``),
so m < pp runs; the interleaved one
(``forward_backward_pipelining_with_interleaving``,
megatron/core/pipeline_parallel/schedules.py) needs the micro-batch group N
(default pp) within [pp, m] and ``m % N`` either 0 or >= pp; interleaving
needs pp > 1, or pp > 2 without p2p overlap (validate_args,
megatron/training/arguments.py).
"""

from __future__ import annotations

from pptune.costmodel.presets import GPUS
from pptune.costmodel.schedule_orders import microbatch_group
from pptune.costmodel.schedules import Schedule
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.batch_fix import megatron_count
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.megatron.knobs import knobs
from pptune.schemas import TrainingConfig


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add) -> None:
    p = cfg.pp
    if cfg.schedule is not Schedule.INTERLEAVED:
        return
    group = knobs(semantics).microbatch_group or p
    where = ("(megatron/core/pipeline_parallel/schedules.py "
             "forward_backward_pipelining_with_interleaving)")
    if not p <= group <= m:
        add("megatron-microbatch-group", "error",
            f"interleaved schedule with {m} micro-batches and a micro-batch group of {group} "
            f"per virtual stage (pp {p}): Megatron-LM raises 'The number of contiguous "
            f"micro-batches in a virtual pipeline stage should range in [PP={p} , M={m}]' "
            f"{where}; use {_fix(cfg, m, p, group)}", microbatches=m, pp=p, group=group)
    elif 0 < m % group < p:
        add("interleaved-m-not-multiple", "error",
            f"interleaved schedule: {m} micro-batches leave a remainder of {m % group} after "
            f"groups of {group}, below pp {p}: Megatron-LM raises 'The remainder of M ... "
            f"should be 0, or larger than or equal to the pipeline-parallel size' {where}; "
            f"use {megatron_count(cfg, m, m + group - m % group)}", microbatches=m, pp=p,
            group=group)


def _fix(cfg: TrainingConfig, m: int, p: int, group: int) -> str:
    """The fix for a micro-batch group outside [pp, m]: a group below pp is the group
    flag's to change, to the least group in [pp, m] leaving a remainder of 0 or >= pp
    (with pp micro-batches where m < pp); a group above m needs ``group`` micro-batches,
    which leave none. Counts are said as --global-batch-size (batch_fix.py)."""
    flag = "--microbatch-group-size-per-virtual-pipeline-stage"
    if group >= p:
        return megatron_count(cfg, m, group)
    if m < p:
        return f"{flag} {p} with {megatron_count(cfg, m, p)}"
    least = next(g for g in range(p, m + 1) if m % g == 0 or m % g >= p)  # g = m leaves 0
    return f"{flag} {least}"


def unsimulated_group(cfg: TrainingConfig, m: int, semantics: Semantics) -> str | None:
    """A stated micro-batch group other than the one pptune simulates for (pp, m): pp
    where it divides m, else the least valid one (schedule_orders.microbatch_group)."""
    group = knobs(semantics).microbatch_group
    if cfg.schedule is not Schedule.INTERLEAVED or group is None:
        return None
    simulated = microbatch_group(cfg.pp, m)
    if simulated is None or group == simulated:
        return None
    return (f"--microbatch-group-size-per-virtual-pipeline-stage {group}; pptune simulates "
            f"{m} micro-batches on pp {cfg.pp} in groups of {simulated}")


def interleave_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """validate_args: interleaving needs pp > 1, or pp > 2 with --no-overlap-p2p-communication."""
    if cfg.schedule is not Schedule.INTERLEAVED:
        return
    overlap = knobs(semantics).overlap_p2p
    floor = 1 if overlap else 2
    if cfg.pp <= floor:
        add("megatron-interleaved-pp", "error",
            f"interleaved schedule with pp {cfg.pp}: Megatron-LM validate_args requires the "
            f"pipeline-model-parallel size to be greater than {floor}"
            + ("" if overlap else " without p2p overlap")
            + " (megatron/training/arguments.py)", pp=cfg.pp)


def a2a_overlap_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """--overlap-moe-expert-parallel-comm: megatron-core 0.16 TransformerConfig asserts a
    virtual pipeline with pp > 1 and no full recomputation (transformer_config.py); not
    judged where a refused layout leaves the virtual stages unknown (Knobs)."""
    if not cfg.a2a_overlap:
        return
    if (cfg.pp > 1 and cfg.schedule is not Schedule.INTERLEAVED
            and not knobs(semantics).virtual_unknown):
        add("megatron-a2a-overlap", "error",
            f"--overlap-moe-expert-parallel-comm with pp {cfg.pp} and no virtual pipeline: "
            "megatron-core asserts 'If enabling EP A2A overlap, "
            "virtual_pipeline_model_parallel_size must be specified when "
            "pipeline_model_parallel_size > 1' (transformer_config.py); add "
            "--num-virtual-stages-per-pipeline-rank", pp=cfg.pp)
    if cfg.recompute == "full":
        add("megatron-a2a-overlap", "error",
            "--overlap-moe-expert-parallel-comm with full recomputation: megatron-core asserts "
            "'disable full recomputation when enabling overlap_moe_expert_parallel_comm' "
            "(transformer_config.py)")
    if cfg.mtp_layers == 1 and cfg.pp == 1:
        add("megatron-a2a-overlap", "error",
            "--overlap-moe-expert-parallel-comm with an MTP layer and no pipeline: megatron-core "
            "asserts 'Pipeline model parallel size must be larger than 1 when enabling "
            "overlap_moe_expert_parallel_comm with MTP layer' (transformer_config.py)")


def overlap_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """--overlap-param-gather: validate_args asserts the distributed optimizer or
    Megatron-FSDP, and --overlap-grad-reduce (megatron/training/arguments.py)."""
    if not cfg.overlap_param_gather:
        return
    if not cfg.sharded_optimizer and not knobs(semantics).megatron_fsdp:
        add("megatron-overlap-param-gather", "error",
            "--overlap-param-gather without --use-distributed-optimizer or "
            "--use-megatron-fsdp: Megatron-LM validate_args asserts '--overlap-param-gather "
            "only supported with distributed optimizer or megatron fsdp' "
            "(megatron/training/arguments.py)")
    if not cfg.overlap_grad_reduce:
        add("megatron-overlap-param-gather", "error",
            "--overlap-param-gather without --overlap-grad-reduce: Megatron-LM validate_args "
            "asserts 'Must use --overlap-param-gather with --overlap-grad-reduce' "
            "(megatron/training/arguments.py)")


BLACKWELL = "GPUs before Blackwell (get_device_arch_version() < 10)"
CONNECTIONS_ONE = ("'Using tensor model parallelism or context parallelism require setting the "
                   "environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1'")


def before_blackwell(gpu: str | None) -> bool | None:
    """Whether the GPU preset's compute capability is below 10 (None: no preset named):
    microscaling FP8 tensor cores (``GpuSpec.mxfp8``) arrived with SM100, Blackwell."""
    return None if gpu not in GPUS else not GPUS[gpu].mxfp8


def contested_connections(tp: int, cp: int, a2a_overlap: bool, gpu: str | None,
                          tp_comm_overlap: bool) -> bool:
    """Whether no CUDA_DEVICE_MAX_CONNECTIONS serves every overlap a plan is priced with:
    the expert all-to-all overlap (more than one connection) beside context parallelism
    or overlapped tensor-parallel collectives before Blackwell, where validate_args warns
    of the pair and 1 would favour their communication (``connections_rule``; a GPU that
    is no preset counts as one before Blackwell)."""
    return (a2a_overlap and before_blackwell(gpu) is not False
            and (cp > 1 or (tp > 1 and tp_comm_overlap)))


def connections_rule(cfg: TrainingConfig, semantics: Semantics, add: Add) -> None:
    """CUDA_DEVICE_MAX_CONNECTIONS as Megatron-LM core_v0.16.1 judges it
    (megatron/training/arguments.py validate_args): with tp or cp > 1 on GPUs before
    Blackwell it asserts 1, except that with Megatron-FSDP or torch FSDP2 (fsdp.py) and
    with --overlap-moe-expert-parallel-comm it only warns; from Blackwell on it checks
    nothing. The overlap wants more than one connection whatever the GPU (megatron-core
    megatron/core/transformer/moe/README.md: 'Requirements for EP A2A Overlap:
    expert_model_parallel_size > 1, CUDA_DEVICE_MAX_CONNECTIONS > 1'). Judged only for a
    launch script, whose exports are the job's environment."""
    k = knobs(semantics)
    if not k.launched or k.fsdp:
        return
    early = before_blackwell(cfg.gpu)
    sharded = cfg.tp > 1 or cfg.cp > 1
    sizes = " and ".join(f"{name} {size}" for name, size in (("tp", cfg.tp), ("cp", cfg.cp))
                         if size > 1)
    on = (f"on {cfg.gpu}, one of the {BLACKWELL}" if early else
          f"on {BLACKWELL} (the config names no GPU preset; --gpu sets one)")
    if cfg.a2a_overlap:
        said = []
        if sharded and early is not False:
            warns = (f"with {sizes} and --overlap-moe-expert-parallel-comm Megatron-LM "
                     f"validate_args warns {on} 'For Hopper and before, try not to use tensor "
                     "model parallelism or context parallelism with "
                     "overlap_moe_expert_parallel_comm'")
            doubt = _overlap_doubt(cfg, k.connections)
            if doubt is None:
                add("megatron-cuda-connections", "info", warns + (
                    f": the script's CUDA_DEVICE_MAX_CONNECTIONS={str(k.connections)[:20]} is the "
                    "choice that warning offers for favouring the expert all-to-all overlap "
                    "('you can set CUDA_DEVICE_MAX_CONNECTIONS to 1 or 32, which depends on "
                    "which parallelization you want to prioritize'); what it gives up, the "
                    "order 1 keeps between the tensor-parallel collectives and the GEMMs they "
                    "overlap (megatron/core/tensor_parallel/layers.py: 'Here we rely on "
                    "CUDA_DEVICE_MAX_CONNECTIONS=1'), pptune does not price: without "
                    "--tp-comm-overlap it counts those collectives exposed "
                    "(megatron/training/arguments.py)"))
            else:
                said.append(warns + " (CUDA_DEVICE_MAX_CONNECTIONS=1 favours the "
                            "tensor/context-parallel communication, "
                            "a larger value such as 32 the expert all-to-all overlap; "
                            f"megatron/training/arguments.py){doubt}")
        if k.connections == "1":
            said.append(
                "CUDA_DEVICE_MAX_CONNECTIONS=1 in the script with --overlap-moe-expert-"
                "parallel-comm: megatron-core's MoE README lists 'CUDA_DEVICE_MAX_CONNECTIONS "
                "> 1' among the overlap's requirements (one connection puts every stream's "
                "kernels in one hardware queue, in launch order), and pptune prices the "
                "all-to-alls as overlapped, so the predicted step may be optimistic; export "
                "32, as NVIDIA's MoE recipes do with the overlap")
        if said:
            add("megatron-cuda-connections", "warning", "; ".join(said))
        return
    if not sharded or early is False or k.connections == "1":
        return
    if k.connections is None:
        add("megatron-cuda-connections", "warning",
            f"{sizes} without CUDA_DEVICE_MAX_CONNECTIONS=1 in the script: Megatron-LM "
            f"validate_args asserts {CONNECTIONS_ONE} {on}; export it unless the job "
            "environment does (megatron/training/arguments.py)")
        return
    add("megatron-cuda-connections", "error" if early else "warning",
        f"CUDA_DEVICE_MAX_CONNECTIONS={k.connections[:20]} in the script with {sizes}: "
        f"Megatron-LM validate_args asserts {CONNECTIONS_ONE} {on} "
        "(megatron/training/arguments.py); export CUDA_DEVICE_MAX_CONNECTIONS=1, or add "
        "--overlap-moe-expert-parallel-comm if that is what the larger value is for")


def _overlap_doubt(cfg: TrainingConfig, connections: str | None) -> str | None:
    """None where the script has made the choice validate_args's tp-and-overlap warning
    asks for and pptune's price does not count on what it gives up: more than one
    connection, exported (the overlap's side), at cp 1 and without --tp-comm-overlap,
    whose hidden collectives (and context parallelism's ring exchange, priced behind
    attention: costmodel/context.py) may want the order of one; else why it stands."""
    if connections is None:
        return ("; the script exports no CUDA_DEVICE_MAX_CONNECTIONS: export 32 to favour "
                "the overlap as priced")
    if cfg.cp > 1:
        return (f"; with cp {cfg.cp} no CUDA_DEVICE_MAX_CONNECTIONS serves both: 1 breaks the "
                "all-to-all overlap (its requirement), a larger value may break the order "
                "context parallelism's ring exchange keeps with the attention pptune prices "
                "it hidden behind, so the step may be optimistic either way (cp 1, or no "
                "--overlap-moe-expert-parallel-comm, settles it)")
    if connections == "1":
        return ""  # the overlap's own requirement says it below
    if cfg.tp_comm_overlap:
        return ("; pptune prices the --tp-comm-overlap collectives hidden behind their GEMMs, "
                "which may want the order of one connection")
    return None
