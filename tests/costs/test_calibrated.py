"""A calibrated profile: the resolver rebuilds the analytic costs on the scaled GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pptune.costmodel import presets
from pptune.costmodel.calibration import Factors, scaled_gpu
from pptune.costmodel.keys import CostKey, Precision
from pptune.costs import calibrated
from pptune.costs.profiles import analytic_profile, cost_table
from pptune.costs.resolve import CostOptions, Mode, find, resolve
from pptune.errors import BadInput
from pptune.schemas import CalibrationRun, Profile
from pptune.tune.jobs import calibration

SHAPE = dataclasses.replace(presets.MODELS["gpt3-1.3b"], num_blocks=4)
RUN = CalibrationRun(config="job.sh", framework="megatron", step_source="--step-s",
                     measured_step_s=1.0, predicted_step_s=1.0, residual=0.0)


def _profile(f: Factors, reserve: float | None = None) -> Profile:
    cal = calibration(SHAPE, "a100-80gb", None, f, [["compute", "memory", "communication"]],
                      [RUN], reserve)
    return calibrated.profile(cal, (1, 2), tp=1)


def test_the_rebuilt_costs_are_the_analytic_ones_on_the_scaled_gpu(tmp_path: Path) -> None:
    f = Factors(0.7, 0.9, 0.5)
    path = tmp_path / "cal.json"
    path.write_text(_profile(f).model_dump_json())
    # another tp than the job's (sequence parallelism off, as analytic_profile prices it)
    got = resolve(CostOptions(profile=path, tp=2, sequence_parallel=False))
    want = cost_table(analytic_profile(SHAPE, scaled_gpu(presets.GPUS["a100-80gb"], f), (1, 2),
                                       tp=2), tp=2, tp_in_costs=2)
    assert got.table.by_mb[2].fwd_s == pytest.approx(want.by_mb[2].fwd_s)
    assert got.table.by_mb[1].bwd_s == pytest.approx(want.by_mb[1].bwd_s)
    assert not got.measured and got.tp_in_costs == 2
    assert got.origin.endswith("calibrated for gpt3-1.3b on a100-80gb (fitted factors on the "
                               "preset's rates, from 1 job: compute x0.7; memory x0.9; "
                               "communication x0.5)")
    # the sizes asked for are priced (a calibrated model is priced at any size)
    assert sorted(resolve(CostOptions(profile=path), sizes=(16,)).table.by_mb) == [16]


def test_check_config_prices_the_configs_cp_on_the_calibrated_gpu() -> None:
    prof = _profile(Factors.common(0.8))
    assert prof.calibration is not None
    found = find(CostOptions(tp=2, cp=2, sequence_parallel=False), Mode.CHECK, sizes=(1,),
                 table_tp=4, profile=prof)
    assert found is not None and found.key == CostKey(tp=2, cp=2)
    # context parallelism priced as the analytic model prices it (its exchange, its
    # attention per rank), not the profile's layers divided by cp
    want = calibrated.tables(prof.calibration, (1,))(CostKey(tp=2, cp=2))
    assert found.table.by_mb[1].fwd_s == pytest.approx(want.by_mb[1].fwd_s)
    assert found.tables is not None and found.table_for(CostKey(tp=4)).names == want.names


def test_the_reserve_rides_with_the_costs() -> None:
    assert resolve(CostOptions(), profile=_profile(Factors(), 3e9)).reserve_bytes == 3e9
    assert resolve(CostOptions(), profile=_profile(Factors())).reserve_bytes is None


def test_one_table_per_cost_key() -> None:
    cal = _profile(Factors.common(0.8)).calibration
    assert cal is not None
    source = calibrated.tables(cal, (1,))
    t1, t2 = source(CostKey(tp=1)), source(CostKey(tp=2))
    assert source(CostKey(tp=1)) is t1  # built once
    assert sum(t2.param_bytes) == pytest.approx(sum(t1.param_bytes) / 2, rel=0.01)
    # context parallelism and FP8 GEMMs on the calibrated GPU: its rates, scaled
    cp2 = source(CostKey(cp=2))
    assert sum(cp2.by_mb[1].fwd_s) < sum(t1.by_mb[1].fwd_s)
    with pytest.raises(BadInput, match="a100-80gb has no FP8 tensor cores"):
        source(CostKey(precision=Precision.FP8))  # the A100 the calibration is for
    with pytest.raises(BadInput, match="no expert layers"):
        source(CostKey(ep=2))


def test_another_model_or_gpu_beside_a_calibration_is_refused() -> None:
    prof = _profile(Factors())
    with pytest.raises(BadInput, match=r"--gpu: the costs come from .* calibrated for gpt3-1\.3b"):
        resolve(CostOptions(gpu="h100-sxm"), profile=prof)
    with pytest.raises(BadInput, match="--model and --efficiency"):
        resolve(CostOptions(model="llama3-8b", efficiency=0.5), profile=prof)


def test_a_calibration_names_a_preset_gpu_and_a_model_shape(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(_profile(Factors()).model_dump_json().replace('"gpu":"a100-80gb"',
                                                                 '"gpu":"tpu-v9"'))
    with pytest.raises(BadInput, match="calibration gpu 'tpu-v9' is not a preset"):
        resolve(CostOptions(profile=path))
    path.write_text(_profile(Factors()).model_dump_json().replace('"hidden":2048', '"width":2048'))
    with pytest.raises(BadInput, match="calibration model is not a model shape"):
        resolve(CostOptions(profile=path))


def test_plans_are_priced_at_the_precision_the_jobs_ran() -> None:
    from pptune.costmodel.precision import Fp8Kernels, Fp8Recipe, TorchaoRecipe

    cal = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None,
                      precision="fp8", fp8_kernels="torchao")
    opts, notes = calibrated.as_ran(CostOptions(), cal)
    assert opts.precision == (Precision.FP8,) and "the calibrated jobs ran" in notes[0]
    # the jobs' FP8 linears, as they ran, where --fp8-kernels is not given
    assert opts.fp8_kernels is Fp8Kernels.TORCHAO and "torchao's, as the calibrated" in notes[1]
    opts, notes = calibrated.as_ran(
        CostOptions(precision=Precision.FP8, fp8_kernels=Fp8Kernels.TE), cal)
    assert opts.fp8_kernels is Fp8Kernels.TE  # the flag wins, and is said to
    assert notes == ["--fp8-kernels te: the calibrated jobs ran FP8 with torchao's kernels; "
                     "their factors price these too"]
    opts, notes = calibrated.as_ran(CostOptions(precision=Precision.BF16), cal)
    assert opts.precision == (Precision.BF16,)
    assert notes == ["--precision bf16: the calibrated jobs ran fp8; their factors, fitted at "
                     "fp8's rates, price bf16 too (calibrate on a bf16 job to fit its own)"]
    same = CostOptions(precision=Precision.FP8, fp8_kernels=Fp8Kernels.TORCHAO)
    assert calibrated.as_ran(same, cal) == (same, [])
    # a BF16 calibration, or one written before the field: nothing changes, nothing said
    plain = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                        [["compute", "memory", "communication"]], [RUN], None)
    assert calibrated.as_ran(CostOptions(), plain) == (CostOptions(), [])
    # the jobs' FP8 scaling and FP8 weights: applied where no flag states them, said
    ran = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None,
                      precision="fp8", fp8_recipe="blockwise", fp8_param_gather=True)
    kept = CostOptions(precision=(Precision.FP8,), fp8_recipe=Fp8Recipe.BLOCKWISE,
                       fp8_param_gather=True)
    applied, notes = calibrated.as_ran(CostOptions(), ran)
    assert applied == kept
    assert notes[1:] == [
        "FP8 recipe blockwise, as the calibrated jobs ran (--fp8-recipe prices another)",
        "FP8 weights (--fp8-param-gather), as the calibrated jobs kept them "
        "(--no-fp8-param-gather prices BF16 weights)"]
    assert calibrated.as_ran(kept, ran) == (kept, [])
    # flags that state others win, and the difference is said
    other = CostOptions(precision=(Precision.FP8,), fp8_recipe=Fp8Recipe.DELAYED,
                        fp8_param_gather=False)
    assert calibrated.as_ran(other, ran) == (other, [
        "--fp8-recipe delayed: the calibrated jobs ran blockwise; their factors price this "
        "recipe too",
        "--no-fp8-param-gather: the calibrated jobs kept their weights in FP8; these plans "
        "are priced (and written by --emit) with BF16 weights"])
    # torchtitan's rowwise: local scales (no amax reduction, as tensorwise) and torchao's
    # rowwise casts, as check-config prices the file (a user trial: it was priced, and
    # written by --emit, tensorwise)
    rowwise = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                          [["compute", "memory", "communication"]], [RUN], None,
                          precision="fp8", fp8_recipe="rowwise")
    opts, notes = calibrated.as_ran(CostOptions(), rowwise)
    assert opts.recipe is Fp8Recipe.TENSORWISE and opts.torchao_recipe is TorchaoRecipe.ROWWISE
    assert notes[-1] == ("FP8 recipe rowwise, as the calibrated jobs ran (--fp8-recipe prices "
                         "another)")
    custom = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                         [["compute", "memory", "communication"]], [RUN], None,
                         precision="fp8", fp8_recipe="custom")  # Megatron-LM's
    opts, notes = calibrated.as_ran(CostOptions(), custom)
    assert opts.recipe is Fp8Recipe.TENSORWISE and opts.torchao_recipe is TorchaoRecipe.TENSORWISE
    assert notes[-1] == ("FP8 recipe custom, as the calibrated jobs ran, priced as tensorwise "
                         "(local scales) (--fp8-recipe prices another)")
    # simulate and check-config's one table: the FP8 key
    prof = calibrated.profile(cal, (1,), tp=1)
    assert find(CostOptions(), Mode.PLAN, profile=prof).key.precision is Precision.FP8  # type: ignore[union-attr]
    assert find(CostOptions(), Mode.CHECK, profile=prof).key.precision is Precision.BF16  # type: ignore[union-attr]


def test_the_fitted_text_says_each_tie_once_and_what_was_not_fitted() -> None:
    one = calibration(SHAPE, "a100-80gb", None, Factors(0.8, 0.8, 0.8),
                      [["compute", "memory", "communication"]], [RUN])
    assert calibrated.fitted_text(one) == ("fitted factors on the preset's rates, from 1 job: "
                                           "compute, memory and communication x0.8 (one factor)")
    two = calibration(SHAPE, "a100-80gb", None, Factors(0.855, 0.855, 1.0),
                      [["compute", "memory"]], [RUN, RUN])
    assert calibrated.fitted_text(two) == (
        "fitted factors on the preset's rates, from 2 jobs: compute and memory x0.855 (one "
        "factor); communication x1 (not fitted)")
    doubt = calibration(SHAPE, "a100-80gb", None, Factors(), [["compute"]], [RUN],
                        warnings=["leave one out misses by -28.0%"])
    assert calibrated.warnings(doubt) == [
        "warning: the calibration's fitted factors: leave one out misses by -28.0%"]


def test_plans_are_priced_with_the_kernels_the_jobs_ran() -> None:
    from pptune.costmodel.loss import CrossEntropy
    from pptune.costmodel.rates import Swiglu, WgradAccum

    cal = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None,
                      tp_comm_overlap=True, cross_entropy="native", swiglu="fused",
                      wgrad_accum="fused")
    ran = CostOptions(tp_comm_overlap=True, cross_entropy=CrossEntropy.NATIVE,
                      swiglu=Swiglu.FUSED, wgrad_accum=WgradAccum.FUSED)
    opts, notes = calibrated.as_ran(CostOptions(), cal)
    assert opts == ran  # filled where no flag names them; pptune's own default not said
    assert notes == ["kernels as the calibrated jobs ran: --tp-comm-overlap, --cross-entropy "
                     "native, --wgrad-accum fused (a flag prices others)"]
    assert calibrated.as_ran(ran, cal) == (ran, [])
    # a flag wins, and is said to
    opts, notes = calibrated.as_ran(CostOptions(tp_comm_overlap=False,
                                                wgrad_accum=WgradAccum.BF16), cal)
    assert (opts.overlaps_tp, opts.wgrad, opts.loss_kernels) == (
        False, WgradAccum.BF16, CrossEntropy.NATIVE)
    assert notes[:2] == [
        "--no-tp-comm-overlap: the calibrated jobs ran --tp-comm-overlap; their factors price "
        "this too",
        "--wgrad-accum bf16: the calibrated jobs ran --wgrad-accum fused; their factors price "
        "this too"]
    # a profile written before the keys: nothing filled, nothing said
    old = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None)
    assert calibrated.as_ran(CostOptions(), old) == (CostOptions(), [])


def test_recommend_does_not_offer_the_fp8_weights_the_calibrated_jobs_kept(
        tmp_path: Path) -> None:
    """A calibration whose jobs kept FP8 weights prices every plan with them (as_ran): the
    what-if that searches again with --fp8-param-gather would offer the winner itself, so
    it is not run (a trial saw 'step 13.67 s (the winner's step)' under a note that said
    the plans already had it)."""
    import json

    from typer.testing import CliRunner

    from pptune.cli import app

    ran = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None,
                      precision="fp8", fp8_param_gather=True)
    path = tmp_path / "cal.json"
    path.write_text(calibrated.profile(ran, (1, 2), tp=1).model_dump_json())
    r = CliRunner().invoke(app, ["recommend", "--gpus", "8", "--profile", str(path),
                                 "--global-batch", "64", "--json"])
    assert r.exit_code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert not [n for n in notes if "not searched: --fp8-param-gather" in n], notes
    assert "as the calibrated jobs kept them" in r.stderr


def test_the_calibration_text_says_whose_bubble_its_parts_hold() -> None:
    """calibrate's parts are the busiest pipeline rank's step, whose bubble is that rank's
    wait; check-config's bubble is the idle share of every rank (simulate.py): a trial read
    1.8% in one and 18.8% in the other for the same job (the head's stage the busiest).
    The text says which is which where the parts hold a bubble."""
    from pptune.report.calibration import calibration_text

    run = RUN.model_copy(update={"parts": {"gemm": 0.9, "pipeline bubble": 0.1}})
    cal = calibration(SHAPE, "h100-sxm", None, Factors.common(1.0),
                      [["compute", "memory", "communication"]], [run], None)
    text = calibration_text(cal)
    assert "the step at the calibration is gemm 90.0%, pipeline bubble 10.0%" in text
    assert ("parts of the busiest pipeline rank's step, whose pipeline bubble is that "
            "rank's wait (check-config's bubble is the idle share of every rank, stage "
            "imbalance included)") in text
    flat = RUN.model_copy(update={"parts": {"gemm": 1.0}})
    assert "busiest pipeline rank" not in calibration_text(calibration(
        SHAPE, "h100-sxm", None, Factors.common(1.0), [["compute", "memory", "communication"]],
        [flat], None))


def test_the_calibration_table_writes_every_step_in_one_format() -> None:
    """A trial read "16 s", "9.207 s" and "0.9752 s" in one column (``:.4g`` drops trailing
    zeros): steps are written as every other table writes seconds (report.fmt)."""
    from pptune.report.calibration import calibration_text

    runs = [RUN.model_copy(update={"config": "a.sh", "measured_step_s": 16.0,
                                   "predicted_step_s": 0.9752})]
    text = calibration_text(calibration(SHAPE, "h100-sxm", None, Factors.common(1.0),
                                        [["compute", "memory", "communication"]], runs, None))
    assert "  a.sh  16.000 s  975.2 ms" in text, text


def test_plans_are_priced_with_the_dispatcher_the_jobs_ran() -> None:
    """A trial calibrated a DeepEP DeepSeek-V3 job, then asked for twice the GPUs: the
    what-if was priced with the NCCL all-to-all (1.19x slower), the profile holding no
    dispatcher. The jobs' dispatcher is kept and filled unless --moe-dispatcher is given
    (even as alltoall, pptune's default)."""
    from pptune.costmodel.dispatch import Dispatcher

    cal = calibration(SHAPE, "h100-sxm", None, Factors.common(0.8),
                      [["compute", "memory", "communication"]], [RUN], None,
                      moe_dispatcher="deepep")
    opts, notes = calibrated.as_ran(CostOptions(), cal)
    assert opts.dispatcher is Dispatcher.DEEPEP
    assert notes == ["kernels as the calibrated jobs ran: --moe-dispatcher deepep (a flag "
                     "prices others)"]
    opts, notes = calibrated.as_ran(CostOptions(moe_dispatcher=Dispatcher.ALLTOALL), cal)
    assert opts.dispatcher is Dispatcher.ALLTOALL
    assert notes == ["--moe-dispatcher alltoall: the calibrated jobs ran --moe-dispatcher "
                     "deepep; their factors price this too"]
    assert CostOptions().dispatcher is Dispatcher.ALLTOALL  # pptune's default
