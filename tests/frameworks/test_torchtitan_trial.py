"""A torchtitan user trial's findings: what torchtitan 0.2.2 itself refuses is an
error citing its source, what pptune does not model a warning naming it.

Files follow torchtitan 0.2.2's own train_configs (``hf_assets_path``, ``[compile]``:
keys only 0.2 has); the legacy test file (tests/data/configs, [experimental] pipeline
keys) stays readable.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.check_json import check_file

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"

BASE = """\
[model]
name = "{name}"
flavor = "{flavor}"
hf_assets_path = "./assets/hf/model"
{model}
[training]
local_batch_size = {local}
seq_len = {seq}
{training}
[parallelism]
{parallel}
{tables}
"""


def titan(tmp_path: Path, *flags: str, name: str = "llama3", flavor: str = "8B",
          model: str = "", local: int = 8, seq: int = 8192, training: str = "",
          parallel: str = "", tables: str = "", gpus: int = 8, gpu: str = "h100-sxm"
          ) -> tuple[int, dict[str, str], dict]:
    text = BASE.format(name=name, flavor=flavor, model=model, local=local, seq=seq,
                       training=training, parallel=parallel, tables=tables)
    return check_file(tmp_path / "job.toml", text, "--gpus", str(gpus), "--gpu", gpu, *flags)


def messages(doc: dict, rule: str) -> list[str]:
    return [f["message"] for f in doc["findings"] if f["id"] == rule]


# --- 1. keys torchtitan 0.2.2's ConfigManager refuses -------------------------------


def test_misspelled_key_is_torchtitans_error_with_the_close_spelling(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, parallel="tensor_paralel_degree = 2")
    assert code == 1 and found["torchtitan-unknown-key"] == "error"
    (text,) = messages(doc, "torchtitan-unknown-key")
    assert ("[parallelism] tensor_paralel_degree: no such key: torchtitan 0.2.2 raises "
            "'Invalid field names in <class 'torchtitan.config.job_config.Parallelism'> "
            "data: {'tensor_paralel_degree'}' (torchtitan/config/manager.py "
            "ConfigManager._dict_to_dataclass); did you mean tensor_parallel_degree?") == text
    assert doc["ignored"] == ["[parallelism] tensor_paralel_degree"]


def test_unknown_tables_are_errors(tmp_path: Path) -> None:
    code, _, doc = titan(tmp_path, tables="[paralelism]\ntensor_parallel_degree = 2\n"
                             "[float8]\nenable_fsdp_float8_all_gather = true\n")
    assert code == 1
    texts = messages(doc, "torchtitan-unknown-key")
    assert len(texts) == 2
    assert texts[0].startswith("[paralelism]: no such key: torchtitan 0.2.2 raises 'Invalid "
                               "field names in <class 'torchtitan.config.job_config.JobConfig'>")
    assert texts[0].endswith("did you mean parallelism?")
    assert texts[1].startswith("[float8] is a key of torchtitan 0.1.0, not of 0.2.2")
    # why an error and not the older-key warning: the key that marks the file as 0.2's
    assert " (the file is read as torchtitan 0.2.2's: its [" in texts[1]
    assert "] " in texts[1].split("its [", 1)[1].split(" is a key only 0.2 has)")[0]
    assert texts[1].endswith('use the [quantize.linear.float8] table (converter '
                             '"quantize.linear.float8")')


def test_keys_0_2_2_dropped_are_errors_in_a_0_2_file(tmp_path: Path) -> None:
    code, _, doc = titan(tmp_path, parallel='pipeline_parallel_split_points = ["layers.16"]',
                         tables="[experimental]\npipeline_parallel_degree = 2\n")
    assert code == 1
    texts = messages(doc, "torchtitan-unknown-key")
    assert ("[parallelism] pipeline_parallel_split_points is a key of torchtitan 0.1.0, not of "
            "0.2.2") in texts[0]
    assert texts[0].endswith("use module_fqns_per_model_part or "
                             "pipeline_parallel_layers_per_stage")
    assert texts[1].startswith("[experimental] pipeline_parallel_degree is a key of torchtitan "
                               "before 0.1.0, not of 0.2.2")
    assert texts[1].endswith("use [parallelism] pipeline_parallel_degree")


def test_legacy_file_stays_readable_with_warnings(tmp_path: Path) -> None:
    """No key only 0.2 has: the file may be for an older release (warnings, exit 0)."""
    code, found, doc = check_file(tmp_path / "old.toml",
                                  (DATA / "torchtitan_llama3_70b_legacy.toml").read_text(),
                                  "--gpus", "64", "--gpu", "h100-sxm")
    assert "torchtitan-unknown-key" not in found
    assert found["torchtitan-older-key"] == "warning"
    assert doc["config"]["tp"] == 8 and doc["config"]["pp"] == 4
    # with the release named, torchtitan 0.2.2's refusal is the error
    code, found, _ = check_file(tmp_path / "old.toml",
                                (DATA / "torchtitan_llama3_70b_legacy.toml").read_text(),
                                "--gpus", "64", "--gpu", "h100-sxm",
                                "--framework-version", "torchtitan=0.2.2")
    assert code == 1 and found["torchtitan-unknown-key"] == "error"


def test_repo_file_has_no_unknown_keys(tmp_path: Path) -> None:
    _, found, doc = check_file(tmp_path / "j.toml",
                                  (DATA / "torchtitan_llama3_8b.toml").read_text(), "--gpus", "8")
    assert "torchtitan-unknown-key" not in found and "torchtitan-older-key" not in found
    # only the tables pptune does not read ([job], [metrics], ...), no unknown key
    assert all(" " not in entry for entry in doc["ignored"]), doc["ignored"]


def test_custom_config_module_makes_unknown_keys_warnings(tmp_path: Path) -> None:
    _, found, _ = titan(tmp_path, tables='[job]\ncustom_config_module = "my.config"\n'
                        "[my_table]\nx = 1\n")
    assert found["torchtitan-unknown-key"] == "warning"


# --- 2, 4, 6. float8 as torchtitan's Float8LinearConverter takes it ------------------

FLOAT8 = 'converters = ["quantize.linear.float8"]'
COMPILE = '[compile]\nenable = true\n'
SWAP = ("torchtitan raises 'Failed to swap to Float8Linear because float8 is only supported "
        "on SM89 or later.To enable testing on older hardware, set `float8.emulate` to True "
        "in eager mode.' (torchtitan/components/quantization/float8.py "
        "Float8LinearConverter)")


def test_float8_emulate_with_compile_before_sm89_is_torchtitans_error(tmp_path: Path) -> None:
    tables = '[quantize.linear.float8]\nemulate = true\nfilter_fqns = ["output"]\n'
    code, found, doc = titan(tmp_path, local=1, model=FLOAT8, tables=tables + COMPILE, gpu="a100-80gb")
    assert code == 1 and found["torchtitan-float8-sm89"] == "error"
    assert SWAP in messages(doc, "torchtitan-float8-sm89")[0]
    # in eager mode torchtitan emulates: accepted, priced as BF16 with its warning
    code, found, doc = titan(tmp_path, local=1, model=FLOAT8, tables=tables, gpu="a100-80gb")
    assert code == 0 and "torchtitan-float8-sm89" not in found
    assert doc["derived"]["cost_key"].endswith("bf16")
    assert found["torchtitan-unmodelled"] == "warning"
    # on an H100 torchtitan runs emulation compiled too
    code, found, _ = titan(tmp_path, local=1, model=FLOAT8, tables=tables + COMPILE, gpu="h100-sxm")
    assert code == 0 and "torchtitan-float8-sm89" not in found


def test_float8_on_a100_says_it_in_torchtitans_terms(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, local=1, model=FLOAT8, gpu="a100-80gb", tables=COMPILE)
    assert code == 1 and found["precision-gpu"] == "error"
    (text,) = messages(doc, "precision-gpu")
    assert SWAP in text and "fp16" not in text
    assert "remove the float8 converter from [model] converters" in text
    assert "mixed_precision_param bfloat16" in text


def test_float8_without_a_compiled_model_is_a_warning_naming_its_pricing(tmp_path: Path
                                                                         ) -> None:
    tables = '[quantize.linear.float8]\nfilter_fqns = ["output"]\n'
    code, found, doc = titan(tmp_path, local=1, model=FLOAT8, tables=tables)
    assert code == 0 and found["torchtitan-float8-eager"] == "warning"
    (text,) = messages(doc, "torchtitan-float8-eager")
    assert text.startswith("quantize.linear.float8 with the model not compiled")
    assert "each op of their casts (abs-max, scale, cast) a kernel of its own, and are " \
        "priced so" in text
    assert (doc["config"]["precision"], doc["config"]["fp8_casts"]) == ("fp8", "eager")
    step = {}
    for compile_table in (COMPILE, '[compile]\nenable = true\ncomponents = ["loss"]\n'):
        _, found, doc = titan(tmp_path, local=1, model=FLOAT8, tables=tables + compile_table)
        assert ("torchtitan-float8-eager" in found) == ("loss" in compile_table)
        assert doc["config"]["fp8_casts"] == ("eager" if "loss" in compile_table else None)
        step["loss" in compile_table] = doc["derived"]["step_time_s"]
    assert step[False] < step[True]  # the model compiled fuses the casts (and the SwiGLU)
    # a rowwise recipe's eager casts are not derived: priced as compiled, and said so
    rowwise = '[quantize.linear.float8]\nrecipe_name = "rowwise"\nfilter_fqns = ["output"]\n'
    _, found, doc = titan(tmp_path, local=1, model=FLOAT8, tables=rowwise)
    (text,) = messages(doc, "torchtitan-float8-eager")
    assert "prices the FP8 GEMMs with the casts as compiled" in text
    assert doc["config"]["fp8_casts"] is None


def test_emitted_dualpipev_fp8_plan_says_its_linears_run_uncompiled(tmp_path: Path) -> None:
    from pptune.plan.emit import Framework, emit, write
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", gpu="h100-sxm", pp="4",
                                     schedules="dualpipev", precision="fp8", top=1))
    out = emit(Framework.TORCHTITAN, run)
    assert (out.plan.schedule.value, out.plan.precision.value) == ("dualpipev", "fp8")
    assert any("torchao's float8 linears (no cached FP8 weights, their casts eager: each op "
               "a kernel of its own): predicted that way" in n for n in out.notes), out.notes
    assert any(n.startswith("the fp8 linears run with the model not compiled: torch's "
                            "zero-bubble and DualPipeV schedules refuse compiled stage "
                            "modules") and n.endswith("priced so (torchao's eager float8 "
                                                      "casts: costmodel/precision.py)")
               for n in out.notes), out.notes
    write(out, tmp_path)
    text = (tmp_path / "torchtitan.toml").read_text()
    assert 'components = ["loss"]' in text and "quantize.linear.float8" in text
    # check-config says the same of the file, and prices it as the header does
    _, found, doc = check_file(tmp_path / "torchtitan.toml", text, "--gpus", "16")
    assert found["torchtitan-float8-eager"] == "warning"
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_emitted_zbv_mxfp8_plan_says_its_eager_casts_are_not_priced() -> None:
    from pptune.plan.emit import Framework, emit
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(RecommendSpec.of(gpus=16, model="llama3-8b", gpu="b200", pp="4",
                                     schedules="zbv", precision="mxfp8", top=1))
    out = emit(Framework.TORCHTITAN, run)
    assert (out.plan.schedule.value, out.plan.precision.value) == ("zbv", "mxfp8")
    assert any(n.startswith("the mxfp8 linears run with the model not compiled") and n.endswith(
        "which pptune prices as compiled (MXFP8's eager casts (torchao's prototype/mx_formats, "
        "a code path of their own) are not derived): the step is predicted faster than it "
        "runs") for n in out.notes), out.notes


# --- 6. torch's and torchtitan's own words --------------------------------------------


def test_microbatch_fix_names_torchtitans_settings(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, local=9, seq=2048, parallel=(
        'pipeline_parallel_degree = 4\npipeline_parallel_schedule = "Interleaved1F1B"\n'
        "data_parallel_shard_degree = 2"))
    assert code == 1 and found["interleaved-rounds"] == "error"
    (text,) = messages(doc, "interleaved-rounds")
    assert text.endswith("use 10 (local_batch_size 10 with pipeline_parallel_microbatch_size 1)")


# --- 5. one expert-parallel mistake, torchtitan's errors only ------------------------


def test_ep_mistake_reads_as_torchtitans_errors(tmp_path: Path) -> None:
    code, found, doc = titan(tmp_path, name="qwen3", flavor="30B-A3B", local=1, seq=4096,
                             parallel="expert_parallel_degree = 3")
    assert code == 1
    assert found == {**{k: v for k, v in found.items() if v != "error"},
                     "torchtitan-ep-mesh": "error", "moe-experts-ep": "error"}
    texts = [f["message"] for f in doc["findings"] if f["severity"] == "error"]
    assert not any("megatron" in t.lower() for t in texts), texts
    assert ("each rank holds experts / ep of them (torchtitan's ExpertParallel splits the "
            "experts evenly over ep") in messages(doc, "moe-experts-ep")[0]


# --- 3. the attention torchtitan's flavors run ----------------------------------------


def test_deepseek_v3_flex_attention_is_said_and_refused_with_cp(tmp_path: Path) -> None:
    dsv3 = {"name": "deepseek_v3", "flavor": "671B", "local": 1, "seq": 4096, "gpus": 256}
    code, found, doc = titan(tmp_path, parallel="pipeline_parallel_degree = 8\n"
                             "expert_parallel_degree = 32", **dsv3)  # type: ignore[arg-type]
    assert found["torchtitan-flex-attention"] == "warning"
    (text,) = messages(doc, "torchtitan-flex-attention")
    assert "pptune has no FlexAttention rate and prices it as flash attention (SDPA)" in text
    code, found, doc = titan(tmp_path, parallel="pipeline_parallel_degree = 8\n"
                             "expert_parallel_degree = 32\ncontext_parallel_degree = 2",
                             **dsv3)  # type: ignore[arg-type]
    assert code == 1 and found["torchtitan-cp-attention"] == "error"
    assert "costs-unavailable" not in found  # torchtitan's reason, not pptune's
    assert ("torchtitan raises 'Context Parallel only supports SDPA attention. Got "
            "attn_type='flex'.") in messages(doc, "torchtitan-cp-attention")[0]


def test_sdpa_flavors_get_no_flex_warning(tmp_path: Path) -> None:
    for name, flavor in (("llama3", "8B"), ("qwen3", "30B-A3B")):
        _, found, _ = titan(tmp_path, name=name, flavor=flavor, local=1, seq=4096)
        assert "torchtitan-flex-attention" not in found, (name, found)
    _, found, _ = titan(tmp_path, name="llama3", flavor="8B_flex", local=1, seq=4096,
                        parallel="context_parallel_degree = 2")  # llama3 runs flex with CP
    assert "torchtitan-cp-attention" not in found and "torchtitan-flex-attention" in found


def test_emit_names_flex_attention_for_deepseek_v3() -> None:
    from pptune.frameworks.torchtitan.attention import attn_type

    assert [attn_type("deepseek_v3", f) for f in ("16B", "236B", "671B", "debugmodel")] == [
        "flex", "flex", "flex", "sdpa"]
    assert attn_type("qwen3", "235B-A22B") == "sdpa" and attn_type("gpt_oss", "120b") == "flex"


# --- 7. the memory hint in torchtitan's settings ------------------------------------


def test_memory_hint_offers_context_parallelism_and_not_what_the_file_does(tmp_path: Path
                                                                           ) -> None:
    code, found, doc = titan(tmp_path, name="llama3", flavor="70B", local=4, seq=131072,
                             parallel="pipeline_parallel_degree = 4",
                             tables='[activation_checkpoint]\nmode = "full"\n', gpus=64)
    assert code == 1 and found["memory-overflow"] == "error"
    text = messages(doc, "memory-overflow")[0]
    assert text.endswith("use more pipeline stages (pipeline_parallel_degree), FSDP over more "
                         "ranks (data_parallel_shard_degree) or context parallelism over more "
                         "ranks (context_parallel_degree)")


def test_a_real_pre_0_1_job_file_reads_with_warnings_only(tmp_path: Path) -> None:
    """The H200 job's file (tests/data/logs) has [model] norm_type and [training]
    batch_size, keys of the layout before 0.1.0 (which dropped unknown keys unsaid)."""
    text = (DATA.parent / "logs" / "torchtitan_h200_llama3_8b.toml").read_text()
    _, found, doc = check_file(tmp_path / "job.toml", text, "--gpus", "8", "--gpu", "h200")
    assert "torchtitan-unknown-key" not in found and found["torchtitan-older-key"] == "warning"
    assert "[model] norm_type" in doc["ignored"]
