"""check-config's findings on hand-made configs (no file readers involved)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.check.rules import CheckOptions, check
from pptune.schemas import TrainingConfig

BASE = dict(gpus=16, tp=1, pp=4, micro_batch_size=1, global_batch=128, model="llama3-8b",
            gpu="h100-sxm", schedule="1f1b", sharded_optimizer=True)


def ids(cfg: dict, **opts) -> dict[str, str]:
    report = check(TrainingConfig.model_validate(cfg), Path("."), CheckOptions(**opts))
    return {f.id: f.severity for f in report.findings}


def test_consistent_config_has_no_errors() -> None:
    found = ids(BASE)
    assert "error" not in found.values(), found
    assert found["memory-ok"] == "info" and found["bubble-ok"] == "info"


def test_all_arithmetic_problems_reported_at_once() -> None:
    found = ids({**BASE, "gpus": 18, "grad_accum_steps": 7, "num_layers": 30, "pp": 4})
    assert found["gpus-mismatch"] == "error"
    # gpus do not split, so dp is unknown: the batch check waits, layers still checked
    assert found["layers-not-divisible"] == "error"


def test_batch_mismatch_names_values() -> None:
    report = check(TrainingConfig.model_validate({**BASE, "grad_accum_steps": 7}), Path("."))
    f = next(f for f in report.findings if f.id == "batch-mismatch")
    assert "128 != micro-batch 1 x GA steps 7 x dp 4 = 28; set GA to 32 or the global " \
        "batch to 28" in f.message
    # no whole GA gives 130 over micro-batch x dp = 4: only the global batch can change
    report = check(TrainingConfig.model_validate({**BASE, "grad_accum_steps": 7,
                                                  "global_batch": 130}), Path("."))
    f = next(f for f in report.findings if f.id == "batch-mismatch")
    assert f.message.endswith("set the global batch to 28 (no whole GA gives 130 over "
                              "micro-batch x dp = 4)")


def test_1f1b_needs_m_ge_p_and_interleaved_needs_rounds() -> None:
    """torch 2.13 torch/distributed/pipelining/schedules.py: Schedule1F1B refuses m < stages;
    ScheduleInterleaved1F1B needs m a multiple of max(1, m // pp) (m = 6 on pp 4 runs)."""
    assert ids({**BASE, "global_batch": 8})["1f1b-m-lt-pp"] == "error"  # m = 2 < 4
    interleaved = {**BASE, "schedule": "interleaved-1f1b", "virtual_stages": 2}
    assert "interleaved-rounds" not in ids({**interleaved, "global_batch": 24})  # m = 6
    assert ids({**interleaved, "global_batch": 36})["interleaved-rounds"] == "error"  # m = 9


def test_ga_not_aligned_is_information() -> None:
    # m = 6 on pp = 4: the simulated step prices it, and recommend ranks such m (marked *)
    assert ids({**BASE, "global_batch": 24})["ga-not-aligned"] == "info"


def test_zbv_needs_two_chunks_and_deepspeed_zero_pp() -> None:
    assert ids({**BASE, "schedule": "zbv", "virtual_stages": 3})["zbv-chunks"] == "error"
    assert ids({**BASE, "zero_stage": 2, "source_format": "deepspeed"})["deepspeed-zero-pp"] == "error"
    assert "deepspeed-zero-pp" not in ids({**BASE, "zero_stage": 2})  # FSDP under torchtitan


def test_explicit_split_must_cover_the_layers() -> None:
    assert ids({**BASE, "stage_layers": [8, 8, 8]})["split-mismatch"] == "error"
    assert ids({**BASE, "stage_layers": [8, 8, 8, 9]})["split-mismatch"] == "error"
    found = ids({**BASE, "stage_layers": [7, 9, 9, 7]})
    assert "split-mismatch" not in found


def test_a_stated_split_may_leave_the_embedding_or_head_a_stage_alone() -> None:
    """Llama 3 8B's 32 blocks over pp 4 x v 9 = 36 chunks: no even split of blocks fills
    them (too-few-layers), but a stated split whose first and last chunks hold only the
    embedding and the head, as recommend plans them (Megatron-LM's account-for flags,
    torchtitan's layers per stage of 1), is checked and predicted."""
    interleaved = {**BASE, "schedule": "interleaved-1f1b", "virtual_stages": 9,
                   "global_batch": 64}
    assert ids(interleaved)["too-few-layers"] == "error"
    found = ids({**interleaved, "stage_layers": [0, *[1] * 32, 0, 0, 0]})
    assert "too-few-layers" not in found and found["bubble-ok"] == "info", found


def test_memory_overflow_names_the_rank() -> None:
    report = check(TrainingConfig.model_validate({**BASE, "pp": 1, "gpus": 4, "global_batch": 64,
                                                  "micro_batch_size": 8}), Path("."))
    over = [f for f in report.findings if f.id == "memory-overflow"]
    assert over and over[0].values["rank"] == 0
    assert "pipeline rank 0 needs" in over[0].message
    # the fixes in the config's framework's own words (its adapter's memory_fixes), less
    # what the config already does: BASE shards its optimizer
    assert over[0].message.endswith("use more pipeline stages (pp), activation recomputation "
                                    "(recompute) or a smaller micro_batch_size")
    plain = check(TrainingConfig.model_validate(
        {**BASE, "pp": 1, "gpus": 4, "global_batch": 64, "micro_batch_size": 8,
         "sharded_optimizer": False}), Path("."))
    assert "a sharded optimizer (sharding: zero1)" in next(
        f for f in plain.findings if f.id == "memory-overflow").message
    megatron = check(TrainingConfig.model_validate(
        {**BASE, "pp": 1, "gpus": 4, "global_batch": 64, "micro_batch_size": 8,
         "sharded_optimizer": False, "source_format": "megatron"}), Path("."))
    assert "--use-distributed-optimizer" in next(
        f for f in megatron.findings if f.id == "memory-overflow").message


def test_bubble_limit_and_slowdown() -> None:
    found = ids({**BASE, "global_batch": 16}, max_bubble=0.05)  # m = 4 on pp = 4
    assert found["bubble-over-limit"] == "error"
    found = ids({**BASE, "global_batch": 16}, max_slowdown=1.0)
    assert found.get("slower-than-best") == "error"  # the user set the limit


def test_bubble_and_slowdown_are_warnings_unless_a_limit_is_set_or_strict() -> None:
    """A prediction is not a framework rule: 1F1B with pp 4 and 8 micro-batches (27%
    bubble) runs as designed, so the default 25% limit only warns."""
    cfg = {**BASE, "global_batch": 32}  # m = 8 on pp = 4
    assert ids(cfg)["bubble-over-limit"] == "warning"
    assert ids(cfg, strict=True)["bubble-over-limit"] == "error"
    assert ids(cfg, max_bubble=0.25)["bubble-over-limit"] == "error"
    assert ids({**cfg, "limits": {"max_bubble": 0.25}})["bubble-over-limit"] == "error"
    assert ids({**cfg, "limits": {"max_slowdown": 1.5}})["bubble-over-limit"] == "warning"


def test_no_model_is_a_warning_not_a_silent_pass() -> None:
    cfg = {k: v for k, v in BASE.items() if k != "model"}
    assert ids(cfg)["model-unknown"] == "warning"


def test_full_recompute_lowers_memory() -> None:
    plain = check(TrainingConfig.model_validate(BASE), Path("."), CheckOptions(compare_best=False))
    full = check(TrainingConfig.model_validate({**BASE, "recompute": "full"}), Path("."),
                 CheckOptions(compare_best=False))
    assert max(full.plan.peak_memory_bytes) < max(plain.plan.peak_memory_bytes)
    assert full.plan.step_time_s > plain.plan.step_time_s


@pytest.mark.parametrize("sched", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"])
def test_every_schedule_checks(sched: str) -> None:
    v = 2 if sched in ("interleaved-1f1b", "zbv") else 1
    found = ids({**BASE, "schedule": sched, "virtual_stages": v}, compare_best=False)
    assert "bubble-ok" in found or "bubble-over-limit" in found


def test_eager_attention_in_the_config_costs_more_time_and_memory() -> None:
    def plan(attention: str | None):  # type: ignore[no-untyped-def]
        cfg = TrainingConfig.model_validate({**BASE, "attention": attention})
        return check(cfg, Path("."), CheckOptions(compare_best=False)).plan

    flash, eager, unstated = plan("flash"), plan("eager"), plan(None)
    assert eager.step_time_s > flash.step_time_s  # unfused softmax over an 8k x 8k square
    assert max(eager.peak_memory_bytes) > max(flash.peak_memory_bytes)
    # not stated: sdpa, the default, which torch 2.13 runs as cuDNN's kernel on an H100
    assert unstated.step_time_s == plan("cudnn").step_time_s < flash.step_time_s


@pytest.mark.parametrize(("extra", "sharding"), [
    ({"sharded_optimizer": False}, "none"),
    ({}, "zero1"),  # the base config's sharded optimizer
    ({"sharded_optimizer": False, "zero_stage": 1}, "zero1"),
    ({"sharding": "fsdp"}, "fsdp"),
])
def test_config_sharding_reaches_the_prediction(extra: dict, sharding: str) -> None:
    report = check(TrainingConfig.model_validate({**BASE, **extra}), Path("."),
                   CheckOptions(compare_best=False))
    assert report.plan is not None and report.plan.sharding.value == sharding


def test_selective_recompute_every_second_block_lowers_memory_less_than_full() -> None:
    def peak(**extra: object) -> float:
        report = check(TrainingConfig.model_validate({**BASE, **extra}), Path("."),
                       CheckOptions(compare_best=False))
        assert report.plan is not None
        return max(report.plan.peak_memory_bytes)

    none, full = peak(), peak(recompute="full")
    every2 = peak(recompute="selective", recompute_every=2)
    assert full < every2 < none
    assert peak(recompute="selective") == none  # Megatron-LM's core attention, flash attention


def test_tensor_parallelism_across_nodes_is_priced_and_said() -> None:
    """tp 8 on nodes of 4: the TP group spans two nodes, a warning, and the step priced
    with its collectives over the NICs (slower than the same config on nodes of 8)."""
    cfg = {**BASE, "gpus": 64, "tp": 8, "pp": 4, "model": "llama3-70b", "global_batch": 64}
    across = check(TrainingConfig.model_validate({**cfg, "gpus_per_node": 4}), Path("."))
    inside = check(TrainingConfig.model_validate({**cfg, "gpus_per_node": 8}), Path("."))
    assert {f.id: f.severity for f in across.findings}["tp-across-nodes"] == "warning"
    assert "tp-across-nodes" not in {f.id for f in inside.findings}
    assert across.derived["step_time_s"] > 1.1 * inside.derived["step_time_s"]


def test_max_memory_caps_the_share_a_rank_may_use() -> None:
    """--max-memory F: the memory check's capacity is F x the GPU's, over the file's own
    limits.memory_fraction; the same plan passes at 1.0 and fails at a share under its
    peak."""
    cfg = TrainingConfig.model_validate({**BASE, "limits": {"memory_fraction": 1.0}})
    whole = check(cfg, Path("."))
    [ok] = [f for f in whole.findings if f.id == "memory-ok"]
    peak, capacity = ok.values["peak_bytes"], ok.values["capacity_bytes"]
    share = 0.9 * peak / capacity  # a tenth under the peak
    capped = check(cfg, Path("."), CheckOptions(max_memory=share))
    [over] = [f for f in capped.findings if f.id == "memory-overflow"]
    assert over.severity == "error"
    assert over.values["capacity_bytes"] == pytest.approx(capacity * share)


def test_a_bubble_no_plan_escapes_is_information_under_the_default_limit() -> None:
    """recommend's plan 1 for GPT-OSS-120B on 576 GB200s has a 28.4% bubble, and its file
    failed `check-config --strict` on the default 25% limit. Where the best plan for the
    same GPUs and batch is over the limit too, the bubble is what the job costs: under
    the default limit the finding is information and says so; a limit the user set (flag
    or file) keeps its severity; a best plan under the limit changes nothing."""
    from types import SimpleNamespace

    from pptune.check.rules import Finding
    from pptune.check.verdicts import bubble_of_the_best

    def finding() -> Finding:
        return Finding("bubble-over-limit", "error", "predicted bubble 28.4% exceeds the "
                       "limit 25.0% (pp=18, m=160, dualpipe)")

    best = SimpleNamespace(bubble_rate=0.284, pp=18, schedule=SimpleNamespace(value="dualpipe"))
    found = [finding()]
    bubble_of_the_best(found, best, 0.25, stated=False)  # type: ignore[arg-type]
    assert found[0].severity == "info"
    assert found[0].message.endswith(
        "; the best plan for these GPUs and batch (pp=18 dualpipe) has 28.4%: no plan "
        "checked stays under the default limit (limits.max_bubble or --max-bubble sets one "
        "to gate on)")
    for stated, bubble in ((True, 0.284), (False, 0.2)):
        found = [finding()]
        bubble_of_the_best(found, SimpleNamespace(  # type: ignore[arg-type]
            bubble_rate=bubble, pp=18, schedule=best.schedule), 0.25, stated=stated)
        assert found == [finding()]


def test_ga_not_aligned_in_a_token_counted_files_keys() -> None:
    """m = 6 on pp 4, dp 4, one run a step, 2048 tokens a micro-batch: the next multiple,
    8, makes 2048 x 8 x 4 = 65536 tokens a step; 2 micro-batches x 2 runs: 4 divides the
    4 a step, one run (the step kept)."""
    from pptune.check.microbatches import not_aligned
    from pptune.frameworks.common.batch_words import TokenBatch

    words = TokenBatch(micro="tok", count="cnt", step="stp", tokens=2048, seq_len=2048,
                       size=1)
    cfg = TrainingConfig.model_validate({**BASE, "global_batch": 24})
    assert not_aligned(cfg, 6, 4, words) == (
        "cnt 6 is not a multiple of pp (4); 8 would align gradient accumulation to pipeline "
        "depth, with stp 65536 (tok 2048 x 8 x dp 4)")
    two = TrainingConfig.model_validate({**BASE, "global_batch": 16, "pipeline_flushes": 2})
    assert not_aligned(two, 2, 4, words) == (
        "cnt 2 is not a multiple of pp (4); 4 would align gradient accumulation to pipeline "
        "depth, run 1 time a step (the global batch kept)")
    assert not_aligned(cfg, 6, 4).startswith(
        "micro-batches per pipeline run (6) are not a multiple of pp (4); ")
