"""recommend --framework NAME: only the plans NAME's files state, ranked as one search."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pptune.costmodel.evaluate import evaluate
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.layout import DP_INNER
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, Recompute, Sharding, search_all
from pptune.errors import BadInput
from pptune.frameworks.deepspeed.adapter import ADAPTER as DEEPSPEED
from pptune.frameworks.megatron.adapter import ADAPTER as MEGATRON
from pptune.frameworks.torchtitan.adapter import ADAPTER as TORCHTITAN
from pptune.frameworks.torchtitan.cp_fp8 import seq_problem
from pptune.options.record import PlanFileRequest
from pptune.plan.emit import job_of, listed_job
from pptune.plan.framework_search import FrameworkSearch
from pptune.plan.recommend import RecommendRun, RecommendSpec, recommend


def ranked(framework: str | None = None, **flags: object) -> RecommendRun:
    """llama3-8b on 8 H100s (the embedded default), ranked for ``framework``."""
    return recommend(replace(RecommendSpec.of(gpus=8, **flags), framework=framework))


@pytest.fixture(scope="module")
def fp8_runs() -> tuple[RecommendRun, RecommendRun]:
    """BF16 and FP8 searched, every plan and DeepSpeed's."""
    flags = dict(cp="1", precision="bf16,fp8", pipeline_margin=0)
    return ranked(**flags), ranked("deepspeed", **flags)


def test_a_key_its_files_cannot_state_is_dropped(fp8_runs) -> None:
    full, ds = fp8_runs
    seq = full.table.seq_len
    # FP8 GEMMs step faster: every plan's winner is FP8, which DeepSpeed's files cannot state
    assert full.result.plans[0].key == CostKey(precision=Precision.FP8)
    assert DEEPSPEED.cannot_state(full.result.plans[0].key, seq) is not None
    assert ds.result.plans and all(DEEPSPEED.cannot_state(p.key, seq) is None
                                   for p in ds.result.plans)
    assert "DeepSpeed's files cannot state precision fp8: searched without it" in ds.notes
    assert ds.request.framework == "deepspeed" and full.request.framework is None
    assert ds.request.costs.precision == (Precision.BF16,)  # what was searched


def test_deepspeeds_narrowing_shows_in_the_ranking() -> None:
    run = ranked("deepspeed", top=10)
    plans = run.result.plans
    # its pipeline engine: 1F1B, data-parallel ranks innermost, ZeRO 0-3, whole blocks
    # recomputed or none; AutoTP (tp > 1) without a pipeline (closest.stateable_request)
    assert {p.schedule for p in plans} == {Schedule.ONE_F_ONE_B}
    assert {p.rank_order for p in plans} == {DP_INNER}
    assert {p.sharding for p in plans} <= {Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2,
                                          Sharding.ZERO3}
    assert {p.recompute for p in plans} <= {Recompute.NONE, Recompute.FULL}
    assert any(p.tp > 1 for p in plans) and any(p.pp > 1 for p in plans)
    assert all(p.pp == 1 for p in plans if p.tp > 1)
    assert run.request_for(CostKey(tp=2)).pp == (1,)
    assert run.request.space is not None and run.request.space.schedules == (Schedule.ONE_F_ONE_B,)
    assert ("DeepSpeed's files state no schedule gpipe, interleaved-1f1b, zb-h1, zbv, "
            "dualpipe, dualpipev; no sharding fsdp; no recomputation selective, modules: "
            "ranked without them") in run.notes


def test_plans_are_priced_with_the_request_they_were_searched_with() -> None:
    # Megatron-LM writes ZeRO-2 as Megatron-FSDP: its narrowing prices the unsharded
    # gradient buckets, which the plain request does not; the job --timeline evaluates
    # (as listed: Megatron-FSDP's BF16 weight gradients) has the plan's own request, so
    # it sees the plan as ranked
    run = ranked("megatron")
    plan = run.result.plans[0]
    assert plan.sharding is Sharding.ZERO2
    job = listed_job(run, plan)
    assert job_of(run, plan).request == job.request
    again = evaluate(job.table, job.request, plan.spec)
    assert (again.step_time_s, again.peak_memory_bytes) == (plan.step_time_s,
                                                            plan.peak_memory_bytes)
    plain = evaluate(job.table, replace(run.plan_request, cost_keys=(plan.key,)), plan.spec)
    assert max(plain.peak_memory_bytes) < max(plan.peak_memory_bytes)


def test_split_requests_list_as_one_search_on_analytic_costs() -> None:
    # the whole ranking of llama3-8b on 8 H100s (its margin passes a faster pipeline over)
    # from one request a tensor-parallel size: the same list as the search
    run = ranked()
    req = run.plan_request
    assert run.result.passed_over is not None
    parts = [replace(req, tp=tp, cost_keys=tuple(k for k in req.keys() if k.tp == tp))
             for tp in sorted({k.tp for k in req.keys()})]
    split = search_all(run.table_for, parts)
    assert [(p.spec, p.step_time_s) for p in split.plans] == [
        (p.spec, p.step_time_s) for p in run.result.plans]
    assert split.passed_over == run.result.passed_over
    assert split.candidates == run.result.candidates
    # each request prunes at its own top-th time, so memory checks more candidates; the
    # rules every candidate meets reject the same
    assert {k: v for k, v in split.rejected.items() if k != "out_of_memory"} == {
        k: v for k, v in run.result.rejected.items() if k != "out_of_memory"}


def _search(adapter, seq_len: int = 8192) -> FrameworkSearch:  # type: ignore[no-untyped-def]
    return FrameworkSearch(adapter, seq_len, "llama3-8b", None)


def test_the_note_names_the_sizes_its_files_never_state() -> None:
    keys = (CostKey(), CostKey(cp=2), CostKey(tp=2, cp=4))
    assert _search(DEEPSPEED).dropped(keys) == (
        "DeepSpeed's files cannot state cp 2, 4: searched without them")
    assert _search(MEGATRON).dropped(keys) is None


def test_a_pair_only_its_sequence_refuses_is_named_with_why() -> None:
    # torchtitan: seq % (tp x 2 x cp) == 0. 4100 = 4 x 1025: tp 2 alone and cp 2 alone
    # divide it (4), tp 2 with cp 2 does not (8)
    keys = (CostKey(), CostKey(tp=2), CostKey(tp=2, cp=2))
    assert _search(TORCHTITAN, 4100).dropped(keys) == (
        f"torchtitan's files cannot state tp2 cp2 bf16 (sequence {seq_problem(4100, 2, 2)}): "
        "searched without it")


def test_nothing_left_is_bad_input_naming_the_flags() -> None:
    keys = (CostKey(cp=2), CostKey(cp=2, precision=Precision.FP8))
    with pytest.raises(BadInput) as err:
        _search(DEEPSPEED).dropped(keys)
    assert str(err.value) == (
        "--framework deepspeed: DeepSpeed's files state none of the layouts searched (they "
        "cannot state cp 2; precision fp8): search one they state (--cp 1, --precision bf16)")


def test_the_note_names_the_choices_it_searched_instead() -> None:
    req = PlanRequest(gpus=8, global_batch=64, schedules=(Schedule.ZBV,),
                      shardings=(Sharding.FSDP, Sharding.ZERO1), recomputes=(Recompute.NONE,))
    search = _search(DEEPSPEED)
    assert search.narrowed(req, search.groups(req)) == (
        "DeepSpeed's files state no schedule zbv; no sharding fsdp: ranked without them "
        "(searched schedule 1f1b instead)")


def test_the_note_names_the_pipeline_depths_its_files_do_not_run() -> None:
    # torchtitan's qwen3 TrainSpec has no pipelining_fn: --pp 4 is searched at pp 1
    req = PlanRequest(gpus=32, global_batch=128, pp=[4], schedules=(Schedule.ONE_F_ONE_B,),
                      shardings=(Sharding.FSDP,), recomputes=(Recompute.NONE,))
    search = FrameworkSearch(TORCHTITAN, 4096, "qwen3-30b-a3b", None)
    assert search.narrowed(req, search.groups(req)) == (
        "torchtitan's files state no pp 4: ranked without it (searched pp 1 instead)")
    # every depth asked (None) and a model it pipelines: nothing to say
    assert search.narrowed(replace(req, pp=None), search.groups(replace(req, pp=None))) is None
    llama = FrameworkSearch(TORCHTITAN, 4096, "llama3-8b", None)
    assert llama.narrowed(req, llama.groups(req)) is None


def test_the_plan_file_records_the_framework() -> None:
    request = PlanFileRequest(framework="torchtitan")
    assert request.to_json()["framework"] == "torchtitan"
    assert PlanFileRequest.from_json(request.to_json()).framework == "torchtitan"
    assert "framework" not in PlanFileRequest().to_json()


def test_torchtitan_drops_cp_for_a_model_whose_attention_refuses_it() -> None:
    """DeepSeek-V3's torchtitan flavors run flex attention, which its context parallelism
    refuses: cp 2 is dropped for that model (and named), kept for Llama 3 8B (SDPA)."""
    keys = [CostKey(tp=4, cp=2, ep=8), CostKey(tp=4, ep=8)]
    deepseek = FrameworkSearch(TORCHTITAN, 4096, "deepseek-v3", None)
    assert deepseek.keys(keys) == (CostKey(tp=4, ep=8),)
    assert deepseek.dropped(keys) == ("torchtitan's files cannot state cp 2: searched "
                                      "without it")
    llama = FrameworkSearch(TORCHTITAN, 8192, "llama3-8b", None)
    assert llama.keys([CostKey(tp=4, cp=2)]) == (CostKey(tp=4, cp=2),)


@pytest.fixture(scope="module")
def torchtitan_run() -> RecommendRun:
    return ranked("torchtitan")


def test_torchtitan_ranks_its_plans_at_the_step_it_runs_them(torchtitan_run) -> None:
    """Searched with torchtitan's kernels (torch's SDPA: cuDNN's on an H100), ZBV over
    pp 2 x dp 4 is the fastest plan, at 42.860 s (its SwiGLU priced compiled), ahead of
    1F1B on the same ranks at 43.177 s. torch's ZBV refuses a compiled model: so run, with
    the SwiGLU eager, it outgrows the H100's 79.65 GiB, and the ZBV plan over pp 2 x dp 2
    x cp 2 (43.953 s)
    outgrows it too, while 1F1B compiles as priced. Plan 1 is that 1F1B plan, at its
    searched step; every plan listed is at the step torchtitan runs it."""
    plans = torchtitan_run.result.plans
    first = plans[0]
    assert (first.pp, first.dp, first.cp, first.schedule, first.sharding, first.recompute,
            first.num_microbatches) == (2, 4, 1, Schedule.ONE_F_ONE_B, Sharding.FSDP,
                                        Recompute.NONE, 128)
    assert round(first.step_time_s, 3) == 43.177
    zbv = [p for p in torchtitan_run.result.dropped if p.schedule is Schedule.ZBV]
    assert [(p.pp, p.dp, p.cp, round(p.step_time_s, 3)) for p in zbv[:2]] == [
        (2, 4, 1, 42.860), (2, 2, 2, 43.953)]
    for plan in plans:  # as --emit and check-config price them
        ran_job, ran = TORCHTITAN.as_run(job_of(torchtitan_run, plan), plan)
        assert ran.spec == plan.spec
        assert (ran.step_time_s, ran.peak_memory_bytes) == (plan.step_time_s,
                                                            plan.peak_memory_bytes)
        assert max(ran.peak_memory_bytes) <= ran_job.table.memory_bytes
    said = [n for n in torchtitan_run.result.notes if n.startswith("ranked as torchtitan")]
    assert len(said) == 1 and ("the fastest: pp=2 dp=4 tp=1 zbv v=2, 128 micro-batches of "
                               "1, fsdp/none at 42.860 s as searched") in said[0]


def test_a_zero_bubble_plan_that_fits_is_listed_at_its_eager_step() -> None:
    """The ZBV plans that fit with the SwiGLU eager are ranked at that step (the plans
    priced again), slower than the search's."""
    run = ranked("torchtitan", top=40, schedules="zbv,1f1b")
    zbv = [p for p in run.result.plans if p.schedule is Schedule.ZBV]
    assert zbv and run.result.repriced
    searched = {p.spec: p for p in run.result.repriced}
    for plan in zbv:
        assert plan.step_time_s > searched[plan.spec].step_time_s
        assert TORCHTITAN.as_run(job_of(run, plan), plan)[1].step_time_s == plan.step_time_s
        # --timeline simulates the plan on the job it was listed with
        job = listed_job(run, plan)
        assert evaluate(job.table, job.request, plan.spec).step_time_s == plan.step_time_s


@pytest.mark.parametrize("framework", ["pptune"])
def test_a_framework_that_runs_plans_as_priced_lists_the_search(framework: str) -> None:
    """pptune's own runtime runs each plan as the search priced it (Adapter.as_run's
    default): the list is the search's over the plans its files state, nothing left out
    (Megatron-LM and DeepSpeed price their plans as run: test_framework_as_run.py)."""
    run = ranked(framework)
    again = search_all(run.table_for, list(run.groups))
    assert [(p.spec, p.step_time_s) for p in run.result.plans] == [
        (p.spec, p.step_time_s) for p in again.plans]
    assert (run.result.dropped, run.result.repriced) == ([], [])
    assert not [n for n in run.result.notes if n.startswith("ranked as")]


def test_the_left_out_note_names_no_plan_the_list_shows_in_the_same_words() -> None:
    # a plan left out that the list shows in words (another split or rank order of a
    # listed plan) is not "a faster plan left out": a trial read plan 1 itself there
    run = recommend(RecommendSpec.of(gpus=8))
    first = run.result.plans[0]
    twin = replace(first, step_time_s=first.step_time_s * 0.99,
                   stage_layers=tuple(reversed(first.stage_layers)))
    note = _search(MEGATRON).as_run_note(replace(run.result, dropped=[twin], repriced=[]))
    assert note is None
    other = replace(twin, recompute=Recompute.SELECTIVE)
    note = _search(MEGATRON).as_run_note(replace(run.result, dropped=[twin, other],
                                                 repriced=[]))
    assert note is not None and "1 faster plan left out" in note
    assert f"{first.sharding.value}/selective at" in note
