"""Where the per-layer costs come from: the one resolver every command uses.

The first row that applies gives the costs:

====  ==========================================  ===========================================
row   costs from                                  taken when
====  ==========================================  ===========================================
1     a profile: ``--profile FILE``, or one the   given (a path or a ``Profile`` object; the
      command names (check-config: the config's  command's own beats --profile: a resumed
      ``profile:``; tune --resume: the probe      tune prices as it first did)
      profile it first priced with)
2     analytic: the model (``--model``,           PLAN (recommend, simulate): a model or a GPU
      ``--hf-config``; check-config: also the     is named. CHECK (check-config): a model is
      config's model, ``hf_config`` or layer      named (its GPU alone is not a model). RUN
      sizes) on ``--gpu`` [default h100-sxm]      (validate, tune): ``--gpu`` is named (their
                                                  model flags name what runs here, not costs)
3     ``./pptune-profile.json``                   the file is there. RUN: and no flag names
                                                  the model (the file may hold another one)
4     embedded default: analytic llama3-8b on     PLAN
      h100-sxm
5     a quick probe of the model here (the        RUN (validate, tune: their runs are priced
      caller's ``QuickProbe``)                    from this machine, not from an H100 preset)
====  ==========================================  ===========================================

CHECK has neither row 4 nor 5: ``find`` returns None and check-config warns
(``model-unknown``) instead of predicting memory and time.

The result is the planner's ``CostTable`` plus one line saying where it
came from and the notes the user should see. Every cost flag is checked
here, once, with one line naming the flag. A measured profile holds costs at
one sequence length on one device, so ``--seq-len`` (other than the measured
one), ``--gpu``, ``--efficiency``, ``--attention`` and ``--tp-comm-overlap``
are refused with it rather than silently ignored (RUN: ``--model``,
``--hf-config`` and ``--seq-len`` name the model that runs, not costs;
CHECK: the config's GPU and attention describe its job, and a profile the
config or ``--profile`` names prices it as measured, as check-config always has).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from enum import Enum
from pathlib import Path

from pptune import limits
from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.keys import CostKey, Precision, TableSource
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.presets import GpuSpec, ModelShape
from pptune.costmodel.search import CostTable
from pptune.costmodel.variation import pace_note, slowest_of
from pptune.costs import calibrated
from pptune.costs.dims import single_key
from pptune.costs.flops import model_flops_per_token
from pptune.costs.measured import check_profile_size, check_tp
from pptune.costs.modelspec import read_hf_config, with_seq_len
from pptune.costs.names import gpu_preset, model_preset
from pptune.costs.profiles import (
    DEFAULT_MICRO_BATCH_SIZES,
    DEFAULT_PROFILE_FILE,
    cost_table,
    preset_tables,
)
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.schemas import Profile, load_profile

__all__ = ["CostOptions", "Costs", "Mode", "QuickProbe", "find", "resolve"]


class Mode(Enum):
    """Which column of the table applies: what the command does with the costs."""

    PLAN = "plan"  # recommend, simulate: price a plan anywhere
    CHECK = "check"  # check-config: price the config's own model
    RUN = "run"  # validate, tune: price what runs on this machine


@dataclass(frozen=True)
class QuickProbe:
    """Row 5: measure the model here (validate, tune). ``measure`` says what it does
    (on stderr) and returns the profile; ``origin`` is the line the costs then carry."""

    measure: Callable[[], Profile]
    origin: str
    names_model: bool = False  # a flag names the model the run takes: skip row 3


@dataclass(frozen=True)
class Costs:
    table: CostTable  # at ``key``
    profile: Profile
    origin: str  # one line: where the costs came from
    measured: bool  # from a profile (probe), not the analytic model
    shape: ModelShape | None = None  # the analytic model's shape
    notes: list[str] = field(default_factory=list)
    tp_in_costs: int = 1  # tensor parallelism already inside the profile's numbers
    key: CostKey = field(default_factory=CostKey)  # the layout ``table`` prices
    # a table for every key (analytic: built on first use); measured: its own key only
    tables: TableSource | None = None
    gpu: GpuSpec | None = None  # the analytic costs' GPU preset
    profile_file: str | None = None  # the profile file read (rows 1 and 3), as --profile gives it

    def table_for(self, key: CostKey) -> CostTable:
        if key == self.key:
            return self.table
        if self.tables is None:
            raise BadInput(f"the costs of {self.origin} price {self.key} only, not {key}; "
                           "use analytic costs (--model/--hf-config) to price other layouts")
        return self.tables(key)

    # memory per GPU beyond the modelled tensors that a calibrated profile measured in
    # the jobs' logs (None: --reserve-gib's default applies)
    reserve_bytes: float | None = None
    # the options as priced: a calibrated profile's jobs' precision and kernels filled in
    options: CostOptions | None = None
    attention: str | None = None  # the attention kernel analytic costs price

    @property
    def described(self) -> str:
        """Where the costs come from and the attention kernel they price (the cost line)."""
        if not self.attention:
            return self.origin
        runs = self.gpu.sdpa_said(self.attention) if self.gpu is not None else ""
        return self.origin + f", {self.attention} attention{runs}"

    @property
    def model_flops_per_token(self) -> float | None:
        return model_flops_per_token(self.profile, 1 if self.measured else self.tp_in_costs,
                                     None if self.measured else self.shape)


def check_options(opts: CostOptions, sizes: tuple[int, ...] = ()) -> list[str]:
    """Every bad cost flag, one clause each (``sizes``: the micro-batch sizes to price)."""
    out = limits.problems(
        *(limits.problem(flag, v, 1, limits.MAX_TP)
          for flag, values in (("--tp", opts.tp), ("--cp", opts.cp), ("--ep", opts.ep),
                               ("--etp", opts.etp)) for v in values or ()),
        limits.problem("--moe-imbalance", opts.moe_imbalance, 1, limits.MAX_MOE_IMBALANCE),
        None if opts.seq_len is None else limits.problem("--seq-len", opts.seq_len, 1,
                                                         limits.MAX_SEQ_LEN),
        None if opts.efficiency is None else limits.problem("--efficiency", opts.efficiency,
                                                            0, 1, lo_open=True, capped=False),
        None if opts.gpu_spread is None else limits.problem("--gpu-spread", opts.gpu_spread,
                                                            0, 0.5, capped=False),
    )
    if len(sizes) > limits.MAX_MICRO_BATCH_CANDIDATES:
        out.append(f"--micro-batch-sizes lists {len(sizes)} sizes; pptune takes up to "
                   f"{limits.MAX_MICRO_BATCH_CANDIDATES}")
    out += limits.problems(*(limits.problem("micro-batch size", b, 1, limits.MAX_MICRO_BATCH)
                             for b in sizes))
    if opts.model is not None and opts.hf_config is not None:
        out.append("--model and --hf-config both name the model; give one of them")
    return out


def resolve(opts: CostOptions, *, sizes: tuple[int, ...] | None = None, cwd: Path | None = None,
            table_tp: int | None = None, profile: Profile | Path | None = None,
            probe: QuickProbe | None = None, search: bool = False,
            gpus_per_node: int | None = None, gpus: int = 1) -> Costs:
    """The costs by the table above: rows 1-4 (PLAN), or rows 1-3 and 5 with ``probe`` (RUN).

    ``sizes``: the micro-batch sizes to price (None: the profile's, or 1, 2, 4, 8);
    ``table_tp`` divides measured costs further (check-config's tp x cp), default the
    key's tp. ``search``: the caller walks several keys (recommend; dims.py), so the
    flags may list sizes; otherwise they name one key (dims.single_key).
    ``gpus_per_node``: the node the analytic costs' collectives sit in (None: the
    GPU preset's NVLink domain); ``gpus``: the GPUs of the job, whose slowest sets
    the analytic compute rates (costmodel/variation.py).
    """
    mode = Mode.RUN if probe is not None else Mode.PLAN
    found = find(opts, mode, sizes=sizes, cwd=cwd, table_tp=table_tp, profile=profile,
                 names_model=probe is not None and probe.names_model, search=search,
                 gpus_per_node=gpus_per_node, gpus=gpus)
    if found is not None:
        return found
    if probe is not None:
        _refuse_with_measured(opts, probe.origin, mode)  # before a minute of measuring
        return _measured(probe.measure(), probe.origin, opts, mode, sizes, table_tp, search)
    return _analytic(opts, None, sizes, default=True, search=search,
                     gpus_per_node=gpus_per_node, gpus=gpus)


def find(opts: CostOptions, mode: Mode = Mode.PLAN, *, sizes: tuple[int, ...] | None = None,
         cwd: Path | None = None, table_tp: int | None = None,
         profile: Profile | Path | None = None, shape: ModelShape | None = None,
         names_model: bool = False, search: bool = False,
         gpus_per_node: int | None = None,
         experts: ExpertParallel | None = None,
         recompute_modules: frozenset[str] = frozenset(), gpus: int = 1) -> Costs | None:
    """Rows 1-3 of the table; None when none applies. ``shape``: a model the caller
    built (check-config: from the config's layer sizes), which names the model;
    ``experts``: its MoE settings besides ep and etp, which the key holds (check-config:
    the config's routing imbalance and grouped GEMMs; default --moe-imbalance);
    ``recompute_modules``: the modules recomputed (check-config: the config's);
    ``gpus``: the job's GPUs (analytic and calibrated costs run at the slowest's pace)."""
    problems = check_options(opts, sizes or ())
    if problems:
        raise BadInput("; ".join(problems))
    if not search:
        single_key(opts)  # one value each, before anything is read or measured
    given = profile if profile is not None else opts.profile
    if isinstance(given, Profile):
        origin = f"profile of {given.model.name} on {given.device.name} ({given.source})"
        return _profile_costs(given, origin, opts, mode, sizes, table_tp, search,
                              gpus_per_node, recompute_modules, experts, gpus)
    shown = str(given)
    if given is None:
        model_named = opts.model is not None or opts.hf_config is not None or shape is not None
        analytic = {Mode.PLAN: model_named or opts.gpu is not None, Mode.CHECK: model_named,
                    Mode.RUN: opts.gpu is not None}[mode]
        if analytic:
            return _analytic(opts, shape, sizes, default=False, search=search,
                             gpus_per_node=gpus_per_node, experts=experts,
                             recompute_modules=recompute_modules, gpus=gpus)
        local = (cwd or Path.cwd()) / DEFAULT_PROFILE_FILE
        if not local.is_file() or (mode is Mode.RUN and (model_named or names_model)):
            return None
        given, shown = local, f"./{DEFAULT_PROFILE_FILE}"
    prof = load_profile(given)
    return replace(_profile_costs(prof, f"profile {shown} ({prof.source})", opts, mode, sizes,
                                  table_tp, search, gpus_per_node, recompute_modules, experts,
                                  gpus), profile_file=shown)


def _analytic(opts: CostOptions, shape: ModelShape | None, sizes: tuple[int, ...] | None, *,
              default: bool, search: bool, gpus_per_node: int | None,
              experts: ExpertParallel | None = None,
              recompute_modules: frozenset[str] = frozenset(), gpus: int = 1) -> Costs:
    notes: list[str] = []
    shape = shape or model_shape(opts, notes)
    if shape.num_blocks > limits.MAX_LAYERS:
        raise BadInput(f"{shape.name} has {shape.num_blocks:,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")
    gpu = opts.gpu or presets.DEFAULT_GPU
    median = gpu_preset(gpu)
    spec = slowest_of(median, gpus, opts.gpu_spread)
    attention = opts.attention.value if opts.attention is not None else "sdpa"
    ex = experts or opts.experts()
    tables = preset_tables(
        shape, spec, tuple(sorted(set(sizes or DEFAULT_MICRO_BATCH_SIZES))), experts=ex,
        efficiency=opts.efficiency,
        sequence_parallel=opts.splits_sequence, attention=attention,
        tp_comm_overlap=opts.overlaps_tp, gpus_per_node=gpus_per_node,
        recompute_modules=recompute_modules, profiles=(built := dict[CostKey, Profile]()),
        **opts.kernel_options())
    # searching: the plain layout prices the table's common parts (names, sizes,
    # memory); the search checks and prices the keys the flags ask for (dims.py)
    key = single_key(opts) if not search else CostKey()
    table = tables(key)
    origin = f"analytic {shape.name} on {gpu}" + (
        " (embedded default: no profile found)" if default else "") + pace_note(
        median, gpus, opts.gpu_spread) + (f", {ex.dispatcher.value} dispatch" if shape.moe else "")
    if median.cudnn_unmeasured(attention):
        notes.append(f"--attention cudnn: cuDNN's rates are not measured on {gpu}; priced at "
                     "FlashAttention-2's (Transformer Engine runs FlashAttention there)")
    return Costs(table, built[key], origin, measured=False, shape=shape, notes=notes,
                 tp_in_costs=key.tp, key=key, tables=tables, gpu=spec, attention=attention)


def _first(values: tuple[int, ...] | None) -> int:
    return values[0] if values else 1


def model_shape(opts: CostOptions, notes: list[str]) -> ModelShape:
    """--model NAME, --hf-config PATH or the default preset, at --seq-len."""
    if opts.hf_config is not None:
        hf = read_hf_config(opts.hf_config, opts.seq_len)
        notes += [f"warning: --hf-config {opts.hf_config}: {n}" for n in hf.notes]
        return hf.shape
    return with_seq_len(model_preset(opts.model or presets.DEFAULT_MODEL), opts.seq_len)


def analytic_costs(
    shape: ModelShape, gpu: str, micro_batch_sizes: tuple[int, ...] | list[int],
    key: CostKey | None = None, experts: ExpertParallel | None = None, *, gpus: int = 1,
    gpu_spread: float | None = None, factors: Factors | None = None, **options: object,
) -> tuple[CostTable, Profile]:
    """Analytic per-layer costs of ``shape`` on a GPU preset at one cost key, at the
    slowest of ``gpus`` GPUs' pace, its rates scaled by a calibration's ``factors``
    (None: the preset's; ``options`` as ``profiles.analytic_profile`` takes them)."""
    if shape.num_blocks > limits.MAX_LAYERS:
        raise BadInput(f"{shape.name} has {shape.num_blocks:,} layers; pptune plans up to "
                       f"{limits.MAX_LAYERS:,}")
    built: dict[CostKey, Profile] = {}
    key = key or CostKey()
    preset = gpu_preset(gpu)
    spec = slowest_of(preset if factors is None else scaled_gpu(preset, factors), gpus,
                      gpu_spread)
    table = preset_tables(shape, spec, tuple(sorted(set(micro_batch_sizes))), experts=experts,
                          profiles=built, **options)(key)
    return table, built[key]


def _profile_costs(prof: Profile, origin: str, opts: CostOptions, mode: Mode,
                   sizes: tuple[int, ...] | None, table_tp: int | None, search: bool,
                   gpus_per_node: int | None, recompute_modules: frozenset[str] = frozenset(),
                   experts: ExpertParallel | None = None, gpus: int = 1) -> Costs:
    """Row 1: a calibrated profile rebuilds the analytic costs for the configuration asked
    (PLAN, CHECK; ``experts`` as ``find``), a table per cost key; others price as measured."""
    if prof.calibration is None or mode is Mode.RUN:
        _refuse_with_measured(opts, origin, mode)
        return _measured(prof, origin, opts, mode, sizes, table_tp, search)
    cal = prof.calibration
    notes: list[str] = []
    if mode is Mode.PLAN:
        opts, notes = calibrated.as_ran(opts, cal)
        flags = [f for f, v in (("--model", opts.model), ("--hf-config", opts.hf_config),
                                ("--gpu", opts.gpu), ("--efficiency", opts.efficiency))
                 if v is not None]
        if flags:
            raise BadInput(f"{' and '.join(flags)}: the costs come from {origin}, calibrated "
                           f"for {cal.model.get('name')} on {cal.gpu}; drop {'/'.join(flags)} "
                           "or the profile (a calibration holds for its model and GPU)")
    built: dict[CostKey, Profile] = {}
    tables = calibrated.tables(
        cal, calibrated.sizes_of(prof, sizes), seq_len=opts.seq_len,
        sequence_parallel=opts.splits_sequence,
        attention=opts.attention.value if opts.attention is not None else None,
        tp_comm_overlap=opts.overlaps_tp, profiles=built,
        experts=experts or opts.experts(), gpus_per_node=gpus_per_node,
        recompute_modules=recompute_modules, gpus=gpus, gpu_spread=opts.gpu_spread,
        **opts.kernel_options())
    key = single_key(opts) if not search else CostKey()
    table = tables(key)
    shape = calibrated.shape(cal, opts.seq_len)
    where = (f"{origin}, calibrated for {shape.name} on {cal.gpu} "
             f"({calibrated.fitted_text(cal)})"
             + pace_note(presets.GPUS[cal.gpu], gpus, opts.gpu_spread))
    notes += calibrated.warnings(cal)
    return Costs(table, calibrated.with_calibration(built[key], cal), where, measured=False,
                 shape=shape, notes=notes, tp_in_costs=key.tp, key=key, tables=tables,
                 gpu=calibrated.gpu(cal, gpus, opts.gpu_spread), reserve_bytes=cal.reserve_bytes,
                 options=opts, attention=opts.attention.value if opts.attention else cal.attention)


def _refuse_with_measured(opts: CostOptions, where: str, mode: Mode) -> None:
    if mode is Mode.CHECK:  # the config's GPU and kernel describe its job; the profile prices it
        return
    named = () if mode is Mode.RUN else (("--model", opts.model), ("--hf-config", opts.hf_config))
    flags = [f for f, v in (*named, ("--gpu", opts.gpu), ("--efficiency", opts.efficiency),
                            ("--gpu-spread", opts.gpu_spread),
                            ("--attention", opts.attention),
                            ("--tp-comm-overlap", opts.tp_comm_overlap or None),
                            ("--cross-entropy", opts.cross_entropy and opts.cross_entropy.value),
                            ("--swiglu", opts.swiglu and opts.swiglu.value),
                            ("--wgrad-accum", opts.wgrad_accum and opts.wgrad_accum.value),
                            ("--fp8-kernels", opts.fp8_kernels and opts.fp8_kernels.value))
             if v is not None]
    if flags:
        verb = "describes" if len(flags) == 1 else "describe"
        raise BadInput(f"{' and '.join(flags)} {verb} analytic costs, but the costs come from "
                       f"{where} (measured); drop {'/'.join(flags)} or the profile")


def _measured(prof: Profile, origin: str, opts: CostOptions, mode: Mode,
              sizes: tuple[int, ...] | None, table_tp: int | None, search: bool) -> Costs:
    check_profile_size(prof, origin)
    other = [f"{flag} {','.join(str(getattr(v, 'value', v)) for v in values)}"
             for flag, values, plain in (("--cp", opts.cp, 1), ("--ep", opts.ep, 1),
                                          ("--etp", opts.etp, 1),
                                          ("--precision", opts.precision, Precision.BF16))
             if values and tuple(values) != (plain,)]
    if mode is not Mode.CHECK and other:
        one = len(other) == 1
        raise BadInput(f"{' and '.join(other)} {'asks' if one else 'ask'} for a layout the "
                       f"costs were not measured with (they come from {origin}: no context "
                       "or expert parallelism, the precision it ran in); use analytic costs "
                       f"(--model/--hf-config) or drop {'it' if one else 'them'}")
    if opts.tp and len(opts.tp) > 1:
        raise BadInput(f"--tp {','.join(map(str, opts.tp))}: the costs come from {origin} "
                       "(measured at tp 1); give one --tp or use analytic costs to search tp")
    tp = _first(opts.tp)
    if mode is not Mode.RUN and opts.seq_len is not None and opts.seq_len != prof.model.seq_len:
        raise BadInput(
            f"--seq-len {opts.seq_len}: the {origin} was measured at sequence length "
            f"{prof.model.seq_len}; measure a profile at {opts.seq_len} "
            f"(pptune probe --seq-len {opts.seq_len}) or use analytic costs (--model/--hf-config)"
        )
    notes = []
    if opts.sequence_parallel and prof.source == "probe":
        notes.append("--sequence-parallel changes analytic activation sizes only; "
                     "a probe profile keeps its measured bytes")
    notes += check_tp(prof, tp, origin)
    table = cost_table(prof, tp=table_tp or tp, tp_in_costs=1)
    missing = [b for b in (sizes or ()) if b not in table.by_mb]
    if missing:
        raise BadInput(
            f"the profile has no costs for micro-batch size(s) {missing}; it has "
            f"{sorted(table.by_mb)} (pptune probe --micro-batch-sizes)"
        )
    return Costs(table, prof, origin, measured=True, notes=notes, key=CostKey(tp=tp))
