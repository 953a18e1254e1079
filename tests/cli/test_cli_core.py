"""CLI: exit codes, one-line errors, JSON contracts (typer's CliRunner)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costs.profiles import analytic_profile

runner = CliRunner()


def run(*args: str, cwd: Path | None = None):
    return runner.invoke(app, list(args), catch_exceptions=False)


def one_error_line(result) -> str:
    lines = [x for x in result.stderr.splitlines() if x.startswith("pptune: error:")]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output + result.stderr
    return lines[0]


def test_simulate_textbook_prints_bubble_and_timeline() -> None:
    r = run("simulate", "--schedule", "1f1b", "--pp", "4", "--microbatches", "8",
            "--fwd-ms", "1", "--bwd-ms", "2", "--timeline")
    assert r.exit_code == 0
    assert "bubble 27.3%" in r.stdout
    assert "step 33.0 ms" in r.stdout
    assert r.stdout.count("dev") >= 8  # summary rows and timeline rows


def test_simulate_json_contract() -> None:
    r = run("simulate", "--schedule", "zb-h1", "--pp", "4", "--microbatches", "8",
            "--fwd-ms", "1", "--bwd-ms", "1", "--wgrad-ms", "1", "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    for key in ("schedule", "pp", "num_microbatches", "virtual_stages", "step_time_s",
                "bubble_rate", "devices"):
        assert key in doc
    assert doc["bubble_rate"] == pytest.approx(3 / (3 * 8 + 3))
    assert {"busy_s", "idle_s", "peak_activation_bytes"} <= set(doc["devices"][0])


def test_simulate_model_preset_with_split(tmp_path: Path) -> None:
    trace, svg = tmp_path / "t.json", tmp_path / "t.svg"
    r = run("simulate", "--model", "gpt3-1.3b", "--gpu", "h100-sxm", "--pp", "4",
            "--microbatches", "8", "--split", "7,6,6,7", "--json", "--trace", str(trace),
            "--svg", str(svg))
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["stage_layers"] == [7, 6, 6, 7]
    assert json.loads(trace.read_text())["traceEvents"]
    assert svg.read_text().startswith("<svg")


def test_simulate_split_may_count_blocks_like_megatron() -> None:
    # the example: gpt3-1.3b has 24 blocks, --split 6,6,6,6
    r = run("simulate", "--model", "gpt3-1.3b", "--gpu", "h100-sxm", "--pp", "4",
            "--microbatches", "8", "--split", "6,6,6,6", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["stage_layers"] == [7, 6, 6, 7]
    assert "transformer blocks" in r.stderr


def test_simulate_1f1b_with_m_below_p_warns_but_runs() -> None:
    r = run("simulate", "--pp", "4", "--microbatches", "2", "--fwd-ms", "1", "--bwd-ms", "2")
    assert r.exit_code == 0
    assert "as Megatron-LM runs it; torch's Schedule1F1B (2.7 on) refuses it" in r.stderr


def test_simulate_interleaved_m_not_a_multiple_of_pp_names_its_groups() -> None:
    """6 micro-batches on pp 4: groups of 6 (6 % 5 = 1 < 4), the whole step one group."""
    r = run("simulate", "--schedule", "interleaved-1f1b", "-v", "2", "--pp", "4",
            "--microbatches", "6", "--fwd-ms", "1", "--bwd-ms", "2")
    assert r.exit_code == 0
    assert "runs Megatron-LM's micro-batch groups of 6" in " ".join(r.stderr.split())


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--pp", "0", "--fwd-ms", "1", "--bwd-ms", "2"], "--pp must be >= 1 (got 0)"),
        (["--microbatches", "0", "--fwd-ms", "1", "--bwd-ms", "2"], "(got 0)"),
        (["--schedule", "pipedream", "--fwd-ms", "1", "--bwd-ms", "2"], "unknown schedule 'pipedream'"),
        (["--schedule", "interleaved-1f1b", "-v", "2", "--microbatches", "3", "--fwd-ms", "1",
          "--bwd-ms", "2"], "as many micro-batches (3) as pipeline depth (4)"),
        (["--model", "gpt3-1.3b", "--split", "1,2,3,4"], "summing to the 26 layers"),
        (["--model", "gpt3-1.3b", "--split", "6,6,6"], "must have 4 entries"),
        (["--model", "gpt-9000"], "unknown model preset 'gpt-9000'"),
        (["--model", "gpt3-1.3b", "--gpu", "tpu"], "unknown GPU preset 'tpu'"),
        (["--split", "a,b", "--model", "gpt3-1.3b"], "comma-separated integers"),
        (["--fwd-ms", "inf", "--bwd-ms", "1"], "finite number"),
        (["--fwd-ms", "1", "--bwd-ms", "1", "--pp", "64", "--microbatches", "100000"],
         "pptune simulates up to 2,000,000"),
        (["--fwd-ms", "1", "--bwd-ms", "1", "--width", "3"], "--width must be >= 20"),
    ],
)
def test_simulate_bad_input_is_one_line_exit_2(args: list[str], needle: str) -> None:
    r = run("simulate", *args)
    assert r.exit_code == 2
    assert needle in one_error_line(r)


def test_recommend_default_json_contract(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no ./pptune-profile.json here
    out = tmp_path / "plans.json"
    r = run("recommend", "--gpus", "8", "--json", "-o", str(out))
    assert r.exit_code == 0, r.stderr
    assert "embedded default" in r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) >= {"plans", "rejected"}
    keys = {"pp", "dp", "tp", "schedule", "virtual_stages", "micro_batch_size",
            "num_microbatches", "grad_accum_steps", "stage_layers", "bubble_rate",
            "step_time_s", "tokens_per_s", "peak_memory_bytes"}
    assert doc["plans"] and all(keys <= set(p) for p in doc["plans"])
    times = [p["step_time_s"] for p in doc["plans"]]
    # fastest first, but a plan without a pipeline within --pipeline-margin (default
    # 0.01) of the fastest ranks first, and a note says so
    assert times[1:] == sorted(times[1:])
    if times[0] > min(times):
        assert doc["plans"][0]["pp"] == 1 and times[0] <= min(times) * 1.01
        assert any("--pipeline-margin" in n for n in doc["notes"])
    for p in doc["plans"]:
        assert p["micro_batch_size"] * p["num_microbatches"] * p["dp"] == 512
        assert p["pp"] * p["dp"] * p["tp"] * p["cp"] == 8
        assert len(p["peak_memory_bytes"]) == p["pp"]
    assert json.loads(out.read_text()) == doc


def test_recommend_table_explains_the_winner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb", "--timeline")
    assert r.exit_code == 0, r.stderr
    assert "winner:" in r.stdout and "bubble" in r.stdout
    assert "searched" in r.stdout and "rejected" in r.stdout
    assert "timeline of plan 1" in r.stdout


def test_recommend_timeline_runs_on_the_plans_own_costs() -> None:
    """The winner's timeline is simulated on its own cost key (tp 8 here), so its
    pipeline ends within the step the table prints (the step adds only the
    data-parallel tail and the optimizer); it had been drawn on the tp = 1 table,
    6x longer."""
    import re

    r = run("recommend", "--gpus", "64", "--model", "llama3-70b", "--tp", "8", "--pp", "4",
            "--schedules", "1f1b", "--timeline", "--top", "1", "--json")
    step = json.loads(r.stdout)["plans"][0]["step_time_s"]
    r = run("recommend", "--gpus", "64", "--model", "llama3-70b", "--tp", "8", "--pp", "4",
            "--schedules", "1f1b", "--timeline", "--top", "1", "--width", "120")
    assert r.exit_code == 0, r.stderr
    end = float(re.findall(r"([0-9.]+) s\n", r.stdout.split("cool-down")[1])[0])
    assert 0.99 * step <= end <= step


def test_recommend_reads_a_profile_file(tmp_path: Path) -> None:
    prof = tmp_path / "p.json"
    prof.write_text(analytic_profile("gpt-small", "a100-80gb", [1, 2]).model_dump_json())
    r = run("recommend", "--gpus", "2", "--profile", str(prof), "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["plans"][0]["global_batch"] == 32


def test_recommend_picks_up_profile_in_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pptune-profile.json").write_text(
        analytic_profile("gpt-small", "h200", [1]).model_dump_json()
    )
    r = run("recommend", "--gpus", "2", "--json")
    assert r.exit_code == 0, r.stderr
    assert "./pptune-profile.json" in r.stderr


@pytest.mark.parametrize(
    "args,code,needle",
    [
        (["--gpus", "0"], 2, "--gpus must be >= 1 (got 0)"),
        (["--gpus", "8", "--tp", "3"], 2, "--tp 3 must divide --gpus 8"),
        (["--gpus", "8", "--schedules", "1f1b,pipedream"], 2, "unknown schedule 'pipedream'"),
        (["--gpus", "8", "--schedules", "1f1b,dualpipe,zbx"], 2,
         "unknown schedule 'zbx'; choose from gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv, "
         "dualpipe, dualpipev"),
        (["--gpus", "8", "--grad-compression", "zip"], 2, "unknown --grad-compression"),
        (["--gpus", "8", "--global-batch", "3", "--schedules", "1f1b", "--model", "gpt3-1.3b",
          "--tp", "1"], 1,
         "no feasible plan"),
        (["--gpus", "2", "--model", "gpt3-175b", "--gpu", "a100-80gb"], 1, "out of memory: "),
        # recomputation by module alone on a dense model: said, no zero counts listed
        (["--gpus", "8", "--recompute", "modules", "--tp", "1", "--cp", "1"], 1,
         "no feasible plan for 8 GPUs (modules recomputation on a dense model: 1); try "
         "--recompute "
         "selective or full: recomputing named modules (Megatron-LM --recompute-modules) is "
         "priced for mixture-of-experts and MLA models, and this model has neither"),
        # one GPU: no tensor parallelism or sharding to suggest, and full recomputation
        # was searched; Llama 3 8B's state fully sharded (8.03e9 parameters x 16 bytes:
        # FP32 weights, gradients and two moments) is 120 GiB, over 2 GPUs 59.8 GiB
        (["--gpus", "1"], 1, "no feasible plan for 1 GPU (schedule needs pp >= 2: 96, "
         "out of memory: 12); try more GPUs (the weights, gradients and optimizer state "
         "alone are 120 GiB at their smallest (fully sharded): at least 2 GPUs of 80 GiB)"),
        # Llama 3 70B: 70,553,706,496 parameters (80 blocks of 855,654,400, two
        # 128,256 x 8,192 tables, the final norm) x 16 bytes = 1,051.3 GiB; / 13 =
        # 80.9 GiB, over 80; / 14 = 75.1 GiB. tp 1 and 2 (those dividing 6), every sharding
        # and recomputation and micro-batches of 1 were searched: more GPUs alone
        (["--gpus", "6", "--model", "llama3-70b"], 1,
         "try more GPUs (the weights, gradients and optimizer state alone are 1,051 GiB at "
         "their smallest (fully sharded): at least 14 GPUs of 80 GiB (2 nodes of 8)); or a --global-batch"),
        # tp 1, 2, 4, 8 searched; what was narrowed by hand comes back
        (["--gpus", "16", "--model", "llama3-70b", "--micro-batch-sizes", "8",
          "--recompute", "none", "--sharding", "none"], 1,
         "try more GPUs, --sharding zero1,fsdp, --recompute full or smaller "
         "--micro-batch-sizes"),
        (["--gpus", "8", "--model", "llama3-405b"], 2,
         "unknown model preset 'llama3-405b' (did you mean llama3.1-405b?)"),
        (["--gpus", "8", "--gpu", "h100"], 2, "unknown GPU preset 'h100' (did you mean h100-sxm?)"),
        (["--gpus", "8", "--gpu", "h20"], 2, "unknown GPU preset 'h20'; choose one of"),
        (["--gpus", "8", "--sharding", "zero9"], 2, "--sharding takes a comma list"),
        (["--gpus", "8", "--sharding", "zero2", "--sharded-optimizer"], 2, "--sharded-optimizer"),
        (["--gpus", "8", "--global-batch", "99999999"], 1, "too many micro-batches to simulate"),
        # the reasons in words, as the table's rejected line gives them (JSON keeps the keys)
        (["--gpus", "8", "--model", "qwen3-30b-a3b", "--ep", "8", "--pp", "2"], 1,
         "no feasible plan for 8 GPUs (ep x etp does not divide the stage: 5); try --ep x "
         "--etp dividing a stage's ranks"),
        (["--gpus", "6", "--model", "qwen3-30b-a3b", "--ep", "4"], 2,
         "no layout of 6 GPUs: ep x etp = 4 x 1 = 4 does not divide them"),
        (["--gpus", "8", "--global-batch", "99999999999"], 2, "--global-batch must be <="),
    ],
)
def test_recommend_errors(args: list[str], code: int, needle: str, tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", *args)
    assert r.exit_code == code
    assert needle in one_error_line(r)


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe binary", b"{not json", b"[]",
                                     b'{"schema_version": 1, "source": "probe"}'])
def test_bad_profile_file_is_one_line_exit_2(tmp_path: Path, content: bytes) -> None:
    prof = tmp_path / "bad.json"
    prof.write_bytes(content)
    r = run("recommend", "--gpus", "2", "--profile", str(prof))
    assert r.exit_code == 2
    assert "profile" in one_error_line(r)


def test_missing_profile_file() -> None:
    r = run("simulate", "--profile", "/nonexistent/p.json")
    assert r.exit_code == 2
    assert "not found" in one_error_line(r)


def test_presets_lists_every_name() -> None:
    r = run("presets")
    assert r.exit_code == 0
    for name in ["gpt-small", "gpt3-1.3b", "gpt3-13b", "gpt3-175b", "llama3-8b", "llama3-70b",
                 "a100-80gb", "h100-sxm", "h200"]:
        assert name in r.stdout
    doc = json.loads(run("presets", "--json").stdout)
    assert {m["name"] for m in doc["models"]} >= {"gpt-small", "llama3-70b"}


@pytest.mark.parametrize("kind", ["profile", "plan", "config"])
def test_schema_prints_json_schema(kind: str) -> None:
    r = run("schema", kind)
    assert r.exit_code == 0
    assert json.loads(r.stdout)["type"] == "object"


def test_schema_unknown_kind() -> None:
    r = run("schema", "nope")
    assert r.exit_code == 2


@pytest.mark.slow
def test_planner_runs_without_torch(tmp_path: Path) -> None:
    # sqlite-utils' trick: block the heavy import and run the real CLI.
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['pynvml'] = None\n"
        "from pptune.cli.app import main; sys.argv = ['pptune', 'recommend', '--gpus', '8', '--json']\n"
        "main()"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plans"]


def test_recompute_and_sequence_parallel_change_memory(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    def best(*flags: str) -> dict:
        r = run("recommend", "--gpus", "8", "--model", "llama3-8b", "--tp", "2", "--pp", "2",
                "--schedules", "1f1b", "--sharded-optimizer", "--json", *flags)
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["plans"][0]

    plain = best("--no-sequence-parallel")
    sp = best()  # sequence parallelism is on by default, as Megatron-LM's recipes run tp
    full = best("--no-sequence-parallel", "--recompute", "full")
    same_shape = ("micro_batch_size", "num_microbatches", "stage_layers")
    assert all(sp[k] == plain[k] for k in same_shape)
    assert max(sp["peak_memory_bytes"]) < max(plain["peak_memory_bytes"])
    if all(full[k] == plain[k] for k in same_shape):
        assert max(full["peak_memory_bytes"]) < max(plain["peak_memory_bytes"])
        assert full["step_time_s"] > plain["step_time_s"]
    r = run("recommend", "--gpus", "8", "--recompute", "some")
    assert r.exit_code == 2 and "--recompute takes a comma list of none, selective, full" in r.stderr


def test_memory_what_if_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    # llama3-8b on two H100s: nothing fits without sharding or recomputation
    r = run("recommend", "--gpus", "2", "--sharding", "none", "--recompute", "none")
    assert r.exit_code == 1
    assert "with --recompute full a plan fits" in r.stderr
    r = run("recommend", "--gpus", "16", "--model", "gpt3-13b", "--gpu", "a100-80gb",
            "--sharding", "none", "--recompute", "none")
    assert r.exit_code == 0
    assert "with every --sharding the best plan would be" in r.stdout


HF = Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen2-7b-config.json"


def test_recommend_and_simulate_from_a_hugging_face_config(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", "--gpus", "16", "--hf-config", str(HF), "--seq-len", "4096",
            "--global-batch", "256", "--tp", "2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["request"]["seq_len"] == 4096
    assert all(sum(p["stage_layers"]) == 28 + 2 for p in doc["plans"])  # 28 blocks + ends
    r = run("simulate", "--hf-config", str(HF), "--pp", "4", "--microbatches", "8",
            "--split", "7,7,7,7", "--json")
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["stage_layers"] == [8, 7, 7, 8]
    r = run("recommend", "--gpus", "8", "--hf-config", str(HF), "--model", "llama3-8b")
    assert r.exit_code == 2 and "give one of them" in r.stderr


def test_attention_flag_switches_the_analytic_attention() -> None:
    def step(*extra: str, gpu: str = "a100-80gb") -> float:
        r = run("simulate", "--model", "gpt3-1.3b", "--gpu", gpu, "--json", *extra)
        assert r.exit_code == 0, r.stderr
        return float(json.loads(r.stdout)["step_time_s"])

    assert step("--attention", "eager") > step("--attention", "flash") == step()
    # the default, torch's SDPA, runs FlashAttention-2 on an A100 (sm80)
    assert step("--attention", "sdpa") == step()
    # cuDNN's rates are measured on H100 only: on an A100 it is priced as flash, and said so
    assert step("--attention", "cudnn") == step()
    r = run("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
            "--attention", "cudnn", "--top", "1")
    assert r.exit_code == 0 and "cuDNN's rates are not measured on a100-80gb" in r.stderr
    assert step("--attention", "cudnn", gpu="h100-sxm") < step("--attention", "flash",
                                                                gpu="h100-sxm")
    r = run("simulate", "--model", "gpt3-1.3b", "--attention", "sparse")
    assert r.exit_code == 2 and ("--attention must be one of flash, cudnn, eager, sdpa"
                                 in one_error_line(r))
    r = run("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--attention", "eager", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["request"]["attention"] == "eager"


def test_efficiency_overrides_every_gemm() -> None:
    def step(*extra: str) -> float:
        r = run("simulate", "--model", "gpt3-1.3b", "--gpu", "a100-80gb", "--json", *extra)
        return float(json.loads(r.stdout)["step_time_s"])

    assert step("--efficiency", "0.3") > step() > step("--efficiency", "1.0")
    r = run("simulate", "--model", "gpt3-1.3b", "--efficiency", "1.5")
    assert r.exit_code == 2 and "--efficiency must be in (0, 1]" in one_error_line(r)


def test_tp_comm_overlap_hides_tensor_parallel_collectives() -> None:
    def step(*extra: str) -> float:
        r = run("simulate", "--model", "gpt3-13b", "--gpu", "a100-80gb", "--tp", "8", "--json",
                *extra)
        assert r.exit_code == 0, r.stderr
        return float(json.loads(r.stdout)["step_time_s"])

    assert step("--tp-comm-overlap") < step()


def test_gradient_reduction_after_backward_exposes_more(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)

    def best(*extra: str) -> dict:
        r = run("recommend", "--gpus", "16", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
                "--pp", "1", "--json", *extra)
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)

    bucketed, after = best(), best("--no-overlap-grad-reduce")
    assert after["request"]["overlap_grad_reduce"] is False
    assert after["plans"][0]["exposed_allreduce_s"] > bucketed["plans"][0]["exposed_allreduce_s"]


def test_simulate_takes_sequence_parallel_as_recommend_does() -> None:
    def peak(*extra: str) -> float:
        r = run("simulate", "--model", "gpt3-13b", "--gpu", "a100-80gb", "--tp", "8", "--json",
                *extra)
        assert r.exit_code == 0, r.stderr
        return max(d["peak_activation_bytes"] for d in json.loads(r.stdout)["devices"])

    assert peak("--sequence-parallel") == peak() < peak("--no-sequence-parallel")
    r = run("simulate", "--fwd-ms", "1", "--bwd-ms", "2", "--sequence-parallel")
    assert r.exit_code == 2 and "drop --sequence-parallel" in one_error_line(r)


def test_check_config_reads_the_local_profile_when_the_config_names_no_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The resolver's CHECK column: the config's model first, then ./pptune-profile.json."""
    monkeypatch.chdir(tmp_path)
    Path("nomodel.yaml").write_text("pp: 2\ngpus: 2\nmicro_batch_size: 1\nglobal_batch: 8\n")
    Path("named.yaml").write_text("pp: 2\ngpus: 2\nmicro_batch_size: 1\nglobal_batch: 8\n"
                                  "model: gpt-small\ngpu: h100-sxm\n")

    def derived(config: str) -> tuple[str, set[str]]:
        r = run("check-config", config, "--output", "json", "--no-compare")
        doc = json.loads(r.stdout)
        return doc["derived"]["cost_source"], {f["id"] for f in doc["findings"]}

    source, ids = derived("nomodel.yaml")
    assert source == "none" and "model-unknown" in ids
    Path("pptune-profile.json").write_text(
        analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    source, ids = derived("nomodel.yaml")
    assert source == "profile ./pptune-profile.json" and "model-unknown" not in ids
    assert "memory-ok" in ids
    # its 2 GPUs: GEMM and attention at the slower one's pace (costmodel/variation.py)
    assert derived("named.yaml")[0] == ("analytic gpt-small on h100-sxm, compute at the slowest "
                                        "of 2 GPUs' pace (-1.0%), sdpa attention (cudnn on "
                                        "h100-sxm)")


def test_recommend_states_the_layout_it_searched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--cp / --ep / --precision are searched dimensions: each plan says its own (JSON keys
    cp, ep, etp, precision) and the request records what was searched."""
    monkeypatch.chdir(tmp_path)
    r = run("recommend", "--gpus", "16", "--model", "mixtral-8x7b", "--tp", "2", "--cp", "1,2",
            "--ep", "4,8", "--precision", "bf16,fp8", "--pp", "1,2", "--json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    for p in doc["plans"]:
        assert p["tp"] == 2 and p["cp"] in (1, 2) and p["ep"] in (4, 8)
        assert p["precision"] in ("bf16", "fp8") and p["etp"] == 1
        assert p["pp"] * p["dp"] * p["tp"] * p["cp"] == 16
    assert (doc["request"]["tp"], doc["request"]["cp"], doc["request"]["ep"]) == (2, [1, 2], [4, 8])
    assert doc["request"]["precision"] == ["bf16", "fp8"]
    table = run("recommend", "--gpus", "16", "--model", "mixtral-8x7b", "--tp", "2", "--cp", "2",
                "--ep", "8", "--precision", "fp8", "--pp", "1")
    assert table.exit_code == 0, table.stderr
    assert "pp×dp×tp×cp" in table.stdout and " ep " in table.stdout and "prec" in table.stdout


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--gpus", "8", "--cp", "3"], "--cp 3: does not divide --gpus 8"),
        (["--gpus", "8", "--cp", "0"], "--cp needs positive integers"),
        (["--gpus", "8", "--precision", "fp8", "--gpu", "a100-80gb"], "a100-80gb has no FP8"),
        (["--gpus", "8", "--precision", "fp4"], "--precision takes a comma list"),
        (["--gpus", "8", "--ep", "2"], "llama3-8b has no experts to split"),
        (["--gpus", "8", "--model", "mixtral-8x7b", "--ep", "3"], "does not divide the 8 routed"),
        (["--gpus", "8", "--moe-imbalance", "0.5"], "--moe-imbalance must be >= 1"),
        (["--gpus", "8", "--cp-comm", "ring"], "--cp-comm must be one of"),
    ],
)
def test_bad_dimensions_are_one_line_exit_2(args: list[str], needle: str, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", *args)
    assert r.exit_code == 2, r.stdout
    assert needle in one_error_line(r)


def test_commands_pricing_one_layout_refuse_lists_and_measured_layouts(tmp_path: Path) -> None:
    r = run("simulate", "--model", "gpt-small", "--tp", "1,2")
    assert r.exit_code == 2 and "prices one layout: give one value to --tp" in one_error_line(r)
    prof = tmp_path / "p.json"
    prof.write_text(analytic_profile("gpt-small", "h100-sxm", [1]).model_dump_json())
    r = run("recommend", "--gpus", "4", "--profile", str(prof), "--cp", "2")
    assert r.exit_code == 2 and "for a layout the costs were not measured with" in one_error_line(r)
    r = run("simulate", "--model", "llama3-8b", "--cp", "2", "--pp", "2", "--microbatches", "4",
            "--json")
    assert r.exit_code == 0, r.stderr


def test_pipeline_margin_zero_ranks_by_step_time_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", "--gpus", "8", "--json", "--pipeline-margin", "0")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    times = [p["step_time_s"] for p in doc["plans"]]
    assert times == sorted(times)
    assert not any("--pipeline-margin" in n for n in doc["notes"])
    # the file records the margin it was ranked with (not the default, so written)
    assert doc["request"]["pipeline_margin"] == 0


@pytest.mark.parametrize("bad", ["-0.1", "1.5", "nan"])
def test_bad_pipeline_margin_is_one_line_exit_2(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.chdir(tmp_path)
    r = run("recommend", "--gpus", "8", "--pipeline-margin", bad)
    assert r.exit_code == 2
    assert "--pipeline-margin" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_recommend_json_says_why_when_no_plan_fits() -> None:
    """--json prints its document with no plan too (its rejections say why), exit 1."""
    r = runner.invoke(app, ["recommend", "--gpus", "1", "--model", "llama3-70b", "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["plans"] == [] and doc["rejected"]["out_of_memory"] > 0
    assert "no feasible plan for 1 GPU" in r.stderr


def test_recommend_says_when_a_hugging_face_config_leaves_the_batch_to_pptune() -> None:
    hf = str(Path(__file__).resolve().parents[1] / "data" / "hf" / "qwen2-7b-config.json")

    def notes(*flags: str) -> list[str]:
        r = runner.invoke(app, ["recommend", "--gpus", "8", "--hf-config", hf, "--seq-len",
                                "4096", "--top", "1", "--json", *flags])
        assert r.exit_code == 0, r.stderr
        return json.loads(r.stdout)["notes"]

    assert any("names no global batch; planned for 512 samples" in n for n in notes())
    assert not any("global batch" in n for n in notes("--global-batch", "256"))


def test_the_default_attention_is_torch_sdpa_as_torch_2_13_dispatches_it() -> None:
    """torch 2.13's scaled_dot_product_attention runs cuDNN's kernel first on sm90 and
    sm10x (sdp_utils.cpp check_prefer_cudnn_attention: cuDNN above 9.15; the 2.13.0 CUDA
    wheel pins cuDNN 9.20) and FlashAttention-2 elsewhere: with no --attention, Hopper and
    Blackwell are priced at cuDNN's rates, an A100 at FlashAttention-2's, and no note says
    cuDNN is unmeasured."""
    def step(gpu: str, *extra: str) -> float:
        r = run("simulate", "--model", "gpt3-1.3b", "--gpu", gpu, "--json", *extra)
        assert r.exit_code == 0, r.stderr
        return float(json.loads(r.stdout)["step_time_s"])

    for gpu in ("h100-sxm", "h200", "b200", "gb300"):
        assert step(gpu) == step(gpu, "--attention", "cudnn") < step(gpu, "--attention",
                                                                      "flash"), gpu
    assert step("a100-80gb") == step("a100-80gb", "--attention", "flash")
    r = run("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
            "--top", "1", "--json")
    assert r.exit_code == 0 and "not measured" not in r.stderr
    assert json.loads(r.stdout)["request"]["attention"] == "sdpa"
