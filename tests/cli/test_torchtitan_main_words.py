"""check-config's advice on a torchtitan main dump in main's words (a trial, u28): main
has no micro-batch size, it counts tokens (torchtitan/trainer.py Trainer.__init__:
num_tokens_per_microbatch_per_dp_rank, num_pp_microbatches, num_tokens_per_train_step);
its stage-split and config refusals are quoted as main words them."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import Result

from tests.cli.test_torchtitan_main_cli import DUMPS, written

PP4 = json.loads((DUMPS / "llama3_debugmodel_pp4_interleaved_1f1b.json").read_text())
Cli = Callable[..., Result]


def findings(cli: Cli, path: Path, *args: str) -> dict[str, str]:
    r = cli("check-config", path, "--gpus", "8", "--gpu", "h100-sxm", "--json", *args)
    return {f["id"]: f["message"] for f in json.loads(r.stdout)["findings"]}


def test_slower_than_best_says_tokens_a_micro_batch(cli: Cli) -> None:
    """pp 4 x dp 2, 8 micro-batches of 2048 tokens: 32768 tokens a step. The best plan,
    pp 1 x dp 8, runs them as one micro-batch of 32768 / 8 = 4096 tokens a rank (two
    sequences of 2048); main states that by the tokens alone (num_pp_microbatches is
    ignored without a pipeline, the step derived)."""
    said = findings(cli, DUMPS / "llama3_debugmodel_pp4_interleaved_1f1b.json")
    message = said["slower-than-best"]
    assert "pp=1 dp=8 tp=1 1f1b, 1 micro-batch of 4096 tokens, blocks per stage" in message
    assert "num_tokens_per_microbatch_per_dp_rank 2048 -> 4096" in message
    assert "micro-batch size" not in message


def test_ga_not_aligned_says_mains_keys(cli: Cli, tmp_path: Path) -> None:
    """1F1B, num_pp_microbatches 6 on pp 4, dp 8 / 4 = 2, the step derived: 8 would align,
    and makes 2048 x 8 x 2 = 32768 tokens a step."""
    dump = copy.deepcopy(PP4)
    dump["parallelism"].update(pipeline_parallel_schedule="1F1B", num_pp_microbatches=6)
    said = findings(cli, written(tmp_path, dump), "--no-compare")
    assert said["ga-not-aligned"] == (
        "num_pp_microbatches 6 is not a multiple of pp (4); 8 would align gradient "
        "accumulation to pipeline depth, with num_tokens_per_train_step 32768 "
        "(num_tokens_per_microbatch_per_dp_rank 2048 x 8 x dp 2)")


def test_the_stage_weights_refusal_names_mains_key_and_function(cli: Cli,
                                                                tmp_path: Path) -> None:
    """6 blocks on pp 4 x 2 stages a rank, the first stage 3 layers less: (6 + 3 + 1) // 8
    = 1 layer a stage, under the 3 (main's pipeline_parallel.py
    _generate_llm_fqn_per_model_part checks the input weight, then the output's)."""
    dump = copy.deepcopy(PP4)
    dump["parallelism"]["pipeline_parallel_first_stage_less_layers"] = 3
    assert findings(cli, written(tmp_path, dump), "--no-compare")["torchtitan-weights"] == (
        "parallelism.pipeline_parallel_first_stage_less_layers 3 exceeds the layers a stage, "
        "(6 blocks + 3 + 1) // 8 stages = 1: torchtitan raises 'input_weight (3) exceeds "
        "minimum layers per stage (1).' (torchtitan/distributed/pipeline_parallel.py "
        "_generate_llm_fqn_per_model_part)")
    dump["parallelism"].update(pipeline_parallel_first_stage_less_layers=1,
                               pipeline_parallel_last_stage_less_layers=2)
    assert findings(cli, written(tmp_path, dump), "--no-compare")["torchtitan-weights"] == (
        "parallelism.pipeline_parallel_last_stage_less_layers 2 exceeds the layers a stage, "
        "(6 blocks + 1 + 2) // 8 stages = 1: torchtitan raises 'output_weight (2) exceeds "
        "minimum layers per stage (1).' (torchtitan/distributed/pipeline_parallel.py "
        "_generate_llm_fqn_per_model_part)")


def test_too_many_stages_names_mains_function(cli: Cli, tmp_path: Path) -> None:
    """pp 8 x 2 stages a rank = 16 stages over 6 blocks + 1 + 1 = 8 effective layers."""
    dump = copy.deepcopy(PP4)
    dump["parallelism"]["pipeline_parallel_degree"] = 8
    assert findings(cli, written(tmp_path, dump), "--no-compare")[
        "torchtitan-too-many-stages"] == (
        "16 stages over 8 effective layers (6 blocks + "
        "pipeline_parallel_first_stage_less_layers 1 + "
        "pipeline_parallel_last_stage_less_layers 1): torchtitan raises 'Number of stages "
        "(16) cannot be greater than effective layers (8)' "
        "(torchtitan/distributed/pipeline_parallel.py _generate_llm_fqn_per_model_part)")


@pytest.mark.parametrize(("section", "key", "value", "raises", "where"), [
    ("parallelism", "num_pp_microbatches", 0,
     "parallelism.num_pp_microbatches must be greater than 0.",
     "torchtitan/trainer.py Trainer.Config.__post_init__"),
    ("training", "num_tokens_per_microbatch_per_dp_rank", -3,
     "num_tokens_per_microbatch_per_dp_rank must be greater than 0.",
     "torchtitan/config/configs.py TrainingConfig.__post_init__"),
    ("training", "max_context_length", 0, "max_context_length must be greater than 0.",
     "torchtitan/config/configs.py TrainingConfig.__post_init__"),
    ("training", "num_tokens_per_train_step", 0,
     "num_tokens_per_train_step must be -1 or greater than 0.",
     "torchtitan/config/configs.py TrainingConfig.__post_init__"),
])
def test_a_count_torchtitan_refuses_is_one_line_in_its_words(
        cli: Cli, error_line: Callable[[Result], str], tmp_path: Path, section: str,
        key: str, value: int, raises: str, where: str) -> None:
    dump = copy.deepcopy(PP4)
    dump[section][key] = value
    path = written(tmp_path, dump)
    line = error_line(cli("check-config", path, "--gpus", "8"))
    assert line == (f"pptune: error: {path}: {section}.{key} is {value}: torchtitan raises "
                    f"'{raises}' ({where})")


HEADER = (
    "torchtitan main's Trainer.Config dump (pptune's torchtitan=0.3.0), read by main's "
    "rules; linears priced at training.mixed_precision_param bfloat16 (a dump names no "
    "quantization converter: --precision fp8 or mxfp8 states one); not priced: "
    "hf_assets_path, dump_folder, profiler, metrics, tokenizer, dataloader, optimizer, "
    "lr_scheduler, checkpoint, comm, validator, debug, override, loss")


def notes(cli: Cli, path: Path, *args: str) -> list[str]:
    r = cli("check-config", path, "--gpus", "8", "--json", "--no-compare", *args)
    return json.loads(r.stdout)["notes"]


def test_a_dumps_boilerplate_is_one_note(cli: Cli) -> None:
    """A trial: every dump opened with five notes (the rules, the ignored sections, the
    GPUs from --gpus, the converter, the shard degree). The rules, the linears' precision
    and the 14 sections not priced are one note (every section named); the GPU count is
    said where it resolves the shard degree -1, else on its own."""
    assert notes(cli, DUMPS / "llama3_8b.json") == [
        HEADER,
        "gpus 8 from --gpus; data_parallel_shard_degree -1 resolved to 8 = 8 / (replicate 1 "
        "x tp x pp x cp = 1)",
        "FSDP full sharding, reshard after forward on (fsdp_reshard_after_forward default, "
        "pp 1)",
        "torchtitan main's batch: 8,192 tokens a micro-batch per dp rank at context 8,192 = "
        "1 sequence of 8,192; 1 a pipeline run; 1 run a step"]
    stated = notes(cli, DUMPS / "deepseek_v3_debugmodel_fsdp2_tp2_pp2_ep4.json")
    assert stated[:2] == [HEADER, "gpus 8 from --gpus: torchtitan takes the GPU count from "
                                  "the launcher"]
    fp8 = notes(cli, DUMPS / "llama3_8b.json", "--precision", "fp8")
    assert fp8[0] == HEADER.replace(
        "training.mixed_precision_param bfloat16 (a dump names no quantization converter: "
        "--precision fp8 or mxfp8 states one)", "--precision fp8 (a dump names no "
        "quantization converter)")


def _moe_dump(tmp_path: Path, ep: int, extra: dict[str, Any]) -> Path:
    dump = json.loads((DUMPS / "qwen3_30b_a3b.json").read_text())
    dump["parallelism"]["expert_parallel_degree"] = ep
    for layer in dump["model_spec"]["model"]["layers"]:
        layer["moe"]["routed_experts"]["token_dispatcher"].update(extra)
    return written(tmp_path, dump)


def test_the_token_dispatcher_the_dump_states_is_priced(cli: Cli, tmp_path: Path) -> None:
    """Main states the experts' all-to-all by the token dispatcher's config
    (models/common/config_utils.py make_token_dispatcher_config), which to_dict() writes
    by its fields: DeepEP's has hidden_dim, num_max_tokens_per_rank and cudagraphable;
    HybridEP's non_blocking_capacity_factor (priced as DeepEP, a warning says so);
    MinimalAsyncEP's num_max_tokens_per_rank alone (not modelled: the standard
    all-to-all, a warning); the standard one num_experts and top_k only."""
    deepep = {"hidden_dim": 2048, "num_max_tokens_per_rank": 4096, "cudagraphable": False}
    r = cli("check-config", _moe_dump(tmp_path, 8, deepep), "--gpus", "8", "--gpu", "h100-sxm")
    assert "deepep dispatch" in r.stderr, r.stderr
    hybrid = {"hidden_dim": 2048, "num_max_tokens_per_rank": 4096,
              "non_blocking_capacity_factor": None}
    r = cli("check-config", _moe_dump(tmp_path, 8, hybrid), "--gpus", "8", "--gpu", "h100-sxm")
    assert "deepep dispatch" in r.stderr and "HybridEP" in r.stdout, r.stdout
    r = cli("check-config", _moe_dump(tmp_path, 8, {"num_max_tokens_per_rank": 4096}),
            "--gpus", "8", "--gpu", "h100-sxm")
    assert "alltoall dispatch" in r.stderr and "MinimalAsyncEP" in r.stdout, r.stdout
    r = cli("check-config", _moe_dump(tmp_path, 8, {}), "--gpus", "8", "--gpu", "h100-sxm")
    assert "alltoall dispatch" in r.stderr and "token_dispatcher:" not in r.stdout, r.stdout
