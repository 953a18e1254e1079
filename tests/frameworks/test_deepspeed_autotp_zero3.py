"""AutoTP with ZeRO stage 3, by DeepSpeed release: up to 0.19.3 the engine asserts
``self.zero_optimization_stage() <= 2`` in ``_configure_tensor_parallel_states``
(deepspeed/runtime/engine.py); 0.19.4 (PRs #8167, #8168) trains it. At the default
release (0.19.8) the combination is stated and searched; at an earlier one it is an
error finding, and no search over what the files state keeps it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.keys import CostKey
from pptune.costmodel.search import PlanRequest, Sharding
from pptune.frameworks.common.versions import Versions
from pptune.frameworks.deepspeed.adapter import ADAPTER
from pptune.frameworks.deepspeed.closest import closest_plan, stateable_request
from pptune.plan.emit import listed_job
from pptune.plan.framework_search import FrameworkSearch
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file
from tests.conftest import Cli

Z3_TP2 = json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                     "bf16": {"enabled": True}, "zero_optimization": {"stage": 3},
                     "tensor_parallel": {"autotp_size": 2}})
FLAGS = ("--gpus", "16", "--model", "llama3-70b", "--gpu", "b200")
OLD = Versions({"deepspeed": "0.19.3"})
ALL = (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2, Sharding.ZERO3)
runner = CliRunner()


def test_check_config_refuses_it_up_to_0_19_3(tmp_path: Path) -> None:
    code, found, doc = check_file(tmp_path / "ds.json", Z3_TP2, *FLAGS,
                                  "--framework-version", "deepspeed=0.19.3")
    assert code == 1 and found["deepspeed-autotp-zero3"] == "error"
    message = next(f["message"] for f in doc["findings"]
                   if f["id"] == "deepspeed-autotp-zero3")
    assert ("Currently, the compatibility between 'autotp' and 'zero_stage = 3' has not "
            "been validated") in message
    assert "0.19.4" in message and "_configure_tensor_parallel_states" in message
    # an earlier release too (the rule is "before 0.19.4", not "at 0.19.3")
    code, found, _ = check_file(tmp_path / "ds.json", Z3_TP2, *FLAGS,
                                "--framework-version", "deepspeed=0.16.0")
    assert code == 1 and found["deepspeed-autotp-zero3"] == "error"


def test_check_config_accepts_it_from_0_19_4(tmp_path: Path) -> None:
    for release in ((), ("--framework-version", "deepspeed=0.19.4")):
        code, found, _ = check_file(tmp_path / "ds.json", Z3_TP2, *FLAGS, *release)
        assert code == 0 and "deepspeed-autotp-zero3" not in found


def test_zero2_and_tp1_stay_accepted_at_0_19_3(tmp_path: Path) -> None:
    z2 = json.loads(Z3_TP2) | {"zero_optimization": {"stage": 2}}
    z3 = json.loads(Z3_TP2) | {"tensor_parallel": {"autotp_size": 1}}
    for cfg in (z2, z3):
        _, found, _ = check_file(tmp_path / "ds.json", json.dumps(cfg), *FLAGS,
                                 "--framework-version", "deepspeed=0.19.3")
        assert "deepspeed-autotp-zero3" not in found


def test_the_stateable_search_drops_zero3_at_tp_2_before_0_19_4() -> None:
    req = PlanRequest(gpus=16, global_batch=64, tp=2)
    assert stateable_request(req, None).shardings == ALL
    assert stateable_request(req, None, OLD).shardings == ALL[:3]
    # tp 1 runs no AutoTP: ZeRO-3 stays
    assert stateable_request(PlanRequest(gpus=16, global_batch=64), None, OLD
                             ).shardings == ALL


def test_groups_and_recommends_search_follow_the_release() -> None:
    keys = (CostKey(tp=1), CostKey(tp=2))
    req = PlanRequest(gpus=16, global_batch=64, cost_keys=keys)
    now = {g.tp: g.shardings for g in ADAPTER.stateable_groups(req, keys, "llama3-70b")}
    assert now == {1: ALL, 2: ALL}
    old = {g.tp: g.shardings
           for g in ADAPTER.stateable_groups(req, keys, "llama3-70b", versions=OLD)}
    assert old == {1: ALL, 2: ALL[:3]}
    # only ZeRO-3 asked: no tp 2 group is left before 0.19.4
    z3 = PlanRequest(gpus=16, global_batch=64, cost_keys=keys, shardings=(Sharding.ZERO3,))
    assert [g.tp for g in ADAPTER.stateable_groups(z3, keys, "llama3-70b",
                                                   versions=OLD)] == [1]
    search = FrameworkSearch(ADAPTER, 8192, "llama3-70b", None, versions=OLD)
    assert {g.tp: g.shardings for g in search.groups(req)} == {1: ALL, 2: ALL[:3]}


def test_the_comparison_names_no_zero3_autotp_plan_before_0_19_4(tmp_path: Path) -> None:
    """A ZeRO-2 tp 2 file: at 0.19.8 the best plan it states differs from it in ZeRO-3
    alone (and recomputation), at tp 2; at 0.19.3 the comparison names one that release
    runs: no ZeRO-3 beside AutoTP."""
    text = json.dumps(json.loads(Z3_TP2) | {"zero_optimization": {"stage": 2},
                                            "pptune": {"recompute": "full"}})
    (tmp_path / "ds.json").write_text(text)
    differs = {}
    for release in ("0.19.8", "0.19.3"):
        r = runner.invoke(app, ["check-config", str(tmp_path / "ds.json"), "--output",
                                "json", *FLAGS, "--framework-version", f"deepspeed={release}"])
        assert r.exit_code == 0, r.stderr
        slower = next(f for f in json.loads(r.stdout)["findings"]
                      if f["id"] == "slower-than-best")
        differs[release] = slower["values"]["differs"]
    assert differs["0.19.8"]["sharding"] == ["zero2", "zero3"] and "tp" not in differs["0.19.8"]
    old = differs["0.19.3"]
    assert "sharding" not in old or old["sharding"][1] != "zero3" or old["tp"][1] == 1


def test_a_zero3_autotp_plan_is_written_without_zero3_for_0_19_3() -> None:
    """The trial's plan (16 B200, Llama 3 70B, --framework deepspeed: ZeRO-3 at tp 2, dp 8)
    is stated as it is at 0.19.8; for 0.19.3 the best tp 2 plan without ZeRO-3, with a
    note (Adapter.express passes the job's releases once recommend takes them)."""
    run = recommend(replace(RecommendSpec.of(gpus=16, model="llama3-70b", gpu="b200", top=1),
                            framework="deepspeed"))
    plan = run.result.plans[0]
    assert (plan.tp, plan.pp, plan.sharding) == (2, 1, Sharding.ZERO3)
    job = listed_job(run, plan)
    assert closest_plan(job, plan, 1).plan.sharding is Sharding.ZERO3
    old = closest_plan(job, plan, 1, OLD)
    assert old.plan.tp == 2 and old.plan.sharding is not Sharding.ZERO3 and not old.exact
    assert old.plan.step_time_s > plan.step_time_s
    assert any("0.19.3's AutoTP runs ZeRO stage 2 at most" in n for n in old.notes)


def test_recommend_for_0_19_3_ranks_and_writes_no_zero3_autotp(cli: Cli, tmp_path: Path
                                                               ) -> None:
    """The trial's B1: recommend --framework deepspeed --emit deepspeed on 16 B200 ranks
    and writes ZeRO-3 with autotp_size 2, which 0.19.8 trains; for 0.19.3 neither the
    ranked plans nor the file hold the pair."""
    flags = ("recommend", *FLAGS, "--framework", "deepspeed", "--emit", "deepspeed")
    now = cli(*flags, "-o", tmp_path / "now")
    assert now.exit_code == 0, now.output
    ds = json.loads((tmp_path / "now" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] == 3 and ds["tensor_parallel"]["autotp_size"] == 2
    old = cli(*flags, "--framework-version", "deepspeed=0.19.3", "-o", tmp_path / "old")
    assert old.exit_code == 0, old.output
    ds = json.loads((tmp_path / "old" / "ds_config.json").read_text())
    assert ds["zero_optimization"]["stage"] != 3 or ds.get(
        "tensor_parallel", {}).get("autotp_size", 1) == 1
    checked = cli("check-config", tmp_path / "old" / "ds_config.json",
                  "--framework-version", "deepspeed=0.19.3", "--json")
    assert checked.exit_code == 0, checked.output


def test_the_ranked_plans_follow_the_release() -> None:
    spec = replace(RecommendSpec.of(gpus=16, model="llama3-70b", gpu="b200", top=5),
                   framework="deepspeed")
    ranked = recommend(spec).result.plans
    assert any(p.tp > 1 and p.sharding is Sharding.ZERO3 for p in ranked)
    old = recommend(replace(spec, versions=OLD)).result.plans
    assert old and not any(p.tp > 1 and p.sharding is Sharding.ZERO3 for p in old)


def test_framework_version_ranks_under_framework_without_emit(cli: Cli) -> None:
    """--framework-version with --framework alone ranks by that release (it was refused
    without --emit, as changing nothing)."""
    r = cli("recommend", *FLAGS, "--framework", "deepspeed", "--framework-version",
            "deepspeed=0.19.3", "--json")
    assert r.exit_code == 0, r.output
    plans = json.loads(r.stdout)["plans"]
    assert plans and not any(p["tp"] > 1 and p["sharding"] == "zero3" for p in plans)


def test_the_release_note_names_the_zero3_autotp_plans_left_out() -> None:
    """Before 0.19.4 the tp > 1 keys are searched without ZeRO-3, which the tp 1 key
    keeps: ``narrowed`` (schedules, shardings asked that no group states) says nothing of
    it, so the release's own note does, naming the release and 0.19.4."""
    keys = (CostKey(tp=1), CostKey(tp=2), CostKey(tp=4))
    req = PlanRequest(gpus=16, global_batch=64, cost_keys=keys, shardings=ALL)
    old = FrameworkSearch(ADAPTER, 8192, "llama3-70b", None, versions=OLD)
    assert old.released(req) == (
        "DeepSpeed 0.19.3's files state no sharding zero3 with AutoTP (tp 2, 4): ranked "
        "without it (its engine asserts ZeRO stage <= 2 beside AutoTP up to 0.19.3, "
        "deepspeed/runtime/engine.py _configure_tensor_parallel_states; 0.19.4 is the first "
        "release that trains it, PRs #8167 and #8168: --framework-version deepspeed=0.19.4)")
    # the default release (0.19.8) trains it; ZeRO-3 not asked, tp 1 alone, or pipelines
    # alone (--pp 2: AutoTP runs at pp 1 only): nothing left out by the release
    assert FrameworkSearch(ADAPTER, 8192, "llama3-70b", None).released(req) is None
    assert old.released(replace(req, shardings=ALL[:3])) is None
    assert old.released(replace(req, cost_keys=keys[:1])) is None
    assert old.released(replace(req, pp=(2,))) is None


def test_recommend_for_0_19_3_says_what_it_left_out(cli: Cli) -> None:
    """16 B200, Llama 3 70B: at 0.19.3 the stderr note appears and no ranked plan is
    ZeRO-3 at tp > 1; at the default release the plans hold the pair and no note."""
    flags = ("recommend", *FLAGS, "--framework", "deepspeed", "--json")
    old = cli(*flags, "--framework-version", "deepspeed=0.19.3")
    assert old.exit_code == 0, old.output
    said = [line for line in old.stderr.splitlines() if "with AutoTP" in line]
    assert len(said) == 1 and said[0].startswith(
        "pptune: DeepSpeed 0.19.3's files state no sharding zero3 with AutoTP (tp 2, 4, 8)"), \
        old.stderr
    assert "0.19.4 is the first release that trains it" in said[0]
    plans = json.loads(old.stdout)["plans"]
    assert plans and not any(p["tp"] > 1 and p["sharding"] == "zero3" for p in plans)
    now = cli(*flags)
    assert now.exit_code == 0, now.output
    assert "with AutoTP" not in now.stderr
    assert any(p["tp"] > 1 and p["sharding"] == "zero3"
               for p in json.loads(now.stdout)["plans"])
