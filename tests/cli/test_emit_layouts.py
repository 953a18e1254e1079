"""Splits and recomputation per stage through every framework's file and back:
emit -> check-config gives the same split, the same blocks recomputed per stage
and the same prediction."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.check import best
from pptune.check.rules import CheckOptions, check
from pptune.cli.app import app
from pptune.costmodel.layout_grammar import parse_layout
from pptune.errors import BadInput, NoFeasiblePlan
from pptune.frameworks.megatron.layout import layout_stages, plan_layout
from pptune.frameworks.read import read_config
from pptune.options import CostOptions
from pptune.plan.emit import SLACK, Framework, emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
FILES = {Framework.MEGATRON: "pretrain_megatron.sh", Framework.TORCHTITAN: "torchtitan.toml",
         Framework.PPTUNE: "pptune.yaml", Framework.DEEPSPEED: "ds_config.json"}


def round_trip(spec: RecommendSpec, framework: Framework, tmp_path: Path,
               *flags: str) -> tuple[object, dict, str]:
    run = recommend(spec)
    out = emit(framework, run)
    write(out, tmp_path)
    name = FILES[framework]
    r = runner.invoke(app, ["check-config", str(tmp_path / name), "--output", "json",
                            "--no-compare", *flags])
    assert r.exit_code == 0, r.stdout + r.stderr
    return out, json.loads(r.stdout), out.files[name]


def same_prediction(out: object, doc: dict) -> None:
    plan = out.plan  # type: ignore[attr-defined]
    assert doc["derived"]["stage_layers"] == plan.stage_layers
    assert doc["derived"]["step_time_s"] == pytest.approx(plan.step_time_s, rel=1e-9)
    assert doc["derived"]["peak_memory_bytes"] == pytest.approx(plan.peak_memory_bytes, rel=1e-9)


INTERLEAVED = RecommendSpec.of(gpus=8, model="gpt3-1.3b", gpu="a100-80gb", pp=[2],
                               schedules=["interleaved-1f1b"], global_batch=32,
                               micro_batch_sizes=[1], top=1)
UNEVEN = RecommendSpec.of(gpus=4, model="gpt-small", gpu="h100-sxm", pp=[4],
                          schedules=["1f1b"], global_batch=8, top=1)


@pytest.mark.parametrize("spec", [INTERLEAVED, UNEVEN], ids=["interleaved", "uneven-1f1b"])
def test_megatron_states_an_uneven_split_as_a_layout(spec: RecommendSpec, tmp_path: Path) -> None:
    model = ["--model", spec.costs.model or "", "--gpu", spec.costs.gpu or ""]
    out, doc, text = round_trip(spec, Framework.MEGATRON, tmp_path, *model)
    assert out.exact, out.notes  # type: ignore[attr-defined]
    assert "--pipeline-model-parallel-layout '" in text
    assert "--decoder-first-pipeline-num-layers" not in text
    assert "--num-virtual-stages-per-pipeline-rank" not in text  # the layout states them
    same_prediction(out, doc)
    assert doc["config"]["virtual_stages"] == out.plan.virtual_stages  # type: ignore[attr-defined]


def test_torchtitan_states_a_split_it_builds_through_its_options(tmp_path: Path) -> None:
    """llama3-8b (a flavor torchtitan ships) at 9,216 tokens, pp 4, 8 micro-batches:
    priced with the eager SwiGLU and loss (no [compile]) memory binds on the first stage, and
    blocks 7,9,9,7 are generate_llm_fqn_per_model_part's split with the embedding
    counted as 2 layers."""
    spec = RecommendSpec.of(gpus=4, pp=[4], schedules=["1f1b"], global_batch=8,
                            recompute="none", sharding="none", top=1, seq_len=9216,
                            cross_entropy="eager", swiglu="eager")
    out, doc, text = round_trip(spec, Framework.TORCHTITAN, tmp_path, "--gpu", "h100-sxm")
    assert "module_fqns_per_model_part" not in text
    assert "pipeline_parallel_first_stage_less_layers = 2" in text
    same_prediction(out, doc)
    # a model torchtitan has no flavor for: the reader cannot know its layer count,
    # so each stage's modules are written
    out, doc, text = round_trip(UNEVEN, Framework.TORCHTITAN, tmp_path / "small",
                                "--model", "gpt-small", "--gpu", "h100-sxm")
    assert "module_fqns_per_model_part" in text
    same_prediction(out, doc)
    # a split generate_llm_fqn_per_model_part does not build: each stage's modules
    out, doc, text = round_trip(INTERLEAVED, Framework.TORCHTITAN, tmp_path / "b",
                                "--model", "gpt3-1.3b", "--gpu", "a100-80gb")
    assert "module_fqns_per_model_part" in text
    same_prediction(out, doc)


PER_STAGE = RecommendSpec.of(gpus=4, pp=[4], schedules=["1f1b"], sharding="none", top=1,
                             micro_batch_sizes=[2])


def test_recomputation_per_stage_round_trips(tmp_path: Path) -> None:
    """llama3-8b on 4 H100, pp 4, micro-batches of 2: the first stages recompute (they
    hold the most micro-batches), the last none; pptune's file states the counts, Megatron-LM's block method one N for
    every stage (the plan's largest), DeepSpeed every block, torchtitan its per-op
    policy (every block recomputed is slower)."""
    run = recommend(PER_STAGE)
    plan = run.result.plans[0]
    assert plan.recompute_layers is not None and plan.recompute_layers[-1] == 0
    counts = list(plan.recompute_layers)
    flags = {Framework.MEGATRON: ["--model", "llama3-8b", "--gpu", "h100-sxm"],
             Framework.TORCHTITAN: ["--gpu", "h100-sxm"], Framework.PPTUNE: [],
             Framework.DEEPSPEED: ["--gpus", "4", "--model", "llama3-8b", "--gpu", "h100-sxm"]}
    for framework, extra in flags.items():
        folder = tmp_path / framework.value
        out, doc, text = round_trip(PER_STAGE, framework, folder, *extra)
        emitted = out.plan  # type: ignore[attr-defined]
        derived = doc["derived"]["recompute_layers_per_stage"]
        assert doc["derived"]["step_time_s"] == pytest.approx(emitted.step_time_s, rel=1e-9)
        if framework is Framework.PPTUNE:
            assert out.exact and derived == counts  # type: ignore[attr-defined]
        elif framework is Framework.MEGATRON:
            n = max(counts)
            assert f"--recompute-method block \\\n    --recompute-num-layers {n}" in text
            assert derived == [min(n, b - (k == 0) - (k == 3))
                               for k, b in enumerate(emitted.stage_layers)]
        elif framework is Framework.DEEPSPEED:
            # every block recomputed on the plan's pp 4, which --pp 4 holds: the AutoTP
            # plan a DeepSpeed file states at tp 4 runs without a pipeline, so it is not
            # written in its place (emit.py keeps a given --pp where a substitute does)
            assert any("one recomputation for every layer" in n for n in out.notes)  # type: ignore[attr-defined]
            assert emitted.pp == 4 and emitted.tp == 1
            assert derived == [b - (k == 0) - (k == 3) for k, b in enumerate(emitted.stage_layers)]
            assert not any("the fastest plan a DeepSpeed file states" in n for n in out.notes)  # type: ignore[attr-defined]
        else:  # every block, then torchtitan's per-op policy, which fits and is faster
            notes = out.notes  # type: ignore[attr-defined]
            assert any("one recomputation for every layer" in n for n in notes)
            assert any("per-op selective checkpointing" in n for n in notes)
            assert 'selective_ac_option = "op"' in text and derived == [0, 0, 0, 0]


def test_mtp_layers_are_placed_where_megatron_core_builds_them() -> None:
    names = ["embedding", "block0", "block1", "block2", "mtp0", "head"]
    assert layout_stages(names, [2, 2, 2]) == parse_layout("Et|tt|mL", 3).stages
    assert plan_layout(names, [2, 2, 2], 3) == "Et|tt|mL"
    assert plan_layout(names, [2, 3, 1], 3) == "Et|ttm|L"  # mtp_standalone: allowed
    # MTP layers split over two stages: megatron-core refuses, no layout
    two = ["embedding", "block0", "block1", "mtp0", "mtp1", "head"]
    assert plan_layout(two, [2, 2, 2], 3) is None
    # interleaved (pp 2, 2 chunks): rank 0's last chunk may hold it, rank 1's first not
    assert plan_layout(names, [2, 1, 2, 1], 2) == "Et|t|tm|L"
    assert plan_layout(names, [2, 3, 0, 1], 2) is None


def test_a_hugging_face_config_of_a_flavor_is_written_as_that_flavor() -> None:
    """Qwen3-30B-A3B read from its Hugging Face config is torchtitan's qwen3 30B-A3B:
    the file names the flavor (not a 'custom' one to register), and torchtitan's qwen3
    has no pipelining, so a plan whose pipeline was forced (--pp 2) is refused rather
    than written without one (plan/kept.py)."""
    hf = Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen3-30b-a3b-config.json"
    flat = recommend(RecommendSpec.of(gpus=8, hf_config=str(hf), gpu="h100-sxm", pp=[1],
                                      seq_len=4096, top=1))
    text = emit(Framework.TORCHTITAN, flat).files["torchtitan.toml"]
    assert 'name = "qwen3"\nflavor = "30B-A3B"' in text and "TrainSpec" not in text
    # no pipeline: no schedule, micro-batch or split for torchtitan to ignore
    assert "pipeline_parallel_degree = 1" in text
    assert "pipeline_parallel_schedule" not in text and "module_fqns" not in text
    piped = recommend(RecommendSpec.of(gpus=8, hf_config=str(hf), gpu="h100-sxm", pp=[2],
                                       seq_len=4096, top=1))
    with pytest.raises(NoFeasiblePlan, match=r"forced --pp 2.*torchtitan's qwen3 model has "
                                             r"no pipelining"):
        emit(Framework.TORCHTITAN, piped)


def test_torchtitan_refuses_more_stages_than_the_layers_it_builds() -> None:
    """DeepSeek-V3 in torchtitan has no MTP module: 61 blocks, the embedding and the
    head are 63 layers, too few for dualpipev's 64 stages at pp 32, which pptune's plan
    fills with its MTP layer; one clear error, not a file torchtitan refuses."""
    run = recommend(RecommendSpec.of(gpus=256, model="deepseek-v3", gpu="h100-sxm",
                                     global_batch=4096, schedules=["dualpipev"], pp=[32],
                                     top=1))
    with pytest.raises(BadInput, match=r"leaves 63 layers .* for 64 stages"):
        emit(Framework.TORCHTITAN, run)


def test_torchtitan_split_options_leave_the_mtp_layers_out() -> None:
    """The blocks torchtitan builds are the plan's without its MTP layer (after the last
    block): stages of 17,15,15,17 layers with the embedding, the head and one MTP layer
    are blocks 16,15,15,15 of 61, which torchtitan builds with no stage lighter for the
    embedding or the head (61 over 4: 16,15,15,15); the 62 blocks counting the MTP layer
    (16,15,15,16) are no split its options build."""
    from types import SimpleNamespace

    from pptune.costmodel.schedules import Schedule
    from pptune.frameworks.torchtitan.placement import stage_options

    plan = SimpleNamespace(stage_layers=(17, 15, 15, 17), pp=4, schedule=Schedule.ONE_F_ONE_B)
    assert stage_options(plan, mtp=1) == [  # type: ignore[arg-type]
        "pipeline_parallel_first_stage_less_layers = 0",
        "pipeline_parallel_last_stage_less_layers = 0"]
    assert stage_options(plan) is None  # type: ignore[arg-type]


def test_torchtitan_plans_deepseek_v3_without_its_mtp_layer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchtitan builds DeepSeek-V3 without its MTP layer, so the plan written is
    chosen on the 61 blocks it builds (the split, sharding and recomputation searched
    again on those costs), not the plan made for 62 with the MTP layer dropped; the
    file's check-config predicts the same step and finds no faster plan torchtitan
    states at the file's tp, cp and ep (it had found one 1.16x faster: a first stage of
    three blocks and the embedding, left heavy where the MTP layer had been taken from
    the last). At other sizes it had found one that torchtitan refuses (its experts'
    mesh), and finds none over the limit that it runs."""
    run = recommend(RecommendSpec.of(gpus=256, model="deepseek-v3", gpu="h100-sxm", top=1))
    assert sum(run.result.plans[0].stage_layers) == 64  # 61 blocks, MTP, embedding, head
    out = emit(Framework.TORCHTITAN, run)
    write(out, tmp_path)
    assert sum(out.plan.stage_layers) == 63 and not out.exact
    assert any("priced without its 1 MTP layer" in n for n in out.notes)
    r = runner.invoke(app, ["check-config", str(tmp_path / "torchtitan.toml"), "--output",
                            "json", "--gpu", "h100-sxm"])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    same_prediction(out, doc)
    # its 671B flavor runs FlexAttention, priced as flash (attention.py); the faster plan
    # it had named at other sizes (tp 4, ep 8, no FSDP: 1.13x) torchtitan refuses, its
    # experts borrowing FSDP ranks (torchtitan-ep-mesh); none other is over the limit
    assert [f["id"] for f in doc["findings"] if f["severity"] == "warning"] == [
        "torchtitan-flex-attention"]
    assert 1.0 <= doc["derived"]["slowdown_vs_best"] <= 1.1
    # at the file's own sizes, its plan is the fastest a torchtitan file states; a split
    # of the same plan refined on the as-run costs may be a hair faster
    monkeypatch.setattr(best, "searched_keys", lambda _costs, req, _held=(): req.keys()[:1])
    read = read_config(tmp_path / "torchtitan.toml", gpu="h100-sxm")
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm")),
                   read.semantics)
    assert 1.0 <= report.derived["slowdown_vs_best"] <= 1.005


def test_a_file_with_counts_per_stage_is_compared_with_fitted_counts(tmp_path: Path) -> None:
    """pptune's file states blocks recomputed per stage; check-config's best plan is then
    searched with counts fitted per stage too, so the file's own plan is among those it
    is compared with (slowdown >= 1: 1.11 here, the search's micro-batches of 1 on other
    pipeline depths beating the pp 4, micro-batch 2 the request pinned), where the best
    had been searched recomputing every block or none and came out slower than the
    file (0.89)."""
    run = recommend(PER_STAGE)
    out = emit(Framework.PPTUNE, run)
    assert out.plan.recompute_layers is not None and out.exact
    write(out, tmp_path)
    r = runner.invoke(app, ["check-config", str(tmp_path / "pptune.yaml"), "--output", "json"])
    assert r.exit_code == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["derived"]["slowdown_vs_best"] >= 1.0 - 1e-9


def test_torchtitan_emits_its_fastest_plan_when_substitutions_cost_more() -> None:
    """Llama 3 70B in FP8 on 64 H100s: plan 1 recomputes three blocks on its first stage
    only (ZeRO-1, interleaved), which a torchtitan file cannot state; substituting step by
    step (FSDP, full recomputation of every block, 1F1B) had written a plan 1.33x slower.
    Priced as torchtitan runs it (torchao's float8: no cached FP8 weights, each weight
    cast on every use), plan 1's layout takes 42.6 s, and the substituted plan (FSDP)
    42.8 s: within 3% of the plan as torchtitan runs it, so it is written (the fallback
    search, for substitutions that cost more, is covered in test_emit_sharding and
    test_dualpipe_cli)."""
    run = recommend(RecommendSpec.of(gpus=64, model="llama3-70b", gpu="h100-sxm",
                                     precision="fp8", top=1))
    written = emit(Framework.TORCHTITAN, run)
    as_run = [n for n in written.notes if "predicted that way, step" in n]
    step = re.search(r"predicted that way, step ([0-9.]+) s", as_run[0]) if as_run else None
    assert step and written.plan.step_time_s <= SLACK * float(step.group(1))
