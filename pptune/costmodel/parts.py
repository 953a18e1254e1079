"""A layer's time split by what it is made of: the per-op model's ops, by kind.

Every op of the per-op model (ops.py, moe.py, attention.py) has a kind; its
time (and its kernels' launches) belongs to one *part* of the layer:

==========================  ============================================  ==============
part                        ops                                           rate group
==========================  ============================================  ==============
``gemm``                    weight and score GEMMs (``Kind.GEMM``)        compute
``attention``               fused attention kernels (``Kind.ATTENTION``)  compute
``memory-bound``            norms, activations, residuals, losses         memory
                            (``Kind.MEMORY``)
``launch``                  the launch gap of every kernel (ops.phase_s)  (fixed)
``expert all-to-all``       MoE dispatch and combine (``Kind.ALL_TO_ALL``) communication
``<group> communication``   collectives inside the layer (``Kind.COMM``),  communication
                            named by the group the op's name starts with
                            (``tp_attn``: ``tp``, ``etp_gather``: ``etp``)
==========================  ============================================  ==============

A collective op is named after its group (``tp_``, ``etp_``; a new dimension's
ops the same way), so a dimension added to the model shows up as its own
part without a list here. ``rate_group`` says which calibration factor
(calibration.py) scales a part; ``launch`` is fixed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pptune.costmodel.calibration import RateGroup
from pptune.costmodel.ops import Kind, OpCost, Phase, Rates

GEMM = "gemm"
ATTENTION = "attention"
MEMORY_BOUND = "memory-bound"
LAUNCH = "launch"
EXPERT_A2A = "expert all-to-all"
COMMUNICATION = "communication"  # the suffix of a collective's part


@dataclass(frozen=True)
class PartTimes:
    """One part's seconds in a layer's forward, input gradient and weight gradient."""

    part: str
    fwd_s: float = 0.0
    bwd_s: float = 0.0
    wgrad_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.wgrad_s


def part_of(op: OpCost) -> str:
    """The part an op's own time belongs to (module docstring)."""
    if op.kind is Kind.GEMM:
        return GEMM
    if op.kind is Kind.ATTENTION:
        return ATTENTION
    if op.kind is Kind.MEMORY:
        return MEMORY_BOUND
    if op.kind is Kind.ALL_TO_ALL:
        return EXPERT_A2A
    group = op.name.split("_", 1)[0] if "_" in op.name else op.name
    return f"{group} {COMMUNICATION}"


def rate_group(part: str) -> RateGroup | None:
    """The calibration factor that scales ``part`` (None: a fixed cost)."""
    if part in (GEMM, ATTENTION):
        return RateGroup.COMPUTE
    if part == MEMORY_BOUND:
        return RateGroup.MEMORY
    if part == LAUNCH:
        return None
    return RateGroup.COMMUNICATION


def layer_parts(ops: Iterable[OpCost], rates: Rates) -> tuple[PartTimes, ...]:
    """The ops' phase times by part, in first-seen order, launches apart.

    The parts of one phase sum to ops.phase_s of that phase: every op's time
    goes to its part and every kernel's launch to ``launch``.
    """
    acc: dict[str, list[float]] = {}
    column = {Phase.F: 0, Phase.B: 1, Phase.W: 2}
    for op in ops:
        c = column[op.phase]
        if op.time_s:
            acc.setdefault(part_of(op), [0.0, 0.0, 0.0])[c] += op.time_s
        if op.kernels:
            acc.setdefault(LAUNCH, [0.0, 0.0, 0.0])[c] += op.kernels * rates.launch_s
    return tuple(PartTimes(p, *v) for p, v in acc.items())
