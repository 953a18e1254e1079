"""The launch a file states in a comment: ``# ... torchrun --nnodes N --nproc_per_node K``.

A torchtitan job file has no key for the GPU count: torchtitan takes the world size
from the launcher (torchrun's WORLD_SIZE; torchtitan/distributed/parallel_dims.py
``ParallelDims._validate`` asserts that the degrees multiply to it). ``recommend
--emit torchtitan`` writes the launch it planned for in a comment
(frameworks/torchtitan/writer.py), and so do users beside their keys; check-config
takes that launch's GPU count as the file's (a ``--gpus`` flag still wins), so that
degrees edited apart from it are a ``gpus-mismatch`` rather than a world inferred
from the degrees alone.

torchrun's own defaults (torch/distributed/run.py): ``--nnodes`` "1:1" (one node),
``--nproc-per-node`` "1"; a comment without ``--nproc_per_node`` (or its dashed
spelling) states no launch. A value that is no whole count (``$NNODES``, an elastic
range ``1:4``, ``gpu``) states none either, with a note; so do comments that name
launches of different GPU counts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pptune import limits
from pptune.frameworks.common.fields import Ctx

_COMMENT = re.compile(r"^[ \t]*#(.*\btorchrun\b.*)$", re.MULTILINE)
_OPTION = re.compile(r"--(nnodes|nproc[_-]per[_-]node)(?:=|[ \t]+)(\S+)")


@dataclass(frozen=True)
class StatedLaunch:
    """The nodes and processes per node a comment's torchrun launch names."""

    nodes: int
    per_node: int
    line: int  # 1-based, of the first comment that names it

    @property
    def gpus(self) -> int:
        return self.nodes * self.per_node

    def said(self) -> str:
        """Where the count comes from, as a finding or note names it."""
        return (f"the file's launch comment, line {self.line}: torchrun --nnodes {self.nodes} "
                f"--nproc_per_node {self.per_node}")


def stated_launch(text: str, ctx: Ctx) -> StatedLaunch | None:
    """The launch the file's comments state (module docstring); None where they state
    none, or launches of different GPU counts (with a note)."""
    found: list[StatedLaunch] = []
    for match in _COMMENT.finditer(text):
        line = text.count("\n", 0, match.start()) + 1
        options = {name.replace("-", "_"): value
                   for name, value in _OPTION.findall(match.group(1))}
        if "nproc_per_node" not in options:
            continue
        nodes, per_node = options.get("nnodes", "1"), options["nproc_per_node"]
        counts = [int(v) if v.isdigit() else 0 for v in (nodes, per_node)]
        if min(counts) < 1 or counts[0] * counts[1] > limits.MAX_GPUS:
            ctx.note(f"the launch comment on line {line} (torchrun --nnodes {nodes[:20]} "
                     f"--nproc_per_node {per_node[:20]}) states no GPU count pptune reads: "
                     "not taken")
            continue
        found.append(StatedLaunch(counts[0], counts[1], line))
    if len({launch.gpus for launch in found}) > 1:
        ctx.note("the file's launch comments name different GPU counts (lines "
                 + ", ".join(f"{launch.line}: {launch.gpus}" for launch in found)
                 + "): none taken")
        return None
    return found[0] if found else None
