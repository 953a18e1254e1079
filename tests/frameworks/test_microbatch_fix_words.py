"""A fix that names another micro-batch count says it in the setting the file states (the
user trial's R8): an interleaved Megatron-LM script edited to --global-batch-size 500
(pp 2, dp 4, micro-batch 1: 125 micro-batches, groups of 2, remainder 1 < pp) was told
"use 126", a count; 126 as --global-batch-size fails (not a multiple of micro x dp 4).
The fix names --global-batch-size 504 (126 micro-batches), which passes every rule."""

from __future__ import annotations

import json
from pathlib import Path

from tests.check_json import check_file
from tests.conftest import Cli
from tests.frameworks.test_framework_rules import mega


def messages(doc: dict, rule: str) -> list[str]:
    return [f["message"] for f in doc["findings"] if f["id"] == rule]


def emitted(cli: Cli, tmp_path: Path, emit: str) -> Path:
    out = tmp_path / emit
    framework = ("--framework", emit) if emit != "pptune" else ()
    r = cli("recommend", "--gpus", "8", *framework, "--schedule", "interleaved-1f1b", "--pp",
            "2", "--emit", emit, "-o", out)
    assert r.exit_code == 0, r.output
    (path,) = out.iterdir()
    return path


def test_the_trial_script_is_told_the_global_batch_size(cli: Cli, tmp_path: Path) -> None:
    script = emitted(cli, tmp_path, "megatron")
    text = script.read_text()
    assert "--global-batch-size 512 " in text and "--micro-batch-size 1 " in text
    code, found, doc = check_file(script, text.replace("--global-batch-size 512 ",
                                                       "--global-batch-size 500 "))
    assert code == 1 and found["interleaved-m-not-multiple"] == "error"
    (message,) = messages(doc, "interleaved-m-not-multiple")
    assert message.endswith("; use --global-batch-size 504 (126 micro-batches)"), message
    # the value named passes every rule
    code, found, _ = check_file(script, text.replace("--global-batch-size 512 ",
                                                     "--global-batch-size 504 "))
    assert "error" not in found.values(), found


def test_the_group_rule_names_the_global_batch_size(tmp_path: Path) -> None:
    """pp 4, dp 1, micro-batch 1: 8 micro-batches below a group of 16; 16 micro-batches
    (--global-batch-size 16) lie in [pp, m] with no remainder."""
    vpp = "--num-layers-per-virtual-pipeline-stage 4"
    group = "--microbatch-group-size-per-virtual-pipeline-stage 16"
    _, found, doc = mega(tmp_path, f"{vpp} --global-batch-size 8 {group}")
    assert found["megatron-microbatch-group"] == "error"
    (message,) = messages(doc, "megatron-microbatch-group")
    assert message.endswith("; use --global-batch-size 16 (16 micro-batches)"), message
    _, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 16 {group}")
    assert "error" not in found.values(), found


def test_pptune_files_are_told_global_batch_and_grad_accum_steps(cli: Cli, tmp_path: Path
                                                                 ) -> None:
    """pptune's own format states global_batch (and grad_accum_steps, which it writes):
    torch 2.5's ScheduleInterleaved1F1B needs a multiple of pp 2 (126), and torch 2.13's
    round rule max(1, m // pp) refuses 125 (rounds 62) and runs 126 (rounds 63)."""
    plan = emitted(cli, tmp_path, "pptune")
    text = plan.read_text()
    assert "global_batch: 512\n" in text and "grad_accum_steps: 128\n" in text
    edited = text.replace("global_batch: 512\n", "global_batch: 500\n").replace(
        "grad_accum_steps: 128\n", "grad_accum_steps: 125\n")
    for release, rule in (("2.5", "interleaved-m-not-multiple"), ("2.13", "interleaved-rounds")):
        _, found, doc = check_file(plan, edited, "--framework-version", f"torch={release}")
        assert found[rule] == "error"
        (message,) = messages(doc, rule)
        assert message.endswith(
            "; use 126 (global_batch: 504, grad_accum_steps: 126)"), message
    # without grad_accum_steps in the file, global_batch alone
    _, _, doc = check_file(plan, edited.replace("grad_accum_steps: 125\n", ""))
    (message,) = messages(doc, "interleaved-rounds")
    assert message.endswith("; use 126 (global_batch: 504)"), message
    fixed = text.replace("global_batch: 512\n", "global_batch: 504\n").replace(
        "grad_accum_steps: 128\n", "grad_accum_steps: 126\n")
    for release in ("2.5", "2.13"):
        _, found, _ = check_file(plan, fixed, "--framework-version", f"torch={release}")
        assert "error" not in found.values(), found


def test_pptune_1f1b_fix_names_the_settings(tmp_path: Path) -> None:
    """1F1B on pp 4 with 2 micro-batches (global 2, micro 1, dp 1): torch 2.7+ refuses m <
    stages; 4 micro-batches are global_batch 4."""
    cfg = {"gpus": 4, "pp": 4, "dp": 1, "schedule": "1f1b", "micro_batch_size": 1,
           "global_batch": 2, "model": "llama3-8b", "seq_len": 4096}
    _, found, doc = check_file(tmp_path / "p.json", json.dumps(cfg))
    assert found["1f1b-m-lt-pp"] == "error"
    (message,) = messages(doc, "1f1b-m-lt-pp")
    assert message.endswith("raise the micro-batches to >= 4 (global_batch: 4)"), message


def test_a_group_below_pp_names_a_group_that_runs(tmp_path: Path) -> None:
    """pp 4, 10 micro-batches, group 2 (< pp): groups 4 (remainder 2 < 4) and 5
    (remainder 0) -> 5; with 2 micro-batches (< pp) group 4 and 4 micro-batches."""
    vpp = "--num-layers-per-virtual-pipeline-stage 4"
    group = "--microbatch-group-size-per-virtual-pipeline-stage"
    _, found, doc = mega(tmp_path, f"{vpp} --global-batch-size 10 {group} 2")
    (message,) = messages(doc, "megatron-microbatch-group")
    assert message.endswith(f"; use {group} 5"), message
    _, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 10 {group} 5")
    assert "error" not in found.values(), found
    _, _, doc = mega(tmp_path, f"{vpp} --global-batch-size 2 {group} 2")
    (message,) = messages(doc, "megatron-microbatch-group")
    assert message.endswith(f"; use {group} 4 with --global-batch-size 4 (4 micro-batches)")
    _, found, _ = mega(tmp_path, f"{vpp} --global-batch-size 4 {group} 4")
    assert "error" not in found.values(), found


def test_dualpipe_counts_are_said_in_the_files_settings(tmp_path: Path) -> None:
    """DualPipeV on pp 4 runs 8 stages and needs 8 micro-batches (torch's
    ScheduleDualPipeV); a pptune file with 6 (global 12, micro 1, dp 2) is told the
    global_batch (16) that gives 8."""
    cfg = {"gpus": 8, "pp": 4, "dp": 2, "schedule": "dualpipev", "micro_batch_size": 1,
           "global_batch": 12, "model": "llama3-8b", "seq_len": 4096}
    _, found, doc = check_file(tmp_path / "p.json", json.dumps(cfg))
    assert found["dualpipe-microbatches"] == "error"
    (message,) = messages(doc, "dualpipe-microbatches")
    assert message.endswith("use 8 micro-batches or more); in the file: global_batch: 16"), \
        message
    _, found, _ = check_file(tmp_path / "p.json", json.dumps(cfg | {"global_batch": 16}))
    assert "dualpipe-microbatches" not in found


# torchtitan: DualPipeV on pp 4 runs 8 stages and needs 8 micro-batches (torch's
# ScheduleDualPipeV); neither a 0.2.2 TOML nor a main dump states the count pptune names
# the way the fix said it ("use 8 micro-batches or more")
TOML = """[job]
dump_folder = "./outputs"
[model]
name = "llama3"
flavor = "8B"
hf_assets_path = "./assets/hf/model"
[training]
local_batch_size = {local}
seq_len = 2048
{training}
[parallelism]
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "DualPipeV"
data_parallel_shard_degree = 2
{parallel}
"""
DUALPIPEV = "(dualpipev with pp=4 runs 8 stages: use 8 micro-batches or more); in the file: "


def _titan(tmp_path: Path, local: int, training: str = "", parallel: str = ""
           ) -> tuple[dict[str, str], list[str]]:
    text = TOML.format(local=local, training=training, parallel=parallel)
    _, found, doc = check_file(tmp_path / "job.toml", text, "--gpus", "8", "--no-compare")
    return found, messages(doc, "dualpipe-microbatches")


def test_a_torchtitan_toml_is_told_its_local_batch_size(tmp_path: Path) -> None:
    """0.2.2: m = local_batch_size / pipeline_parallel_microbatch_size (6 / 1, 12 / 2); 8
    micro-batches are local_batch_size 8 (16 at micro-batch 2). A global_batch_size of 24
    (6 x dp 2 x 2 runs) keeps its 2 runs a step at 8 x dp 2 x 2 = 32."""
    found, (message,) = _titan(tmp_path, 6)
    assert found["dualpipe-microbatches"] == "error"
    assert message.endswith(DUALPIPEV + "local_batch_size 8 with "
                            "pipeline_parallel_microbatch_size 1"), message
    _, (message,) = _titan(tmp_path, 12, parallel="pipeline_parallel_microbatch_size = 2")
    assert message.endswith(DUALPIPEV + "local_batch_size 16 with "
                            "pipeline_parallel_microbatch_size 2"), message
    _, (message,) = _titan(tmp_path, 6, training="global_batch_size = 24")
    assert message.endswith(DUALPIPEV + "local_batch_size 8 with pipeline_parallel_"
                            "microbatch_size 1, and global_batch_size 32"), message
    # the values named pass the rule
    for local, training in ((8, ""), (8, "global_batch_size = 32")):
        found, said = _titan(tmp_path, local, training=training)
        assert "dualpipe-microbatches" not in found and not said, said


def test_a_torchtitan_main_dump_is_told_its_count_and_step_tokens(tmp_path: Path) -> None:
    """main (llama3 debugmodel, pp 4 x dp 2): num_pp_microbatches 6 -> 8; with
    num_tokens_per_train_step 2048 x 6 x dp 2 x 2 runs = 49152 stated, it keeps its 2 runs
    at 2048 x 8 x 2 x 2 = 65536."""
    from tests.cli.test_torchtitan_main_words import PP4

    def said(count: int, step: int = -1) -> tuple[dict[str, str], list[str]]:
        dump = json.loads(json.dumps(PP4))
        dump["parallelism"].update(pipeline_parallel_schedule="DualPipeV",
                                   num_pp_microbatches=count)
        dump["training"]["num_tokens_per_train_step"] = step
        path = tmp_path / "dump.json"
        path.write_text(json.dumps(dump))
        _, found, doc = check_file(path, path.read_text(), "--gpus", "8", "--no-compare")
        return found, messages(doc, "dualpipe-microbatches")

    found, (message,) = said(6)
    assert found["dualpipe-microbatches"] == "error"
    assert message.endswith(DUALPIPEV + "num_pp_microbatches 8"), message
    _, (message,) = said(6, 49152)
    assert message.endswith(DUALPIPEV + "num_pp_microbatches 8, and "
                            "num_tokens_per_train_step 65536"), message
    for count, step in ((8, -1), (8, 65536)):
        found, left = said(count, step)
        assert "dualpipe-microbatches" not in found and not left, left


def test_megatron_ga_not_aligned_names_its_global_batch_once(tmp_path: Path) -> None:
    """pp 4 on 8 GPUs (dp 2), micro-batch 1, --global-batch-size 10: 10 / (1 x 2) = 5
    micro-batches a run, one run a step; no multiple of 4 divides 5, so the next, 8, makes
    the global batch 1 x 8 x 2 = 16, said once: by the flag that states it."""
    _, found, doc = mega(tmp_path, "--global-batch-size 10", gpus=8)
    assert found["ga-not-aligned"] == "info"
    assert messages(doc, "ga-not-aligned") == [
        "micro-batches per pipeline run (5) are not a multiple of pp (4); 8 would align "
        "gradient accumulation to pipeline depth, with a global batch of micro-batch 1 x 8 "
        "x dp 2; in the file: --global-batch-size 16"]
    _, found, _ = mega(tmp_path, "--global-batch-size 16", gpus=8)
    assert "ga-not-aligned" not in found
