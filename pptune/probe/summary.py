"""The probe's summary: rich tables built from a Profile (returned, never printed)."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from pptune.launch.stats import HIGH_SPREAD
from pptune.report.fmt import fmt_bytes
from pptune.schemas import Profile


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f}"


def layer_table(profile: Profile) -> Table:
    """One row per layer and micro-batch size; spreads past HIGH_SPREAD marked '!'."""
    table = Table(
        title=f"per-layer costs: {profile.model.name} on {profile.device.name}",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("layer", "left"), ("params", "right"), ("mb", "right"), ("fwd ms", "right"),
        ("B ms", "right"), ("W ms", "right"), ("act", "right"), ("out", "right"),
        ("spread", "right"),
    )
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for layer in profile.layers:
        for i, size in enumerate(sorted(layer.per_micro_batch, key=int)):
            c = layer.per_micro_batch[size]
            spreads = [s for s in (c.fwd_spread, c.bwd_spread, c.wgrad_spread) if s is not None]
            worst = max(spreads) if spreads else 0.0
            mark = Text(("! " if worst > HIGH_SPREAD else "") + f"{worst:.2f}")
            if worst > HIGH_SPREAD:
                mark.stylize("bold yellow")
            table.add_row(
                layer.name if i == 0 else "",
                fmt_bytes(layer.param_bytes) if i == 0 else "",
                size,
                _ms(c.fwd_s),
                _ms(c.bwd_s),
                _ms(c.wgrad_s),
                fmt_bytes(c.act_bytes),
                fmt_bytes(c.out_bytes),
                mark,
            )
    return table


def links_table(profile: Profile) -> Table:
    fits: dict[str, Any] = (profile.raw or {}).get("links_fit", {})
    table = Table(
        title="links (time = latency + bytes / bandwidth)", box=box.SIMPLE_HEAD, pad_edge=False
    )
    table.add_column("link")
    table.add_column("op")
    table.add_column("latency us", justify="right")
    table.add_column("GB/s", justify="right")
    table.add_column("source")
    for scope in ("intra_node", "inter_node"):
        pair = getattr(profile.links, scope)
        for op, field_name in (("p2p", "p2p"), ("allreduce", "allreduce"),
                               ("alltoall", "all_to_all")):
            spec = getattr(pair, field_name)
            if spec is None:  # all-to-all: only when measured
                continue
            source = str(fits.get(f"{scope}.{op}", {}).get("source", ""))
            table.add_row(
                scope.replace("_", "-"),
                {"p2p": "p2p", "allreduce": "all-reduce (bus)"}.get(op, "all-to-all (bus)"),
                f"{spec.latency_s * 1e6:.1f}",
                f"{spec.bytes_per_s / 1e9:.3g}",
                source,
            )
    return table


def summary(profile: Profile) -> list[Any]:
    """The tables for stdout, and the high-spread warning when there is one."""
    parts: list[Any] = [layer_table(profile), links_table(profile)]
    flagged = [n for n in profile.notes if n.startswith("high spread")]
    if flagged:
        parts.append(Text("! " + flagged[0], style="yellow"))
    return parts
