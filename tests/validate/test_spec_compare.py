"""pptune.validate.spec checks and compare's prediction, on plain values (no torch)."""

from __future__ import annotations

import math

import pytest

from pptune.costmodel.schedules import DEFAULT_SCHEDULES, Schedule
from pptune.errors import BadInput
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
from pptune.validate import compare
from pptune.validate.measure import OpStamp, RankStep, summarize
from pptune.validate.spec import TORCH_SCHEDULES, RunSpec, check


def spec(schedule: str = "1f1b", pp: int = 2, m: int = 4, v: int = 1, split=(2, 2), b: int = 1) -> RunSpec:  # type: ignore[no-untyped-def]
    return RunSpec(Schedule(schedule), pp, m, v, b, tuple(split))


@pytest.mark.torch
def test_every_schedule_maps_to_a_torch_class() -> None:
    # every schedule but dualpipe, which no torch runtime has
    assert set(TORCH_SCHEDULES) == set(DEFAULT_SCHEDULES) - {Schedule.DUALPIPE}
    torch = pytest.importorskip("torch")
    from torch.distributed.pipelining import schedules

    for schedule in TORCH_SCHEDULES:
        assert hasattr(schedules, TORCH_SCHEDULES[schedule]), (schedule, torch.__version__)


def test_stage_placement_loop_and_v() -> None:
    assert spec().stages_of(1) == [1]
    inter = spec("interleaved-1f1b", v=2, split=(1, 1, 1, 1))
    assert [inter.stages_of(r) for r in range(2)] == [[0, 2], [1, 3]]
    zbv = spec("zbv", split=(1, 1, 1, 1))
    assert [zbv.stages_of(r) for r in range(2)] == [[0, 3], [1, 2]]  # torch's style="v"
    vee = spec("dualpipev", split=(1, 1, 1, 1))
    assert [vee.stages_of(r) for r in range(2)] == [[0, 3], [1, 2]]
    assert (vee.sim_v, vee.n_stages) == (2, 4)
    assert zbv.n_stages == 4 and zbv.sim_v == 2


def test_dualpipe_refuses_in_one_line_and_dualpipev_follows_torchs_rule() -> None:
    with pytest.raises(BadInput) as err:
        check(spec("dualpipe", pp=2, m=4, split=(2, 2)), 4)
    assert str(err.value) == (
        "--schedule dualpipe: no torch runtime has it (torch.distributed.pipelining has "
        "DualPipeV, not the bidirectional DualPipe, which is DeepSeek's own implementation), "
        "so validate cannot run it; validate --schedule dualpipev, or pptune simulate "
        "--schedule dualpipe"
    )
    with pytest.raises(BadInput) as err:  # a plan file's: by flags, since --plan refuses them
        check(spec("dualpipe", pp=2, m=4, split=(2, 2)), 4, plan="plans.json plan 1")
    assert ("so validate cannot run it; validate --schedule dualpipev --pp 2 --microbatches 4, "
            "without --plan, or pptune simulate --schedule dualpipe") in str(err.value)
    with pytest.raises(BadInput, match="DualPipeV requires at least as many microbatches"):
        check(spec("dualpipev", pp=2, m=2, split=(1, 1, 1, 1)), 4)
    check(spec("dualpipev", pp=2, m=4, split=(1, 1, 1, 1)), 4)


def test_good_specs_pass() -> None:
    check(spec(), 4)
    check(spec("gpipe", m=1), 4)
    check(spec("interleaved-1f1b", v=2, split=(1, 1, 1, 1)), 4)
    check(spec("zb-h1", m=2), 4)
    check(spec("zbv", m=1, split=(1, 1, 1, 1)), 4)


def test_1f1b_fewer_microbatches_than_stages_in_our_words() -> None:
    with pytest.raises(BadInput, match=r"\(2 < pp=4\).*Schedule1F1B.*--microbatches to 4"):
        check(spec(pp=4, m=2, split=(1, 1, 1, 1)), 4)


def test_split_must_cover_the_layers() -> None:
    with pytest.raises(BadInput, match=r"--split 3,3 must have 2 entries .* summing to the model's 8"):
        check(spec(split=(3, 3)), 8)
    with pytest.raises(BadInput, match="each >= 1"):
        check(spec(split=(0, 8)), 8)


def test_torch_rounds_rule_for_zero_bubble() -> None:
    # torch: rounds = max(1, m // pp) = 2, and 5 % 2 != 0
    with pytest.raises(BadInput, match=r"multiple of max\(1, m // pp\) = 2 rounds"):
        check(spec("zb-h1", m=5), 4)


def test_all_problems_at_once() -> None:
    with pytest.raises(BadInput) as err:
        check(spec(pp=4, m=2, split=(1, 1, 1, 1, 1)), 4)
    text = str(err.value)
    assert "Schedule1F1B" in text and "--split" in text and "; " in text


def test_bad_numbers_are_named() -> None:
    with pytest.raises(BadInput, match="--steps must be at least 1"):
        check(RunSpec(Schedule.GPIPE, 2, 4, 1, 1, (2, 2), steps=0), 4)
    with pytest.raises(BadInput, match="--timeout"):
        check(RunSpec(Schedule.GPIPE, 2, 4, 1, 1, (2, 2), timeout_s=0), 4)


def profile(fwd_s: float = 1.0, bwd_s: float = 1.5, wgrad_s: float = 0.5, n: int = 4) -> Profile:
    free = LinkSpec(latency_s=0.0, bytes_per_s=1e30)
    cost = LayerCost(fwd_s=fwd_s, bwd_s=bwd_s, wgrad_s=wgrad_s, act_bytes=0, out_bytes=8)
    return Profile(
        source="probe",
        model=ModelInfo(name="toy", seq_len=8),
        device=DeviceInfo(name="cpu", memory_bytes=1e9),
        links=Links(intra_node=LinkPair(p2p=free, allreduce=free),
                    inter_node=LinkPair(p2p=free, allreduce=free)),
        layers=[Layer(name=f"l{i}", param_bytes=0, per_micro_batch={"1": cost}) for i in range(n)],
        raw={"settings": {"threads": 1}},
    )


def test_prediction_reproduces_the_closed_form_bubble() -> None:
    # stages of 2 layers: F = 2, B (full backward) = 4; gpipe: step = (m + p - 1)(F + B)
    pred = compare.predict(profile(), spec("gpipe"))
    assert pred.result.step_time_s == pytest.approx((4 + 1) * 6)
    assert pred.result.bubble_rate == pytest.approx(1 / 5)


def test_loss_is_added_to_the_last_stage() -> None:
    pred = compare.predict(profile(), spec("gpipe"), loss_s=(0.25, 0.5))
    assert pred.stages[-1].fwd_s == pytest.approx(2.25)
    assert pred.stages[-1].bwd_s == pytest.approx(3.5)
    assert pred.stages[0].fwd_s == pytest.approx(2.0)
    assert any("loss" in note for note in pred.notes)


def test_gradient_accumulation_lengthens_w_for_all_but_the_first_micro_batch() -> None:
    # stages of 2 layers (F 2, B 3, W 1); stage 1's backward into held gradients takes
    # 0.4 s longer whole and 0.2 s longer as a split W: 3 of its 4 micro-batches pay
    pred = compare.predict(profile(), spec("gpipe"), accum_s={1: (0.4, 0.2)})
    assert pred.stages[1].wgrad_s == pytest.approx(1.0 + 0.75 * 0.4)
    assert pred.stages[1].split_w_s == pytest.approx(1.0 + 0.75 * 0.2)
    assert pred.stages[0].wgrad_s == pytest.approx(1.0)
    # gpipe's step: (m + p - 1) x (F + B) with stage 1's backward 0.3 s longer
    assert pred.result.step_time_s == pytest.approx(5 * 6 + 4 * 0.3)
    assert any("gradient accumulation" in note for note in pred.notes)


def test_zero_bubble_moves_stage0_backward_into_w() -> None:
    pred = compare.predict(profile(), spec("zb-h1"))
    assert (pred.stages[0].bwd_s, pred.stages[0].wgrad_s) == pytest.approx((0.0, 4.0))
    assert (pred.stages[1].bwd_s, pred.stages[1].wgrad_s) == pytest.approx((3.0, 1.0))


def test_profile_mismatches_are_refused_or_noted() -> None:
    with pytest.raises(BadInput, match=r"the profile has 4 layers but model .* has 8"):
        compare.check_profile(profile(), spec(), [f"x{i}" for i in range(8)])
    with pytest.raises(BadInput, match=r"no costs for micro-batch size 2; it has \[1\]"):
        compare.check_profile(profile(), spec(b=2), [f"l{i}" for i in range(4)])
    notes = compare.check_profile(profile(), spec(), [f"x{i}" for i in range(4)])
    assert any("matched by position" in n for n in notes)


def test_comparison_keys_and_signed_error() -> None:
    pred = compare.predict(profile(), spec("gpipe"))  # 30 s predicted
    ms = 1_000_000_000  # stamps in ns; one "second" per op unit
    ranks = [
        RankStep(0, 0, 40 * ms, (OpStamp("F", 0, 0, 0, 2 * ms), OpStamp("B", 0, 0, 30 * ms, 34 * ms))),
        RankStep(1, 0, 40 * ms, (OpStamp("F", 0, 1, 3 * ms, 5 * ms), OpStamp("B", 0, 1, 5 * ms, 9 * ms))),
    ]
    doc = compare.comparison(spec("gpipe"), pred, summarize([ranks], p=2), [123.0, None])
    assert doc["step_time_error"] == pytest.approx((30 - 40) / 40)
    assert [d["peak_activation_bytes"] for d in doc["measured"]["devices"]] == [123.0, None]
    assert [d["peak_activation_bytes"] for d in doc["predicted"]["devices"]] == [
        d.peak_activation_bytes for d in pred.result.devices]
    for side in ("predicted", "measured"):
        assert set(doc[side]) >= {"step_time_s", "bubble_rate", "devices"}
        assert all({"busy_s", "idle_s"} <= set(d) for d in doc[side]["devices"])
    assert doc["measured"]["bubble_rate"] == pytest.approx(1 - 12 / 80)
    ops = {(r["kind"], r["stage"]): r for r in doc["ops"]}
    assert ops[("B", 0)]["predicted_s"] == pytest.approx(4.0)
    assert ops[("B", 0)]["measured_s"] == pytest.approx(4.0)
    assert math.isnan(compare.rel_error(1.0, 0.0))


def test_stretch_is_processor_sharing() -> None:
    base = [compare.StageCost(1.0, 2.0, 0.5)]
    full = compare.stretch(base, {("F", 0): 1.0, ("B", 0): 0.5}, f=2.0, split=False)
    assert full[0].fwd_s == pytest.approx(2.0)  # always overlapped: f times the work
    assert full[0].bwd_s == pytest.approx(2.0 / 0.75)  # half: 1 / (0.5 + 0.25)
    assert full[0].wgrad_s == pytest.approx(0.5 / 0.75)  # W stretched as B when not split
    alone = compare.stretch(base, {}, f=3.0, split=True)
    assert alone == base


def test_overlap_fractions_by_hand() -> None:
    # gpipe, pp=2, m=1: nothing runs at once; m=2: dev1's F0 overlaps dev0's F1 fully
    one = compare.predict(profile(), spec("gpipe", m=1))
    assert set(compare.overlap_fractions(one.result).values()) == {0.0}
    two = compare.predict(profile(), spec("gpipe", m=2))
    frac = compare.overlap_fractions(two.result)
    assert frac[("F", 1)] == pytest.approx(0.5)  # F0@1 overlaps F1@0, F1@1 runs alone
    assert frac[("F", 0)] == pytest.approx(0.5)


def test_contention_lengthens_the_prediction_only_where_ranks_overlap() -> None:
    plain = compare.predict(profile(), spec("gpipe", m=4))
    same = compare.predict(profile(), spec("gpipe", m=4), contention=1.0)
    assert same.result.step_time_s == pytest.approx(plain.result.step_time_s)
    slow = compare.predict(profile(), spec("gpipe", m=4), contention=2.0)
    assert slow.plain is not None and slow.contention == 2.0
    assert plain.result.step_time_s < slow.result.step_time_s < 2 * plain.result.step_time_s
    assert any("contention" in n for n in slow.notes)
    # one rank: nobody to contend with
    solo = compare.predict(profile(), spec("gpipe", pp=1, split=(4,)), contention=2.0)
    assert solo.plain is None


def test_profile_speed_compares_the_ranks_training_work_with_the_profile() -> None:
    # stages of 2 layers: the profile's F + B + W is 2 + 3 + 1 = 6 s per stage
    assert compare.rank_speeds(profile(), spec(), {0: 9.0, 1: 15.0}) == {
        0: pytest.approx(1.5), 1: pytest.approx(2.5)}
    assert compare.profile_speed(profile(), spec(), {0: 9.0, 1: 15.0}) == pytest.approx(2.0)
    assert compare.profile_speed(profile(), spec(), {}) is None


def test_each_ranks_speed_scales_its_stage_costs() -> None:
    # gpipe, pp 2, m 4, F = 2, B = 4 per stage; rank 1 runs at half the profile's pace
    plain = compare.predict(profile(), spec("gpipe"))
    slow = compare.predict(profile(), spec("gpipe"), speed={0: 1.0, 1: 2.0})
    assert [s.fwd_s for s in slow.stages] == pytest.approx([2.0, 4.0])
    assert [s.bwd_s for s in slow.stages] == pytest.approx([3.0, 6.0])
    # rank 1 is the bottleneck: F0 then 4 x (F1 + B1) then B0 = 2 + 4 x 12 + 4
    assert slow.result.step_time_s == pytest.approx(2 + 4 * 12 + 4)
    assert slow.profile_only is not None
    assert slow.profile_only.step_time_s == pytest.approx(plain.result.step_time_s)
    assert any("host speed" in n for n in slow.notes)


def test_bench_ranking_helpers() -> None:
    from bench.accuracy import ranking_pairs, spearman

    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    rows = [
        {"config": "a", "predicted_step_s": 1.0, "measured_step_s": 1.2},
        {"config": "b", "predicted_step_s": 1.1, "measured_step_s": 1.1},  # within 15% of a
        {"config": "c", "predicted_step_s": 2.0, "measured_step_s": 1.0},  # disagrees with b
    ]
    r = ranking_pairs(rows)
    assert (r["pairs_compared"], r["pairs_agreeing"], r["matches"]) == (2, 0, False)
    assert r["disagreements"] == ["a vs c", "b vs c"]


def test_an_ops_row_leaves_out_the_runtimes_work_between_the_calls() -> None:
    # gpipe pp=2 m=4 over free links: an idle step is 0 s, and the busiest rank runs 8
    # actions, so a 0.8 s tiny step is 0.1 s an action, added to every simulated op;
    # B of stage 0 (two layers of 1.5 + 0.5) is 4 s in its row, as without it
    pred = compare.predict(profile(), spec("gpipe"), tiny_step_s=0.8)
    assert pred.per_action_s == pytest.approx(0.1)
    b0 = [e.end_s - e.start_s for e in pred.result.events
          if str(getattr(e.op.kind, "value", e.op.kind)) == "B" and e.op.stage == 0]
    assert b0 == pytest.approx([4.1] * 4)
    ms = 1_000_000_000
    ranks = [RankStep(0, 0, 40 * ms, (OpStamp("B", 0, 0, 30 * ms, 34 * ms),)),
             RankStep(1, 0, 40 * ms, (OpStamp("B", 0, 1, 5 * ms, 9 * ms),))]
    doc = compare.comparison(spec("gpipe"), pred, summarize([ranks], p=2))
    ops = {(r["kind"], r["stage"]): r for r in doc["ops"]}
    assert ops[("B", 0)]["predicted_s"] == pytest.approx(4.0)
