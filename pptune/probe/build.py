"""Run the probe and assemble the ``Profile`` (pptune.schemas).

Order: resolve the options; the model plan (so a bad model input fails before
NVML is asked or anything is spawned); inventory (NVML, else the CPU); links (measured,
read from nccl-tests output, or documented defaults); then per-layer costs
on rank 0. Talk goes through a ``Reporter`` (warnings, progress); nothing
here prints. The options and their checks are in ``pptune.probe.options``,
the link fits and defaults in ``pptune.probe.links``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pptune.errors import BadInput
from pptune.launch import allocator, ranks
from pptune.launch.deps import import_torch
from pptune.launch.stats import HIGH_SPREAD
from pptune.probe import comm as comm_mod
from pptune.probe import host_memory
from pptune.probe.inventory import Inventory, cpu_inventory, gpu_inventory, peak_flops_for
from pptune.probe.links import (
    Points,
    default_links,
    links_from_points,
    points_from_comm,
    points_from_nccl_tests,
)
from pptune.probe.options import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MICRO_BATCH_SIZES,
    DEFAULT_MODEL,
    DEFAULT_OUTPUT,
    DEFAULT_REPEATS,
    DEFAULT_TIMEOUT_S,
    TORCH_DTYPES,
    DeviceChoice,
    DType,
    ProbeOptions,
    resolve_options,
)
from pptune.report.fmt import fmt_bytes
from pptune.schemas import DeviceInfo, Layer, LayerCost, Links, ModelInfo, Profile

# The options live in pptune.probe.options; the names callers import from here stay.
__all__ = [
    "DEFAULT_OUTPUT",
    "DType",
    "DeviceChoice",
    "NullReporter",
    "ProbeOptions",
    "ProbeOutcome",
    "Reporter",
    "run_probe",
]


class Reporter(Protocol):
    def warn(self, message: str) -> None: ...
    def start(self, label: str, total: int) -> None: ...
    def begin(self, description: str) -> None: ...  # what the step now running measures
    def advance(self, description: str | None = None) -> None: ...
    def finish(self) -> None: ...


class NullReporter:
    def warn(self, message: str) -> None:
        pass

    def start(self, label: str, total: int) -> None:
        pass

    def begin(self, description: str) -> None:
        pass

    def advance(self, description: str | None = None) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass
class ProbeOutcome:
    profile: Profile | None  # None on torchrun ranks other than 0
    rank: int = 0


def _device(choice: DeviceChoice, torch: Any) -> str:
    has_cuda = bool(torch.cuda.is_available())
    if choice == DeviceChoice.CUDA and not has_cuda:
        raise BadInput(
            f"--device cuda: torch {torch.__version__} sees no CUDA device "
            "(torch.cuda.is_available() is False); use --device cpu or auto"
        )
    if choice == DeviceChoice.AUTO:
        return "cuda" if has_cuda else "cpu"
    return str(choice.value)


def _inventory(device: str, torch: Any, reporter: Reporter) -> Inventory:
    inv = gpu_inventory()
    if device == "cuda":
        if inv.kind == "gpu":
            return inv
        reporter.warn(f"{inv.nvml_error}; GPU inventory taken from torch.cuda instead")
        props = torch.cuda.get_device_properties(0)
        return Inventory(
            kind="gpu",
            name=props.name,
            memory_bytes=float(props.total_memory),
            count=torch.cuda.device_count(),
            nvml_error=inv.nvml_error,
        )
    if inv.kind == "gpu":
        reporter.warn(
            f"NVML sees {inv.count} x {inv.name}, but the probe runs on the CPU "
            "(--device cpu, or torch without CUDA)"
        )
        return cpu_inventory()
    reporter.warn(f"{inv.nvml_error}: no GPU to inventory; probing the CPU")
    return inv


def _plan_model(opts: ProbeOptions, device: str, torch_dtype: Any) -> Any:
    from pptune.probe import models

    if opts.hf_config is not None:
        return models.plan_hf_config(opts.hf_config, device, torch_dtype, opts.seq_len)
    if opts.module is not None:
        return models.plan_module(opts.module, device, opts.seq_len)
    return models.plan_preset(opts.model or DEFAULT_MODEL, device, torch_dtype, opts.seq_len)


@dataclass
class _Run:
    """One probe run's settled facts, shared by its steps."""

    opts: ProbeOptions
    torch: Any
    device: str  # "cpu" or "cuda"
    compute_device: str  # "cpu", "cuda" or "cuda:N"
    env: dict[str, int] | None  # torchrun's, when launched by it
    reporter: Reporter
    inv: Inventory
    threads: int
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)


def run_probe(opts: ProbeOptions, reporter: Reporter | None = None) -> ProbeOutcome:
    """The whole probe; returns the profile (rank 0) without writing it."""
    opts = resolve_options(opts)
    torch = import_torch("probe")
    device = _device(opts.device or DeviceChoice.AUTO, torch)
    env = ranks.torchrun_env()
    rank = env["RANK"] if env else 0
    # under torchrun only rank 0 talks: the other ranks' lines would repeat it
    reporter = (reporter or NullReporter()) if rank == 0 else NullReporter()
    compute_device = f"cuda:{env['LOCAL_RANK']}" if env and device == "cuda" else device
    dtype = opts.dtype
    if dtype == DType.AUTO:
        dtype = DType.BF16 if device == "cuda" else DType.FP32
    # the model plan before NVML or any process: a bad model input fails at once, alone
    plan = _plan_model(opts, compute_device, getattr(torch, TORCH_DTYPES[dtype]))
    run = _Run(
        opts=opts,
        torch=torch,
        device=device,
        compute_device=compute_device,
        env=env,
        reporter=reporter,
        inv=_inventory(device, torch, reporter) if rank == 0 else cpu_inventory(),
        threads=opts.threads or 1,
    )
    for message in plan.warnings:
        reporter.warn(message)

    found = _measure_links(run)
    if rank != 0:
        return ProbeOutcome(profile=None, rank=rank)
    before = len(run.notes)
    links, run.raw["links_fit"] = links_from_points(found, default_links(run.inv, device), run.notes)
    for note in run.notes[before:]:
        if note.startswith("warning: "):  # a sweep that resolved no bandwidth
            reporter.warn(note)
    layers, high = _measure_layers(run, plan)
    return ProbeOutcome(profile=_assemble(run, plan, dtype, links, layers, high))


def _measure_links(run: _Run) -> Points:
    """Link points from nccl-tests files or the sweeps; nothing with --no-comm."""
    opts, notes = run.opts, run.notes
    if opts.nccl_tests:
        found, run.raw["nccl_tests"] = points_from_nccl_tests(opts.nccl_tests, notes)
        notes.append("links read from nccl-tests output: " + ", ".join(map(str, opts.nccl_tests)))
        return found
    if not opts.comm:
        notes.append("--no-comm: link bandwidth was NOT measured")
        return {}
    cplan = comm_mod.CommPlan(
        backend="nccl" if run.device == "cuda" else "gloo",
        device=run.device,
        sizes=comm_mod.message_sizes(opts.max_bytes or DEFAULT_MAX_BYTES[run.device]),
        repeats=opts.repeats or DEFAULT_REPEATS,
        warmup=max(1, opts.warmup or 0),
        timeout_s=opts.timeout_s or DEFAULT_TIMEOUT_S,
        threads=run.threads,
    )

    def on_progress(payload: Any) -> None:
        label, size = payload
        run.reporter.advance(f"{label} {fmt_bytes(size)}")

    result: dict[str, Any] | None = None
    if run.env:
        # torchrun numbers ranks node by node: enough to size the progress bar
        local = max(1, run.env["LOCAL_WORLD_SIZE"])
        todo, _ = comm_mod.plan_measurements(
            [str(r // local) for r in range(run.env["WORLD_SIZE"])]
        )
        run.reporter.start("bandwidth (torchrun job)", len(cplan.sizes) * len(todo))
        try:
            result = comm_mod.run_joined(cplan, run.env, on_progress)
        finally:
            run.reporter.finish()
    else:
        world = 2 if run.device == "cpu" else int(run.torch.cuda.device_count())
        if world < 2:
            notes.append("one GPU: no link to measure")
            return {}
        run.reporter.start(f"bandwidth ({world} local processes)", len(cplan.sizes) * 3)
        try:
            result = comm_mod.spawn_ranks(
                comm_mod.comm_entry, (cplan,), world, cplan.timeout_s, on_progress
            )
        finally:
            run.reporter.finish()
    if result is None:  # a torchrun rank other than 0
        return {}
    run.raw["comm"] = result
    notes.append(
        f"links measured with {cplan.backend}, {result['world_size']} ranks"
        + (f", {run.threads} torch thread(s) each" if run.device == "cpu" else "")
        + f", sizes {fmt_bytes(cplan.sizes[0])}..{fmt_bytes(cplan.sizes[-1])}"
        f" doubling, {cplan.repeats} repeats after {cplan.warmup} warm-up; p2p = 2-rank "
        "exchange (sendrecv_perf), all-reduce bytes_per_s = bus bandwidth 2(n-1)/n; "
        "alpha-beta fit on per-size medians, relative-error weights, latency >= 0"
    )
    for reason in result.get("not_measured", []):
        notes.append("not measured: " + reason)
    return points_from_comm(result)


def _measure_layers(run: _Run, plan: Any) -> tuple[list[Layer], list[str]]:
    """Every layer at every micro-batch size; the layers and the high-spread list."""
    from pptune.probe.layers import measure_model

    torch, opts = run.torch, run.opts
    sizes = opts.micro_batch_sizes or DEFAULT_MICRO_BATCH_SIZES
    if run.device == "cpu" and plan.memory_need is not None:  # before the OOM killer
        need, which = plan.memory_need(list(sizes))
        host_memory.require(
            need, f"a CPU probe of {plan.name} at micro-batch size {max(sizes)}", which,
            f"{opts.smaller}, probe a smaller model, or probe on GPUs",
            host_memory.available_bytes())
    previous_threads = torch.get_num_threads()
    if run.device == "cpu":
        torch.set_num_threads(run.threads)
        kept = allocator.keep_freed_memory()  # time ops as a caching allocator would
        if kept is not None:
            run.notes.append(f"{kept}: op times on this CPU may move with the op order "
                             "(pptune/launch/allocator.py)")
    run.reporter.start(
        f"layers of {plan.name} on {run.compute_device}", len(plan.layer_names) * len(sizes)
    )
    try:
        results = measure_model(
            torch,
            plan,
            sizes,
            opts.repeats or DEFAULT_REPEATS,
            opts.warmup or 0,
            run.compute_device,
            on_step=lambda name, b: run.reporter.advance(f"{name} @ micro-batch {b}"),
            smaller=opts.smaller,
            on_begin=lambda name, b: run.reporter.begin(f"{name} @ micro-batch {b}"),
        )
    finally:
        run.reporter.finish()
        torch.set_num_threads(previous_threads)

    layers: list[Layer] = []
    samples: dict[str, Any] = {}
    high: list[str] = []
    for res in results:
        per_mb = {}
        samples[res.name] = {}
        for b, costs in res.per_micro_batch.items():
            summary = costs.summary()
            per_mb[str(b)] = LayerCost(**summary)
            samples[res.name][str(b)] = {
                "fwd_s": costs.fwd_s, "bwd_s": costs.bwd_s, "wgrad_s": costs.wgrad_s,
            }
            if costs.split_bwd_s:
                samples[res.name][str(b)].update(split_bwd_s=costs.split_bwd_s,
                                                 split_wgrad_s=costs.split_wgrad_s)
            worst = [
                f"{part} {summary[part + '_spread']:.2f}"
                for part in ("fwd", "bwd", "wgrad")
                if summary[part + "_spread"] > HIGH_SPREAD
            ]
            if worst:
                high.append(f"{res.name} @ {b} ({', '.join(worst)})")
        layers.append(
            Layer(name=res.name, param_bytes=float(res.param_bytes),
                  expert_param_bytes=float(res.expert_param_bytes), per_micro_batch=per_mb)
        )
    run.raw["layer_samples"] = samples
    return layers, high


def _assemble(
    run: _Run, plan: Any, dtype: DType, links: Links, layers: list[Layer], high: list[str]
) -> Profile:
    opts, inv = run.opts, run.inv
    peak, _ = peak_flops_for(inv.name) if inv.kind == "gpu" else (None, None)
    thread_text = f", {run.threads} torch thread(s)" if run.device == "cpu" else ""
    head_notes = [
        f"measured by pptune probe on {inv.name} (torch {run.torch.__version__}, "
        f"{run.compute_device}, {dtype.value}{thread_text})",
        f"per layer: median of {opts.repeats} repeats after {opts.warmup} warm-up "
        f"({'CUDA events' if run.device == 'cuda' else 'perf_counter_ns'}); *_spread = IQR / "
        "median; bwd_s = input-gradient pass (B), wgrad_s = full backward minus B; "
        "split_bwd_s / split_wgrad_s = B and W as torch.distributed.pipelining's split "
        "backward runs them; act_bytes = tensors saved for backward, once per storage, "
        "parameters excluded",
    ]
    notes = list(run.notes)
    if high:
        notes.append(
            f"high spread (IQR/median > {HIGH_SPREAD}), medians may move between runs: "
            + "; ".join(high)
        )
    run.raw["settings"] = {
        "device": run.compute_device,
        "dtype": dtype.value,
        "threads": run.threads if run.device == "cpu" else None,
        "micro_batch_sizes": opts.micro_batch_sizes,
        "repeats": opts.repeats,
        "warmup": opts.warmup,
        "max_bytes": (opts.max_bytes or DEFAULT_MAX_BYTES[run.device])
        if opts.comm and not opts.nccl_tests
        else None,
        "timeout_s": opts.timeout_s,
        "torchrun": run.env,
        "pid": os.getpid(),
    }
    run.raw["inventory"] = inv.to_raw()
    return Profile(
        source="probe",
        model=ModelInfo(
            name=plan.name,
            seq_len=plan.seq_len,
            global_batch=plan.global_batch,
            hidden_size=plan.hidden_size,
            num_blocks=plan.num_blocks,
            hf_config=str(Path(opts.hf_config).resolve()) if opts.hf_config is not None else None,
            experts=getattr(plan, "experts", None), top_k=getattr(plan, "top_k", None),
        ),
        device=DeviceInfo(
            name=inv.name, memory_bytes=inv.memory_bytes, count=inv.count, peak_flops=peak
        ),
        links=links,
        param_dtype_bytes=plan.param_dtype_bytes,
        layers=layers,
        notes=head_notes + plan.notes + notes,
        raw=run.raw,
    )
