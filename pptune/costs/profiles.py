"""Cost sources: a probe profile file, or the analytic presets.

Turns a ``Profile`` (pydantic, the file format) into the planner's plain
``CostTable`` and builds analytic profiles from model and GPU presets.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TypeVar

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.ops import Attention
from pptune.costmodel.search import CostTable, LayerCosts
from pptune.costmodel.simulate import Link
from pptune.errors import BadInput
from pptune.schemas import (
    DeviceInfo,
    Layer,
    LayerCost,
    LinkPair,
    Links,
    LinkSpec,
    ModelInfo,
    Profile,
)

DEFAULT_PROFILE_FILE = "pptune-profile.json"
DEFAULT_MICRO_BATCH_SIZES = (1, 2, 4, 8)
ATTENTION_KINDS = tuple(a.value for a in Attention)

T = TypeVar("T")


def _preset(kind: str, table: Mapping[str, T], name: str) -> T:
    try:
        return table[name]
    except KeyError:
        raise BadInput(f"unknown {kind} preset {name!r}; choose one of: {', '.join(table)}") from None


def model_preset(name: str) -> presets.ModelShape:
    return _preset("model", presets.MODELS, name)


def gpu_preset(name: str) -> presets.GpuSpec:
    return _preset("GPU", presets.GPUS, name)


def preset_links(gpu: presets.GpuSpec) -> Links:
    return Links(
        intra_node=LinkPair(
            p2p=LinkSpec(latency_s=presets.P2P_LATENCY_INTRA_S, bytes_per_s=gpu.nvlink_bytes_per_s),
            allreduce=LinkSpec(
                latency_s=presets.ALLREDUCE_LATENCY_INTRA_S, bytes_per_s=gpu.nvlink_bytes_per_s
            ),
        ),
        inter_node=LinkPair(
            p2p=LinkSpec(latency_s=presets.P2P_LATENCY_INTER_S, bytes_per_s=gpu.ib_bytes_per_s),
            allreduce=LinkSpec(
                latency_s=presets.ALLREDUCE_LATENCY_INTER_S, bytes_per_s=gpu.ib_bytes_per_s
            ),
        ),
    )


def analytic_profile(
    model: str | presets.ModelShape,
    gpu: str,
    micro_batch_sizes: tuple[int, ...] | list[int] = DEFAULT_MICRO_BATCH_SIZES,
    tp: int = 1,
    efficiency: float | None = presets.DEFAULT_EFFICIENCY,
    sequence_parallel: bool = False,
    attention: str = "flash",
    tp_comm_overlap: bool = False,
    experts: ExpertParallel | None = None,
    recompute_modules: frozenset[str] = frozenset(),
) -> Profile:
    """Per-layer costs of a preset (or any ModelShape) on a GPU preset.

    ``efficiency`` None: each GEMM's from the per-op model; else one fraction
    of peak for every GEMM. ``attention``: flash or eager (unfused).
    ``experts``: expert parallelism of a MoE model (its all-to-all over the
    GPU's NVLink and NIC unless the settings name links). ``recompute_modules``:
    Megatron-core's selective recomputation priced into the layers."""
    shape = model if isinstance(model, presets.ModelShape) else model_preset(model)
    model = shape.name
    spec = gpu_preset(gpu)
    if efficiency is not None and not 0 < efficiency <= 1:
        raise BadInput(f"--efficiency must be in (0, 1], got {efficiency}")
    if attention not in ATTENTION_KINDS:
        raise BadInput(f"--attention must be one of {', '.join(ATTENTION_KINDS)} (got {attention!r})")
    if tp < 1:
        raise BadInput(f"--tp must be >= 1, got {tp}")
    if shape.heads % tp:
        raise BadInput(
            f"--tp {tp} does not divide the {shape.heads} attention heads of {model}"
        )
    ex = preset_experts(spec, experts) if shape.moe else None
    if ex is not None:
        problem = expert_problem(shape, ex)
        if problem:
            raise BadInput(problem)
    try:
        layers = analytic_layers(
            shape, spec, list(micro_batch_sizes), tp=tp, efficiency=efficiency,
            flash_attention=Attention(attention) is Attention.FLASH,
            tp_allreduce=(presets.ALLREDUCE_LATENCY_INTRA_S, spec.nvlink_bytes_per_s),
            sequence_parallel=sequence_parallel and tp > 1, tp_comm_overlap=tp_comm_overlap,
            experts=ex, recompute_modules=recompute_modules,
        )
    except ValueError as exc:
        raise BadInput(f"{model}: {exc}") from None
    return Profile(
        source="analytic",
        model=ModelInfo(
            name=model, seq_len=shape.seq_len, global_batch=shape.global_batch,
            hidden_size=shape.hidden, num_blocks=shape.num_blocks,
            experts=shape.experts or None, top_k=shape.top_k if shape.moe else None,
        ),
        device=DeviceInfo(name=gpu, memory_bytes=spec.memory_bytes, peak_flops=spec.peak_flops),
        links=preset_links(spec),
        param_dtype_bytes=2,
        layers=[
            Layer(
                name=layer.name,
                param_bytes=layer.param_bytes,
                expert_param_bytes=layer.expert_param_bytes,
                per_micro_batch={
                    str(b): LayerCost(
                        fwd_s=c.fwd_s, bwd_s=c.bwd_s, wgrad_s=c.wgrad_s,
                        act_bytes=c.act_bytes, out_bytes=c.out_bytes,
                        fwd_a2a_s=c.fwd_a2a_s, bwd_a2a_s=c.bwd_a2a_s,
                    )
                    for b, c in layer.per_micro_batch.items()
                },
            )
            for layer in layers
        ],
        notes=[
            f"analytic: {model} on {gpu}, tp={tp}"
            + (" with sequence parallelism" if sequence_parallel and tp > 1 else "")
            + (", tensor-parallel communication overlapped" if tp_comm_overlap and tp > 1 else "")
            + f", {attention} attention, GEMM efficiency "
            + (f"{efficiency:g}" if efficiency is not None else "per shape")
            + f" of peak {spec.peak_flops / 1e12:g} TFLOP/s; links from the {gpu} spec sheet"
            + (f"; experts: ep={ex.ep}, etp={ex.etp}, routing imbalance {ex.imbalance:g}"
               if ex is not None else "")
        ],
    )


def cost_table(profile: Profile, tp: int = 1, tp_in_costs: int = 1) -> CostTable:
    """The planner's plain view of a profile.

    A measured profile is for tp=1; asking for tp>1 divides compute, memory
    and sends by tp (linear scaling, an approximation stated on stderr).
    """
    scale = tp / tp_in_costs if tp_in_costs != tp else 1.0
    sizes = profile.micro_batch_sizes()
    by_mb = {}
    experts = any(layer.expert_param_bytes for layer in profile.layers)
    for b in sizes:
        cs = [layer.cost(b) for layer in profile.layers]
        a2a = any(c.fwd_a2a_s or c.bwd_a2a_s for c in cs)
        by_mb[b] = LayerCosts(
            fwd_s=[c.fwd_s / scale for c in cs],
            bwd_s=[c.bwd_s / scale for c in cs],
            wgrad_s=[c.wgrad_s / scale for c in cs],
            act_bytes=[c.act_bytes / scale for c in cs],
            out_bytes=[c.out_bytes / scale for c in cs],
            fwd_a2a_s=[c.fwd_a2a_s for c in cs] if a2a else (),
            bwd_a2a_s=[c.bwd_a2a_s for c in cs] if a2a else (),
        )
    links = profile.links

    def p2p(spec: LinkSpec) -> Link:
        return Link(spec.latency_s, spec.bytes_per_s)

    def ar(spec: LinkSpec) -> AllReduceLink:
        return AllReduceLink(spec.latency_s, spec.bytes_per_s)

    return CostTable(
        names=[layer.name for layer in profile.layers],
        param_bytes=[layer.param_bytes / scale for layer in profile.layers],
        param_dtype_bytes=profile.param_dtype_bytes,
        by_mb=by_mb,
        seq_len=profile.model.seq_len,
        memory_bytes=profile.device.memory_bytes,
        p2p_intra=p2p(links.intra_node.p2p),
        p2p_inter=p2p(links.inter_node.p2p),
        ar_intra=ar(links.intra_node.allreduce),
        ar_inter=ar(links.inter_node.allreduce),
        expert_param_bytes=[layer.expert_param_bytes / scale for layer in profile.layers]
        if experts else (),
    )


def preset_experts(gpu: presets.GpuSpec, experts: ExpertParallel | None) -> ExpertParallel:
    """The expert settings with the GPU's own NVLink and NIC for the all-to-all
    and NVLink for the etp group's collectives (the preset links)."""
    ex = experts or ExpertParallel()
    return dataclasses.replace(
        ex,
        intra=Link(presets.P2P_LATENCY_INTRA_S, gpu.nvlink_bytes_per_s),
        inter=Link(presets.P2P_LATENCY_INTER_S, gpu.ib_bytes_per_s),
        etp_link=AllReduceLink(presets.ALLREDUCE_LATENCY_INTRA_S, gpu.nvlink_bytes_per_s),
    )


def expert_problem(shape: presets.ModelShape, ex: ExpertParallel) -> str | None:
    """Why ``ex`` cannot place the model's experts, as one line naming the knob."""
    if shape.top_k > shape.experts:
        return (f"{shape.name} routes each token to {shape.top_k} of its {shape.experts} "
                f"experts; the top-k must be at most the experts")
    if shape.experts % ex.ep:
        return (f"--ep {ex.ep} does not divide the {shape.experts} routed experts of "
                f"{shape.name}; choose an ep that divides {shape.experts}")
    if shape.expert_ffn % ex.etp:
        return (f"--etp {ex.etp} does not divide the expert FFN width {shape.expert_ffn} of "
                f"{shape.name}")
    return None

