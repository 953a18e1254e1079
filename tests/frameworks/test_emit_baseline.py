"""recommend --emit's narration: every ratio is to plan N as ranked, named, and the
plan written is priced once more only when what changed says why."""

from __future__ import annotations

import re
from pathlib import Path

from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend
from pptune.report.fmt import fmt_seconds


def _ratios(notes: list[str]) -> list[str]:
    return re.findall(r"\((\d+\.\d{3}x[^)]*)\)", " ".join(notes))


def test_every_ratio_names_plan_1_and_is_to_its_step() -> None:
    # torchtitan's qwen3 has no pipelining: plan 1 (DualPipeV) gives way to the fastest
    # plan without one, whose substitutions cost enough for the search's to replace it
    run = recommend(RecommendSpec.of(gpus=16, model="qwen3-30b-a3b", gpu="h100-sxm", top=1))
    out = emit("torchtitan", run)
    base = run.result.plans[0].step_time_s
    ratios = _ratios(out.notes)
    assert ratios and all(r.endswith("x plan 1") for r in ratios), out.notes
    for note in out.notes:  # each "step S (Rx plan 1)" has R = S / plan 1's step
        for step, r in re.findall(r"step (\d+\.\d+ s) \((\d+\.\d{3})x plan 1\)", note):
            assert step == fmt_seconds(float(r) * base) or abs(
                float(step[:-2]) / base - float(r)) < 1e-3, note
    # the plan written is stated once at its final step, not re-quoted at two prices
    final = fmt_seconds(out.plan.step_time_s)
    swapped = [n for n in out.notes if n.startswith("those substitutions")]
    assert len(swapped) == 1 and final not in swapped[0]


def test_a_plan_no_substitute_on_its_ranks_fits_gives_way_to_one_that_does(tmp_path: Path
                                                                           ) -> None:
    """Llama 3 70B on 16 H100s ranks a ZeRO-3 plan first, which Megatron-FSDP (gathering
    every layer in each micro-batch) cannot fit on its ranks: emit writes the fastest plan
    a Megatron-LM script states on the same GPUs instead of refusing, and says why."""
    from dataclasses import replace

    from tests.check_json import check_file

    run = recommend(replace(RecommendSpec.of(gpus=16, model="llama3-70b", top=1),
                            written_as="megatron"))  # ranked with its kernels, as the CLI does
    assert run.result.plans[0].sharding.value == "zero3"
    out = emit("megatron", run)
    said = [n for n in out.notes if n.startswith("megatron cannot express plan 1")]
    assert len(said) == 1 and "is written instead" in said[0], out.notes
    assert out.plan.spec != run.result.plans[0].spec
    assert out.plan.step_time_s >= run.result.plans[0].step_time_s
    code, found, doc = check_file(tmp_path / "pretrain.sh", out.files["pretrain_megatron.sh"])
    assert code == 0 and "memory-ok" in found and "memory-overflow" not in found
    assert abs(doc["derived"]["step_time_s"] - out.plan.step_time_s) < 1e-3 * out.plan.step_time_s


def test_experts_borrowing_fsdp_ranks_are_written_only_where_they_fit(tmp_path: Path) -> None:
    """torchtitan's expert mesh borrows FSDP ranks where ep > tp x cp; under a pipeline its
    FSDP keeps a stage's weights gathered, so the FSDP twin of DeepSeek-V3's plan 1 on 256
    H100s (all-gather dispatch, pp 8 or 16) needs 85.89 GiB: emit writes another plan
    instead of a file check-config rejects, and check-config prices it alike."""
    from dataclasses import replace

    from tests.check_json import check_file

    run = recommend(replace(RecommendSpec.of(
        gpus=256, model="deepseek-v3", gpu="h100-sxm", global_batch=1024,
        moe_dispatcher="allgather", pp="8,16", top=1), written_as="torchtitan"))
    out = emit("torchtitan", run)
    said = [n for n in out.notes if "borrows FSDP ranks" in n]
    assert len(said) == 1 and "85.89 GiB of 79.65 GiB" in said[0], out.notes
    code, found, doc = check_file(tmp_path / "torchtitan.toml", out.files["torchtitan.toml"])
    assert code == 0 and "memory-ok" in found and "memory-overflow" not in found
    assert abs(doc["derived"]["step_time_s"] - out.plan.step_time_s) < 1e-3 * out.plan.step_time_s
