"""The note recommend prints when the job does not fill whole nodes (NVLink domains).

A job of ``n`` GPUs on nodes of ``g`` fills ``n // g`` whole ones and ``n % g`` GPUs of one
more (256 GB200s: three NVL72 racks and 40 GPUs of a fourth). Ranks are numbered node by
node (costmodel/layout.py), so a group whose size does not divide ``g`` has members on both
sides of a boundary somewhere; the layout prices every such group at its worst placement,
over the NICs. The note says so, so that a user who can round the job to whole nodes knows
what the remainder costs. And one when ``--gpus-per-node`` names one host of a rack
whose NVLink domain spans hosts (``host_note``), or more GPUs than the GPU's NVLink
domain holds (``wider_note``)."""

from __future__ import annotations

from pptune.costmodel.presets import GPUS, GpuSpec


def domain_note(gpus: int, gpus_per_node: int, domain: str,
                host: int | None = None) -> str | None:
    """One line when ``gpus`` is over one node and not a multiple of ``gpus_per_node``
    (``domain``: what a node is called, e.g. "NVLink domain"); None otherwise. Where the
    domain spans hosts of ``host`` GPUs, the note also names the largest whole-host share
    of it that divides the job (``segment``), if that is more than one host."""
    if gpus <= gpus_per_node or gpus % gpus_per_node == 0:
        return None
    whole, rest = divmod(gpus, gpus_per_node)
    # "an NVLink domain" (en-vee-link), "a node"
    article = "an" if domain.startswith("NVLink") or domain[0].lower() in "aeio" else "a"
    text = (f"{gpus} GPUs fill {whole} {domain}{'s' * (whole > 1)} of {gpus_per_node} and "
            f"{rest} GPU{'s' * (rest > 1)} of one more: a group whose size does not divide "
            f"{gpus_per_node} can cross {article} {domain} boundary and is priced at its worst "
            f"placement (over the NICs); {whole * gpus_per_node} or "
            f"{(whole + 1) * gpus_per_node} GPUs fill whole ones")
    used = segment(gpus, gpus_per_node, host)
    if used is None or host is None:
        return text
    return (text + f", or --gpus-per-node {used} prices {gpus // used} racks used as {used} "
            f"GPUs each ({used // host} hosts of {host}; a scheduler's segments of whole "
            "hosts place them so)")


def segment(gpus: int, domain: int, host: int | None) -> int | None:
    """The most GPUs of a ``domain`` that spans hosts of ``host`` a job of ``gpus`` can use
    in each (whole hosts, dividing the job: SLURM's ``--segment`` places a job so), where
    that is more than one host and less than the domain; None otherwise."""
    if host is None or host >= domain:
        return None
    return next((d for d in range(domain - domain % host, host, -host)
                 if d < domain and gpus % d == 0), None)


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


def wider_note(asked: int | None, gpu: GpuSpec) -> str | None:
    """One line when ``--gpus-per-node`` (``asked``, the NVLink domain the plans are
    priced on) is more GPUs than the GPU preset's NVLink domain (presets.py: 8 on an HGX
    B200, 72 on a GB200 NVL72), naming the presets whose domain it is: a B200 job typed
    with an NVL72's 72 is priced on NVLink it does not have; None otherwise."""
    if asked is None or asked <= gpu.gpus_per_node:
        return None
    have = [name for name, spec in GPUS.items() if spec.gpus_per_node == asked]
    return (f"--gpus-per-node {asked} prices an NVLink domain of {asked} GPUs, which "
            f"{gpu.name} does not have: its NVLink domain is {gpu.gpus_per_node} GPUs"
            + (f" ({' and '.join(have)} {'has' if len(have) == 1 else 'have'} {asked})"
               if have else ""))


def rack_host(gpu: GpuSpec | None, domain: int) -> int | None:
    """The GPUs a host of ``gpu`` holds where ``domain`` is its whole rack of several
    hosts (an NVL72 priced as such: a share of it can divide a job), else None."""
    return gpu.gpus_per_host if gpu is not None and domain == gpu.gpus_per_node else None
