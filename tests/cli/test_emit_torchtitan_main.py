"""recommend --emit torchtitan --framework-version torchtitan=0.3.0 writes torchtitan
main's Python config (frameworks/torchtitan/writer_main.py).

CI has no torchtitan: the emitted file is parsed (ast), and its settings are applied to a
real main dump of the same config function (tests/data/torchtitan_main/, the
``to_dict()`` of llama3_8b() and qwen3_30b_a3b() at b5bcd76) the way main's
``dataclasses.replace`` would, then read back by check-config: the same sizes, schedule,
split and micro-batches, priced at the step the file's header predicts.
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.frameworks.torchtitan.writer_main import FILE, FUNCTION, tokens
from pptune.report.fmt import compact_split, fmt_seconds

runner = CliRunner()
DUMPS = Path(__file__).parents[1] / "data" / "torchtitan_main"
MAIN = ["--emit", "torchtitan", "--framework-version", "torchtitan=0.3.0"]


SAID: dict[str, str] = {}  # file text -> recommend's stderr (its summary names the split)


def _emit(tmp_path: Path, *args: str) -> str:
    r = runner.invoke(app, ["recommend", *args, *MAIN, "-o", str(tmp_path)])
    assert r.exit_code == 0, r.stderr
    assert not (tmp_path / "torchtitan.toml").exists()
    text = (tmp_path / FILE).read_text()
    SAID[text] = r.stderr
    return text


def _kwargs(call: ast.Call) -> dict[str, Any]:
    return {k.arg: k.value for k in call.keywords if k.arg is not None}


def _settings(text: str) -> dict[str, Any]:
    """What the emitted function states, from its syntax tree: the base config function,
    model_registry's arguments, and replace()'s sections."""
    tree = ast.parse(text)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == FUNCTION)
    base = fn.body[0].value  # base = <config function>()
    registry = fn.body[1].value  # model_spec = model_registry(...)
    ret = _kwargs(fn.body[-1].value)  # return replace(base, ...)
    assert isinstance(base, ast.Call) and isinstance(registry, ast.Call)
    reg = _kwargs(registry)
    return {
        "base": base.func.id,  # type: ignore[attr-defined]
        "flavor": ast.literal_eval(registry.args[0]),
        "attn_backend": ast.literal_eval(reg["attn_backend"]),
        "converters": [c.func.value.id for c in reg["converters"].elts]  # type: ignore[attr-defined]
        if "converters" in reg else [],
        "training": {k: ast.literal_eval(v) for k, v in _kwargs(ret["training"]).items()},
        "parallelism": {k: ast.literal_eval(v) for k, v in _kwargs(ret["parallelism"]).items()},
        "ac": ast.unparse(ret["activation_checkpoint"]),
        "compile": {k: ast.literal_eval(v) for k, v in _kwargs(ret["compile"]).items()},
    }


def _dump(text: str) -> dict[str, Any]:
    """The main dump of the emitted function: its base function's real dump with the
    sections replaced as main's dataclasses.replace would (ParallelismConfig and
    CompileConfig fresh: the llama3_8b dump's are main's defaults)."""
    said = _settings(text)
    dump = copy.deepcopy(json.loads((DUMPS / f"{said['base']}.json").read_text()))
    defaults = json.loads((DUMPS / "llama3_8b.json").read_text())
    assert dump["model_spec"]["flavor"] == said["flavor"]  # the fixture's model is the plan's
    assert said["attn_backend"] == "flex"  # the fixtures' own backend (main's default)
    dump["training"].update(said["training"])
    dump["parallelism"] = {**defaults["parallelism"], **said["parallelism"]}
    dump["compile"] = {**defaults["compile"], **said["compile"]}
    selective = defaults["activation_checkpoint"]  # SelectiveAC.Config()'s to_dict()
    dump["activation_checkpoint"] = {
        "SelectiveAC.Config()": selective, "None": None,
        "FullAC.Config()": {k: v for k, v in selective.items()
                            if k != "force_recompute_mm_shapes_by_fqns"}}[said["ac"]]
    return dump


def _check(tmp_path: Path, text: str, *args: str) -> dict[str, Any]:
    """check-config of the emitted file's dump: no error, the split recommend wrote."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(_dump(text)))
    r = runner.invoke(app, ["check-config", str(path), "--json", *args])
    doc = json.loads(r.stdout)
    assert not [f for f in doc["findings"] if f["severity"] == "error"], doc["findings"]
    split = doc["config"]["stage_layers"] or [doc["config"]["num_layers"] or 0]
    if doc["config"]["pp"] > 1:
        assert f"blocks/stage {compact_split(split)} " in SAID[text]
    return doc


def _predicted(text: str) -> float:
    return float(text.split("# predicted: step ")[1].split(" s,")[0])


def test_main_token_batch_by_hand() -> None:
    """Micro-batch 2 at seq 8192 is 16,384 tokens a dp rank; a global batch of 512
    sequences is 512 x 8192 tokens a step; the pipeline's micro-batches are stated only
    with a pipeline (main ignores them without one)."""
    job = SimpleNamespace(global_batch=512)
    piped = SimpleNamespace(micro_batch_size=2, pp=4, num_microbatches=32)
    assert tokens(job, piped, 8192) == {  # type: ignore[arg-type]
        "num_tokens_per_microbatch_per_dp_rank": 16384, "max_context_length": 8192,
        "num_tokens_per_train_step": 4194304, "num_pp_microbatches": 32}
    flat = SimpleNamespace(micro_batch_size=1, pp=1, num_microbatches=64)
    assert tokens(SimpleNamespace(global_batch=64), flat, 4096) == {  # type: ignore[arg-type]
        "num_tokens_per_microbatch_per_dp_rank": 4096, "max_context_length": 4096,
        "num_tokens_per_train_step": 262144}


def test_llama3_8b_pipeline_round_trip(tmp_path: Path) -> None:
    text = _emit(tmp_path, "--gpus", "8", "--model", "llama3-8b", "--pp", "2",
                 "--micro-batch-sizes", "1", "--global-batch", "512")
    said = _settings(text)
    assert said["base"] == "llama3_8b" and said["flavor"] == "8B"
    assert "from torchtitan.models.llama3.config_registry import llama3_8b" in text
    par, train = said["parallelism"], said["training"]
    assert par["pipeline_parallel_degree"] == 2
    dp = par["data_parallel_shard_degree"] * par["data_parallel_replicate_degree"]
    assert dp * par["tensor_parallel_degree"] * 2 == 8
    # micro-batch 1 at seq 8192; 512 sequences a step, split over dp and the micro-batches
    assert train["num_tokens_per_microbatch_per_dp_rank"] == 8192
    assert train["max_context_length"] == 8192
    assert train["num_tokens_per_train_step"] == 512 * 8192
    assert train["disable_cuda_graphs"] is True  # main's CUDA graphs refuse a pipeline
    assert 512 % (par["num_pp_microbatches"] * dp) == 0
    doc = _check(tmp_path, text, "--gpus", "8", "--gpu", "h100-sxm")
    cfg = doc["config"]
    assert (cfg["pp"], cfg["dp"], cfg["tp"], cfg["global_batch"], cfg["seq_len"]) == (
        2, dp, par["tensor_parallel_degree"], 512, 8192)
    assert doc["derived"]["microbatches"] == par["num_pp_microbatches"]
    assert cfg["schedule"] == {"1F1B": "1f1b", "Interleaved1F1B": "interleaved-1f1b",
                               "GPipe": "gpipe", "ZBVZeroBubble": "zbv"}[
        par["pipeline_parallel_schedule"]]
    header = text.split("blocks/stage")[0]
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text), header


def test_module_names_per_stage_name_mains_head(tmp_path: Path) -> None:
    """A split torchtitan's options cannot build is stated module by module, the head
    being main's lm_head (0.2.2: output)."""
    text = _emit(tmp_path, "--gpus", "64", "--model", "llama3-8b", "--pp", "4",
                 "--schedules", "interleaved-1f1b")
    par = _settings(text)["parallelism"]
    parts = par["module_fqns_per_model_part"]  # this split is uneven: no option builds it
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "lm_head"]
    assert sum(len([n for n in p if n.startswith("layers.")]) for p in parts) == 32
    doc = _check(tmp_path, text, "--gpus", "64", "--gpu", "h100-sxm")
    assert doc["config"]["schedule"] == "interleaved-1f1b"
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text)


def test_qwen3_experts_round_trip(tmp_path: Path) -> None:
    """qwen3 pipelines on main (0.2.2's TrainSpec had no pipelining_fn); ep states no etp."""
    text = _emit(tmp_path, "--gpus", "64", "--model", "qwen3-30b-a3b", "--ep", "8",
                 "--pp", "2")
    said = _settings(text)
    assert said["base"] == "qwen3_30b_a3b" and said["flavor"] == "30B-A3B"
    par = said["parallelism"]
    assert par["expert_parallel_degree"] == 8 and "expert_tensor_parallel_degree" not in par
    doc = _check(tmp_path, text, "--gpus", "64", "--gpu", "h100-sxm")
    assert (doc["config"]["ep"], doc["config"]["etp"], doc["config"]["pp"]) == (
        8, 1, par["pipeline_parallel_degree"])
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text)


def test_float8_converter_priced_rowwise(tmp_path: Path) -> None:
    """Main's Float8LinearConverter runs rowwise (no tensorwise recipe): the plan is priced
    so, and check-config --precision fp8 prices a dump so."""
    text = _emit(tmp_path, "--gpus", "64", "--model", "llama3-8b", "--precision", "fp8",
                 "--pp", "2")
    said = _settings(text)
    assert said["converters"] == ["Float8LinearConverter"]
    assert 'filter_fqns=["lm_head"]' in text
    doc = _check(tmp_path, text, "--gpus", "64", "--gpu", "h100-sxm", "--precision",
                 "fp8")
    assert doc["config"]["precision"] == "fp8" and doc["config"]["fp8_recipe"] == "rowwise"
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text)


def test_context_parallel_all_gathers(tmp_path: Path) -> None:
    text = _emit(tmp_path, "--gpus", "16", "--model", "llama3-8b", "--seq-len", "32768",
                 "--cp", "2", "--pp", "2")
    assert _settings(text)["parallelism"]["context_parallel_degree"] == 2
    assert "rotate" not in "".join(line for line in text.splitlines()
                                   if not line.lstrip().startswith("#") and "#" not in line)
    doc = _check(tmp_path, text, "--gpus", "16", "--gpu", "h100-sxm")
    assert doc["config"]["cp"] == 2 and doc["config"]["cp_comm"] == "all-gather"
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text)


def test_default_and_older_releases_keep_the_toml(tmp_path: Path) -> None:
    for extra in ([], ["--framework-version", "torchtitan=0.2.2"]):
        r = runner.invoke(app, ["recommend", "--gpus", "8", "--emit", "torchtitan", *extra])
        assert r.exit_code == 0, r.stderr
        assert "# ----- torchtitan.toml" in r.stdout and FILE not in r.stdout


def test_framework_version_refusals() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--framework-version",
                            "torchtitan=0.3.0"])
    assert r.exit_code == 2
    assert "without either it does nothing" in r.stderr
    r = runner.invoke(app, ["recommend", "--gpus", "8", *MAIN[:2], "--framework-version",
                            "torchtitan=main"])
    assert r.exit_code == 2
    assert ("--framework-version 'torchtitan=main': the version must be dotted numbers such "
            "as 0.2.2") in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--model", "qwen3-30b-a3b", "--ep",
                            "8", "--etp", "2", "--tp", "2", *MAIN])
    assert r.exit_code == 2
    assert ("torchtitan main cannot express plan 1: expert tensor parallelism (etp 2): "
            "main's ParallelismConfig has no expert_tensor_parallel_degree") in r.stderr


def test_framework_ranks_as_main_runs_its_plans() -> None:
    """recommend --framework torchtitan for main ranks what main states, priced as main
    runs it: FlexAttention (main's language models refuse SDPA), and no every-N-th-block
    selective recomputation (main has FullAC and per-op SelectiveAC); the plan ranked first
    is the one --emit writes, at the step the table shows (a trial's qwen3-30b-a3b ranked a
    selective plan at 2.383 s and wrote a full one at 2.573 s, 1.080x it)."""
    flags = ["recommend", "--gpus", "64", "--model", "qwen3-30b-a3b", "--framework",
             "torchtitan", "--framework-version", "torchtitan=0.3.0"]
    r = runner.invoke(app, [*flags, "--json"])
    assert r.exit_code == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert plans and not any(p["recompute"] == "selective" for p in plans)
    r = runner.invoke(app, [*flags, "--emit", "torchtitan"])
    assert r.exit_code == 0, r.stderr
    assert f"predicted step {fmt_seconds(plans[0]['step_time_s'])}" in r.stderr


def test_deepep_at_ep_1_is_written_as_the_standard_dispatcher(tmp_path: Path) -> None:
    """--moe-dispatcher deepep with --ep 1: main refuses DeepEP's config at ep 1
    (update_ep_token_dispatcher_config), so the file names no moe_comm_backend (main's
    "standard", a local permute at ep 1, which the plan was priced with: runs_as), and a
    note says so. Its dump (the qwen3 fixture, token_dispatcher num_experts and top_k
    only, as the scratch install dumped it) checks with no error at the header's step."""
    text = _emit(tmp_path, "--gpus", "8", "--model", "qwen3-30b-a3b", "--ep", "1",
                 "--moe-dispatcher", "deepep")
    assert "moe_comm_backend" not in text
    assert ("the experts' standard dispatcher, not DeepEP (a local permute at ep 1: main "
            "raises 'DeepEPTokenDispatcher.Config requires expert parallelism "
            "(expert_parallel_degree > 1).'") in " ".join(SAID[text].split())
    doc = _check(tmp_path, text, "--gpus", "8", "--gpu", "h100-sxm")
    assert doc["config"]["ep"] == 1 and doc["config"]["moe_dispatcher"] is None
    assert round(doc["derived"]["step_time_s"], 3) == _predicted(text)
