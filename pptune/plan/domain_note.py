"""The note recommend prints when the job does not fill whole nodes (NVLink domains).

A job of ``n`` GPUs on nodes of ``g`` fills ``n // g`` whole ones and ``n % g`` GPUs of one
more (256 GB200s: three NVL72 racks and 40 GPUs of a fourth). Ranks are numbered node by
node (costmodel/layout.py), so a group whose size does not divide ``g`` has members on both
sides of a boundary somewhere; the layout prices every such group at its worst placement,
over the NICs. The note says so, so that a user who can round the job to whole nodes knows
what the remainder costs. And one when ``--gpus-per-node`` names one host of a rack
whose NVLink domain spans hosts (``host_note``)."""

from __future__ import annotations

from pptune.costmodel.presets import GpuSpec


def domain_note(gpus: int, gpus_per_node: int, domain: str) -> str | None:
    """One line when ``gpus`` is over one node and not a multiple of ``gpus_per_node``
    (``domain``: what a node is called, e.g. "NVLink domain"); None otherwise."""
    if gpus <= gpus_per_node or gpus % gpus_per_node == 0:
        return None
    whole, rest = divmod(gpus, gpus_per_node)
    # "an NVLink domain" (en-vee-link), "a node"
    article = "an" if domain.startswith("NVLink") or domain[0].lower() in "aeio" else "a"
    return (f"{gpus} GPUs fill {whole} {domain}{'s' * (whole > 1)} of {gpus_per_node} and "
            f"{rest} GPU{'s' * (rest > 1)} of one more: a group whose size does not divide "
            f"{gpus_per_node} can cross {article} {domain} boundary and is priced at its worst placement "
            f"(over the NICs); {whole * gpus_per_node} or {(whole + 1) * gpus_per_node} GPUs "
            "fill whole ones")


def host_note(asked: int | None, gpu: GpuSpec) -> str | None:
    """One line when ``--gpus-per-node`` (``asked``, the NVLink domain) is one host of a
    GPU whose domain spans hosts (GB200/GB300 NVL72: compute trays of 4 GPUs), the GPUs
    a host runs rather than the domain; None otherwise."""
    host = gpu.gpus_per_host
    if asked is None or host is None or asked != host or asked >= gpu.gpus_per_node:
        return None
    return (f"--gpus-per-node {asked} prices an NVLink domain of {asked} GPUs; {gpu.name}'s "
            f"NVL{gpu.gpus_per_node} joins {gpu.gpus_per_node} over NVLink, {host} a host "
            "(compute tray): leave --gpus-per-node out to price the rack")
