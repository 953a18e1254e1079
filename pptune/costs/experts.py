"""The expert-parallel settings of a preset GPU's node, and what rules them out
(profiles.py's analytic costs of a MoE model)."""

from __future__ import annotations

import dataclasses

from pptune.costmodel import presets
from pptune.costmodel.collectives import Fabric
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.simulate import Link


def a2a_sm_share(ex: ExpertParallel | None, fabric: Fabric | None) -> float | None:
    """The SMs DeepEP's kernels hold (``ExpertParallel.dispatch_sms``, megatron-core's 20
    unless said) as a share of the GPU's; None: the dispatcher runs NCCL's collectives, at
    the fabric's share."""
    if ex is None or ex.dispatcher is not Dispatcher.DEEPEP or fabric is None \
            or not fabric.sm_count:
        return None
    return min(1.0, ex.dispatch_sms / fabric.sm_count)


def preset_experts(fabric: Fabric, gpus_per_node: int,
                   experts: ExpertParallel | None) -> ExpertParallel:
    """The expert settings on the GPU's node as NCCL achieves it: pairwise copies
    over NVLink and one NIC for the all-to-all, the ring bus bandwidth for the
    etp group's collectives; on a switchless mesh the group's direct links."""
    ex = experts or ExpertParallel()
    return dataclasses.replace(
        ex,
        gpus_per_node=gpus_per_node,
        intra=Link(presets.P2P_LATENCY_INTRA_S, fabric.p2p_bytes_per_s),
        inter=Link(presets.P2P_LATENCY_INTER_S, fabric.nic_busbw_bytes_per_s),
        etp_link=AllReduceLink(presets.ALLREDUCE_LATENCY_INTRA_S, fabric.ring_busbw_bytes_per_s),
        mesh_link_bytes_per_s=fabric.mesh_link_bytes_per_s,
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
