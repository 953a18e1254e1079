"""Cost sources: a probe profile file, or the analytic presets.

Turns a ``Profile`` (pydantic, the file format) into the planner's plain
``CostTable`` and builds analytic profiles from model and GPU presets.
"""

from __future__ import annotations

import dataclasses

from pptune.costmodel import collectives, context, deepep, precision, presets
from pptune.costmodel.analytic import AnalyticLayer, analytic_layers
from pptune.costmodel.collectives import Collective, Fabric
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.context import CpComm
from pptune.costmodel.dispatch import runs_as
from pptune.costmodel.keys import CostKey, Precision, TableSource
from pptune.costmodel.layout import contiguous_group
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.memo import ByKey
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.ops import Attention
from pptune.costmodel.partition import MTP
from pptune.costmodel.rates import MAIN_GRAD_BYTES, Swiglu, WgradAccum
from pptune.costmodel.recompute_modules import searched_modules
from pptune.costmodel.search import CostTable, LayerCosts
from pptune.costmodel.simulate import Link
from pptune.costmodel.tp_overlap import TpOverlap
from pptune.costs.experts import a2a_sm_share as a2a_sm_share  # re-exported
from pptune.costs.experts import expert_problem as expert_problem
from pptune.costs.experts import preset_experts as preset_experts
from pptune.costs.fp8_cache import weight_cache_bytes
from pptune.costs.names import gpu_preset, model_preset
from pptune.errors import BadInput
from pptune.schemas import (
    DeviceInfo,
    FabricSpec,
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

def preset_links(gpu: presets.GpuSpec, nvls: bool = True) -> Links:
    """A GPU preset's links at what NCCL achieves (presets.py fabric): a pairwise
    NVLink copy and the ring bus bandwidth inside a node, one NIC across (one
    member a node), and the fabric itself for the planner's algorithm choice."""
    f = gpu.fabric_or_line()
    return Links(
        intra_node=LinkPair(
            p2p=LinkSpec(latency_s=presets.P2P_LATENCY_INTRA_S, bytes_per_s=f.p2p_bytes_per_s),
            allreduce=LinkSpec(
                latency_s=presets.ALLREDUCE_LATENCY_INTRA_S, bytes_per_s=f.ring_busbw_bytes_per_s
            ),
        ),
        inter_node=LinkPair(
            p2p=LinkSpec(latency_s=presets.P2P_LATENCY_INTER_S,
                         bytes_per_s=f.nic_busbw_bytes_per_s),
            allreduce=LinkSpec(
                latency_s=presets.ALLREDUCE_LATENCY_INTER_S, bytes_per_s=f.nic_busbw_bytes_per_s
            ),
        ),
        fabric=FabricSpec(
            ring_busbw_bytes_per_s=f.ring_busbw_bytes_per_s, p2p_bytes_per_s=f.p2p_bytes_per_s,
            nic_busbw_bytes_per_s=f.nic_busbw_bytes_per_s,
            nvls_busbw_bytes_per_s=f.nvls_busbw_bytes_per_s, nvls_min_ranks=f.nvls_min_ranks,
            nvls_enabled=f.nvls_enabled and nvls, collective_ctas=f.collective_ctas,
            sm_count=f.sm_count, mesh_link_bytes_per_s=f.mesh_link_bytes_per_s,
        ),
    )


def fabric_of(links: Links) -> Fabric | None:
    spec = links.fabric
    if spec is None:
        return None
    return Fabric(spec.ring_busbw_bytes_per_s, spec.p2p_bytes_per_s, spec.nic_busbw_bytes_per_s,
                  spec.nvls_busbw_bytes_per_s, spec.nvls_min_ranks, spec.nvls_enabled,
                  spec.collective_ctas, spec.sm_count, spec.mesh_link_bytes_per_s)


def _tp_link(fabric: Fabric, tp: int, sequence_parallel: bool, nbytes: float,
             gpus_per_node: int) -> tuple[float, float]:
    """(latency, bus bandwidth) of the tensor-parallel collectives: NCCL's pick for one
    hidden-state tensor (a reduce-scatter and an all-gather under sequence parallelism,
    else an all-reduce, NVLS where it qualifies) over the TP group as it sits on nodes
    of ``gpus_per_node`` (inside one, or across them over the NICs)."""
    if tp <= 1:
        return presets.ALLREDUCE_LATENCY_INTRA_S, fabric.ring_busbw_bytes_per_s
    kind = Collective.REDUCE_SCATTER if sequence_parallel else Collective.ALL_REDUCE
    link = collectives.link_for(kind, nbytes, contiguous_group(tp, gpus_per_node), fabric)
    return link.latency_s, link.busbw_bytes_per_s


def analytic_profile(
    model: str | presets.ModelShape,
    gpu: str | presets.GpuSpec,
    micro_batch_sizes: tuple[int, ...] | list[int] = DEFAULT_MICRO_BATCH_SIZES,
    tp: int = 1,
    efficiency: float | None = presets.DEFAULT_EFFICIENCY,
    sequence_parallel: bool = False,
    attention: str = "flash",
    tp_comm_overlap: bool = False,
    experts: ExpertParallel | None = None,
    recompute_modules: frozenset[str] = frozenset(),
    cp: int = 1,
    cp_comm: CpComm = CpComm.P2P,
    gemm_precision: Precision = Precision.BF16,
    gpus_per_node: int | None = None,
    nvls: bool = True,
    fp8_params: bool = False,
    tp_overlap: TpOverlap | None = None,
    layers_out: list[AnalyticLayer] | None = None,
    cross_entropy: CrossEntropy = CrossEntropy.FUSED,
    swiglu: Swiglu = Swiglu.FUSED,
    fp8_kernels: precision.Fp8Kernels = precision.Fp8Kernels.TE,
    wgrad_accum: WgradAccum = WgradAccum.BF16,
    torchao_recipe: precision.TorchaoRecipe = precision.TorchaoRecipe.TENSORWISE,
    fp8_recipe: precision.Fp8Recipe = precision.Fp8Recipe.DELAYED,
    main_grad_bytes: float = MAIN_GRAD_BYTES,
    fp8_casts: precision.Fp8Casts = precision.Fp8Casts.FUSED,
    shared_layers: ByKey | None = None,
) -> Profile:
    """Per-layer costs of a preset (or any ModelShape) on a GPU preset (or a GpuSpec:
    a calibrated one, pptune.costmodel.calibration).

    ``efficiency`` None: each GEMM's from the per-op model; else one fraction of peak for every
    GEMM. ``attention``: flash or eager (unfused). ``cp``: context parallelism with ``cp_comm``
    (context.py) on a node of ``gpus_per_node`` (None: the GPU's NVLink domain);
    ``gemm_precision`` of the block GEMMs (precision.py), ``fp8_params``: FP8 weights (no cached
    copies); ``nvls``: NCCL may use NVLink SHARP (recipes that set NCCL_NVLS_ENABLE=0 do not);
    ``tp_overlap``: Transformer Engine's per-GEMM overlap under ``tp_comm_overlap``
    (costmodel/tp_overlap.py; None: its defaults); ``cross_entropy``: the loss's kernels
    (costmodel/loss.py); ``fp8_kernels``: whose FP8 linears run (Transformer Engine's or
    torchao's, at ``torchao_recipe``, casts ``fp8_casts``: precision.py; TE's at ``fp8_recipe``,
    whose block scales add bytes); ``swiglu``: a gated MLP's activation kernels, ``wgrad_accum``: where
    weight gradients go, into a ``main_grad`` of ``main_grad_bytes`` (costmodel/rates.py
    Accumulation). ``experts``: expert parallelism of a MoE model (its all-to-all over the GPU's
    NVLink and NIC unless the settings name links). ``recompute_modules``: Megatron-core's
    selective recomputation priced into the layers. ``layers_out`` receives the analytic layers
    themselves (their times by part: costmodel.parts); ``shared_layers``: layers priced
    alike by other calls given it, reused (analytic.analytic_layers)."""
    shape = model if isinstance(model, presets.ModelShape) else model_preset(model)
    model = shape.name
    spec = gpu if isinstance(gpu, presets.GpuSpec) else gpu_preset(gpu)
    gpu = spec.name
    if efficiency is not None and not 0 < efficiency <= 1:
        raise BadInput(f"--efficiency must be in (0, 1], got {efficiency}")
    if attention not in ATTENTION_KINDS:
        raise BadInput(f"--attention must be one of {', '.join(ATTENTION_KINDS)} (got {attention!r})")
    spec = spec.with_attention_kernel(attention)
    if tp < 1:
        raise BadInput(f"--tp must be >= 1, got {tp}")
    if shape.heads % tp:
        raise BadInput(
            f"--tp {tp} does not divide the {shape.heads} attention heads of {model}"
        )
    problems = precision.problems(gemm_precision, spec)
    if cp > 1 and not Attention(attention).fused:
        problems.append(f"--cp {cp} needs fused (flash or cudnn) attention, not --attention "
                        f"{attention}")
    problems += context.problems(shape.seq_len, shape.heads // tp, max(1, shape.kv_heads // tp),
                                 cp, cp_comm, tp=tp)
    gpn = gpus_per_node or spec.gpus_per_node
    fabric = spec.fabric_or_line() if nvls else spec.fabric_or_line().without_nvls()
    ex = preset_experts(fabric, gpn, experts) if shape.moe else None
    if ex is not None:
        problem = expert_problem(shape, ex)
        if problem:
            problems.append(problem)
        if ex.precision is not None:  # the routed experts' own (moe.py)
            problems += [p for p in precision.problems(ex.precision, spec) if p not in problems]
            if Precision.NVFP4 in (ex.precision, gemm_precision) and ex.precision != gemm_precision:
                problems.append(f"routed experts in {ex.precision.value} under "
                                f"{gemm_precision.value} blocks: NVFP4 is priced for every "
                                "linear or none (nvfp4.py); state one precision")
    if problems:
        raise BadInput("; ".join(problems))
    links = preset_links(spec, nvls)
    hidden = max(micro_batch_sizes) * shape.seq_len // cp * shape.hidden * 2
    cp_links = (context.local_links(cp, tp, gpn, fabric, presets.P2P_LATENCY_INTRA_S,
                                    presets.P2P_LATENCY_INTER_S) if cp > 1 else None)
    try:
        layers = analytic_layers(
            shape, spec, list(micro_batch_sizes), tp=tp, efficiency=efficiency,
            flash_attention=Attention(attention).fused,
            tp_allreduce=_tp_link(fabric, tp, sequence_parallel and tp > 1, hidden, gpn),
            sequence_parallel=sequence_parallel and tp > 1, tp_comm_overlap=tp_comm_overlap,
            experts=ex, recompute_modules=recompute_modules,
            cp=cp, cp_comm=cp_comm, cp_links=cp_links, gemm_precision=gemm_precision,
            tp_overlap=tp_overlap, tp_p2p=(presets.P2P_LATENCY_INTRA_S, fabric.p2p_bytes_per_s),
            cross_entropy=CrossEntropy(cross_entropy), swiglu=Swiglu(swiglu),
            fp8_kernels=precision.Fp8Kernels(fp8_kernels), fp8_params=fp8_params,
            wgrad_accum=WgradAccum(wgrad_accum), main_grad_bytes=main_grad_bytes,
            torchao_recipe=precision.TorchaoRecipe(torchao_recipe),
            fp8_recipe=precision.Fp8Recipe(fp8_recipe), fp8_casts=precision.Fp8Casts(fp8_casts),
            shared=shared_layers,
        )
    except ValueError as exc:
        raise BadInput(f"{model}: {exc}") from None
    if layers_out is not None:
        layers_out.extend(layers)
    kernels, recipe = precision.Fp8Kernels(fp8_kernels), precision.Fp8Recipe(fp8_recipe)

    def cache(name: str) -> float | None:
        """A block's (or MTP block's) cached FP8 weights on this rank (fp8_cache.py)."""
        i = (int(name[len("block"):]) if name.startswith("block") else
             shape.num_blocks + int(name[len(MTP):]) if name.startswith(MTP) else None)
        found = 0.0 if i is None else weight_cache_bytes(shape, i, tp, ex, gemm_precision,
                                                         fp8_params, kernels, recipe)
        return found or None
    # the blocks of a kind share one dict of costs (analytic_layers): validated once, each
    # layer given its own copies (a profile's costs may be edited layer by layer)
    costs: dict[int, dict[str, LayerCost]] = {}

    def per_micro_batch(layer: AnalyticLayer) -> dict[str, LayerCost]:
        if id(layer.per_micro_batch) not in costs:  # ``layers`` holds the dicts meanwhile
            costs[id(layer.per_micro_batch)] = {
                str(b): LayerCost(fwd_s=c.fwd_s, bwd_s=c.bwd_s, wgrad_s=c.wgrad_s,
                                  act_bytes=c.act_bytes, out_bytes=c.out_bytes,
                                  fwd_a2a_s=c.fwd_a2a_s, bwd_a2a_s=c.bwd_a2a_s)
                for b, c in layer.per_micro_batch.items()}
        return {b: c.model_copy() for b, c in costs[id(layer.per_micro_batch)].items()}
    # a tied head's matrix is the embedding's: one copy on a stage that holds both
    tied = shape.vocab * shape.hidden / tp * 2 if shape.tied_embeddings else 0.0
    return Profile(
        source="analytic",
        model=ModelInfo(
            name=model, seq_len=shape.seq_len, global_batch=shape.global_batch,
            hidden_size=shape.hidden, num_blocks=shape.num_blocks,
            experts=shape.experts or None, top_k=shape.top_k if shape.moe else None,
        ),
        device=DeviceInfo(name=gpu, memory_bytes=spec.memory_bytes, peak_flops=spec.peak_flops,
                          hbm_bytes_per_s=spec.hbm_bytes_per_s * spec.hbm_fraction),
        links=links,
        param_dtype_bytes=2,
        layers=[
            Layer(
                name=layer.name,
                param_bytes=layer.param_bytes,
                expert_param_bytes=layer.expert_param_bytes,
                cache_bytes=cache(layer.name),
                tied_param_bytes=tied if layer.name == "head" else 0.0,
                per_micro_batch=per_micro_batch(layer),
            )
            for layer in layers
        ],
        notes=[
            f"analytic: {model} on {gpu}, tp={tp}"
            + (" with sequence parallelism" if sequence_parallel and tp > 1 else "")
            + (", tensor-parallel communication overlapped" if tp_comm_overlap and tp > 1 else "")
            + (f", context-parallel {cp} ({cp_comm.value})" if cp > 1 else "")
            + (f", {gemm_precision.value} GEMMs" if gemm_precision is not Precision.BF16 else "")
            + f", {attention} attention" + (f" (at flash attention's rates: cuDNN's are not "
               f"measured on {gpu})" if spec.cudnn_unmeasured(attention) else
               spec.sdpa_said(attention)) + ", GEMM efficiency "
            + (f"{efficiency:g}" if efficiency is not None else "per shape")
            + f" of peak {spec.peak_flops / 1e12:g} TFLOP/s; links at what NCCL achieves on "
            f"{gpu} (pptune presets)"
            + (f"; experts: ep={ex.ep}, etp={ex.etp}, routing imbalance {ex.imbalance:g}, "
               f"{ex.dispatcher.value} dispatch" if ex is not None else "")
        ],
    )


def preset_tables(
    model: str | presets.ModelShape,
    gpu: str | presets.GpuSpec,
    micro_batch_sizes: tuple[int, ...] | list[int] = DEFAULT_MICRO_BATCH_SIZES,
    experts: ExpertParallel | None = None,
    profiles: dict[CostKey, Profile] | None = None,
    **options: object,
) -> TableSource:
    """A cost table per cost key (tp, cp, ep, etp, precision) of a model and GPU
    preset, built on first use; ``experts`` the MoE settings besides ep and etp
    (routing imbalance, dispatch precision), ``options`` as ``analytic_profile``
    takes them; ``profiles`` collects each key's profile as it is built."""
    shape = model if isinstance(model, presets.ModelShape) else model_preset(model)
    built: dict[CostKey, CostTable] = {}
    shared: ByKey = ByKey()  # the keys' layers priced alike (analytic_layers)

    def table(key: CostKey) -> CostTable:
        if not shape.moe and (key.ep != 1 or key.etp != 1):
            raise BadInput(f"{shape.name} has no expert layers to split ({key})")
        if key not in built:
            asked = experts or ExpertParallel()
            ex = (dataclasses.replace(asked, ep=key.ep, etp=key.etp,
                                      dispatcher=runs_as(asked.dispatcher, key.ep))
                  if shape.moe else None)

            def priced(**more: object) -> tuple[Profile, CostTable]:
                layers: list[AnalyticLayer] = []
                prof = analytic_profile(shape, gpu, micro_batch_sizes, tp=key.tp, cp=key.cp,
                                        gemm_precision=key.precision, experts=ex,
                                        layers_out=layers, shared_layers=shared,
                                        **{**options, **more})  # type: ignore[arg-type]
                parts = {b: tuple(layer.per_micro_batch[b].parts for layer in layers)
                         for b in prof.micro_batch_sizes()}
                table = cost_table(prof, tp=key.tp, tp_in_costs=key.tp)
                return prof, dataclasses.replace(
                    table, layer_parts=parts, a2a_sm_share=a2a_sm_share(ex, table.fabric),
                    dispatch_buffer_bytes=deepep.dispatch_buffer_bytes(ex, shape.hidden))

            prof, built[key] = priced()
            modules = () if options.get("recompute_modules") else searched_modules(
                shape, key.precision, ex.grouped_gemm if ex is not None else True)
            if modules:
                _, twin = priced(recompute_modules=frozenset(modules))
                built[key] = dataclasses.replace(built[key], modules_table=dataclasses.replace(
                    twin, recompute_modules=modules))
            if profiles is not None:
                profiles[key] = prof
        return built[key]

    return table


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
        split = any(c.split_bwd_s is not None or c.split_wgrad_s is not None for c in cs)
        by_mb[b] = LayerCosts(
            fwd_s=[c.fwd_s / scale for c in cs],
            bwd_s=[c.bwd_s / scale for c in cs],
            wgrad_s=[c.wgrad_s / scale for c in cs],
            act_bytes=[c.act_bytes / scale for c in cs],
            out_bytes=[c.out_bytes / scale for c in cs],
            fwd_a2a_s=[c.fwd_a2a_s for c in cs] if a2a else (),
            bwd_a2a_s=[c.bwd_a2a_s for c in cs] if a2a else (),
            # a layer the probe did not time split runs as its fused parts
            split_bwd_s=[(c.bwd_s if c.split_bwd_s is None else c.split_bwd_s) / scale
                         for c in cs] if split else (),
            split_wgrad_s=[(c.wgrad_s if c.split_wgrad_s is None else c.split_wgrad_s) / scale
                           for c in cs] if split else (),
        )
    links = profile.links

    def p2p(spec: LinkSpec) -> Link:
        return Link(spec.latency_s, spec.bytes_per_s)

    def ar(spec: LinkSpec) -> AllReduceLink:
        # a cross-node figure measured with G ranks a node is G NICs' worth (schemas.LinkSpec)
        return AllReduceLink(spec.latency_s, spec.bytes_per_s / (spec.ranks_per_node or 1))

    cache = [(layer.cache_bytes or 0.0) / scale for layer in profile.layers]
    return CostTable(
        names=[layer.name for layer in profile.layers],
        param_bytes=[layer.param_bytes / scale for layer in profile.layers],
        param_dtype_bytes=profile.param_dtype_bytes,
        tied_param_bytes=sum(layer.tied_param_bytes for layer in profile.layers) / scale,
        by_mb=by_mb,
        seq_len=profile.model.seq_len,
        memory_bytes=profile.device.memory_bytes,
        p2p_intra=p2p(links.intra_node.p2p),
        p2p_inter=p2p(links.inter_node.p2p),
        ar_intra=ar(links.intra_node.allreduce),
        ar_inter=ar(links.inter_node.allreduce),
        expert_param_bytes=[layer.expert_param_bytes / scale for layer in profile.layers]
        if experts else (),
        fabric=fabric_of(links),
        hbm_bytes_per_s=profile.device.hbm_bytes_per_s,
        cache_bytes=cache if any(cache) else None,
    )
