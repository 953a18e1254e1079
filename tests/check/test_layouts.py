"""The layouts check-config's best-plan comparison searches (pptune.check.layouts) and
which of them the config's framework states (check.framework.stateable_requests)."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.check import best
from pptune.check.costs import costs
from pptune.check.framework import stateable_requests
from pptune.check.job import ConfigCosts
from pptune.check.layouts import own_first, searched_keys
from pptune.check.rules import CheckOptions, check
from pptune.cli.app import app
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.presets import MODELS
from pptune.costmodel.search import PlanRequest, Sharding
from pptune.costs.dims import KvHeads
from pptune.frameworks.read import read_config
from pptune.options import CostOptions
from pptune.schemas import TrainingConfig

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
QWEN = DATA / "megatron_qwen3_235b_ep32.sh"  # TP2 PP8 VP4 EP32 on 32 nodes of 8 B200


def unused(key: CostKey) -> None:
    raise AssertionError(f"searched_keys prices nothing ({key})")


def test_the_sizes_recommend_searches_at_the_files_precision() -> None:
    """Qwen3-235B-A22B (64 heads, 4 key/value heads, 128 experts, 4,096 tokens) on 256
    B200 in nodes of 8: tp 1, 2, 4 and 8 (megatron-core keeps one of the 4 key/value
    heads on each pair of ranks), cp 1, 2 (2,048 tokens a rank at most), ep the powers
    of two up to the 128 experts, etp 1: 4 x 2 x 8 = 64 keys, all in the file's FP8, the
    file's own first; for a torchtitan file, whose tp divides the key/value heads, 48."""
    own = CostKey(tp=2, ep=32, precision=Precision.FP8)
    priced = ConfigCosts(None, "analytic", own, options=CostOptions(precision=(Precision.FP8,)),
                         shape=MODELS["qwen3-235b-a22b"], gpu="b200", tables=unused)  # type: ignore[arg-type]
    req = PlanRequest(gpus=256, global_batch=1024, tp=2, gpus_per_node=8, cost_keys=(own,))
    keys = searched_keys(priced, req)
    assert keys[0] == own and len(keys) == len(set(keys)) == 64
    assert set(keys) == {CostKey(tp, cp, ep, 1, Precision.FP8) for tp, cp, ep in
                         itertools.product((1, 2, 4, 8), (1, 2), (1, 2, 4, 8, 16, 32, 64, 128))}
    split = searched_keys(replace(priced, kv_heads=KvHeads.SPLIT), req)
    assert len(split) == 48 and {k.tp for k in split} == {1, 2, 4}
    # measured costs price the file's key alone
    assert searched_keys(ConfigCosts(None, "profile p.json", own), req) == (own,)


def test_a_key_the_file_states_stands_and_autotp_runs_without_a_pipeline() -> None:
    """A DeepSpeed config of FP16 with DeepSpeed-Ulysses cp 2: its writer states neither,
    but the file does, so other tp at them stand; cp 4 is a size no DeepSpeed file here
    states. AutoTP runs without a pipeline: tp 2 is searched apart, at pp 1."""
    cfg = TrainingConfig.model_validate({"source_format": "deepspeed", "gpus": 16, "micro_batch_size": 1,
                                         "cp": 2, "precision": "fp16"})
    own = CostKey(tp=1, cp=2, precision=Precision.FP16)
    others = [CostKey(tp=tp, cp=cp, precision=Precision.FP16)
              for tp, cp in ((2, 2), (1, 1), (1, 4), (2, 1))]
    req = PlanRequest(gpus=16, global_batch=64, cost_keys=(own, *others))
    found = stateable_requests(cfg, req)
    assert [(r.keys(), r.pp) for r in found] == [
        ((own, others[1]), None), ((others[0], others[3]), (1,))]


def test_torchtitan_states_no_sequence_its_tp_and_cp_cannot_split() -> None:
    """torchtitan asserts seq_len % (tp x 2 x cp) == 0: at 4,100 tokens (4 x 1,025) tp 2
    with cp 2 and tp 4 are refused, tp 2 and cp 2 alone are not; one request (its
    narrowing does not depend on tp) but for cp 2, which it runs with FSDP alone (it
    shards over the cp ranks: Adapter.key_shardings)."""
    cfg = TrainingConfig.model_validate({"source_format": "torchtitan", "gpus": 16,
                                         "micro_batch_size": 1})
    keys = [CostKey(tp=tp, cp=cp) for tp, cp in ((1, 1), (2, 1), (1, 2), (2, 2), (4, 1))]
    req, cp2 = stateable_requests(cfg, PlanRequest(gpus=16, global_batch=64, cost_keys=keys),
                                  seq_len=4100)
    assert set(req.keys()) == set(keys[:2]) and req.keys()[0] == keys[0]
    assert cp2.keys() == (keys[2],) and tuple(cp2.shardings) == (Sharding.FSDP,)


def test_the_files_key_is_searched_in_full_and_the_others_recompute_whole() -> None:
    own, other = CostKey(tp=2), CostKey(tp=1)
    req = PlanRequest(gpus=16, global_batch=64, cost_keys=(own, other))
    [mine, rest] = own_first(req, own)
    assert (mine.keys(), mine.stage_recompute) == ((own,), True)
    assert (rest.keys(), rest.stage_recompute) == ((other,), False)
    assert own_first(PlanRequest(gpus=16, global_batch=64, cost_keys=(own,)), own) == [
        PlanRequest(gpus=16, global_batch=64, cost_keys=(own,), tp=2)]


OVERLAP_WARNINGS = ("megatron-unmodelled-flag", "megatron-cuda-connections")


def test_an_expert_group_across_nodes_is_slower_than_best(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """EP32 spans four nodes of 8: the expert all-to-all crosses InfiniBand. The file's
    10.57 s step is over four times the best plan a Megatron-LM script states on the
    same GPUs, at tp 1 and ep 8 (ep 2 had been, before each rank's expert weight
    gradients were accumulated into their FP32 main_grad in every micro-batch: 8 bytes
    an element, where fewer experts a rank move fewer); at the file's own tp 2 and ep 32
    (all the comparison had searched) nothing was 1.10x faster, so it had passed. tp 1
    with ep 8 passes."""
    r = CliRunner().invoke(app, ["check-config", str(QWEN), "--gpu", "b200", "--output",
                                 "json"])
    doc = json.loads(r.stdout)
    # beside it, the script's expert all-to-all overlap without --delay-wgrad-compute and
    # with CUDA_DEVICE_MAX_CONNECTIONS=1: two warnings of their own (a2a.py, rules.py)
    assert {f["id"] for f in doc["findings"] if f["severity"] != "info"} == {
        *OVERLAP_WARNINGS, "slower-than-best"}
    [slower] = [f for f in doc["findings"] if f["severity"] != "info"
                and f["id"] not in OVERLAP_WARNINGS]
    assert (r.exit_code, slower["id"]) == (0, "slower-than-best")
    # the script runs Transformer Engine's fused loss (--cross-entropy-fusion-impl te);
    # the best plan is priced as a script pptune writes runs it, with megatron-core's
    # (megatron/closest.kernels): said, so that the plan so written predicts its step
    te, native = ("fused (--cross-entropy-loss-fusion --cross-entropy-fusion-impl te)",
                  "fused (--cross-entropy-loss-fusion)")
    assert slower["values"]["differs"] == {"tp": [2, 1], "ep": [32, 8],
                                           "cross-entropy": [te, native]}
    assert (f"it differs from the file in tp 2 -> 1, ep 32 -> 8, cross-entropy {te} -> "
            f"{native} and the split") in slower["message"]
    assert doc["derived"]["slowdown_vs_best"] > 4
    # compared at the file's own sizes alone, as it had been
    monkeypatch.setattr(best, "searched_keys", lambda _costs, req, _held=(): req.keys()[:1])
    read = read_config(QWEN)
    report = check(read.config, DATA, CheckOptions(costs=CostOptions(gpu="b200")),
                   read.semantics)
    assert report.derived["slowdown_vs_best"] < 1.10
    assert "slower-than-best" not in {f.id for f in report.findings}


def test_the_same_script_at_tp_1_and_ep_8_passes(tmp_path: Path) -> None:
    script = tmp_path / "ep8.sh"
    script.write_text(QWEN.read_text().replace("\nTP=2\n", "\nTP=1\n")
                      .replace("\nEP=32\n", "\nEP=8\n"))
    r = CliRunner().invoke(app, ["check-config", str(script), "--gpu", "b200", "--output",
                                 "json"])
    doc = json.loads(r.stdout)
    assert (r.exit_code, doc["warnings"]) == (0, 2), doc["findings"]
    assert {f["id"] for f in doc["findings"] if f["severity"] == "warning"} == set(
        OVERLAP_WARNINGS)
    assert 1.0 <= doc["derived"]["slowdown_vs_best"] < 1.10


@pytest.mark.parametrize(("framework", "splits"), [
    ("megatron", True), ("torchtitan", True), ("pptune", True), ("deepspeed", False)])
def test_a_tp_1_file_is_compared_at_other_tp_as_its_framework_runs_them(
        framework: str, splits: bool) -> None:
    """A file of tp 1 says nothing of sequence parallelism (it splits nothing there):
    other tp are priced splitting the sequence as the framework runs tensor parallelism
    (Megatron-LM's MoE layers need it; DeepSpeed's AutoTP splits the weights alone)."""
    cfg = TrainingConfig.model_validate({"source_format": framework, "micro_batch_size": 1,
                                         "model": "llama3-8b", "gpu": "h100-sxm"})
    priced = costs(cfg, Path("."), CostOptions(), lambda *a, **v: None, gpus=16)
    assert priced.tables is not None and priced.options is not None
    assert priced.key == CostKey(tp=1) and priced.options.splits_sequence is splits
    two = TrainingConfig.model_validate({**cfg.model_dump(), "tp": 2})
    stated = costs(two, Path("."), CostOptions(), lambda *a, **v: None, gpus=16)
    assert stated.options is not None and not stated.options.splits_sequence


def test_a_plan_at_another_key_is_timed_on_that_keys_costs(tmp_path: Path) -> None:
    """A torchtitan file compiling its loss alone (Llama 3 8B, tp 1 on 8 H100s): its best
    plan is at cp 2, timed as torchtitan runs it at that key, which here is the search's
    price on that key's own table (the file's kernels, nothing to price again)."""
    from pptune.costmodel.search import evaluate
    from tests.check.test_best_as_run import LOSS_ONLY, TOML, ZBV_OUTGROWS

    path = tmp_path / "job.toml"
    path.write_text(TOML.format(**ZBV_OUTGROWS) + LOSS_ONLY)
    read = read_config(path, gpus=8, gpu="h100-sxm")
    report = check(read.config, tmp_path, CheckOptions(costs=CostOptions(gpu="h100-sxm")),
                   read.semantics)
    found = report.best
    assert found is not None and report.request is not None
    assert (found.key.tp, found.key.cp) == (1, 2)
    priced = costs(read.config, tmp_path, CostOptions(gpu="h100-sxm"), lambda *a, **v: None,
                   gpus=8)
    assert priced.tables is not None
    at_key = replace(report.request, cost_keys=(found.key,), tp=found.key.tp)
    assert found.step_time_s == evaluate(priced.tables(found.key), at_key,
                                         found.spec).step_time_s
