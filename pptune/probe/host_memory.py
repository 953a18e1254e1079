"""The host's free memory, and a refusal when a CPU probe would not fit in it.

A probe on the CPU (``pptune probe``, and the quick probe ``validate`` and
``tune`` run in their own process when no profile exists) builds and times one
layer at a time. What one layer needs at the largest micro-batch size is at least
its weights and their gradients and what its forward keeps for its backward; for
the head, its logits and their gradient (``tokens x vocab`` elements each). When
that is more than the host has free, the kernel's OOM killer ends the process
without a word; pptune refuses first, in one line.

The free memory is Linux's ``MemAvailable`` (``/proc/meminfo``; proc(5): "an
estimate of how much memory is available for starting new applications, without
swapping"). Where it cannot be read, nothing is refused.
"""

from __future__ import annotations

from pathlib import Path

from pptune.costmodel.analytic import block_act_bytes, layer_params
from pptune.costmodel.presets import ModelShape
from pptune.errors import BadInput

GIB = 2**30
MEMINFO = Path("/proc/meminfo")


def available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """``MemAvailable`` in bytes; None where the file or the line cannot be read."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key == "MemAvailable":
            parts = rest.split()
            if parts and parts[0].isdigit():
                return int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return None


def probe_need(shape: ModelShape, micro_batch_sizes: list[int], dtype_bytes: int
               ) -> tuple[float, str]:
    """(bytes, which layer) a probe of ``shape`` needs at least: the larger of a block
    (weights and gradients, and what it keeps for backward: analytic.block_act_bytes
    at flash attention, scaled from 2 bytes an element to ``dtype_bytes``) and the
    head (weights and gradients, logits and their gradient), plus the inputs the probe
    holds at every micro-batch size."""
    b = max(micro_batch_sizes)
    tokens = b * shape.seq_len
    params = max(sum(layer_params(shape, i)) for i in range(shape.num_blocks))  # all experts
    block = 2 * params * dtype_bytes + block_act_bytes(shape, b) * dtype_bytes / 2
    head = 2 * shape.vocab * shape.hidden * dtype_bytes + 2 * tokens * shape.vocab * dtype_bytes
    inputs = sum(s * shape.seq_len * shape.hidden * dtype_bytes for s in micro_batch_sizes)
    if head >= block:
        return head + inputs, f"its head (the logits of {tokens:,} tokens x {shape.vocab:,})"
    return block + inputs, "one of its blocks"


def require(need: float, who: str, what: str, fix: str, available: int | None) -> None:
    """BadInput when ``need`` bytes (``who`` needs them for ``what``) exceed ``available``
    (None: unknown, no refusal)."""
    if available is not None and need > available:
        raise BadInput(f"{who} needs at least {need / GIB:.1f} GiB for {what}, more than the "
                       f"{available / GIB:.1f} GiB this machine has free (MemAvailable); {fix}")
