"""The winner's lines under recommend's table: the step time is the reason a plan wins,
the bubble only context; exposed communication is named where the JSON has it."""

from __future__ import annotations

from functools import cache

from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend
from pptune.report.fmt import fmt_pct, fmt_seconds
from pptune.report.plans import why_lines


@cache
def run_of(**flags: object) -> RecommendRun:
    return recommend(RecommendSpec.of(**flags))


def test_a_pipelined_winner_with_the_larger_bubble_is_justified_by_its_step() -> None:
    run = run_of(gpus=8, global_batch=7)
    w = run.result.plans[0]
    flat = next(p for p in run.result.plans if p.pp == 1)
    assert w.pp > 1 and w.bubble_rate > flat.bubble_rate  # the bubble is no justification
    lines = why_lines(run.result)
    slower = flat.step_time_s / w.step_time_s - 1
    assert lines[0].endswith(
        f": step {fmt_seconds(w.step_time_s)} vs {fmt_seconds(flat.step_time_s)} "
        f"({slower:.1%} slower) for the best plan without a pipeline (pp=1, "
        f"m={flat.num_microbatches}); bubble {fmt_pct(w.bubble_rate)} vs "
        f"{fmt_pct(flat.bubble_rate)}")
    # the pp=1 plan is the winner line's rival: no second line repeating it
    assert not any(line.startswith("without a pipeline:") for line in lines)


def test_a_flat_winner_kept_by_the_margin_says_the_rival_is_faster() -> None:
    run = run_of(gpus=8)
    w, fast = run.result.plans[0], run.result.passed_over
    assert w.pp == 1 and fast is not None
    gain = w.step_time_s / fast.step_time_s - 1
    (line,) = [line for line in why_lines(run.result) if line.startswith("winner:")]
    assert (f": step {fmt_seconds(w.step_time_s)} vs {fmt_seconds(fast.step_time_s)} "
            f"({gain:.2%} faster, within --pipeline-margin) for the best pipeline plan "
            f"({fast.schedule.value}, pp={fast.pp}, m={fast.num_microbatches}); bubble ") in line
    assert "0.999x" not in line


def test_a_mostly_hidden_cp_exchange_and_dp_traffic_over_cp_ranks_are_said() -> None:
    run = run_of(gpus=64, model="llama3-70b", gpu="h100-sxm", seq_len=131072, tp="4",
                 cp="16", pp="1", sharding="zero3", micro_batch_sizes="1", top=1)
    w = run.result.plans[0]
    assert (w.dp, w.cp) == (1, 16)
    assert w.exposed_cp_s and w.exposed_allreduce_s
    text = " ".join(why_lines(run.result))
    share = w.exposed_cp_s / w.step_time_s
    assert share < 0.005
    assert (f"CP K/V exchange mostly hidden behind attention ({fmt_seconds(w.exposed_cp_s)} "
            f"exposed a step, {fmt_pct(share)})") in text
    dp = w.exposed_allreduce_s / w.step_time_s
    assert (f"DP zero3 traffic (over the 16 cp ranks) exposes "
            f"{fmt_seconds(w.exposed_allreduce_s)} ({fmt_pct(dp)})") in text


def test_the_legend_explains_mbs_and_v() -> None:
    from pptune.report.plans import plans_table
    from pptune.report.render import render_plain

    text = " ".join(render_plain(plans_table(run_of(gpus=8).result, width=80), width=80).split())
    assert "v = virtual stages (model chunks per GPU)" in text
    assert "mbs = micro-batch size (sequences)" in text
