"""A user trial of flags that changed nothing: --plan and --force without --emit (or
--force without -o DIR), the FP8 flags where no FP8 plan is priced, a
--framework-version later than any release pptune has read, DeepSpeed's two files on
stdout, the expert-parallel cap in a config's own words, and simulate's ep beyond a
stage's ranks; --schedule for --schedules."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from tests.conftest import Cli

ErrorLine = Callable[[Result], str]
JOB = ("recommend", "--gpus", "8")
CAP = "pptune's cap, see docs/limits.md"


# ------------------------------------------------------------------ --plan and --force

@pytest.mark.parametrize(("flags", "said"), [
    (("--plan", "2"), "--plan 2 picks the plan --emit writes; without --emit it does "
     "nothing (the table lists every plan): add --emit FRAMEWORK, or drop --plan"),
    (("--plan", "1"), "--plan 1 picks the plan --emit writes; without --emit it does "
     "nothing (the table lists every plan): add --emit FRAMEWORK, or drop --plan"),
    (("--force",), "--force lets --emit FRAMEWORK -o DIR replace the files already in DIR; "
     "without --emit it does nothing: add --emit FRAMEWORK -o DIR, or drop --force"),
    (("--force", "--emit", "megatron"), "--force lets --emit FRAMEWORK -o DIR replace the "
     "files already in DIR; without -o DIR it does nothing: add -o DIR, or drop --force"),
])
def test_a_flag_of_emit_without_it_is_refused(cli: Cli, error_line: ErrorLine,
                                              flags: tuple[str, ...], said: str) -> None:
    assert error_line(cli(*JOB, *flags)) == f"pptune: error: {said}"


def test_both_are_said_at_once_and_nothing_is_written(cli: Cli, error_line: ErrorLine,
                                                      tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    line = error_line(cli(*JOB, "--plan", "3", "--force", "-o", out))
    assert line.startswith("pptune: error: --plan 3 picks the plan") and "; --force lets" in line
    assert not out.exists()


def test_with_emit_and_a_folder_they_still_act(cli: Cli, tmp_path: Path) -> None:
    first = cli(*JOB, "--emit", "pptune", "-o", tmp_path)
    assert first.exit_code == 0, first.stderr
    plan_1 = (tmp_path / "pptune.yaml").read_text()
    r = cli(*JOB, "--emit", "pptune", "--plan", "2", "--force", "-o", tmp_path)
    assert r.exit_code == 0, r.stderr
    assert "(replaced the previous one)" in r.stderr
    assert (tmp_path / "pptune.yaml").read_text() != plan_1


# ------------------------------------------------------------------ the FP8 flags

@pytest.mark.parametrize(("flags", "said"), [
    (("--precision", "bf16", "--fp8-recipe", "blockwise"),
     "--fp8-recipe blockwise shapes FP8 plans only, and none is priced here (precision "
     "bf16): add fp8 to --precision (recommend: a list such as bf16,fp8), or drop it"),
    (("--fp8-recipe", "tensorwise", "--fp8-kernels", "torchao", "--fp8-param-gather"),
     "--fp8-recipe tensorwise, --fp8-kernels torchao and --fp8-param-gather shape FP8 plans "
     "only, and none is priced here (precision bf16): add fp8 to --precision (recommend: a "
     "list such as bf16,fp8), or drop them"),
])
def test_fp8_flags_without_an_fp8_plan_are_refused(cli: Cli, error_line: ErrorLine,
                                                   flags: tuple[str, ...], said: str) -> None:
    assert error_line(cli(*JOB, *flags)) == f"pptune: error: {said}"
    # simulate prices one layout with the same flags and the same rule
    sim = error_line(cli("simulate", "--model", "llama3-8b", "--pp", "2", *flags))
    assert sim == f"pptune: error: {said}"


def test_fp8_flags_act_where_an_fp8_plan_is_priced(cli: Cli) -> None:
    for precision in ("bf16,fp8", "mxfp8"):
        r = cli(*JOB, "--gpu", "b200", "--precision", precision, "--fp8-recipe", "blockwise")
        assert r.exit_code == 0, r.stderr
    r = cli(*JOB, "--no-fp8-param-gather")  # states the BF16 default: nothing to refuse
    assert r.exit_code == 0, r.stderr


# ------------------------------------------------------------------ --framework-version

def test_a_later_release_is_judged_by_the_newest_rules_with_a_note(cli: Cli) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "megatron-llama3-8b.sh"
    plain = cli("check-config", example)
    later = cli("check-config", example, "--framework-version", "megatron-core=99.0")
    assert later.exit_code == plain.exit_code == 0, later.stderr
    text = " ".join(later.stdout.split())
    assert ("--framework-version megatron-core=99.0 is later than 0.16.1, the newest release "
            "pptune has read: judged by the rules pptune has for 0.16.1 and later; what "
            "changed after 0.16.1 is not checked") in text
    known = cli("check-config", example, "--framework-version", "megatron-core=0.16.1")
    assert "is later than" not in known.stdout


# torchtitan's newest is main after 0.2.2, which pptune names 0.3.0
@pytest.mark.parametrize(("value", "newest"), [("torchtitan=0.3.1", "0.3.0"),
                                               ("torch=2.14", "2.13"),
                                               ("deepspeed=0.20.0", "0.19.8")])
def test_each_library_names_its_newest_release(cli: Cli, value: str, newest: str) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "llama3-8b-16gpu.yaml"
    r = cli("check-config", example, "--framework-version", value, "--no-compare")
    assert r.exit_code == 0, r.stderr
    assert f"{value} is later than {newest}, the newest release" in " ".join(r.stdout.split())


# ------------------------------------------------------------------ DeepSpeed on stdout

def test_deepspeeds_two_files_are_not_written_to_stdout(cli: Cli, error_line: ErrorLine) -> None:
    assert error_line(cli(*JOB, "--emit", "deepspeed")) == (
        "pptune: error: --emit deepspeed writes 2 files (ds_config.json, ds_partition.txt), "
        "which stdout cannot keep apart: give -o DIR, the folder to write them into")


def test_one_file_still_goes_to_stdout(cli: Cli) -> None:
    r = cli(*JOB, "--emit", "megatron")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("# ----- pretrain_megatron.sh\n")


# ------------------------------------------------------------------ the ep cap

MEGATRON = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
            "--num-attention-heads 8 --seq-length 2048 --max-position-embeddings 2048 "
            "--micro-batch-size 1 --global-batch-size 64 --pipeline-model-parallel-size 2 "
            "--num-experts 8 --expert-model-parallel-size {ep} --bf16 --ffn-hidden-size 4096\n")
TITAN = ("[model]\nname = \"deepseek_v3\"\nflavor = \"16B\"\n[training]\nlocal_batch_size = 8\n"
         "seq_len = 2048\n[parallelism]\npipeline_parallel_degree = 2\n"
         "expert_parallel_degree = {ep}\ndata_parallel_shard_degree = -1\n")
DEEPSPEED = ('{{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, '
             '"expert_parallel": {{"enabled": true, "autoep_size": {ep}}}}}')
PPTUNE = "model: mixtral-8x7b\ngpus: 8\nmicro_batch_size: 1\nglobal_batch: 64\nep: {ep}\n"


@pytest.mark.parametrize("ep", [4096, 4_000_000])  # over the cap; over the schema's 2**20
@pytest.mark.parametrize(("name", "text", "key"), [
    ("pretrain.sh", MEGATRON, "--expert-model-parallel-size"),
    ("job.toml", TITAN, "parallelism.expert_parallel_degree"),
    ("ds_config.json", DEEPSPEED, "expert_parallel.autoep_size"),
    ("job.yaml", PPTUNE, "ep"),
])
def test_the_ep_cap_is_said_as_docs_limits_states_it(cli: Cli, error_line: ErrorLine,
                                                     tmp_path: Path, name: str, text: str,
                                                     key: str, ep: int) -> None:
    path = tmp_path / name
    path.write_text(text.format(ep=ep))
    assert error_line(cli("check-config", path, "--gpus", "8")) == (
        f"pptune: error: {path}: {key} must be <= 1,024 (got {ep}): {CAP}")


def test_docs_limits_states_the_cap_the_code_has() -> None:
    from pptune import limits

    doc = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text()
    assert limits.MAX_TP == 1_024
    assert "| `--tp`, `--cp`, `--ep`, `--etp` (each size of a list; a config's `tp`, `cp`, " \
           "`ep`, `etp`) | 1,024 |" in doc


# ------------------------------------------------------------------ simulate's ep

def test_simulate_says_where_expert_ranks_beyond_a_stage_come_from(cli: Cli) -> None:
    # ep 8 x etp 1 = 8 expert ranks over a stage of tp 2 x cp 1 = 2: megatron-core asks
    # ep x etp | tp x cp x dp, so dp a multiple of 8 / gcd(8, 2) = 4
    r = cli("simulate", "--model", "mixtral-8x7b", "--pp", "2", "--tp", "2", "--ep", "8")
    assert r.exit_code == 0, r.stderr
    assert ("pptune: ep 8 x etp 1 = 8 ranks do not fit a stage's tp 2 x cp 1 = 2: the expert "
            "groups take ranks of other pipeline replicas (megatron-core: ep x etp divides "
            "tp x cp x dp, here dp a multiple of 4); simulate times one replica") in r.stderr
    r = cli("simulate", "--model", "mixtral-8x7b", "--pp", "2", "--tp", "8", "--ep", "8")
    assert r.exit_code == 0 and "do not fit a stage" not in r.stderr


def test_schedule_is_an_alias_of_schedules(cli: Cli) -> None:
    # simulate and validate take --schedule; recommend and tune accept it for --schedules
    r = cli(*JOB, "--schedule", "zbv", "--top", "1", "--json")
    assert r.exit_code == 0, r.stderr
    assert {p["schedule"] for p in json.loads(r.stdout)["plans"]} == {"zbv"}
