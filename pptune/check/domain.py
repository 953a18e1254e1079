"""The node check-config prices a config's collectives on: the NVLink domain.

A file states the GPUs a node runs (torchrun's ``--nproc_per_node``, a DeepSpeed
hostfile's slots), which is the NVLink domain on a DGX or HGX (8 GPUs) but one host
of it on a GB200 or GB300 NVL72, whose compute trays of 4 GPUs share a 72-GPU
domain. The domain is what the collectives are priced on (``gpus_per_node`` of the
request): the GPU preset's where the file states no node or one host of a domain
that spans hosts, else the node as stated. ``--gpus-per-node`` fills a node size a
file does not state; where the file states one host of such a domain, the flag
sets the domain instead (an NVL72 rack used as 64 GPUs), and where it cannot (the
GPU's domain is one host, the node is more than a host, the flag is not whole
hosts or more than the rack), one finding says it was overridden by the file and why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pptune.check.profile_match import named_profile
from pptune.costmodel import presets
from pptune.costmodel.layout import contiguous_group
from pptune.costmodel.presets import GpuSpec
from pptune.errors import PptuneError
from pptune.options import CostOptions
from pptune.report.domain_note import domain_note, rack_host
from pptune.schemas import Profile, TrainingConfig

# the value the findings about --gpus-per-node carry (calibrate repeats them as notes)
FLAG_VALUE = "gpus_per_node_flag"


def with_nvlink_domain(cfg: TrainingConfig, flags: CostOptions, add: Any,
                       asked: int | None = None, given: Profile | None = None,
                       base_dir: Path = Path(".")) -> TrainingConfig:
    """The config with the NVLink domain it is priced on as ``gpus_per_node`` (module
    docstring; an info finding when that changes it); unchanged for measured costs (a
    probe's profile) and for a node size that is the domain. A calibrated profile
    (``given``, calibrate's own, or the file ``--profile`` or the config names, relative
    to ``base_dir``) prices its GPU's analytic model: its GPU's domain. ``asked``: a
    ``--gpus-per-node`` the file's own node size overrode, taken as the domain where the
    node is one host of it. Where the node size is settled, a warning where a
    tensor-parallel group spans nodes (_tp_across)."""
    gpu, measured = _priced_gpu(cfg, flags, given, base_dir)
    spec = presets.GPUS.get(gpu)
    measured = measured or spec is None
    node = cfg.gpus_per_node
    if asked is not None:
        why = ("the costs come from a profile, which is priced on the node the file states"
               if spec is None or measured else _cannot_be_the_domain(node, asked, gpu, spec))
        if why is None and spec is not None:
            add("nvlink-domain", "info",
                f"NVLink domain priced as {asked} GPUs (--gpus-per-node {asked}, of {gpu}'s "
                f"{spec.gpus_per_node}): the {node} GPUs a node runs are one host of it",
                gpus_per_node=asked, **{FLAG_VALUE: asked})
            _tp_across(cfg, asked, add)
            _partial(cfg, asked, spec, add)
            return cfg.model_copy(update={"gpus_per_node": asked})
        add("gpus-per-node-ignored", "info",
            f"--gpus-per-node {asked} ignored: the file states a node size = {node}, and {why}",
            gpus_per_node=node, **{FLAG_VALUE: asked})
    if spec is None or measured:
        return cfg
    host = spec.gpus_per_host
    stated = "gpus_per_node" in cfg.model_fields_set
    if (stated and not (host is not None and node <= host)) or node == spec.gpus_per_node:
        _tp_across(cfg, node, add)
        _partial(cfg, node, spec, add)
        return cfg
    add("nvlink-domain", "info", f"NVLink domain priced as {gpu}'s {spec.gpus_per_node} GPUs: "
        + (f"the {node} GPUs a node runs are one host of it" if stated
           else "the config states no node size"), gpus_per_node=spec.gpus_per_node)
    _tp_across(cfg, spec.gpus_per_node, add)
    _partial(cfg, spec.gpus_per_node, spec, add)
    return cfg.model_copy(update={"gpus_per_node": spec.gpus_per_node})


def _partial(cfg: TrainingConfig, domain: int, spec: GpuSpec, add: Any) -> None:
    """An info finding when the config's GPUs are not whole domains of ``domain``: a group
    that crosses a boundary is priced at its worst placement (report/domain_note.py), and
    on a rack that spans hosts, the share of it that divides the job is named."""
    if cfg.gpus is None:
        return
    note = domain_note(cfg.gpus, domain, "NVLink domain" if domain > 8 else "node",
                       rack_host(spec, domain))
    if note is not None:
        add("nvlink-domain-partial", "info", note, gpus=cfg.gpus, gpus_per_node=domain)


def _priced_gpu(cfg: TrainingConfig, flags: CostOptions, given: Profile | None,
                base_dir: Path) -> tuple[str, bool]:
    """The GPU the config is priced on, and whether its costs are measured (a probe's
    profile: its layers as measured on the node it ran). A calibrated profile prices
    the analytic model of its own GPU, scaled; a profile that cannot be read counts as
    measured (check/costs.py reports it)."""
    try:
        given = named_profile(cfg, base_dir, flags, given)
    except PptuneError:
        return flags.gpu or cfg.gpu or presets.DEFAULT_GPU, True
    if given is not None:
        cal = given.calibration
        return (cal.gpu, False) if cal is not None else ("", True)
    return flags.gpu or cfg.gpu or presets.DEFAULT_GPU, False


def _cannot_be_the_domain(node: int, asked: int, gpu: str, spec: GpuSpec) -> str | None:
    """Why ``asked`` GPUs cannot be the NVLink domain of nodes of ``node`` (None: they can
    be: whole hosts of a domain that spans hosts, at most the GPU's own)."""
    host = spec.gpus_per_host
    if host is None:
        return (f"{gpu}'s NVLink domain is one host of {spec.gpus_per_node} GPUs: the node "
                "the file launches is the domain priced")
    if node > host:
        return (f"that is more than one {host}-GPU host of {gpu}: it is priced as the NVLink "
                "domain itself")
    if asked % node:
        return f"an NVLink domain holds whole hosts: a multiple of the {node} GPUs a node runs"
    if asked > spec.gpus_per_node:
        return f"{gpu}'s NVLink domain holds at most {spec.gpus_per_node} GPUs"
    return None


def _tp_across(cfg: TrainingConfig, gpus_per_node: int, add: Any) -> None:
    """A warning where a tensor-parallel group spans nodes: its per-layer collectives then
    run over the NICs (priced so, profiles._tp_link), which frameworks advise against."""
    group = contiguous_group(cfg.tp, gpus_per_node)
    if group.nodes > 1:
        add("tp-across-nodes", "warning",
            f"tp {cfg.tp} on nodes of {gpus_per_node} GPUs: a tensor-parallel group spans "
            f"{group.nodes} nodes, and its collectives in every layer run over the network "
            "(priced so); keep tp within a node", tp=cfg.tp, gpus_per_node=gpus_per_node)
