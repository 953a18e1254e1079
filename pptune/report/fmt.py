"""Human formatting of seconds, bytes and fractions for tables and axes.

Every renderer in ``pptune.report`` goes through these three so that the same
quantity reads the same everywhere:

- ``fmt_seconds(0.0123)`` -> ``"12.3 ms"``, ``fmt_seconds(1.2344)`` -> ``"1.234 s"``,
  ``fmt_seconds(85e-6)`` -> ``"85.0 us"`` (seconds with 3 decimals, smaller
  units with 1; ASCII ``us`` so logs and golden files stay 7-bit);
- ``fmt_bytes(1.5 * 2**30)`` -> ``"1.50 GiB"`` (IEC binary units, as
  ``torch.cuda.memory_summary`` and ``nvidia-smi`` report memory);
- ``fmt_pct(0.2727)`` -> ``"27.3%"``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pptune.costmodel.partition import is_mtp, stage_bounds
from pptune.costmodel.stage_recompute import stage_blocks

# (factor in seconds, unit name, decimals), largest first.
_TIME_UNITS: tuple[tuple[float, str, int], ...] = (
    (1.0, "s", 3),
    (1e-3, "ms", 1),
    (1e-6, "us", 1),
    (1e-9, "ns", 1),
)

_BYTE_UNITS: tuple[str, ...] = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")

# Every unit written after a number and a space: the formatters' own, validate's ``+2.1
# pts`` and tune's ``TFLOP/s`` (a job's logged rate). A line wrapped for the console
# keeps each with its number (report.wrap).
UNITS: frozenset[str] = frozenset(
    {*(name for _, name, _ in _TIME_UNITS), *_BYTE_UNITS, "pts", "TFLOP/s"})


def seconds_unit(s: float) -> tuple[float, str, int]:
    """The ``(factor_s, name, decimals)`` that ``fmt_seconds(s)`` uses for ``s``.

    The unit is the largest whose rounded value is at least 1, so 0.99996 s
    reads ``1.000 s``, not ``1000.0 ms``.
    """
    a = abs(s)
    if a == 0 or not math.isfinite(a):
        return _TIME_UNITS[0]
    for factor, name, decimals in _TIME_UNITS:
        if round(a / factor, decimals) >= 1:
            return factor, name, decimals
    return _TIME_UNITS[-1]


def fmt_seconds(s: float) -> str:
    """``12.3 ms``, ``1.234 s``, ``85.0 us``; ``0 s`` for zero."""
    if math.isnan(s):
        return "nan"
    if math.isinf(s):
        return "inf s" if s > 0 else "-inf s"
    if s == 0:
        return "0 s"
    factor, name, decimals = seconds_unit(s)
    return f"{s / factor:.{decimals}f} {name}"


def fmt_bytes(b: float) -> str:
    """IEC units: ``512 B``, ``1.50 KiB``, ``1.50 GiB``."""
    if math.isnan(b):
        return "nan"
    if math.isinf(b):
        return "inf B" if b > 0 else "-inf B"
    sign = "-" if b < 0 else ""
    a = abs(b)
    if round(a) < 1024:
        return f"{sign}{round(a)} B"
    i = 0
    value = a
    while i < len(_BYTE_UNITS) - 1 and round(value, 2) >= 1024:
        value /= 1024
        i += 1
    return f"{sign}{value:.2f} {_BYTE_UNITS[i]}"


def fmt_pct(x: float) -> str:
    """A fraction as a percentage with one decimal: ``0.2727`` -> ``27.3%``."""
    if math.isnan(x):
        return "nan"
    return f"{x * 100:.1f}%"


def fmt_sizes(pp: int, dp: int, tp: int, cp: int = 1, ep: int = 1, etp: int = 1) -> str:
    """A plan's parallel sizes, those above 1 of cp, ep and etp only:
    ``pp=2 dp=4 tp=1 ep=4``."""
    extra = "".join(f" {k}={n}" for k, n in (("cp", cp), ("ep", ep), ("etp", etp)) if n > 1)
    return f"pp={pp} dp={dp} tp={tp}{extra}"


def fmt_microbatches(m: int, size: int) -> str:
    """``m`` micro-batches of ``size`` samples, in words ("1 micro-batch of 2")."""
    return f"{m} micro-batch{'es' if m != 1 else ''} of {size}"


def fmt_ratio(ratio: float) -> str:
    """A step-time ratio, ``1.07x``; three decimals where two would read 1.00x for
    plans that differ."""
    return f"{ratio:.3f}x" if f"{ratio:.2f}" == "1.00" and ratio != 1 else f"{ratio:.2f}x"


# the most decimals a ratio over its limit is given to (fmt_over_limit)
MAX_RATIO_DECIMALS = 6


def fmt_over_limit(ratio: float, limit: float) -> tuple[str, str]:
    """A ratio over its limit, and the limit, as a finding says them: the limit to the
    decimals it is given in (two at least: ``1.10x``), the ratio to the fewest from
    there that show it above the limit (1.1047 over 1.10 reads ``1.105x``, where two
    decimals would read ``1.10x``), at most ``MAX_RATIO_DECIMALS``."""
    places = range(2, MAX_RATIO_DECIMALS + 1)
    given = next((d for d in places if float(f"{limit:.{d}f}") == limit), places[-1])
    shown = next((d for d in range(given, places[-1] + 1)
                  if float(f"{ratio:.{d}f}") > float(f"{limit:.{given}f}")), places[-1])
    return f"{ratio:.{shown}f}x", f"{limit:.{given}f}x"


def compact_split(stage_layers: Sequence[int]) -> str:
    """``8,9,9,8``; long uniform runs shortened: ``1,4x30,2``."""
    parts: list[str] = []
    i = 0
    while i < len(stage_layers):
        j = i
        while j < len(stage_layers) and stage_layers[j] == stage_layers[i]:
            j += 1
        run = j - i
        parts.append(f"{stage_layers[i]}x{run}" if run > 3 else ",".join([str(stage_layers[i])] * run))
        i = j
    return ",".join(parts)


def blocks_text(names: Sequence[str], stage_layers: Sequence[int]) -> str:
    """Transformer blocks per stage, and where the embedding, the head and any MTP layers
    sit (a stage's MTP layers are not blocks); a run of more than three equal counts
    shortened as recommend's table does (``2x47,0``: compact_split). check-config's
    findings and ``--emit``'s lines all say a split so."""
    blocks = stage_blocks(list(names), list(stage_layers))
    where = [k for k, (s, e) in enumerate(stage_bounds(list(stage_layers)))
             if any(is_mtp(n) for n in names[s:e])]
    mtp = sum(map(is_mtp, names))
    layers = "the MTP layer" if mtp == 1 else f"the {mtp} MTP layers"
    ends = ("embedding first, head last" if not where else
            f"embedding first, {layers} and the head last" if where == [len(blocks) - 1] else
            f"embedding first, head last, {layers} on stage "
            + ",".join(map(str, where)))
    return f"{compact_split(blocks)} (+ {ends})"


def fmt_ranges(values: Sequence[int]) -> str:
    """Sorted integers as runs: ``0-1, 3-5, 7``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def json_safe(obj: Any) -> Any:
    """NaN and inf become null: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def run_labels(names: Sequence[str], gpus: Sequence[int | None]) -> list[str]:
    """One label per run: its config's name, with its GPU count where two runs share a
    name (two sizes of one script), and its position where that still repeats."""
    labels = [n if names.count(n) == 1 else f"{n} ({g} GPUs)" if g else n
              for n, g in zip(names, gpus, strict=True)]
    return [x if labels.count(x) == 1 else f"{x} #{i + 1}" for i, x in enumerate(labels)]
