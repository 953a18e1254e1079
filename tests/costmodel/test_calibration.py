"""Calibration in the pure core: scaled rates, the parts of a layer and of a step, the fit."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pptune.costmodel import presets
from pptune.costmodel.analytic import analytic_layers
from pptune.costmodel.breakdown import BUBBLE, DATA_PARALLEL, OPTIMIZER, SENDS, step_parts
from pptune.costmodel.calibration import (
    COMPUTE_CEILING,
    GPU_FIXED,
    GPU_RATES,
    SANITY_FLOOR,
    Factors,
    RateGroup,
    ceiling,
    problems,
    scaled_gpu,
)
from pptune.costmodel.comm import AllReduceLink
from pptune.costmodel.fit import MIN_SINGULAR, Observed, fit, held_out, smallest_eigenvalue
from pptune.costmodel.keys import CostKey
from pptune.costmodel.ops import Kind, OpCost, Phase, Rates, phase_s
from pptune.costmodel.parts import LAUNCH, PartTimes, layer_parts, part_of, rate_group
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import CostTable, LayerCosts, PlanRequest, PlanSpec, evaluate
from pptune.costmodel.simulate import Link
from pptune.costs.profiles import preset_tables

H100 = presets.GPUS["h100-sxm"]


# ------------------------------------------------------------------ scaled rates


def test_every_gpu_field_is_a_rate_or_fixed() -> None:
    names = {f.name for f in dataclasses.fields(presets.GpuSpec)}
    assert set(GPU_RATES) | GPU_FIXED == names
    assert not set(GPU_RATES) & GPU_FIXED


def test_scaled_gpu_multiplies_the_rates_of_each_group_only() -> None:
    f = Factors(compute=0.5, memory=0.8, communication=0.25)
    g = scaled_gpu(H100, f)
    assert g.gemm_fraction == pytest.approx(H100.gemm_fraction * 0.5)
    assert g.fp8_gemm_fraction == pytest.approx(H100.fp8_gemm_fraction * 0.5)  # type: ignore[operator]
    assert g.attention_fraction == pytest.approx(H100.attention_fraction * 0.5)
    assert [n for n, _ in g.causal_attention] == [n for n, _ in H100.causal_attention]
    assert [x for _, x in g.causal_attention] == pytest.approx(
        [x * 0.5 for _, x in H100.causal_attention])
    assert g.hbm_fraction == pytest.approx(H100.hbm_fraction * 0.8)
    assert g.nvlink_bytes_per_s == pytest.approx(450e9 * 0.25)
    assert g.ib_bytes_per_s == pytest.approx(50e9 * 0.25)
    assert H100.fabric is not None and g.fabric is not None
    assert g.fabric.ring_busbw_bytes_per_s == pytest.approx(H100.fabric.ring_busbw_bytes_per_s / 4)
    assert g.fabric.nvls_min_ranks == H100.fabric.nvls_min_ranks  # a count, not a rate
    for name in GPU_FIXED:
        assert getattr(g, name) == getattr(H100, name)
    assert scaled_gpu(H100, Factors()) is H100


def test_factors_outside_the_physical_range_name_the_rate() -> None:
    assert problems(H100, Factors(0.6, 1.0, 0.9)) == []
    fast = problems(H100, Factors(compute=COMPUTE_CEILING + 0.01))
    assert len(fast) == 1 and "above the GPU's measured matmul peak" in fast[0]
    # NCCL reaches 47 GB/s of the NIC's 50 (presets' fabric): 50 / 47 is the headroom
    assert ceiling(H100, RateGroup.COMMUNICATION) == pytest.approx(50 / 47)
    assert problems(H100, Factors(communication=1.06)) == []
    line = problems(H100, Factors(communication=1.07))
    assert "above the links' line rate" in line[0]
    lines_only = dataclasses.replace(H100, fabric=None)
    assert ceiling(lines_only, RateGroup.COMMUNICATION) == 1.0
    # the datasheet HBM bandwidth is 1 / 0.90 of the achieved one the preset prices
    top = 1 / H100.hbm_fraction
    assert problems(H100, Factors(memory=top - 1e-9)) == []
    assert "datasheet HBM" in problems(H100, Factors(memory=top + 1e-3))[0]
    slow = problems(H100, Factors.common(SANITY_FLOOR / 2))
    assert len(slow) == 3 and all("below a tenth" in p for p in slow)
    assert problems(H100, Factors(compute=2.0), (RateGroup.COMMUNICATION,)) == []


# ------------------------------------------------------------------ parts of a layer

RATES = Rates(peak_flops=1e12, hbm_bytes_per_s=1e9, sm_count=1, gemm_fraction=1.0,
              attention_fraction=1.0, launch_s=0.001)


def _op(name: str, phase: Phase, kind: Kind, time_s: float, kernels: int = 1) -> OpCost:
    return OpCost(name, phase, kind, 0.0, 0.0, time_s, kernels)


def test_parts_split_each_phase_exactly() -> None:
    ops = [
        _op("qkv", Phase.F, Kind.GEMM, 0.010), _op("norm1", Phase.F, Kind.MEMORY, 0.002),
        _op("tp_attn", Phase.F, Kind.COMM, 0.003, kernels=0),
        _op("a2a_dispatch", Phase.F, Kind.ALL_TO_ALL, 0.004, kernels=0),
        _op("flash_attn.bwd", Phase.B, Kind.ATTENTION, 0.020, kernels=3),
        _op("etp_gather.bwd", Phase.B, Kind.COMM, 0.001, kernels=0),
        _op("qkv.wgrad", Phase.W, Kind.GEMM, 0.008),
    ]
    parts = {p.part: p for p in layer_parts(ops, RATES)}
    assert set(parts) == {"gemm", "memory-bound", "tp communication", "expert all-to-all",
                          "attention", "etp communication", LAUNCH}
    assert parts["gemm"] == PartTimes("gemm", 0.010, 0.0, 0.008)
    # one launch each for qkv, norm1 and qkv.wgrad; three for the attention backward
    assert parts[LAUNCH] == PartTimes(LAUNCH, 0.002, 0.003, 0.001)
    for phase, col in ((Phase.F, "fwd_s"), (Phase.B, "bwd_s"), (Phase.W, "wgrad_s")):
        assert sum(getattr(p, col) for p in parts.values()) == pytest.approx(
            phase_s(ops, phase, RATES))


def test_a_collective_is_the_part_of_the_group_its_name_starts_with() -> None:
    assert part_of(_op("cp_kv", Phase.F, Kind.COMM, 1.0)) == "cp communication"
    assert part_of(_op("tp_head.bwd", Phase.B, Kind.COMM, 1.0)) == "tp communication"
    assert rate_group("cp communication") is RateGroup.COMMUNICATION
    assert rate_group("gemm") is RateGroup.COMPUTE
    assert rate_group("memory-bound") is RateGroup.MEMORY
    assert rate_group(LAUNCH) is None


@pytest.mark.parametrize("model", ["llama3-8b", "mixtral-8x7b", "deepseek-v3", "gpt3-1.3b"])
def test_analytic_layers_carry_parts_that_sum_to_their_times(model: str) -> None:
    m = dataclasses.replace(presets.MODELS[model], num_blocks=4, first_dense=1, mtp_layers=0)
    for layer in analytic_layers(m, H100, [1], tp=2):
        c = layer.per_micro_batch[1]
        total = c.fwd_s + c.bwd_s + c.wgrad_s + c.fwd_a2a_s + c.bwd_a2a_s
        assert sum(p.total_s for p in c.parts) == pytest.approx(total, rel=1e-12)
        assert sum(p.fwd_s for p in c.parts) == pytest.approx(c.fwd_s + c.fwd_a2a_s)


@pytest.mark.parametrize(("model", "cp", "modules"), [
    ("llama3-8b", 2, frozenset()), ("deepseek-v3", 1, frozenset({"mla_up_proj", "moe_act"})),
    ("mixtral-8x7b", 2, frozenset())])
def test_a_tables_parts_are_its_layers_times(model: str, cp: int, modules: frozenset[str]) -> None:
    # the parts a calibration splits a step into come with the table the step was priced
    # with: its context parallelism, experts and recomputed modules included
    m = dataclasses.replace(presets.MODELS[model], num_blocks=4, mtp_layers=0,
                            first_dense=min(presets.MODELS[model].first_dense, 1))
    table = preset_tables(m, "h100-sxm", (1, 2), recompute_modules=modules)(
        CostKey(tp=2, cp=cp, ep=2 if m.moe else 1))
    assert table.layer_parts is not None
    for b, c in table.by_mb.items():
        a2a = c.fwd_a2a_s or [0.0] * len(c.fwd_s)
        for i, parts in enumerate(table.layer_parts[b]):
            assert sum(p.fwd_s for p in parts) == pytest.approx(c.fwd_s[i] + a2a[i], rel=1e-12)
            assert sum(p.wgrad_s for p in parts) == pytest.approx(c.wgrad_s[i], rel=1e-12)
        if cp > 1:
            assert any(p.part == "cp communication" for ps in table.layer_parts[b] for p in ps)


# ------------------------------------------------------------------ parts of a step


def _table(parts: list[tuple[PartTimes, ...]]) -> CostTable:
    f = [sum(p.fwd_s for p in ps) for ps in parts]
    b = [sum(p.bwd_s for p in ps) for ps in parts]
    w = [sum(p.wgrad_s for p in ps) for ps in parts]
    n = len(parts)
    free = Link(0.0, math.inf)
    ar = AllReduceLink(0.0, math.inf)
    return CostTable([f"l{i}" for i in range(n)], [0.0] * n, 2,
                     {1: LayerCosts(f, b, w, [0.0] * n, [0.0] * n)}, 1, 1e18, free, free, ar, ar)


def test_gpipe_step_splits_into_its_compute_and_the_bubble() -> None:
    # two stages of one layer: F = 0.6 GEMM + 0.4 memory-bound, B = 2 GEMM
    one = (PartTimes("gemm", 0.6, 2.0), PartTimes("memory-bound", 0.4))
    table = _table([one, one])
    req = PlanRequest(gpus=2, global_batch=2, shardings=(), recomputes=())
    spec = PlanSpec(Schedule.GPIPE, 2, 1, 2, (1, 1))
    plan = evaluate(table, req, spec)
    # (m + p - 1)(F + B) = 3 x 3 = 9 s; each rank computes m (F + B) = 6 s
    assert plan.step_time_s == pytest.approx(9.0)
    split = step_parts(table, req, plan, [one, one])
    assert dict(split.parts) == pytest.approx({"gemm": 5.2, "memory-bound": 0.8,
                                               DATA_PARALLEL: 0.0, SENDS: 0.0, OPTIMIZER: 0.0,
                                               BUBBLE: 3.0})
    assert sum(s for _, s in split.parts) == pytest.approx(split.step_s)
    assert split.share(BUBBLE) == pytest.approx(1 / 3)


def test_recomputed_layers_count_their_forward_again() -> None:
    from pptune.costmodel.breakdown import device_parts

    one = (PartTimes("gemm", 1.0, 2.0, 0.5),)
    got = device_parts([one, one], (1, 1), [0, 1], m=3, recomputed=frozenset({1}))
    assert got == [{"gemm": 3 * 3.5}, {"gemm": 3 * 4.5}]


# ------------------------------------------------------------------ the fit


def _run(label: str, a: float, b: float, truth: Factors) -> Observed:
    """A step of ``a`` seconds of compute and ``b`` of communication at factor 1."""
    def step_at(f: Factors) -> float:
        return a / f.compute + b / f.communication + 0.01 * a / f.memory

    return Observed(label, step_at(truth), step_at)


def test_one_run_fits_one_common_factor_exactly() -> None:
    truth = Factors(0.7, 0.9, 0.4)
    res = fit([_run("one", 3.0, 1.0, truth)])
    assert len(res.fitted) == 1 and set(res.fitted[0]) == set(RateGroup)
    f = res.factors.compute
    assert res.factors == Factors.common(f)
    assert 3.0 / f + 1.0 / f + 0.03 / f == pytest.approx(res.predicted_s[0])
    assert res.residuals[0] == pytest.approx(0.0, abs=1e-9)


def test_two_runs_that_differ_in_communication_recover_both_factors() -> None:
    truth = Factors(0.7, 0.7, 0.4)
    res = fit([_run("dense", 3.0, 0.2, truth), _run("chatty", 1.0, 2.0, truth)])
    assert res.fitted == ((RateGroup.COMPUTE, RateGroup.MEMORY), (RateGroup.COMMUNICATION,))
    assert res.factors.compute == pytest.approx(0.7, rel=1e-6)
    assert res.factors.communication == pytest.approx(0.4, rel=1e-6)
    assert max(abs(r) for r in res.residuals) < 1e-9
    assert res.smallest_singular is not None and res.smallest_singular >= MIN_SINGULAR


def test_runs_with_the_same_split_fit_one_factor() -> None:
    truth = Factors(0.7, 0.7, 0.4)
    res = fit([_run("a", 3.0, 1.0, truth), _run("b", 6.0, 2.0, truth)])
    assert len(res.fitted) == 1


def test_smallest_eigenvalue_of_a_known_matrix() -> None:
    # [[2, 1], [1, 2]] has eigenvalues 1 and 3
    assert smallest_eigenvalue([[2.0, 1.0], [1.0, 2.0]]) == pytest.approx(1.0)
    assert smallest_eigenvalue([[4.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 9.0]]) == (
        pytest.approx(1.0))


def test_a_nonpositive_measurement_is_refused() -> None:
    with pytest.raises(ValueError, match="not a positive time"):
        fit([Observed("x", 0.0, lambda f: 1.0)])


def test_the_singular_value_reported_is_the_one_the_threshold_compares() -> None:
    # two runs that split alike: the two-factor tie falls short of MIN_SINGULAR and its
    # value is reported, not the one-factor column's (the norm of the elasticities)
    truth = Factors(0.7, 0.7, 0.4)
    res = fit([_run("a", 3.0, 1.0, truth), _run("b", 6.0, 2.0, truth)])
    assert len(res.fitted) == 1
    assert res.smallest_singular is not None and res.smallest_singular < MIN_SINGULAR


def test_leave_one_out_predicts_each_run_from_the_others() -> None:
    truth = Factors(0.7, 0.7, 0.7)
    runs = [_run("a", 3.0, 0.2, truth), _run("b", 1.0, 2.0, truth), _run("c", 2.0, 1.0, truth)]
    assert held_out(runs[:1]) == (None,)
    # a common factor explains every run: each is predicted exactly from the others
    assert held_out(runs) == pytest.approx((0.0, 0.0, 0.0), abs=1e-6)
    # a run 30% slower than the common factor gives: the others miss it, it misses them
    slow = Observed("slow", runs[1].measured_s * 1.3, runs[1].step_at)
    got = held_out([runs[0], slow])
    assert got[1] == pytest.approx(1 / 1.3 - 1, rel=1e-3)
    assert got[0] == pytest.approx(0.3, rel=1e-3)
