"""Caps on every size that drives work or memory, and the number checks at
the command-line boundary (finite, in range, one line naming the flag).

Each cap sits well above what real training uses and below what would take
minutes or gigabytes; it is checked before the work starts. The README's
"Limits" section lists them.
"""

from __future__ import annotations

import math

# 2^17 GPUs: above the largest published training clusters (about 100k GPUs).
MAX_GPUS = 131_072
# transformer blocks: the largest published dense models have under 200
# (GPT-3 175B: 96; Llama 3.1 405B: 126).
MAX_LAYERS = 4_096
# pipeline stages simulate takes (--pp): a stage holds at least one transformer block, so
# no pipeline is deeper than MAX_LAYERS; simulate lays out a table row per device (measured
# on 2 CPU cores: 2.6 s and 70 MB at this depth, 345 s and 0.8 GB at MAX_GPUS)
MAX_SIMULATED_PP = MAX_LAYERS
MAX_TP = 1_024
MAX_MOE_IMBALANCE = 64.0  # busiest expert over the mean: beyond this a run is not balanced
MAX_MICRO_BATCH = 65_536
MAX_MICRO_BATCH_CANDIDATES = 64
MAX_SEQ_LEN = 1 << 24  # 16M tokens
MAX_GLOBAL_BATCH = 1 << 30
MAX_TIMELINE_WIDTH = 1_000  # columns of a text timeline
MAX_TOP = 1_000  # plans listed
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_STEPS = 100_000  # validate's warm-up and timed steps
MAX_TRAIN_TOKENS = 1e18
MAX_RESERVE_GIB = 1e6
MAX_MS = 1e9  # a textbook time per device: 11.6 days
# probe's largest sweep message: nccl-tests' own sweeps end at 8-16 GiB (the 16 GiB
# all-reduce the GPU presets' bus bandwidths were measured at)
MAX_PROBE_BYTES = 16 << 30


def problem(flag: str, value: float | int, lo: float, hi: float,
            lo_open: bool = False, capped: bool = True) -> str | None:
    """None when ``value`` is finite and ``lo <= value <= hi`` (``lo < value``
    when ``lo_open``), else one clause naming the flag and the bound.
    ``capped``: ``hi`` is one of pptune's caps (said so), not the quantity's own range."""
    if not (isinstance(value, int) or math.isfinite(value)):
        return f"{flag} must be a finite number (got {value})"
    if not capped and (value < lo or (lo_open and value == lo) or value > hi):
        return f"{flag} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}] (got {value})"
    if value < lo or (lo_open and value == lo):
        return f"{flag} must be {'>' if lo_open else '>='} {lo:g} (got {value})"
    if value > hi:
        return over_cap(flag, str(value), hi)
    return None


def over_cap(flag: str, shown: str, cap: float) -> str:
    """The clause for a value (as ``shown``) above one of pptune's caps."""
    said = f"{int(cap):,}" if float(cap).is_integer() else f"{cap:,g}"
    return f"{flag} must be <= {said} (got {shown}): pptune's cap, see docs/limits.md"


def problems(*checks: str | None) -> list[str]:
    return [c for c in checks if c is not None]
