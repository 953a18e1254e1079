"""check-config's flags that supply what a file lacks: --hf-config names the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.check_json import check_file

HF = Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen3-30b-a3b-config.json"
DS = json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                 "bf16": {"enabled": True}, "zero_optimization": {"stage": 1},
                 "expert_parallel": {"enabled": True, "autoep_size": 8},
                 "pptune": {"seq_len": 4096}})  # the config.json's own is 40,960


def test_hf_config_names_the_model_a_file_does_not(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A DeepSpeed JSON names no model: with --hf-config (relative to the working folder)
    check-config prices Qwen3-30B-A3B from its config.json, as --model prices the preset;
    without either it says no model is known."""
    monkeypatch.chdir(HF.parent)
    _, found, doc = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm",
                               "--hf-config", HF.name)
    assert "model-unknown" not in found and doc["derived"]["step_time_s"] > 0
    _, _, preset = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm",
                              "--model", "qwen3-30b-a3b")
    assert doc["derived"]["step_time_s"] == pytest.approx(preset["derived"]["step_time_s"],
                                                          rel=0.05)
    _, found, _ = check_file(tmp_path / "ds.json", DS, "--gpus", "8", "--gpu", "h100-sxm")
    assert "model-unknown" in found
    assert "moe-ep-dense" not in found  # the model is unknown, not dense


SCRIPT = (
    "NNODES=${NNODES:-1}\n"
    "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    "torchrun --nnodes $NNODES --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \\\n"
    "  --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 \\\n"
    "  --micro-batch-size 1 --global-batch-size 1536 --bf16 --use-distributed-optimizer\n")


def test_env_sets_what_a_launch_script_takes_from_its_environment(tmp_path: Path) -> None:
    """${NNODES:-1} is one node unless the environment says otherwise: GPT-3 175B at tp 8 x
    pp 16 needs 128 GPUs; --env NNODES=16 gives them, the script's own assignments win."""
    _, found, doc = check_file(tmp_path / "run.sh", SCRIPT, "--gpu", "h100-sxm")
    assert found["gpus-mismatch"] == "error"
    assert any("(check-config --env NNODES=VALUE sets it)" in n for n in doc["notes"])
    _, found, doc = check_file(tmp_path / "run.sh", SCRIPT, "--gpu", "h100-sxm",
                                  "--env", "NNODES=16")
    assert "gpus-mismatch" not in found and doc["config"]["gpus"] == 128
    assert "NNODES=16 from --env" in doc["notes"]
    fixed = SCRIPT.replace("NNODES=${NNODES:-1}", "NNODES=1")
    _, found, doc = check_file(tmp_path / "fixed.sh", fixed, "--gpu", "h100-sxm",
                               "--env", "NNODES=16")
    assert found["gpus-mismatch"] == "error"  # the script states one node itself
    assert ("NNODES=16 from --env, replaced by the script's own assignment NNODES=1 (a "
            "script's assignments win over its environment)") in doc["notes"]


@pytest.mark.parametrize("value", ["NNODES", "1X=2", "A B=3", "=4"])
def test_a_malformed_env_is_one_clear_line(tmp_path: Path, value: str) -> None:
    from typer.testing import CliRunner

    from pptune.cli.app import app
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT)
    r = CliRunner().invoke(app, ["check-config", str(path), "--env", value])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert "expected NAME=VALUE" in r.stderr


AUTO = json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                   "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                   "zero_optimization": {"stage": 3}})


def test_batch_flags_fill_what_a_file_leaves_auto_or_unresolved(tmp_path: Path) -> None:
    """A Hugging Face Trainer's DeepSpeed config leaves the batch "auto": --micro-batch-size
    and --global-batch give it (GA = 64 / (2 x 8) = 4); a script's unresolved $MBS the
    same; a value the file states wins, and a torchtitan file states its own."""
    from typer.testing import CliRunner

    from pptune.cli.app import app
    path = tmp_path / "ds.json"
    path.write_text(AUTO)
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpus", "8", "--model",
                                 "llama3-8b", "--gpu", "h100-sxm"])
    assert r.exit_code == 2 and "train_micro_batch_size_per_gpu is 'auto'" in r.stderr
    _, _, doc = check_file(path, AUTO, "--gpus", "8", "--model", "llama3-8b", "--gpu",
                           "h100-sxm", "--micro-batch-size", "2", "--global-batch", "64")
    assert (doc["config"]["micro_batch_size"], doc["config"]["global_batch"],
            doc["derived"]["grad_accum_steps"]) == (2, 64, 4)
    script = SCRIPT.replace("--micro-batch-size 1", "--micro-batch-size $MBS")
    _, _, doc = check_file(tmp_path / "run.sh", script, "--gpu", "h100-sxm", "--env",
                           "NNODES=16", "--micro-batch-size", "2")
    assert doc["config"]["micro_batch_size"] == 2
    _, _, doc = check_file(tmp_path / "run.sh", SCRIPT, "--gpu", "h100-sxm", "--env",
                           "NNODES=16", "--micro-batch-size", "2")
    assert doc["config"]["micro_batch_size"] == 1
    assert any("--micro-batch-size 2 ignored: the file states --micro-batch-size = 1" in n
               for n in doc["notes"])


@pytest.mark.parametrize(("flag", "value", "meant"), [("--gpu", "h100", "h100-sxm"),
                                                      ("--model", "llama3-405b", "llama3.1-405b")])
def test_a_preset_flag_typo_is_bad_usage(tmp_path: Path, flag: str, value: str,
                                         meant: str) -> None:
    """Exit 2 and one line naming the preset meant, as recommend and simulate say it (a
    finding with exit 1 had reported it)."""
    from typer.testing import CliRunner

    from pptune.cli.app import app
    path = tmp_path / "run.sh"
    path.write_text(SCRIPT)
    r = CliRunner().invoke(app, ["check-config", str(path), flag, value])
    assert r.exit_code == 2 and f"(did you mean {meant}?)" in r.stderr


def test_gpu_with_measured_costs_says_it_does_not_apply(tmp_path: Path) -> None:
    """A profile's costs were measured on its own devices: --gpu cannot reprice them, and
    check-config says so instead of staying silent."""
    from pptune.costs.profiles import analytic_profile
    prof = tmp_path / "p.json"
    prof.write_text(analytic_profile("gpt-small", "a100-80gb", [1, 2]).model_dump_json())
    cfg = "gpus: 2\npp: 2\nmicro_batch_size: 1\nglobal_batch: 8\nschedule: 1f1b\n"
    _, found, _ = check_file(tmp_path / "c.yaml", cfg, "--profile", str(prof),
                               "--gpu", "h100-sxm")
    assert found["gpu-unused"] == "info"
    _, found, _ = check_file(tmp_path / "c.yaml", cfg, "--profile", str(prof))
    assert "gpu-unused" not in found


def test_a_tp_that_does_not_divide_a_probed_models_heads_is_refused(tmp_path: Path) -> None:
    """A profile probed from a Hugging Face config of 4 heads: --tp 8 is refused (exit 2,
    one line), as analytic costs refuse it; --tp 4 plans."""
    from typer.testing import CliRunner

    from pptune.cli.app import app
    from pptune.costs.profiles import analytic_profile
    hf = tmp_path / "config.json"
    hf.write_text(json.dumps({"model_type": "llama", "hidden_size": 64,
                              "intermediate_size": 128, "num_attention_heads": 4,
                              "num_key_value_heads": 4, "num_hidden_layers": 4,
                              "vocab_size": 256, "max_position_embeddings": 32}))
    prof = analytic_profile("gpt-small", "a100-80gb", [1])
    prof = prof.model_copy(update={"model": prof.model.model_copy(
        update={"hf_config": str(hf)})})
    path = tmp_path / "p.json"
    path.write_text(prof.model_dump_json())
    r = CliRunner().invoke(app, ["recommend", "--gpus", "8", "--profile", str(path),
                                 "--tp", "8"])
    assert r.exit_code == 2 and "--tp 8 does not divide the 4 attention heads" in r.stderr
    r = CliRunner().invoke(app, ["recommend", "--gpus", "8", "--profile", str(path),
                                 "--tp", "4"])
    assert r.exit_code == 0, r.stderr


def test_seq_len_fills_what_the_file_does_not_state(tmp_path: Path) -> None:
    """A DeepSpeed JSON states no sequence length: --seq-len prices it at that length (the
    preset's 8,192 otherwise); a file that states one wins, with a note."""
    plain = json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                        "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}})
    flags = ("--gpus", "8", "--gpu", "h100-sxm", "--model", "llama3-8b")
    _, _, default = check_file(tmp_path / "ds.json", plain, *flags)
    _, _, short = check_file(tmp_path / "ds.json", plain, *flags, "--seq-len", "4096")
    assert short["config"]["seq_len"] == 4096 and default["config"]["seq_len"] is None
    assert short["derived"]["step_time_s"] < default["derived"]["step_time_s"]
    assert any("seq_len 4096 from --seq-len" in n for n in short["notes"])
    stated = json.dumps({**json.loads(plain), "pptune": {"seq_len": 2048}})
    _, _, doc = check_file(tmp_path / "ds.json", stated, *flags, "--seq-len", "4096")
    assert doc["config"]["seq_len"] == 2048
    assert any("--seq-len 4096 ignored: the file states seq_len = 2048" in n
               for n in doc["notes"])


TITAN = """[model]
name = "llama3"
flavor = "70B"

[training]
local_batch_size = 1
seq_len = 8192

[parallelism]
data_parallel_replicate_degree = {replicate}
data_parallel_shard_degree = {shard}
tensor_parallel_degree = 8

[activation_checkpoint]
mode = "full"
"""


def test_hsdp_shards_the_state_within_a_replica(tmp_path: Path) -> None:
    """torchtitan's HSDP (data_parallel_replicate_degree) shards the weights, gradients and
    optimizer state over each replica's ranks only (its "fsdp" mesh: dp_shard x cp): 4
    replicas of 8 hold per GPU what one group of 8 does, more than 32 shards do."""
    flags = ("--gpu", "h100-sxm", "--no-compare")
    _, _, hsdp = check_file(tmp_path / "a.toml", TITAN.format(replicate=4, shard=8),
                            "--gpus", "256", *flags)
    _, _, alone = check_file(tmp_path / "b.toml", TITAN.format(replicate=1, shard=8),
                             "--gpus", "64", *flags)
    _, _, full = check_file(tmp_path / "c.toml", TITAN.format(replicate=1, shard=32),
                            "--gpus", "256", *flags)
    assert hsdp["config"]["dp_replicate"] == 4 and hsdp["config"]["dp"] == 32
    peak = [max(d["derived"]["peak_memory_bytes"]) for d in (hsdp, alone, full)]
    assert peak[0] == pytest.approx(peak[1], rel=1e-12)
    assert peak[0] > peak[2]


def test_torchtitan_memory_budget_overflow_is_a_warning_and_needs_compile(tmp_path: Path
                                                                           ) -> None:
    """activation_checkpoint mode "memory_budget" is not modelled (priced without
    recomputation): a predicted overflow is a warning; torchtitan's apply_ac asserts the
    model is compiled."""
    text = TITAN.format(replicate=1, shard=8).replace(
        'mode = "full"', 'mode = "memory_budget"\nmemory_budget = 0.5').replace(
        "local_batch_size = 1", "local_batch_size = 4")
    flags = ("--gpus", "64", "--gpu", "h100-sxm", "--no-compare")
    code, found, doc = check_file(tmp_path / "a.toml", text + "\n[compile]\nenable = true\n",
                                  *flags)
    assert found.get("memory-overflow") == "warning" and code == 0, doc["findings"]
    code, found, _ = check_file(tmp_path / "b.toml", text, *flags)
    assert found["torchtitan-ac-memory-budget"] == "error" and code == 1


def test_torchtitan_compiled_model_under_a_split_backward_schedule_is_refused(
        tmp_path: Path) -> None:
    """torch's InterleavedZeroBubble, ZBVZeroBubble and DualPipeV raise on stage modules
    that used torch.compile (schedules.py _check_torch_compile_compatibility), which
    torchtitan's per-block compile makes them; a compiled loss alone, or 1F1B, is fine."""
    base = TITAN.format(replicate=1, shard=8).replace(
        "tensor_parallel_degree = 8", "tensor_parallel_degree = 8\npipeline_parallel_degree = 2\n"
        'pipeline_parallel_schedule = "{schedule}"').replace(
        "local_batch_size = 1", "local_batch_size = 8")
    flags = ("--gpus", "128", "--gpu", "h100-sxm", "--no-compare")
    found = {}
    for schedule, components in (("ZBVZeroBubble", None), ("DualPipeV", '["model"]'),
                                 ("ZBVZeroBubble", '["loss"]'), ("1F1B", None)):
        table = "\n[compile]\nenable = true\n" + (
            f"components = {components}\n" if components else "")
        name = f"{schedule}-{components}.toml".replace('"', "").replace("[", "").replace("]", "")
        _, got, _ = check_file(tmp_path / name, base.format(schedule=schedule) + table, *flags)
        found[schedule, components] = got.get("torchtitan-compile-split-backward")
    assert found == {("ZBVZeroBubble", None): "error", ("DualPipeV", '["model"]'): "error",
                     ("ZBVZeroBubble", '["loss"]'): None, ("1F1B", None): None}


def test_torchtitan_selective_ac_option_zero_checkpoints_every_block(tmp_path: Path) -> None:
    """torchtitan's apply_ac: ``if not ac_freq or count % ac_freq == 0`` wraps the block,
    so "0" checkpoints every block, as "1" does (it had been refused)."""
    flags = ("--gpus", "64", "--gpu", "h100-sxm", "--no-compare")
    docs = []
    for option in ("0", "1"):
        text = TITAN.format(replicate=1, shard=8).replace(
            'mode = "full"', f'mode = "selective"\nselective_ac_option = "{option}"')
        code, found, doc = check_file(tmp_path / f"{option}.toml", text, *flags)
        assert "torchtitan-ac-option" not in found and code in (0, 1), doc["findings"]
        docs.append(doc)
    assert docs[0]["config"]["recompute_every"] == docs[1]["config"]["recompute_every"] == 1
    assert docs[0]["derived"]["step_time_s"] == docs[1]["derived"]["step_time_s"]


MOE_TITAN = """[model]
name = "deepseek_v3"
flavor = "671B"

[training]
local_batch_size = 64
seq_len = 4096

[activation_checkpoint]
mode = "{mode}"

[parallelism]
data_parallel_shard_degree = 32
expert_parallel_degree = 32
pipeline_parallel_degree = 8
pipeline_parallel_schedule = "DualPipeV"
pipeline_parallel_microbatch_size = 1
{overlap}"""


def test_torchtitan_dualpipev_overlaps_the_experts_all_to_all_unless_told(
        tmp_path: Path) -> None:
    """torchtitan's DualPipeV with experts overlaps their all-to-all in its F&B pairs
    (pipeline_parallel_expert_parallel_overlap, default true) and raises with activation
    checkpointing (dual_pipe_v.py get_dual_pipe_v_flag); read as pptune's a2a overlap, an
    overlapped file steps faster than the same file with it off."""
    flags = ("--gpus", "256", "--gpu", "h100-sxm", "--no-compare")
    docs = {}
    for name, overlap in (("on", ""), ("off", "pipeline_parallel_expert_parallel_overlap = false")):
        code, found, doc = check_file(tmp_path / f"{name}.toml",
                                      MOE_TITAN.format(mode="none", overlap=overlap), *flags)
        assert "torchtitan-dualpipev-ac" not in found, doc["findings"]
        docs[name] = doc
    assert docs["on"]["config"]["a2a_overlap"] is True
    assert docs["off"]["config"]["a2a_overlap"] is False
    assert docs["on"]["derived"]["step_time_s"] < docs["off"]["derived"]["step_time_s"]
    code, found, _ = check_file(tmp_path / "ac.toml", MOE_TITAN.format(mode="full", overlap=""),
                                *flags)
    assert found["torchtitan-dualpipev-ac"] == "error" and code == 1
    code, found, _ = check_file(
        tmp_path / "ac-off.toml",
        MOE_TITAN.format(mode="full", overlap="pipeline_parallel_expert_parallel_overlap = false"),
        *flags)
    assert "torchtitan-dualpipev-ac" not in found


# --- the file's own hf_config key --------------------------------------------------

OWN = "gpus: 8\npp: 2\nmicro_batch_size: 1\nglobal_batch: 64\nseq_len: 4096\ngpu: h100-sxm\n"


def _exit2(tmp_path: Path, text: str, *flags: str) -> str:
    from typer.testing import CliRunner

    from pptune.cli.app import app

    path = tmp_path / "run.yaml"
    path.write_text(text)
    r = CliRunner().invoke(app, ["check-config", str(path), "--no-compare", *flags])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, (r.exit_code, r.stderr)
    return r.stderr.strip()


def test_a_file_naming_its_model_twice_is_refused_as_recommend_refuses(tmp_path: Path) -> None:
    """recommend refuses --model with --hf-config ("both name the model"); a file with
    both model and hf_config is refused alike, whether or not the hf_config file exists."""
    message = _exit2(tmp_path, OWN + "model: llama3-8b\nhf_config: /nonexistent/config.json\n")
    assert message.endswith(
        f"{tmp_path / 'run.yaml'}: model 'llama3-8b' and hf_config '/nonexistent/config.json' "
        "both name the model; give one of them"), message
    message = _exit2(tmp_path, OWN + f"model: llama3-8b\nhf_config: {HF}\n")
    assert message.endswith("both name the model; give one of them"), message


def test_the_files_hf_config_is_named_as_the_files_key(tmp_path: Path) -> None:
    """A config's hf_config that cannot be read: no costs (an error finding), and the
    message names the file's key, not the --hf-config flag nobody gave."""
    path = tmp_path / "run.yaml"
    code, found, _ = check_file(path, OWN + "hf_config: /nonexistent/config.json\n",
                                by="message")
    assert code == 1 and found["costs-unavailable"] == (
        "cannot build costs: the config's hf_config file not found: /nonexistent/config.json "
        "(no such file)")
    (tmp_path / "bad.json").write_text("{not json")
    code, found, _ = check_file(path, OWN + f"hf_config: {tmp_path / 'bad.json'}\n",
                                by="message")
    assert code == 1 and found["costs-unavailable"].startswith(
        f"cannot build costs: the config's hf_config {tmp_path / 'bad.json'} is not valid JSON")


def test_a_model_flag_still_overrides_the_files_hf_config(tmp_path: Path) -> None:
    """--model and --hf-config override the file (check-config --help): the file's
    unread hf_config is no error, and a note says which one prices the run."""
    path = tmp_path / "run.yaml"
    code, found, doc = check_file(path, OWN + "hf_config: /nonexistent/config.json\n",
                                  "--model", "llama3-8b")
    assert code in (0, 1) and "model-unknown" not in found
    assert ("--model llama3-8b names the model: the file's hf_config /nonexistent/config.json "
            "is not read") in doc["notes"]
