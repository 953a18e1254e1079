"""The ops a pipeline schedule is made of, named, printable and parseable.

An op is one unit of compute a device runs for one micro-batch on one model
chunk (a global pipeline stage):

- ``F`` forward;
- ``B`` backward: the input-gradient part only in schedules that split the
  backward (zero-bubble, DualPipe), the whole backward otherwise;
- ``W`` the weight-gradient part of a split backward;
- ``BW`` a whole backward (input and weight gradients in one pass) inside a
  schedule that splits the others: torch.distributed.pipelining's
  ``FULL_BACKWARD`` ("B" in torch's listings, where "I" is the input part);
- ``F&B`` an overlapped pair: the forward of one micro-batch on one chunk
  and the whole backward of another micro-batch on another chunk, run
  together so that each hides the other's communication (DeepSeek-AI 2024,
  "DeepSeek-V3 Technical Report", sec. 3.2.1; torch's ``OVERLAP_F_B``).

Ops print as ``F3@2`` (kind, micro-batch, ``@`` stage) and ``F3@0&B1@3``
for a pair; ``parse_op`` reads them back. Inside the builders and the
simulator an op is a plain tuple of ints (``RawOp``) for speed:
``(kind, mb, stage)``, or ``(FB, f_mb, f_stage, b_mb, b_stage)`` for a pair.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import NamedTuple


class OpKind(str, Enum):
    F = "F"
    B = "B"
    W = "W"
    BW = "BW"
    FB = "F&B"


class Op(NamedTuple):
    kind: OpKind
    mb: int
    stage: int
    b_mb: int = -1  # F&B only: the micro-batch of the backward half
    b_stage: int = -1  # F&B only: the stage of the backward half

    def __str__(self) -> str:
        return self.label(with_stage=True)

    def label(self, with_stage: bool = False) -> str:
        """``F3`` / ``F3&B1``, or with stages ``F3@2`` / ``F3@0&B1@3``."""
        at = f"@{self.stage}" if with_stage else ""
        if self.kind is OpKind.FB:
            b_at = f"@{self.b_stage}" if with_stage else ""
            return f"F{self.mb}{at}&B{self.b_mb}{b_at}"
        return f"{self.kind.value}{self.mb}{at}"

    def halves(self) -> tuple[Op, ...]:
        """The ops this op runs: itself, or a pair's forward and whole backward."""
        if self.kind is OpKind.FB:
            return (Op(OpKind.F, self.mb, self.stage), Op(OpKind.BW, self.b_mb, self.b_stage))
        return (self,)


_OP_RE = re.compile(r"(BW|F|B|W)(\d+)@(\d+)")


def parse_op(text: str) -> Op:
    """The op ``str(op)`` printed: ``F3@2``, ``BW0@5``, ``F3@0&B1@3``."""
    parts = text.strip().split("&")
    found = [_OP_RE.fullmatch(part) for part in parts]
    if len(parts) == 1 and found[0]:
        kind, mb, stage = found[0].groups()
        return Op(OpKind(kind), int(mb), int(stage))
    if len(parts) == 2 and found[0] and found[1]:
        (fk, f_mb, f_st), (bk, b_mb, b_st) = found[0].groups(), found[1].groups()
        if fk == "F" and bk == "B":
            return Op(OpKind.FB, int(f_mb), int(f_st), int(b_mb), int(b_st))
    raise ValueError(
        f"not an op: {text[:40]!r}; expected KIND<micro-batch>@<stage> with KIND one of "
        "F, B, W, BW (e.g. F3@2), or a pair F<mb>@<stage>&B<mb>@<stage>"
    )


# Raw ops: plain int tuples, the builders' and the simulator's fast path.
RawOp = tuple[int, ...]
RAW_F, RAW_B, RAW_W, RAW_BW, RAW_FB = 0, 1, 2, 3, 4
RAW_KINDS = (OpKind.F, OpKind.B, OpKind.W, OpKind.BW, OpKind.FB)


def to_op(raw: RawOp) -> Op:
    """The named op for a raw tuple."""
    return Op(RAW_KINDS[raw[0]], *raw[1:])
