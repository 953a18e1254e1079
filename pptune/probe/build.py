"""Run the probe and assemble the ``Profile`` (pptune.schemas).

Order: resolve the options; inventory (NVML, else the CPU); the model plan
(so a bad model input fails before anything is spawned); links (measured,
read from nccl-tests output, or documented defaults); then per-layer costs
on rank 0. Talk goes through a ``Reporter`` (warnings, progress); nothing
here prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

from pptune.costmodel import presets
from pptune.errors import BadInput
from pptune.launch import ranks
from pptune.launch.deps import import_torch
from pptune.launch.stats import HIGH_SPREAD
from pptune.probe import comm as comm_mod
from pptune.probe.fit import AlphaBeta, fit_alpha_beta
from pptune.probe.inventory import Inventory, cpu_inventory, gpu_inventory, peak_flops_for
from pptune.report.fmt import fmt_bytes
from pptune.schemas import (
    DeviceInfo,
    Layer,
    LayerCost,
    LinkPair,
    Links,
    LinkSpec,
    ModelInfo,
    Profile,
)

MIB = 1024**2
DEFAULT_OUTPUT = Path("pptune-profile.json")
DEFAULT_MODEL = "gpt-small"
DEFAULT_MICRO_BATCH_SIZES = [1, 2, 4]
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 3
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_BYTES = {"cpu": 64 * MIB, "cuda": 256 * MIB}
# --quick: the CI smoke run, well under a minute on a 2-core CPU machine.
QUICK = {"micro_batch_sizes": [1, 2], "repeats": 5, "warmup": 2, "max_bytes": 4 * MIB}

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


class DeviceChoice(str, Enum):
    AUTO = "auto"
    CPU = "cpu"
    CUDA = "cuda"


class DType(str, Enum):
    AUTO = "auto"  # fp32 on CPU, bf16 on CUDA
    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


_TORCH_DTYPES = {DType.FP32: "float32", DType.BF16: "bfloat16", DType.FP16: "float16"}


@dataclass
class ProbeOptions:
    """What the user asked for; ``None`` means "not given" (quick or normal default)."""

    model: str | None = None
    hf_config: Path | None = None
    module: str | None = None
    micro_batch_sizes: list[int] | None = None
    repeats: int | None = None
    warmup: int | None = None
    comm: bool = True
    nccl_tests: list[Path] = field(default_factory=list)
    max_bytes: int | None = None
    timeout_s: float | None = None
    quick: bool = False
    device: DeviceChoice | None = None
    dtype: DType = DType.AUTO
    threads: int | None = None
    seq_len: int | None = None


class Reporter(Protocol):
    def warn(self, message: str) -> None: ...
    def start(self, label: str, total: int) -> None: ...
    def advance(self, description: str | None = None) -> None: ...
    def finish(self) -> None: ...


class NullReporter:
    def warn(self, message: str) -> None:
        pass

    def start(self, label: str, total: int) -> None:
        pass

    def advance(self, description: str | None = None) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass
class ProbeOutcome:
    profile: Profile | None  # None on torchrun ranks other than 0
    rank: int = 0
    high_spread: list[str] = field(default_factory=list)


def resolve_options(opts: ProbeOptions) -> ProbeOptions:
    """Fill defaults (``--quick`` ones first) and check every value; BadInput names the knob."""
    sources = [
        flag
        for flag, value in (("--model", opts.model), ("--hf-config", opts.hf_config),
                            ("--module", opts.module))
        if value is not None
    ]
    if len(sources) > 1:
        raise BadInput(f"{' and '.join(sources)} both name the model; give one of them")
    if opts.nccl_tests and not opts.comm:
        raise BadInput("--nccl-tests and --no-comm both given; --nccl-tests already skips the "
                       "bandwidth probe, drop one")
    quick: dict[str, Any] = QUICK if opts.quick else {}
    out = replace(
        opts,
        model=opts.model if sources else DEFAULT_MODEL,
        micro_batch_sizes=opts.micro_batch_sizes
        or quick.get("micro_batch_sizes", DEFAULT_MICRO_BATCH_SIZES),
        repeats=opts.repeats if opts.repeats is not None else quick.get("repeats", DEFAULT_REPEATS),
        warmup=opts.warmup if opts.warmup is not None else quick.get("warmup", DEFAULT_WARMUP),
        max_bytes=opts.max_bytes if opts.max_bytes is not None else quick.get("max_bytes"),
        timeout_s=opts.timeout_s if opts.timeout_s is not None else DEFAULT_TIMEOUT_S,
        device=opts.device or (DeviceChoice.CPU if opts.quick else DeviceChoice.AUTO),
    )
    sizes = out.micro_batch_sizes or []
    bad = [b for b in sizes if b < 1]
    if bad or not sizes:
        raise BadInput(f"--micro-batch-sizes must be positive integers, got {sizes}")
    if len(set(sizes)) != len(sizes):
        raise BadInput(f"--micro-batch-sizes has repeated values: {sizes}")
    out.micro_batch_sizes = sorted(sizes)
    if (out.repeats or 0) < 1:
        raise BadInput(f"--repeats must be at least 1, got {out.repeats}")
    if (out.warmup or 0) < 0:
        raise BadInput(f"--warmup must be 0 or more, got {out.warmup}")
    if out.max_bytes is not None and out.max_bytes < comm_mod.MIN_BYTES:
        raise BadInput(
            f"--max-bytes {out.max_bytes} is below the smallest message "
            f"({comm_mod.MIN_BYTES} bytes); give e.g. 64M"
        )
    if (out.timeout_s or 0) <= 0:
        raise BadInput(f"--timeout must be positive seconds, got {out.timeout_s}")
    if out.threads is not None and out.threads < 1:
        raise BadInput(f"--threads must be at least 1, got {out.threads}")
    if out.seq_len is not None and out.seq_len < 1:
        raise BadInput(f"--seq-len must be at least 1, got {out.seq_len}")
    return out


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


def _default_links(inv: Inventory, device: str) -> tuple[dict[str, AlphaBeta], str]:
    """Per-op defaults for unmeasured links, and where they come from."""
    if device == "cpu":
        return (
            {"p2p": CPU_LOOPBACK_P2P, "allreduce": CPU_LOOPBACK_ALLREDUCE},
            "CPU loopback defaults (p2p 100 us + 1 GB/s, all-reduce 200 us + 0.5 GB/s bus; "
            "pptune.probe.build)",
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


def _links_from_points(
    found: dict[tuple[str, str], tuple[list[tuple[float, float]], str]],
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
    for (scope, op), (points, source) in sorted(found.items()):
        fits[(scope, op)] = _fit(points, f"{scope} {op} ({source})")
        ab = fits[(scope, op)]
        fit_raw[f"{scope}.{op}"] = {
            "latency_s": ab.latency_s,
            "bytes_per_s": ab.bytes_per_s,
            "source": source,
            "points": len(points),
        }
    values, default_src = defaults
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
    links = Links(
        intra_node=LinkPair(
            p2p=_spec(fits[("intra_node", "p2p")]),
            allreduce=_spec(fits[("intra_node", "allreduce")]),
        ),
        inter_node=LinkPair(
            p2p=_spec(fits[("inter_node", "p2p")]),
            allreduce=_spec(fits[("inter_node", "allreduce")]),
        ),
    )
    return links, fit_raw


def points_from_comm(result: dict[str, Any]) -> dict[tuple[str, str], tuple[list[tuple[float, float]], str]]:
    """(bus bytes, median seconds) per measured (scope, op) of a comm sweep."""
    found = {}
    for sweep in result.get("sweeps", []):
        n = len(sweep["ranks"])
        factor = 1.0 if sweep["op"] == "p2p" else 2.0 * (n - 1) / n
        pts = [(row["bytes"] * factor, row["time_s"]) for row in sweep["rows"]]
        found[(sweep["scope"], sweep["op"])] = (pts, f"measured, {result['backend']}, {n} ranks")
    return found


def points_from_nccl_tests(
    paths: list[Path], notes: list[str]
) -> tuple[dict[tuple[str, str], tuple[list[tuple[float, float]], str]], list[dict[str, Any]]]:
    from pptune.probe.nccl_tests import load_nccl_tests

    found: dict[tuple[str, str], tuple[list[tuple[float, float]], str]] = {}
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
    run = _Run(
        opts=opts,
        torch=torch,
        device=device,
        compute_device=f"cuda:{env['LOCAL_RANK']}" if env and device == "cuda" else device,
        env=env,
        reporter=reporter,
        inv=_inventory(device, torch, reporter) if rank == 0 else cpu_inventory(),
        threads=opts.threads or 1,
    )
    dtype = opts.dtype
    if dtype == DType.AUTO:
        dtype = DType.BF16 if device == "cuda" else DType.FP32
    # the model plan before any process is spawned: a bad model input fails at once
    plan = _plan_model(opts, run.compute_device, getattr(torch, _TORCH_DTYPES[dtype]))
    for message in plan.warnings:
        reporter.warn(message)

    found = _measure_links(run)
    if rank != 0:
        return ProbeOutcome(profile=None, rank=rank)
    links, run.raw["links_fit"] = _links_from_points(found, _default_links(run.inv, device), run.notes)
    layers, high = _measure_layers(run, plan)
    return ProbeOutcome(profile=_assemble(run, plan, dtype, links, layers, high), high_spread=high)


def _measure_links(run: _Run) -> dict[tuple[str, str], tuple[list[tuple[float, float]], str]]:
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
        run.reporter.start(f"bandwidth ({world} local processes)", len(cplan.sizes) * 2)
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
    previous_threads = torch.get_num_threads()
    if run.device == "cpu":
        torch.set_num_threads(run.threads)
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
            worst = [
                f"{part} {summary[part + '_spread']:.2f}"
                for part in ("fwd", "bwd", "wgrad")
                if summary[part + "_spread"] > HIGH_SPREAD
            ]
            if worst:
                high.append(f"{res.name} @ {b} ({', '.join(worst)})")
        layers.append(
            Layer(name=res.name, param_bytes=float(res.param_bytes), per_micro_batch=per_mb)
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
        "median; bwd_s = input-gradient pass (B), wgrad_s = full backward minus B; act_bytes = "
        "tensors saved for backward, once per storage, parameters excluded",
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
