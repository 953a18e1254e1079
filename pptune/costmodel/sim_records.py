"""What the simulator reads and returns: per-stage costs, links, events and
per-device statistics (plain records, re-exported by simulate.py).

Op times, per micro-batch, from the stage's ``StageCost``:

- ``F``: ``fwd_s + fwd_comm_s``; ``B``: ``bwd_s + bwd_comm_s`` (plus
  ``wgrad_s`` where backward is not split); ``W``: ``wgrad_s``; ``BW``:
  ``bwd_s + wgrad_s + bwd_comm_s``. Where backward is split, B and W take
  ``split_bwd_s`` / ``split_wgrad_s`` when the stage has them: what a
  runtime's split backward costs, more than the fused one (torch's
  ``stage_backward_weight`` runs one autograd pass per parameter group from
  the intermediates its B saved); a whole backward (BW, a pair's backward
  half) stays fused. ``fwd_comm_s`` / ``bwd_comm_s`` are the
  communication inside a stage's own forward / backward that its next
  compute waits on (the MoE dispatch and combine all-to-alls: the expert
  MLP needs its dispatched tokens, the next layer the combined output), run
  on a communication stream; alone, a chunk cannot overlap them with its
  own compute, so they add up (exposed).
- ``F&B`` (``overlapped_pair_s``): the pair runs the forward chunk's compute
  ``Fc`` and communication ``Fa`` and the backward chunk's ``Bc`` (input
  and weight gradient) and ``Ba`` on two streams, compute on one and
  communication on the other, each chunk's parts alternating as its data
  dependencies require. DeepSeek-V3's report (DeepSeek-AI 2024, sec. 3.2.1,
  fig. 4) cuts each chunk into attention, all-to-all dispatch, MLP and
  all-to-all combine and interleaves the two chunks so that one chunk's
  all-to-all runs during the other's compute, "both all-to-all and PP
  communication can be fully hidden". The pair can end no sooner than
  either stream's total work, nor than either chunk's own chain (its
  communication and compute alternate, never overlap each other)::

      F&B = max(Fc + Bc + (Fa + Ba) s, Fa + Ba, Fc + Fa, Bc + Ba)

  used as the pair's time, where ``s`` is the share of the SMs the
  communication kernels hold while they run (``StageCost.comm_sm_share``:
  NCCL's CTAs, collectives.Fabric; DeepSeek's own kernels take 20 of 132, report
  sec. 3.2.2), which the compute beside them does without. With ``Fa <= Bc``
  and ``Ba <= Fc`` (each chunk's all-to-all no longer than the other chunk's
  compute) it is ``Fc + Bc`` plus that share: the communication is hidden, the
  case the report describes. Where the components' sizes do not interleave
  that well the bound is optimistic. Without communication the pair costs the
  sum of its two chunks.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from pptune.costmodel.schedule_ops import Op
from pptune.costmodel.schedules import Schedule


@dataclass(frozen=True)
class StageCost:
    """Costs of one pipeline stage for one micro-batch."""

    fwd_s: float
    bwd_s: float  # input-gradient part of backward
    wgrad_s: float = 0.0  # weight-gradient part of backward
    act_bytes: float = 0.0  # activations kept from F until backward completes
    out_bytes: float = 0.0  # sent to the next stage (the gradient back has the same size)
    fwd_comm_s: float = 0.0  # communication the forward waits on (MoE all-to-alls)
    bwd_comm_s: float = 0.0  # communication the input-gradient backward waits on
    # B and W as a split backward runs them (torch's stage_backward_input /
    # stage_backward_weight, measured by the probe); None: bwd_s / wgrad_s
    split_bwd_s: float | None = None
    split_wgrad_s: float | None = None
    # the share of the SMs this stage's all-to-all kernels hold while they run, which
    # the compute of an F&B pair beside them does without (overlapped_pair_s)
    comm_sm_share: float = 0.0
    # the most bytes one backward of the stage re-creates at once by recomputation,
    # beyond ``act_bytes`` (table.LayerCosts.rerun_bytes); memory adds it to the peak
    rerun_bytes: float = 0.0

    @property
    def total_s(self) -> float:
        return self.fwd_s + self.bwd_s + self.wgrad_s

    @property
    def split_b_s(self) -> float:
        """B where backward is split: ``split_bwd_s``, else ``bwd_s``."""
        return self.bwd_s if self.split_bwd_s is None else self.split_bwd_s

    @property
    def split_w_s(self) -> float:
        """W where backward is split: ``split_wgrad_s``, else ``wgrad_s``."""
        return self.wgrad_s if self.split_wgrad_s is None else self.split_wgrad_s

    @staticmethod
    def summed(fwd_s: float, bwd_s: float, wgrad_s: float, act_bytes: float, out_bytes: float,
               fwd_comm_s: float, bwd_comm_s: float, split_bwd_s: float | None,
               split_wgrad_s: float | None, comm_sm_share: float,
               rerun_bytes: float) -> StageCost:
        """``StageCost(...)`` of every field, set at once (as ``longer`` copies): the
        search sums thousands of splits' stages (table.stage_costs), and a frozen
        dataclass's ``__init__`` sets each field through ``object.__setattr__``."""
        new = object.__new__(StageCost)
        new.__dict__.update(
            fwd_s=fwd_s, bwd_s=bwd_s, wgrad_s=wgrad_s, act_bytes=act_bytes, out_bytes=out_bytes,
            fwd_comm_s=fwd_comm_s, bwd_comm_s=bwd_comm_s, split_bwd_s=split_bwd_s,
            split_wgrad_s=split_wgrad_s, comm_sm_share=comm_sm_share, rerun_bytes=rerun_bytes)
        return new

    def longer(self, fwd_s: float, bwd_s: float) -> StageCost:
        """The stage with ``fwd_s`` more forward and ``bwd_s`` more input gradient (the
        split B with it). A copy of the fields, not ``dataclasses.replace``: the search
        lengthens every stage of thousands of plans (amax.py), and replace's per-call
        field walk was a tenth of a large search's time."""
        new = object.__new__(StageCost)
        fields = dict(self.__dict__)
        fields["fwd_s"] += fwd_s
        fields["bwd_s"] += bwd_s
        if fields["split_bwd_s"] is not None:
            fields["split_bwd_s"] += bwd_s
        new.__dict__.update(fields)
        return new

    def retimed(self, fwd_s: float, bwd_s: float) -> StageCost:
        """The stage with these forward and input-gradient times, the rest as it is: a
        copy of the fields, as ``longer`` (evaluate.with_comm retimes every stage of
        every plan whose data-parallel traffic runs inside its ops)."""
        new = object.__new__(StageCost)
        fields = dict(self.__dict__)
        fields["fwd_s"] = fwd_s
        fields["bwd_s"] = bwd_s
        new.__dict__.update(fields)
        return new

    def scaled(self, fwd: float, bwd: float, wgrad: float) -> StageCost:
        """The stage with its forward, input-gradient and weight-gradient times (the
        split ones with them) multiplied by these factors."""
        return dataclasses.replace(
            self, fwd_s=self.fwd_s * fwd, bwd_s=self.bwd_s * bwd, wgrad_s=self.wgrad_s * wgrad,
            split_bwd_s=None if self.split_bwd_s is None else self.split_bwd_s * bwd,
            split_wgrad_s=None if self.split_wgrad_s is None else self.split_wgrad_s * wgrad)


def overlapped_pair_s(fwd: StageCost, bwd: StageCost) -> float:
    """Time of an F&B pair: the forward of ``fwd``'s stage overlapped with the
    whole backward of ``bwd``'s (module docstring: DeepSeek-V3 sec. 3.2.1)."""
    fc, fa = fwd.fwd_s, fwd.fwd_comm_s
    bc, ba = bwd.bwd_s + bwd.wgrad_s, bwd.bwd_comm_s
    share = max(fwd.comm_sm_share, bwd.comm_sm_share)
    return max(fc + bc + (fa + ba) * share, fa + ba, fc + fa, bc + ba)


@dataclass(frozen=True)
class Link:
    """Alpha-beta link: ``latency_s + bytes / bytes_per_s``."""

    latency_s: float = 0.0
    bytes_per_s: float = math.inf

    def time_s(self, nbytes: float) -> float:
        return self.latency_s + nbytes / self.bytes_per_s


FREE_LINK = Link()


class Event(NamedTuple):
    device: int
    op: Op
    start_s: float
    end_s: float


class Transfer(NamedTuple):
    src: int
    dst: int
    op: Op  # the op whose output is sent (a pair's half: its F or its BW)
    start_s: float
    end_s: float


@dataclass
class DeviceStats:
    busy_s: float = 0.0
    idle_s: float = 0.0
    compute_end_s: float = 0.0
    allreduce_end_s: float = 0.0
    peak_inflight: int = 0
    peak_activation_bytes: float = 0.0
    exposed_comm_s: float = 0.0  # of busy_s: communication the compute waited on
    # of exposed_comm_s: its once-per-step data-parallel traffic past the pipeline's
    # last op (simulate.with_allreduce)
    dp_tail_s: float = 0.0


@dataclass
class SimResult:
    schedule: Schedule
    p: int
    m: int
    v: int
    step_time_s: float
    bubble_rate: float
    devices: list[DeviceStats]
    events: list[Event] = field(repr=False)
    transfers: list[Transfer] = field(repr=False)
    stage_grads_done_s: list[float] = field(default_factory=list, repr=False)

    @property
    def busiest_s(self) -> float:
        return max(d.busy_s for d in self.devices)


class DeadlockError(RuntimeError):
    """The op orders wait on each other (a schedule bug, never user input)."""


def uniform_stages(
    n: int, fwd_s: float, bwd_s: float, wgrad_s: float = 0.0, act_bytes: float = 0.0,
    out_bytes: float = 0.0, fwd_comm_s: float = 0.0, bwd_comm_s: float = 0.0,
) -> list[StageCost]:
    """``n`` identical stages (the textbook what-if)."""
    return [StageCost(fwd_s, bwd_s, wgrad_s, act_bytes, out_bytes, fwd_comm_s, bwd_comm_s)
            for _ in range(n)]
