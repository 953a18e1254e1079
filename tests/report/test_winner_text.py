"""The winner's lines under recommend's table: the step time is the reason a plan wins,
the bubble only context; exposed communication is named where the JSON has it."""

from __future__ import annotations

from functools import cache

from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend
from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_seconds
from pptune.report.plans import exposure, fullest, why_lines


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
            f"exposed a step, {share:.2%})") in text
    dp = w.exposed_allreduce_s / w.step_time_s
    assert (f"DP zero3 traffic (over the 16 cp ranks) exposes "
            f"{fmt_seconds(w.exposed_allreduce_s)} ({fmt_pct(dp)})") in text


def test_the_legend_explains_mbs_and_v() -> None:
    from pptune.report.plans import plans_table
    from pptune.report.render import render_plain

    text = " ".join(render_plain(plans_table(run_of(gpus=8).result, width=80), width=80).split())
    assert "v = virtual stages (model chunks per GPU)" in text
    assert "mbs = micro-batch size (sequences)" in text


def test_one_rule_says_hidden_for_p2p_dp_and_cp() -> None:
    """"hidden" only where nothing is exposed; under 0.5% of the step the time is given,
    the share to two decimals (0.24%, where one would read 0.2%); above, what it adds."""
    adds = "adds {s} ({pct})"
    assert exposure("p2p", 0.0, 38.88, "compute", adds) == "p2p hidden behind compute"
    # 94.1 ms of a 38.88 s step: 0.242%
    assert exposure("DP zero1 traffic", 0.0941, 38.88, "compute", adds) == (
        "DP zero1 traffic mostly hidden behind compute (94.1 ms exposed a step, 0.24%)")
    # 495.8 ms of a 47.81 s step: 1.04%
    assert exposure("DP zero2 traffic", 0.4958, 47.81, "compute", "exposes {s} ({pct})") == (
        "DP zero2 traffic exposes 495.8 ms (1.0%)")
    assert exposure("CP K/V exchange", 0.0878, 38.88, "attention", adds) == (
        "CP K/V exchange mostly hidden behind attention (87.8 ms exposed a step, 0.23%)")


def test_the_winner_lines_agree_with_the_json_and_name_one_gpu() -> None:
    """Llama 3 70B on 64 GPUs at cp 2 in FP8: the DP traffic (94 ms) is no more hidden
    than the CP exchange (88 ms), and the FP8 copies the fp8-param-gather note names are
    those of the fullest GPU, the one the memory line itemizes."""
    run = run_of(gpus=64, model="llama3-70b", gpu="h100-sxm", cp="2", precision="fp8,bf16")
    w = run.result.plans[0]
    text = " ".join(why_lines(run.result))
    for what, exposed in (("p2p", w.exposed_p2p_s), ("DP zero1 traffic", w.exposed_allreduce_s),
                          ("CP K/V exchange", w.exposed_cp_s)):
        assert exposed  # each non-zero in the JSON: none is called hidden outright
        assert f"{what} hidden" not in text
        assert f"{fmt_seconds(exposed)} exposed a step" in text
    full = fullest(w)
    assert full is not None and full.fp8_copies_bytes > 0
    copies = fmt_bytes(full.fp8_copies_bytes)
    assert f"with {copies} of FP8 weight copies" in text
    (note,) = [n for n in run.result.notes if n.startswith("not searched: --fp8-param-gather")]
    assert f"(the winner's fullest GPU holds {copies} of FP8 weight copies)" in note
    # another pipeline rank holds more copies, and is not the one named
    assert max(m.fp8_copies_bytes for m in w.memory) > full.fp8_copies_bytes


def hint_of(**flags: object) -> list[str]:
    run = run_of(**flags)
    factor = run.request_for(run.result.plans[0].key).grad_bytes_factor
    return [line for line in why_lines(run.result, factor)
            if "--grad-compression" in line]


def test_the_compression_hint_is_offered_only_where_it_narrows_the_gradients() -> None:
    """ZeRO-2/3 reduce DeepSpeed's 16-bit gradients: --grad-compression fp16 changes
    nothing there (a trial reran the hint and got the same step to the last digit); the
    FP32 gradients of zero1 and FSDP it narrows to 2 bytes, up to half the traffic."""
    assert hint_of(gpus=64, global_batch=64, sharding="zero2") == []
    assert hint_of(gpus=64, global_batch=64, sharding="zero3") == []
    moe = dict(gpus=64, model="qwen3-30b-a3b", gpu="b200", precision="fp8", sharding="fsdp")
    (hint,) = hint_of(**moe)
    assert hint == ("hint: the data-parallel traffic is exposed; --grad-compression fp16 "
                    "sends 2-byte gradients where 4-byte ones are reduced (up to half the "
                    "traffic; top-k sparsification cuts more)")
    assert hint_of(**moe, grad_compression="fp16") == []
