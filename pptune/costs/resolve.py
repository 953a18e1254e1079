"""Where the per-layer costs come from: the one resolver every command uses.

Order: ``--profile FILE``; else ``--model``/``--hf-config``/``--gpu``
presets (analytic); else ``./pptune-profile.json``; else the embedded
default (analytic llama3-8b on h100-sxm). The result is the planner's
``CostTable`` plus one line saying where it came from and the notes the
user should see. Every cost flag is checked here, once, with one line
naming the flag.

A measured profile holds costs at one sequence length on one device, so
``--seq-len`` (other than the measured one), ``--gpu`` and ``--efficiency``
are refused with it rather than silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pptune import limits
from pptune.costmodel import presets
from pptune.costmodel.presets import ModelShape
from pptune.costmodel.search import CostTable
from pptune.costs.modelspec import read_hf_config, with_seq_len
from pptune.costs.profiles import (
    DEFAULT_MICRO_BATCH_SIZES,
    DEFAULT_PROFILE_FILE,
    analytic_profile,
    cost_table,
    model_preset,
)
from pptune.errors import BadInput
from pptune.schemas import Profile, load_profile


@dataclass(frozen=True)
class CostOptions:
    """The cost flags, as every command declares them (``pptune.cli.options``)."""

    profile: Path | None = None
    model: str | None = None
    hf_config: Path | None = None
    seq_len: int | None = None
    gpu: str | None = None
    tp: int = 1
    efficiency: float | None = None  # None: each GEMM's from the per-op model
    attention: str | None = None  # None: flash
    tp_comm_overlap: bool = False
    sequence_parallel: bool = False
    micro_batch_sizes: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Costs:
    table: CostTable
    profile: Profile
    origin: str  # one line: where the costs came from
    measured: bool  # from a profile file (probe), not the analytic model
    shape: ModelShape | None = None  # the analytic model's shape
    notes: list[str] = field(default_factory=list)

    @property
    def model_flops_per_token(self) -> float | None:
        return model_flops_per_token(self.profile, 1 if self.measured else self.tp_in_costs)

    tp_in_costs: int = 1  # tensor parallelism already inside the profile's numbers


def model_flops_per_token(profile: Profile, tp_in_costs: int = 1) -> float | None:
    """Training FLOPs per token of the model (forward + backward, no recomputation).

    6 x N for the weight matmuls (2 forward, 4 backward; Kaplan et al. 2020,
    "Scaling Laws for Neural Language Models", sec. 2.1) plus the attention
    scores and their product with V: 12 x L x h x s for the full square
    (Chowdhery et al. 2022, PaLM, appendix B), halved for causal masking as
    the analytic cost model counts it, so 6 x L x h x s. N counts every
    parameter but the embedding table's (a lookup, no matmul); the LM head is
    counted. None when the profile has no parameters.
    """
    layers = profile.layers[1:] if profile.layers[0].name == "embedding" else profile.layers
    params = sum(layer.param_bytes for layer in layers) / profile.param_dtype_bytes * tp_in_costs
    if params <= 0:
        return None
    m = profile.model
    attention = 6 * m.num_blocks * m.hidden_size * m.seq_len if m.num_blocks and m.hidden_size else 0
    return 6 * params + attention


def check_options(opts: CostOptions) -> list[str]:
    """Every bad cost flag, one clause each."""
    out = limits.problems(
        limits.problem("--tp", opts.tp, 1, limits.MAX_TP),
        None if opts.seq_len is None else limits.problem("--seq-len", opts.seq_len, 1,
                                                         limits.MAX_SEQ_LEN),
        None if opts.efficiency is None else limits.problem("--efficiency", opts.efficiency,
                                                            0, 1, lo_open=True, capped=False),
    )
    sizes = opts.micro_batch_sizes or ()
    if len(sizes) > limits.MAX_MICRO_BATCH_CANDIDATES:
        out.append(f"--micro-batch-sizes lists {len(sizes)} sizes; pptune takes up to "
                   f"{limits.MAX_MICRO_BATCH_CANDIDATES}")
    out += limits.problems(*(limits.problem("micro-batch size", b, 1, limits.MAX_MICRO_BATCH)
                             for b in sizes))
    if opts.model is not None and opts.hf_config is not None:
        out.append("--model and --hf-config both name the model; give one of them")
    return out


def resolve(opts: CostOptions, cwd: Path | None = None, table_tp: int | None = None) -> Costs:
    """The cost table for these flags; ``table_tp`` divides the costs further
    (check-config's tp x cp), default ``opts.tp``."""
    problems = check_options(opts)
    if problems:
        raise BadInput("; ".join(problems))
    analytic_asked = opts.model is not None or opts.hf_config is not None or opts.gpu is not None
    if opts.profile is not None:
        _refuse_with_measured(opts, f"--profile {opts.profile}")
        prof = load_profile(opts.profile)
        return _measured(prof, f"profile {opts.profile} ({prof.source})", opts, table_tp)
    local = (cwd or Path.cwd()) / DEFAULT_PROFILE_FILE
    if not analytic_asked and local.is_file():
        _refuse_with_measured(opts, f"./{DEFAULT_PROFILE_FILE}")
        prof = load_profile(local)
        return _measured(prof, f"profile ./{DEFAULT_PROFILE_FILE} ({prof.source})", opts, table_tp)
    notes: list[str] = []
    shape = model_shape(opts, notes)
    gpu = opts.gpu or presets.DEFAULT_GPU
    table, prof = analytic_costs(shape, gpu, opts.micro_batch_sizes or DEFAULT_MICRO_BATCH_SIZES,
                                 opts.tp, opts.efficiency, opts.sequence_parallel, table_tp,
                                 attention=opts.attention or "flash",
                                 tp_comm_overlap=opts.tp_comm_overlap)
    origin = f"analytic {shape.name} on {gpu}" + (
        "" if analytic_asked else " (embedded default: no profile found)")
    return Costs(table, prof, origin, measured=False, shape=shape, notes=notes,
                 tp_in_costs=opts.tp)


def model_shape(opts: CostOptions, notes: list[str]) -> ModelShape:
    """--model NAME, --hf-config PATH or the default preset, at --seq-len."""
    if opts.hf_config is not None:
        hf = read_hf_config(opts.hf_config, opts.seq_len)
        notes += [f"warning: --hf-config {opts.hf_config}: {n}" for n in hf.notes]
        return hf.shape
    return with_seq_len(model_preset(opts.model or presets.DEFAULT_MODEL), opts.seq_len)


def analytic_costs(
    shape: ModelShape, gpu: str, micro_batch_sizes: tuple[int, ...] | list[int], tp: int = 1,
    efficiency: float | None = None, sequence_parallel: bool = False,
    table_tp: int | None = None, attention: str = "flash", tp_comm_overlap: bool = False,
) -> tuple[CostTable, Profile]:
    """Analytic per-layer costs of ``shape`` on a GPU preset, tensor-parallel ``tp``."""
    if shape.num_blocks > limits.MAX_LAYERS:
        raise BadInput(f"{shape.name} has {shape.num_blocks:,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")
    prof = analytic_profile(shape, gpu, tuple(sorted(set(micro_batch_sizes))), tp=tp,
                            efficiency=efficiency, sequence_parallel=sequence_parallel,
                            attention=attention, tp_comm_overlap=tp_comm_overlap)
    return cost_table(prof, tp=table_tp or tp, tp_in_costs=tp), prof


def measured_costs(path: Path, table_tp: int = 1) -> CostTable:
    """The cost table of a profile file (measured at tp=1), divided by ``table_tp``."""
    prof = load_profile(path)
    _check_profile_size(prof, str(path))
    return cost_table(prof, tp=table_tp, tp_in_costs=1)


def find_profile(profile: Path | None, cwd: Path | None = None) -> tuple[Profile, str] | None:
    """--profile FILE, else ./pptune-profile.json, else None (validate then probes)."""
    if profile is not None:
        prof = load_profile(profile)
        return prof, f"profile {profile} ({prof.source})"
    local = (cwd or Path.cwd()) / DEFAULT_PROFILE_FILE
    if local.is_file():
        prof = load_profile(local)
        return prof, f"profile ./{DEFAULT_PROFILE_FILE} ({prof.source})"
    return None


def _refuse_with_measured(opts: CostOptions, where: str) -> None:
    flags = [f for f, v in (("--model", opts.model), ("--hf-config", opts.hf_config),
                            ("--gpu", opts.gpu), ("--efficiency", opts.efficiency),
                            ("--attention", opts.attention),
                            ("--tp-comm-overlap", opts.tp_comm_overlap or None))
             if v is not None]
    if flags:
        raise BadInput(f"{' and '.join(flags)} describe analytic costs, but the costs come from "
                       f"{where} (measured); drop {'/'.join(flags)} or the profile")


def _check_profile_size(prof: Profile, where: str) -> None:
    if len(prof.layers) > limits.MAX_LAYERS + 2:
        raise BadInput(f"{where} has {len(prof.layers):,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")


def _measured(prof: Profile, origin: str, opts: CostOptions, table_tp: int | None) -> Costs:
    _check_profile_size(prof, origin)
    if opts.seq_len is not None and opts.seq_len != prof.model.seq_len:
        raise BadInput(
            f"--seq-len {opts.seq_len}: the {origin} was measured at sequence length "
            f"{prof.model.seq_len}; measure a profile at {opts.seq_len} "
            f"(pptune probe --seq-len {opts.seq_len}) or use analytic costs (--model/--hf-config)"
        )
    notes = []
    if opts.sequence_parallel and prof.source == "probe":
        notes.append("--sequence-parallel changes analytic activation sizes only; "
                     "a probe profile keeps its measured bytes")
    if opts.tp != 1:
        notes.append(
            f"the profile was measured without tensor parallelism; --tp {opts.tp} divides its "
            "compute, memory and sends by tp (linear scaling, an approximation)"
        )
    table = cost_table(prof, tp=table_tp or opts.tp, tp_in_costs=1)
    missing = [b for b in (opts.micro_batch_sizes or ()) if b not in table.by_mb]
    if missing:
        raise BadInput(
            f"the profile has no costs for micro-batch size(s) {missing}; it has "
            f"{sorted(table.by_mb)} (pptune probe --micro-batch-sizes)"
        )
    return Costs(table, prof, origin, measured=True, notes=notes)
