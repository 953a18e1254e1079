"""Link figures for the profile: fitted from the comm sweeps or nccl-tests
output, or documented defaults where a link was not measured.

Points are ``(bus bytes, seconds)`` per ``(scope, op)``; each is fitted to
latency + bytes / bandwidth (``pptune.probe.fit``), and every link not
measured is filled from the defaults below with a note saying so.
"""

from __future__ import annotations

from pathlib import Path
from statistics import median
from typing import Any

from pptune.costmodel import presets
from pptune.errors import BadInput
from pptune.probe.fit import AlphaBeta, fit_alpha_beta, unresolved
from pptune.probe.inventory import Inventory, peak_flops_for
from pptune.report.fmt import fmt_bytes
from pptune.schemas import LinkPair, Links, LinkSpec

# (bus bytes, seconds) points per measured (scope, op), and where they came from
Points = dict[tuple[str, str], tuple[list[tuple[float, float]], str]]

# Links when they are not measured (--no-comm, one GPU, or missing from
# --nccl-tests files). Always written with a note saying so.
# CPU: round figures of the order of a loopback TCP socket between two
# processes of a small host (gloo over loopback was seen at ~100-240 us one
# way and 1.5-2.7 GB/s p2p, all-reduce busbw 0.3-0.95 GB/s; docs/measured.md).
CPU_LOOPBACK_P2P = AlphaBeta(latency_s=100e-6, bytes_per_s=1.0e9)
CPU_LOOPBACK_ALLREDUCE = AlphaBeta(latency_s=200e-6, bytes_per_s=0.5e9)
# GPU without NVLink: PCIe 4.0 x16 carries 31.5 GB/s per direction (PCI-SIG,
# 16 GT/s x 16 lanes, 128b/130b); ~80% of it is what copies reach.
PCIE4_X16_BYTES_PER_S = 25e9


def _spec(ab: AlphaBeta) -> LinkSpec:
    return LinkSpec(latency_s=ab.latency_s, bytes_per_s=ab.bytes_per_s)


def _fit(points: list[tuple[float, float]], what: str) -> AlphaBeta:
    try:
        return fit_alpha_beta(points)
    except ValueError as exc:
        raise BadInput(
            f"cannot fit latency and bandwidth to the {what} sweep: {exc}; its largest messages "
            "are too small to show the bandwidth through the noise: raise --max-bytes or rerun"
        ) from None


def default_links(inv: Inventory, device: str) -> tuple[dict[str, AlphaBeta], str]:
    """Per-op defaults for unmeasured links, and where they come from."""
    if device == "cpu":
        return (
            {"p2p": CPU_LOOPBACK_P2P, "allreduce": CPU_LOOPBACK_ALLREDUCE},
            "CPU loopback defaults (p2p 100 us + 1 GB/s, all-reduce 200 us + 0.5 GB/s bus; "
            "pptune.probe.links)",
        )
    nvlink = any(link.kind == "NVLink" for link in inv.links if {link.a, link.b} == {0, 1})
    _, key = peak_flops_for(inv.name)
    if nvlink and key is not None:
        bw = presets.GPUS[key].nvlink_bytes_per_s
        src = f"{key} NVLink figure from pptune presets"
    else:
        bw = PCIE4_X16_BYTES_PER_S
        src = "PCIe 4.0 x16 (~80% of 31.5 GB/s)"
    # Across nodes a GPU talks through its NIC: the preset's InfiniBand figure,
    # or one 200 Gb/s HDR NIC per GPU when the card is not a preset.
    ib = presets.GPUS[key].ib_bytes_per_s if key is not None else 25e9
    return (
        {
            "p2p": AlphaBeta(presets.P2P_LATENCY_INTRA_S, bw),
            "allreduce": AlphaBeta(presets.ALLREDUCE_LATENCY_INTRA_S, bw),
            "inter.p2p": AlphaBeta(presets.P2P_LATENCY_INTER_S, ib),
            "inter.allreduce": AlphaBeta(presets.ALLREDUCE_LATENCY_INTER_S, ib),
        },
        f"GPU defaults: {src}, latencies from pptune presets",
    )


def links_from_points(
    found: Points,
    defaults: tuple[dict[str, AlphaBeta], str],
    notes: list[str],
) -> tuple[Links, dict[str, Any]]:
    """Fit each (scope, op) found; fill the rest, each with a note.

    ``found[(scope, op)] = (points, source)`` where points are (bus bytes, s).
    Missing intra-node links take the defaults; missing inter-node links take
    the NIC default on GPUs and copy the intra-node figure on CPU.
    """
    fits: dict[tuple[str, str], AlphaBeta] = {}
    fit_raw: dict[str, Any] = {}
    values, default_src = defaults
    for (scope, op), (points, source) in sorted(found.items()):
        why = unresolved(points)
        if why:
            # every size was latency-bound: the latency is measured, the bandwidth is not
            dflt = values.get(op if scope == "intra_node" else f"inter.{op}", values.get(op))
            sizes = sorted(x for x, _ in points)
            span = f"{fmt_bytes(sizes[0])}..{fmt_bytes(sizes[-1])}" if sizes else "no sizes"
            notes.append(
                f"warning: {scope.replace('_', '-')} {op} ({source}, {span}): bandwidth "
                f"unresolved: {why}; " + (
                    "not written (no default)" if dflt is None else
                    f"its latency is taken as measured, its bandwidth the default's "
                    f"({dflt.bytes_per_s / 1e9:.3g} GB/s)")
                + "; raise --max-bytes (the default: 64M on CPU, 256M on GPU) to measure it")
            fit_raw[f"{scope}.{op}"] = {"source": source, "points": len(points),
                                        "unresolved": why}
            if dflt is None:
                continue
            lat = median(max(0.0, t - x / dflt.bytes_per_s) for x, t in points)
            fits[(scope, op)] = AlphaBeta(lat, dflt.bytes_per_s)
            fit_raw[f"{scope}.{op}"].update(
                latency_s=lat, bytes_per_s=dflt.bytes_per_s,
                source=f"{source}: latency only, bandwidth unresolved (default)")
            continue
        fits[(scope, op)] = _fit(points, f"{scope} {op} ({source})")
        ab = fits[(scope, op)]
        fit_raw[f"{scope}.{op}"] = {
            "latency_s": ab.latency_s,
            "bytes_per_s": ab.bytes_per_s,
            "source": source,
            "points": len(points),
        }
    for op in ("p2p", "allreduce"):
        if ("intra_node", op) not in fits:
            fits[("intra_node", op)] = values[op]
            notes.append(f"intra-node {op} link NOT measured: {default_src}")
            fit_raw[f"intra_node.{op}"] = {"source": "default: " + default_src}
        if ("inter_node", op) not in fits and f"inter.{op}" in values:
            fits[("inter_node", op)] = values[f"inter.{op}"]
            notes.append(
                f"inter-node {op} link NOT measured: InfiniBand default "
                f"({values[f'inter.{op}'].bytes_per_s / 1e9:.0f} GB/s per GPU; probe under "
                "torchrun --nnodes 2 to measure it)"
            )
            fit_raw[f"inter_node.{op}"] = {"source": "default: InfiniBand per-GPU NIC"}
        elif ("inter_node", op) not in fits:
            fits[("inter_node", op)] = fits[("intra_node", op)]
            notes.append(f"inter-node {op} link NOT measured: copied from intra-node")
            fit_raw[f"inter_node.{op}"] = {"source": "copy of intra_node"}
    def pair(scope: str) -> LinkPair:
        a2a = fits.get((scope, "alltoall"))  # measured only: no default is written
        return LinkPair(p2p=_spec(fits[(scope, "p2p")]),
                        allreduce=_spec(fits[(scope, "allreduce")]),
                        all_to_all=None if a2a is None else _spec(a2a))

    return Links(intra_node=pair("intra_node"), inter_node=pair("inter_node")), fit_raw


def points_from_comm(result: dict[str, Any]) -> Points:
    """(bus bytes, median seconds) per measured (scope, op) of a comm sweep."""
    found = {}
    from pptune.probe.comm import BUS_FACTOR

    for sweep in result.get("sweeps", []):
        n = len(sweep["ranks"])
        factor = BUS_FACTOR[sweep["op"]](n)
        pts = [(row["bytes"] * factor, row["time_s"]) for row in sweep["rows"]]
        found[(sweep["scope"], sweep["op"])] = (pts, f"measured, {result['backend']}, {n} ranks")
    return found


def points_from_nccl_tests(
    paths: list[Path], notes: list[str]
) -> tuple[Points, list[dict[str, Any]]]:
    from pptune.probe.nccl_tests import load_nccl_tests

    found: Points = {}
    raw = []
    for path in paths:
        for table in load_nccl_tests(path):
            op = "p2p" if table.test == "sendrecv" else "allreduce"
            key = (table.scope, op)
            if key in found:
                raise BadInput(
                    f"--nccl-tests: two {table.test}_perf tables for {table.scope} links "
                    f"({found[key][1]} and {path}); give one"
                )
            factor = table.bus_factor()
            pts = [(r.size_bytes * factor, r.time_s) for r in table.rows]
            found[key] = (pts, f"nccl-tests {table.test}_perf, {path}")
            raw.append(table.to_raw())
            if not table.hosts:
                notes.append(f"{path}: no rank list in the output; taken as intra-node")
    return found, raw
