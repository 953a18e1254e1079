"""DualPipe and DualPipeV: op orders (hand-checked, torch parity, DeepSeek's
structure), refusals, and the closed forms of DeepSeek's README table."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pptune.costmodel.inflight import peak_inflight_per_stage
from pptune.costmodel.schedules import (
    Op,
    OpKind,
    Schedule,
    ScheduleError,
    device_stages,
    format_orders,
    model_chunk,
    op_orders,
    param_share_per_device,
    stage_chains,
    validate,
)
from pptune.costmodel.simulate import overlapped_pair_s, simulate, uniform_stages


def line(ops: list[Op]) -> str:
    return " ".join(str(op) for op in ops)


# --- op orders ------------------------------------------------------------------


def test_dualpipev_p2_m4_follows_the_eight_steps() -> None:
    # Rank 0 of 2 (stages 0 and 3), by dualpipe.py's steps: 1) 2(p-r-1) = 2
    # forwards of stage 0; 2) F stage 0, F stage 3; 3) input-grad B of stage
    # 3, its W, F stage 3; 4) m-2p+r+1 = 1 round of the pairs F0&B3, F3&B0;
    # 5) whole backward of stage 3, pair F3&B0; 6) whole BW of stage 3, then
    # input-grad B of stage 0 (r even: split after phase 1's op); 7) the
    # oldest W, B of stage 0; 8) the last W.
    orders = op_orders("dualpipev", 2, 4)
    assert line(orders[0]) == (
        "F0@0 F1@0 F2@0 F0@3 B0@3 W0@3 F1@3 F3@0&B1@3 F2@3&B0@0 BW2@3 F3@3&B1@0 BW3@3 "
        "B2@0 W2@0 B3@0 W3@0"
    )
    # Rank 1 (stages 1 and 2) is the bottom of the V: no step 1 or 3, and the
    # first round of step 4 runs F and a whole backward unpaired.
    assert line(orders[1]) == (
        "F0@1 F0@2 F1@1 F1@2 F2@1 BW0@2 F2@2&B0@1 F3@1&B1@2 F3@2&B1@1 BW2@2 BW2@1 "
        "B3@2 B3@1 W3@2 W3@1"
    )


def test_dualpipe_ranks_mirror_each_other() -> None:
    # DeepSeek's DualPipe: rank p-1-r runs rank r's order with the directions
    # swapped (the other half of the micro-batches, the mirrored stage).
    p, m = 4, 8
    orders = op_orders("dualpipe", p, m)
    assert line(orders[0]) == (
        "F0@0 F1@0 F2@0 F4@7 B4@7 W4@7 F5@7 F3@0&B5@7 F6@7&B0@0 BW6@7 F7@7&B1@0 BW7@7 "
        "B2@0 W2@0 B3@0 W3@0"
    )

    def mirror(op: Op) -> Op:
        swap = lambda mb, k: ((mb + m // 2) % m, (k + p) % (2 * p))
        mb, k = swap(op.mb, op.stage)
        if op.kind is OpKind.FB:
            return Op(op.kind, mb, k, *swap(op.b_mb, op.b_stage))
        return Op(op.kind, mb, k)

    for r in range(p):
        assert orders[p - 1 - r] == [mirror(op) for op in orders[r]]


@pytest.mark.parametrize("p,m", [(2, 4), (4, 8), (4, 12), (6, 14), (8, 16)])
def test_dualpipe_is_dualpipev_cut_in_half(p: int, m: int) -> None:
    # Sea AI Lab's "cut-in-half": the first p/2 ranks of DualPipe run
    # DualPipeV on p/2 ranks with m/2 micro-batches, its stage s < p/2 being
    # DualPipe's down stage s and its stage p-1-h DualPipe's up stage 2p-1-h.
    half = p // 2
    vee = op_orders("dualpipev", half, m // 2)

    def rename(mb: int, k: int) -> tuple[int, int]:
        return (mb, k) if k < half else (mb + m // 2, 2 * p - 1 - (2 * half - 1 - k))

    for r in range(half):
        want = []
        for op in vee[r]:
            if op.kind is OpKind.FB:
                want.append(Op(op.kind, *rename(op.mb, op.stage), *rename(op.b_mb, op.b_stage)))
            else:
                want.append(Op(op.kind, *rename(op.mb, op.stage)))
        assert op_orders("dualpipe", p, m)[r] == want


def test_placement_chains_and_model_chunks() -> None:
    assert device_stages(Schedule.DUALPIPEV, 3) == [[0, 5], [1, 4], [2, 3]]
    assert device_stages(Schedule.DUALPIPE, 4) == [[0, 7], [1, 6], [2, 5], [3, 4]]
    assert stage_chains(Schedule.DUALPIPEV, 2) == [[0, 1, 2, 3]]
    assert stage_chains(Schedule.DUALPIPE, 4) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    # up stage 4+c runs the same layers as down stage c
    assert [model_chunk(Schedule.DUALPIPE, 4, k) for k in range(8)] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert [model_chunk(Schedule.DUALPIPEV, 2, k) for k in range(4)] == [0, 1, 2, 3]


def test_format_orders_prints_pairs() -> None:
    text = format_orders(op_orders("dualpipev", 1, 2))
    # one rank holds both stages: F0, F of the bottom stage, F1, the unpaired
    # whole backward, the pair, and the split tail
    assert text == "dev0: F0@0 F0@1 F1@0 BW0@1 F1@1&B0@0 BW1@1 B1@0 W1@0"


# --- parity with torch 2.13's ScheduleDualPipeV ----------------------------------


def _torch_dualpipev(p: int, m: int) -> list[list[Op]]:
    vis = pytest.importorskip(
        "torch.distributed.pipelining._schedule_visualizer",
        reason="torch not installed: DualPipeV parity with torch is skipped",
    )
    # torch's kinds: F forward, I input-grad, W weight-grad, B whole
    # backward, OVERLAP_F_B a pair whose sub-actions are F and B
    kind = {"F": OpKind.F, "I": OpKind.B, "W": OpKind.W, "B": OpKind.BW}
    out = []
    for rank in vis.get_schedule_ops("DualPipeV", p, m, num_stages_per_rank=2):
        ops = []
        for a in rank:
            if a is None:
                continue
            if a.computation_type.value == "OVERLAP_F_B":
                f, b = a.sub_actions
                assert (f.computation_type.value, b.computation_type.value) == ("F", "B")
                ops.append(Op(OpKind.FB, f.microbatch_index, f.stage_index,
                              b.microbatch_index, b.stage_index))
            else:
                ops.append(Op(kind[a.computation_type.value], a.microbatch_index,
                              a.stage_index))
        out.append(ops)
    return out


@pytest.mark.torch
@pytest.mark.parametrize("p,m", [(1, 2), (1, 5), (2, 4), (2, 5), (2, 9), (3, 6), (3, 10),
                                 (4, 8), (4, 13), (6, 12), (8, 24)])
def test_dualpipev_matches_torch_schedule(p: int, m: int) -> None:
    assert op_orders("dualpipev", p, m) == _torch_dualpipev(p, m)


@pytest.mark.torch
def test_dualpipev_refusal_is_torchs_own() -> None:
    vis = pytest.importorskip("torch.distributed.pipelining._schedule_visualizer")
    with pytest.raises(ValueError) as theirs:
        vis.get_schedule_ops("DualPipeV", 2, 2, num_stages_per_rank=2)
    with pytest.raises(ScheduleError) as ours:
        validate(Schedule.DUALPIPEV, 2, 2)
    assert str(ours.value).startswith(str(theirs.value))


# --- refusals, and micro-batches fewer than stages --------------------------------


def test_dualpipev_refuses_fewer_microbatches_than_stages_in_torchs_words() -> None:
    # torch 2.13 ScheduleDualPipeV.__init__
    with pytest.raises(ScheduleError) as err:
        op_orders("dualpipev", 2, 2)
    assert str(err.value).startswith(
        "DualPipeV requires at least as many microbatches as stages, but got 2 "
        "microbatches and 4 stages."
    )
    assert "use 4 micro-batches or more" in str(err.value)


@pytest.mark.parametrize("p,m,needle", [
    (3, 6, "even pipeline depth (got pp=3)"),
    (4, 6, "at least 2 x pp = 8 (got 6)"),
    (4, 9, "even number of micro-batches, at least 2 x pp = 8 (got 9)"),
])
def test_dualpipe_refusals_name_deepseeks_asserts(p: int, m: int, needle: str) -> None:
    with pytest.raises(ScheduleError) as err:
        validate(Schedule.DUALPIPE, p, m)
    assert needle in str(err.value)
    assert "DeepSeek's DualPipe asserts" in str(err.value)


@pytest.mark.parametrize("schedule", [Schedule.DUALPIPE, Schedule.DUALPIPEV])
def test_dual_schedules_hold_two_chunks(schedule: Schedule) -> None:
    with pytest.raises(ScheduleError, match="always holds 2 chunks per device"):
        validate(schedule, 2, 8, v=3)


@pytest.mark.parametrize("p,m", [(2, 1), (4, 1), (4, 3), (8, 5)])
def test_gpipe_1f1b_zbv_run_fewer_microbatches_than_stages(p: int, m: int) -> None:
    # torch's ScheduleGPipe and ScheduleZBVZeroBubble build orders for m < p
    # (their listings above), Megatron-LM's 1F1B runs them with
    # num_warmup_microbatches = min(pp - rank - 1, num_microbatches)
    # (megatron-core 0.16 pipeline_parallel/schedules.py): all are accepted;
    # torch's Schedule1F1B refuses, which is the validate runner's to say.
    for schedule, v in (("gpipe", 1), ("1f1b", 1), ("zbv", 2)):
        validate(Schedule(schedule), p, m, v)
        r = simulate(schedule, p, m, uniform_stages(p * v, 1.0, 2.0))
        assert sum(1 for e in r.events if e.op.kind is OpKind.F) == m * p * v
    # GPipe and 1F1B keep the textbook step (m + p - 1)(F + B) for m < p
    for schedule in ("gpipe", "1f1b"):
        assert simulate(schedule, p, m, uniform_stages(p, 1, 2)).step_time_s == (m + p - 1) * 3


# --- DeepSeek's README table: bubble, parameters and activations per device -------
#
# "Pipeline Bubbles and Memory Usage Comparison (based on the same number of PP
# stages)", github.com/deepseek-ai/DualPipe README: PP stages (even); F a forward
# chunk, B a full backward chunk, W its weight part, F&B two mutually
# overlapped chunks.
#
#   1F1B       bubble (PP-1)(F+B)          parameters 1x  activations PP
#   ZB1P       bubble (PP-1)(F+B-2W)       parameters 1x  activations PP
#   DualPipe   bubble (PP/2-1)(F&B+B-3W)   parameters 2x  activations PP+1   on PP devices
#   DualPipeV  bubble (PP/2-1)(F&B+B-3W)   parameters 2x  activations PP+1   on PP/2 devices
#
# Here B = I + W with I = StageCost.bwd_s (the input-gradient part) and
# W = wgrad_s. The DualPipe expressions hold, exactly, for the cells of the
# README's figure: a forward chunk as long as the input-gradient part of a
# backward (F = B - W) and W <= F, with m >= 2 PP micro-batches (DualPipe:
# DeepSeek's own minimum) or m >= PP (DualPipeV: torch's), every m tried.
# Without communication F&B = F + B; with it (fwd_comm_s, bwd_comm_s) F and
# B include the exposed all-to-all and F&B hides it (overlapped_pair_s), and
# the bubble is that of the least busy device (the others run more unpaired,
# exposed chunks). Other shapes (F != B - W) simulate to other bubbles.

DUAL_COSTS = [
    # (F compute, I, W, forward all-to-all, backward all-to-all)
    (1, 1, 1, 0, 0), (2, 2, 1, 0, 0), (1, 1, 0.5, 0, 0), (3, 3, 2, 0, 0),
    (1, 1, 1, 0.5, 0.5), (2, 1, 1, 0, 1), (1, 2, 1, 1, 0), (2, 2, 1, 1, 1),
]


def _readme_dual_bubble(pp: int, f: float, i: float, w: float, fa: float, ba: float) -> float:
    st = uniform_stages(1, f, i, w, fwd_comm_s=fa, bwd_comm_s=ba)[0]
    f_and_b = overlapped_pair_s(st, st)
    b_full = i + w + ba
    assert f + fa == b_full - w and w <= f + fa  # the README figure's shape
    return (pp / 2 - 1) * (f_and_b + b_full - 3 * w)


@pytest.mark.parametrize("costs", DUAL_COSTS)
@pytest.mark.parametrize("pp", [2, 4, 6, 8])
@pytest.mark.parametrize("m_extra", [0, 2, 8])
def test_dualpipe_bubble_is_readme_closed_form(
    costs: tuple[float, ...], pp: int, m_extra: int
) -> None:
    f, i, w, fa, ba = costs
    m = 2 * pp + m_extra
    r = simulate("dualpipe", pp, m, uniform_stages(2 * pp, f, i, w, fwd_comm_s=fa,
                                                   bwd_comm_s=ba))
    assert max(d.idle_s for d in r.devices) == pytest.approx(
        _readme_dual_bubble(pp, f, i, w, fa, ba), abs=1e-9)


@pytest.mark.parametrize("costs", DUAL_COSTS)
@pytest.mark.parametrize("pp", [2, 4, 6, 8])
@pytest.mark.parametrize("m_extra", [0, 1, 5])
def test_dualpipev_same_bubble_on_half_the_devices(
    costs: tuple[float, ...], pp: int, m_extra: int
) -> None:
    f, i, w, fa, ba = costs
    p = pp // 2  # PP stages on PP/2 devices
    r = simulate("dualpipev", p, pp + m_extra, uniform_stages(pp, f, i, w, fwd_comm_s=fa,
                                                              bwd_comm_s=ba))
    assert max(d.idle_s for d in r.devices) == pytest.approx(
        _readme_dual_bubble(pp, f, i, w, fa, ba), abs=1e-9)


def test_without_communication_every_device_idles_the_bubble() -> None:
    # unit costs F = I = W = 1: (PP/2-1)(F&B + B - 3W) = (PP/2-1)(3 + 2 - 3)
    for pp in (4, 6, 8):
        r = simulate("dualpipe", pp, 2 * pp, uniform_stages(2 * pp, 1, 1, 1))
        assert [d.idle_s for d in r.devices] == [2.0 * (pp / 2 - 1)] * pp


@pytest.mark.parametrize("pp", [2, 4, 8])
@pytest.mark.parametrize("m_per_pp", [2, 3])
def test_one_f_one_b_and_zb1p_rows(pp: int, m_per_pp: int) -> None:
    f, i, w = 2.0, 2.0, 1.0  # B = I + W = 3
    m = pp * m_per_pp
    one = simulate("1f1b", pp, m, uniform_stages(pp, f, i, w))
    assert max(d.idle_s for d in one.devices) == pytest.approx((pp - 1) * (f + (i + w)))
    zb = simulate("zb-h1", pp, m, uniform_stages(pp, f, i, w))
    assert max(d.idle_s for d in zb.devices) == pytest.approx((pp - 1) * (f + (i + w) - 2 * w))
    # activations: 1F1B holds PP micro-batches on the first device
    assert max(d.peak_inflight for d in one.devices) == pp


@pytest.mark.parametrize("pp", [2, 4, 6, 8])
def test_parameters_per_device(pp: int) -> None:
    one = param_share_per_device(Schedule.ONE_F_ONE_B, pp)  # PP stages on PP devices
    assert one == Fraction(1, pp)
    # DualPipe: PP stages on PP devices, each device two distinct chunks: 2x
    assert param_share_per_device(Schedule.DUALPIPE, pp) / one == 2
    # DualPipeV: PP stages on PP/2 devices: 2x against 1F1B over the same PP
    # stages (the README's basis), 1x against 1F1B on the same PP/2 devices
    vee = param_share_per_device(Schedule.DUALPIPEV, pp // 2)
    assert vee / one == 2
    assert vee / param_share_per_device(Schedule.ONE_F_ONE_B, pp // 2) == 1


@pytest.mark.parametrize("pp", [2, 4, 6, 8])
@pytest.mark.parametrize("m_extra", [0, 4, 10])
def test_activations_per_device_are_pp_plus_one(pp: int, m_extra: int) -> None:
    # in units of one chunk's activations for one micro-batch; a chunk's
    # activations are freed by its W (or a whole backward)
    act = 7.0
    dual = simulate("dualpipe", pp, 2 * pp + m_extra, uniform_stages(2 * pp, 1, 1, 1, act))
    assert [d.peak_inflight for d in dual.devices] == [pp + 1] * pp
    assert [d.peak_activation_bytes for d in dual.devices] == [act * (pp + 1)] * pp
    vee = simulate("dualpipev", pp // 2, pp + m_extra, uniform_stages(pp, 1, 1, 1, act))
    assert [d.peak_inflight for d in vee.devices] == [pp + 1] * (pp // 2)


def test_inflight_per_stage_by_hand() -> None:
    # dualpipev on one rank: F0@0 F0@1 F1@0 BW0@1 F1@1&B0@0 BW1@1 B1@0 W1@0.
    # Stage 0 holds micro-batches 0 and 1 until the pair frees 0; stage 1
    # frees each before the next arrives. The device peaks at 3 = PP + 1
    # (F0@0, F0@1, F1@0 alive together).
    assert peak_inflight_per_stage(Schedule.DUALPIPEV, 1, 2) == [2, 1]
    r = simulate("dualpipev", 1, 2, uniform_stages(2, 1, 1, 1))
    assert r.devices[0].peak_inflight == 3
