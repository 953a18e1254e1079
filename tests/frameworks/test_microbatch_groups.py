"""Interleaving with micro-batches not a multiple of pp: searched in Megatron-LM's
micro-batch groups, written with --microbatch-group-size-per-virtual-pipeline-stage,
checked back as simulated; torch's frameworks refuse such a count or run it in another
order, which pptune neither writes nor prices."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel.schedule_orders import microbatch_group
from pptune.costmodel.schedules import Schedule
from pptune.frameworks.common.torch_schedules import refused_rounds
from pptune.plan.emit import emit
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

# 8 GPUs, pp 4, dp 2, micro-batch 1: 36 sequences are 18 micro-batches, which groups of
# 4 cannot take (remainder 2 < pp) and groups of 6 can
SPEC = dict(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[4], cp=[1], tp=[1],
            global_batch=36, schedules="interleaved-1f1b", recompute="full",
            sharding="zero1", top=1)


def _run(**more: object) -> object:
    return recommend(RecommendSpec.of(**{**SPEC, **more}))  # type: ignore[arg-type]


def test_megatron_writes_the_group_it_simulated_and_reads_it_back(tmp_path: Path) -> None:
    run = _run()
    plan = run.result.plans[0]  # type: ignore[attr-defined]
    assert (plan.schedule, plan.pp, plan.num_microbatches) == (Schedule.INTERLEAVED, 4, 18)
    out = emit("megatron", run)  # type: ignore[arg-type]
    script = out.files["pretrain_megatron.sh"]
    assert "--microbatch-group-size-per-virtual-pipeline-stage 6" in script
    code, found, doc = check_file(tmp_path / "run.sh", script)
    assert code == 0 and "schedule-not-modelled" not in found
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    # 18 % 9 == 0: Megatron-LM runs groups of 9 too, in an order pptune does not build
    _, found, _ = check_file(tmp_path / "run9.sh", script.replace(
        "stage 6", "stage 9"), by="message")
    assert ("--microbatch-group-size-per-virtual-pipeline-stage 9; pptune simulates 18 "
            "micro-batches on pp 4 in groups of 6") in found["schedule-not-modelled"]


def test_torchtitan_states_another_plan_and_prices_none_in_torchs_order(
        tmp_path: Path) -> None:
    # tp 2 lets pp 4 take dp 1: 36 micro-batches, a multiple of pp
    run = _run(tp=[1, 2])
    assert run.result.plans[0].num_microbatches == 18  # type: ignore[attr-defined]
    out = emit("torchtitan", run)  # type: ignore[arg-type]
    assert not (out.plan.schedule is Schedule.INTERLEAVED
                and out.plan.num_microbatches % out.plan.pp)
    # 18 // 4 = 4 rounds, 18 % 4 = 2: torch refuses the count, and no other plan on the same
    # ranks fits the schedules asked: the best plan of the search in torch's order instead
    assert out.notes[0].startswith(
        "torchtitan cannot express plan 1 (torch's ScheduleInterleaved1F1B refuses 18 "
        "micro-batches on pp 4: they must be a multiple of its round count max(1, m // pp) = "
        "4 (torch 2.13 torch/distributed/pipelining/schedules.py)): emitting the best plan "
        "it can state (tp2 bf16, pp=4 dp=1)"), out.notes
    toml = out.files["torchtitan.toml"]
    code, found, _ = check_file(tmp_path / "a.toml", toml)
    assert code == 0 and "schedule-not-modelled" not in found
    # 6 micro-batches on pp 4: torch 2.13 runs them (6 % max(1, 6 // 4) = 0), in its own
    # order, which pptune does not price as Megatron-LM's groups
    assert 'pipeline_parallel_schedule = "Interleaved1F1B"' in toml
    six = toml.replace("local_batch_size = 36", "local_batch_size = 6").replace(
        "global_batch_size = 36", "global_batch_size = 6")
    code, found, _ = check_file(tmp_path / "b.toml", six, by="message")
    assert "in an order of its own" in found["schedule-not-modelled"]


@pytest.mark.parametrize(("m", "pp", "rounds"), [
    (128, 9, 14), (18, 4, 4), (130, 9, 14), (126, 9, None), (20, 9, None), (10, 4, None),
    (3, 4, None)])
def test_torchs_round_rule_by_hand(m: int, pp: int, rounds: int | None) -> None:
    # max(1, m // pp) rounds must divide m: 128 // 9 = 14 and 128 % 14 = 2; 18 // 4 = 4 and
    # 18 % 4 = 2; 130 // 9 = 14 and 130 % 14 = 4; 126 = 9 x 14; 20 // 9 = 2 divides 20; and
    # torch's own examples, 10 on pp 4 (2 rounds) and 3 on pp 4 (1)
    assert refused_rounds(m, pp) == rounds


def test_torchtitan_runs_another_schedule_on_the_same_ranks(tmp_path: Path) -> None:
    # FP8 plan 1 interleaves 18 micro-batches on pp 4, which torch refuses; on the same
    # ranks torchtitan runs 1F1B and ZBV, ZBV with its float8 casts eager (it cannot compile
    # the model): 1F1B, compiled, is the faster as the file runs them
    run = _run(schedules="interleaved-1f1b,1f1b,zbv", precision="fp8")
    plan = run.result.plans[0]  # type: ignore[attr-defined]
    assert (plan.schedule, plan.pp, plan.num_microbatches) == (Schedule.INTERLEAVED, 4, 18)
    out = emit("torchtitan", run)  # type: ignore[arg-type]
    assert (out.plan.schedule, out.plan.pp, out.plan.dp, out.plan.num_microbatches) == (
        Schedule.ONE_F_ONE_B, 4, 2, 18)
    assert out.notes[0].startswith(
        "torchtitan cannot express plan 1 (torch's ScheduleInterleaved1F1B refuses 18 "
        "micro-batches on pp 4: they must be a multiple of its round count max(1, m // pp) = 4"
    ) and "emitting the fastest plan it can run on the same ranks and micro-batches: 1f1b" \
        in out.notes[0], out.notes
    code, found, doc = check_file(tmp_path / "a.toml", out.files["torchtitan.toml"])
    assert code == 0 and not [f for f, severity in found.items() if severity == "error"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_megatron_group_for_128_on_pp_9_meets_megatron_core_016() -> None:
    # megatron-core 0.16 forward_backward_pipelining_with_interleaving: the group N in
    # [pp, m] and m % N either 0 or >= pp. 128 % 9 = 2, 128 % 10 = 8, 128 % 11 = 7,
    # 128 % 12 = 8, 128 % 13 = 11 >= 9: the least valid N is 13
    assert microbatch_group(9, 128) == 13
    assert 9 <= 13 <= 128 and 128 % 13 >= 9
