"""Costs from a calibrated profile: the analytic model on the GPU with its rates scaled.

A profile written by ``pptune calibrate --run`` carries a ``calibration``
section (schemas.Calibration): the model's shape, the GPU preset, the factors
on its rates (pptune.costmodel.calibration) and the memory the jobs' logs
showed beyond the modelled tensors. Its layers price the first job's own
configuration; any other configuration of that model and GPU is priced by
rebuilding the analytic costs on the scaled GPU (``tables``), so recommend,
simulate and check-config answer what-ifs (other tp, pp, batch, schedule,
sequence length) at the rates the jobs ran at.

The factors were fitted at the GEMM precision the jobs ran (the calibration's
``precision``): a plan without ``--precision`` is priced at it, as the jobs
ran (``as_ran``), its FP8 plans with the FP8 linears the jobs ran (Transformer
Engine's or torchao's: their memory differs), and a flag that prices another
precision or other FP8 kernels than the jobs' says so. The same holds for the
jobs' other kernels: attention, tensor-parallel overlap, loss, SwiGLU and
weight-gradient accumulation (a Megatron-LM job of Llama 3.1 70B at 131k tokens
on 512 H100: its own layout priced at pptune's defaults 8% slower than the step
it was calibrated on, 53.4 s against 49.3 s). An FP8 job's factors on a BF16 plan would
price BF16 GEMMs at rates fitted to FP8 ones (a Megatron-LM FP8 job of
GPT-3 7B on 8 H100: its own configuration 43% slower than its log at BF16,
-0.3% at FP8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pptune.costmodel.analytic import AnalyticLayer
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey, Precision, TableSource
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.precision import Fp8Kernels, Fp8Recipe, TorchaoRecipe, is_low
from pptune.costmodel.presets import GPUS, GpuSpec, ModelShape
from pptune.costmodel.rates import Swiglu, WgradAccum
from pptune.costmodel.variation import slowest_of
from pptune.costs.modelspec import with_seq_len
from pptune.costs.profiles import DEFAULT_MICRO_BATCH_SIZES, analytic_profile, preset_tables
from pptune.errors import BadInput
from pptune.options import CostOptions
from pptune.schemas import Calibration, Profile


def factors(cal: Calibration) -> Factors:
    return Factors(**cal.factors)


def gpu(cal: Calibration, gpus: int = 1, spread: float | None = None) -> GpuSpec:
    """The calibration's GPU preset with its rates scaled by the factors, at the pace of
    the slowest of ``gpus`` (costmodel/variation.py; ``spread`` None: the preset's)."""
    return slowest_of(scaled_gpu(GPUS[cal.gpu], factors(cal)), gpus, spread)


def shape(cal: Calibration, seq_len: int | None = None) -> ModelShape:
    """The calibrated model, at ``seq_len`` (None: the jobs')."""
    return with_seq_len(ModelShape(**cal.model), seq_len)


def sizes_of(cal_profile: Profile, sizes: Sequence[int] | None) -> tuple[int, ...]:
    """The micro-batch sizes to price: those asked for, else the profile's and pptune's
    defaults (a calibrated model is priced at any size)."""
    if sizes:
        return tuple(sorted(set(sizes)))
    return tuple(sorted(set(DEFAULT_MICRO_BATCH_SIZES) | set(cal_profile.micro_batch_sizes())))


def profile(cal: Calibration, sizes: Sequence[int], *, tp: int = 1, seq_len: int | None = None,
            sequence_parallel: bool = False, attention: str | None = None,
            tp_comm_overlap: bool = False, ep: int = 1, etp: int = 1,
            layers_out: list[AnalyticLayer] | None = None, gpus: int = 1) -> Profile:
    """The analytic profile of the calibrated model on the calibrated GPU, for one
    configuration of ``gpus`` GPUs; the calibration rides along."""
    m = shape(cal, seq_len)
    experts = ExpertParallel(ep=ep, etp=etp) if m.moe else None
    if not m.moe and (ep, etp) != (1, 1):
        raise BadInput(f"--ep/--etp {ep}/{etp}: {m.name} has no experts to split")
    prof = analytic_profile(m, gpu(cal, gpus), tuple(sizes), tp=tp, efficiency=None,
                            sequence_parallel=sequence_parallel,
                            attention=attention or cal.attention, tp_comm_overlap=tp_comm_overlap,
                            experts=experts, layers_out=layers_out)
    return with_calibration(prof, cal)


def with_calibration(prof: Profile, cal: Calibration) -> Profile:
    """An analytic profile priced on the calibrated GPU, with the calibration and a note
    of its factors."""
    f = factors(cal)
    note = (f"calibrated: {cal.gpu}'s rates x compute {f.compute:.3g}, memory {f.memory:.3g}, "
            f"communication {f.communication:.3g} (fitted to {len(cal.runs)} job(s))")
    return prof.model_copy(update={"calibration": cal, "notes": [*prof.notes, note]})


def fitted_text(cal: Calibration) -> str:
    """The fitted factors as the cost line states them: each group tied in the fit once,
    a group the fit left out marked so (``pptune calibrate`` prints the same)."""
    f = cal.factors
    done = {g for tie in cal.fitted for g in tie}
    parts = []
    for tie in (t for t in cal.fitted if t):
        if len(tie) > 1 and len({f"{f[g]:.3g}" for g in tie}) == 1:  # one value, said once
            parts.append(", ".join(tie[:-1]) + f" and {tie[-1]} x{f[tie[0]]:.3g} (one factor)")
        else:
            parts += [f"{g} x{f[g]:.3g}" for g in tie]
    parts += [f"{g} x{f[g]:.3g} (not fitted)" for g in f if g not in done]
    jobs = len(cal.runs)
    return (f"fitted factors on the preset's rates, from {jobs} job{'s' * (jobs != 1)}: "
            + "; ".join(parts))


def warnings(cal: Calibration) -> list[str]:
    """What ``pptune calibrate`` stored as making the factors doubtful, as notes."""
    return [f"warning: the calibration's fitted factors: {w}" for w in cal.warnings]


def tables(cal: Calibration, sizes: Sequence[int], *, seq_len: int | None = None,
           sequence_parallel: bool = False, attention: str | None = None,
           tp_comm_overlap: bool = False, profiles: dict[CostKey, Profile] | None = None,
           experts: ExpertParallel | None = None, gpus: int = 1,
           gpu_spread: float | None = None, **options: object) -> TableSource:
    """A cost table per cost key (tp, cp, ep, etp, precision), built on first use (the
    search walks keys): the presets' own per-key tables (``preset_tables``), on the
    calibrated GPU at the slowest of ``gpus``' pace; ``options`` as ``analytic_profile``
    takes them."""
    return preset_tables(shape(cal, seq_len), gpu(cal, gpus, gpu_spread), tuple(sizes),
                         experts=experts,
                         profiles=profiles, sequence_parallel=sequence_parallel,
                         attention=attention or cal.attention, tp_comm_overlap=tp_comm_overlap,
                         **options)


# torchao's recipes beyond tensorwise (torchtitan's recipe_name): priced as torchao's
# (TorchaoRecipe, costmodel/precision.py), as check-config prices them (check/costs.py)
ROWWISE = frozenset({TorchaoRecipe.ROWWISE.value, TorchaoRecipe.ROWWISE_WITH_GW_HP.value})


def _recipe(name: str) -> Fp8Recipe:
    """pptune's recipe for one a job's file names: its own, else (torchtitan's rowwise,
    Megatron-LM's custom) tensorwise, whose scales are computed locally too (torchao's
    rowwise recipes also set ``torchao_recipe``: ``as_ran``)."""
    try:
        return Fp8Recipe(name)
    except ValueError:
        return Fp8Recipe.TENSORWISE


def as_ran(opts: CostOptions, cal: Calibration) -> tuple[CostOptions, list[str]]:
    """The cost options a plan is priced with on this calibration, and what to say: its
    jobs' GEMM precision where --precision is not given, their kernels where no flag names
    them (module docstring)."""
    ran = Precision(cal.precision or Precision.BF16.value)
    notes = []
    seq = cal.model.get("seq_len")
    if opts.seq_len and isinstance(seq, int) and not seq / 2 <= opts.seq_len <= 2 * seq:
        # attention grows with the sequence, the rest with the tokens: the factors were
        # fitted to another mix of the two (one factor per rate group, calibration.py)
        notes.append(f"--seq-len {opts.seq_len:,}: the calibrated jobs ran {seq:,} tokens a "
                     "sequence; their factors, fitted where attention weighed "
                     f"{'less' if opts.seq_len > seq else 'more'}, price this length too "
                     "(calibrate on a run at this length to fit its own)")
    if opts.precision is None:
        if ran is not Precision.BF16:
            opts = replace(opts, precision=(ran,))
            notes.append(f"precision {ran.value}: the GEMM precision the calibrated jobs ran "
                         "(--precision prices another)")
    elif any(p is not ran for p in opts.precision):
        other = ",".join(p.value for p in opts.precision if p is not ran)
        notes.append(f"--precision {other}: the calibrated jobs ran {ran.value}; their factors, "
                     f"fitted at {ran.value}'s rates, price {other} too (calibrate on a "
                     f"{other} job to fit its own)")
    low = any(is_low(p) for p in opts.precision or ())
    if low and cal.fp8_recipe:
        if opts.fp8_recipe is None:
            ran_recipe = _recipe(cal.fp8_recipe)
            opts = replace(opts, fp8_recipe=ran_recipe)
            torchao = cal.fp8_recipe in ROWWISE  # priced, and written by --emit, as it ran
            if torchao:
                opts = replace(opts, torchao_recipe=TorchaoRecipe(cal.fp8_recipe))
            if ran_recipe is not Fp8Recipe.DELAYED:
                priced = ("" if ran_recipe.value == cal.fp8_recipe or torchao
                          else f", priced as {ran_recipe.value} (local scales)")
                notes.append(f"FP8 recipe {cal.fp8_recipe}, as the calibrated jobs ran{priced} "
                             "(--fp8-recipe prices another)")
        elif opts.fp8_recipe.value != cal.fp8_recipe:
            notes.append(f"--fp8-recipe {opts.fp8_recipe.value}: the calibrated jobs ran "
                         f"{cal.fp8_recipe}; their factors price this recipe too")
    if low and cal.fp8_param_gather:
        if opts.fp8_param_gather is None:
            opts = replace(opts, fp8_param_gather=True)
            notes.append("FP8 weights (--fp8-param-gather), as the calibrated jobs kept them "
                         "(--no-fp8-param-gather prices BF16 weights)")
        elif not opts.fp8_param_gather:
            notes.append("--no-fp8-param-gather: the calibrated jobs kept their weights in FP8; "
                         "these plans are priced (and written by --emit) with BF16 weights")
    kernels = cal.fp8_kernels
    if kernels and low:
        if opts.fp8_kernels is None:
            opts = replace(opts, fp8_kernels=Fp8Kernels(kernels))
            if opts.fp8_kernels is not Fp8Kernels.TE:
                notes.append(f"FP8 linears: {kernels}'s, as the calibrated jobs ran them "
                             "(--fp8-kernels prices others)")
        elif opts.fp8_kernels.value != kernels:
            notes.append(f"--fp8-kernels {opts.fp8_kernels.value}: the calibrated jobs ran FP8 "
                         f"with {kernels}'s kernels; their factors price these too")
    return _kernels_as_ran(opts, cal, notes), notes


def _ran(cal: Calibration) -> dict[str, Any]:
    """The kernels the calibrated jobs ran, by CostOptions field (a key the profile does
    not hold left out: pptune's default then; the attention kernel is the tables' own
    default, ``tables``)."""
    out: dict[str, Any] = {}
    if cal.tp_comm_overlap is not None:
        out["tp_comm_overlap"] = cal.tp_comm_overlap
    for name, kind in (("cross_entropy", CrossEntropy), ("swiglu", Swiglu),
                       ("wgrad_accum", WgradAccum), ("moe_dispatcher", Dispatcher)):
        value = getattr(cal, name)
        if value is not None:
            out[name] = kind(value)
    return out


def _flag(name: str, value: object) -> str:
    """A kernel option as its flag spells it."""
    if name == "tp_comm_overlap":
        return "--tp-comm-overlap" if value else "--no-tp-comm-overlap"
    return f"--{name.replace('_', '-')} {getattr(value, 'value', value)}"


def _kernels_as_ran(opts: CostOptions, cal: Calibration, notes: list[str]) -> CostOptions:
    """``opts`` with the kernels the jobs ran where no flag names them, and what to say:
    the filled ones that are not pptune's defaults, and a flag that prices others."""
    filled: dict[str, Any] = {}
    for name, ran in _ran(cal).items():
        given = getattr(opts, name)
        if given is None:
            filled[name] = ran
        elif given != ran:
            notes.append(f"{_flag(name, given)}: the calibrated jobs ran {_flag(name, ran)}; "
                         "their factors price this too")
    plain = CostOptions()  # what each option left unset prices (its property)
    said = [_flag(n, v) for n, v in filled.items()
            if n in _PRICED and v != getattr(plain, _PRICED[n])]
    if said:
        notes.append(f"kernels as the calibrated jobs ran: {', '.join(said)} (a flag prices "
                     "others)")
    return replace(opts, **filled)


# the CostOptions property that prices each kernel option left unset
_PRICED = {"tp_comm_overlap": "overlaps_tp", "cross_entropy": "loss_kernels",
           "swiglu": "swiglu_kernels", "wgrad_accum": "wgrad", "moe_dispatcher": "dispatcher"}
