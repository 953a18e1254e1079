"""What a torchtitan user trial found check-config passing or saying wrongly: MXFP8 with
tensor parallelism compiled, async TP uncompiled, unknown models and flavors (each
torchtitan 0.2.2's own refusal), micro-batch fixes that keep the global batch, a
minimal job file's format, and the words of four messages."""

from __future__ import annotations

from pathlib import Path

from pptune.frameworks.read import read_config
from pptune.frameworks.registry import Framework
from tests.check_json import check_file

JOB = """\
[model]
name = "{name}"
flavor = "{flavor}"
{model}
[training]
local_batch_size = {local}
global_batch_size = {global_batch}
seq_len = 8192
{training}
[parallelism]
data_parallel_shard_degree = {shard}
tensor_parallel_degree = {tp}
pipeline_parallel_degree = {pp}
pipeline_parallel_schedule = "{schedule}"
pipeline_parallel_microbatch_size = 1
{parallel}
[compile]
enable = true
components = {components}
{tables}
"""
MX = 'converters = ["quantize.linear.mx"]'


def job(tmp_path: Path, *flags: str, name: str = "llama3", flavor: str = "70B",
        model: str = "", local: int = 32, global_batch: int = 512, training: str = "",
        shard: int = 4, tp: int = 4, pp: int = 4, schedule: str = "Interleaved1F1B",
        parallel: str = "", components: str = '["model", "loss"]', tables: str = "",
        gpu: str = "b200") -> tuple[int, dict[str, str], dict]:
    text = JOB.format(name=name, flavor=flavor, model=model, local=local,
                      global_batch=global_batch, training=training, shard=shard, tp=tp, pp=pp,
                      schedule=schedule, parallel=parallel, components=components,
                      tables=tables)
    return check_file(tmp_path / "job.toml", text, "--gpu", gpu, *flags)


def messages(doc: dict, rule: str) -> list[str]:
    return [f["message"] for f in doc["findings"] if f["id"] == rule]


# --- 1. MXFP8 linears, tensor parallelism and a compiled model ----------------------


def test_mxfp8_with_tp_and_the_model_compiled_is_torchtitans_assert(tmp_path: Path) -> None:
    """torchtitan 0.2.0 - 0.2.2 components/quantization/mx.py MXLinearConverter: assert not
    (compile.enable and "model" in components and tensor_parallel_degree > 1)."""
    code, found, doc = job(tmp_path, model=MX)
    assert code == 1 and found["torchtitan-mx-tp-compile"] == "error"
    assert messages(doc, "torchtitan-mx-tp-compile") == [
        'quantize.linear.mx with tensor_parallel_degree 4 and the model compiled ([compile] '
        'enable with "model" in components): torchtitan 0.2.2 asserts \'TP not yet supported '
        "with torch.compile for mxfp8' (torchtitan/components/quantization/mx.py "
        'MXLinearConverter); drop "model" from [compile] components (the MXFP8 casts then '
        "run eager) or use tensor_parallel_degree 1"]
    # main after 0.2.2 dropped the assert (PR #2520)
    _, found, _ = job(tmp_path, "--framework-version", "torchtitan=0.3.0", model=MX)
    assert "torchtitan-mx-tp-compile" not in found


def test_mxfp8_runs_with_tp_1_or_the_model_uncompiled(tmp_path: Path) -> None:
    _, found, _ = job(tmp_path, model=MX, tp=1, shard=16)
    assert "torchtitan-mx-tp-compile" not in found
    code, found, doc = job(tmp_path, model=MX, components='["loss"]')
    assert code == 0 and "torchtitan-mx-tp-compile" not in found
    # the eager warning names the converter in use, and that compiling needs tp 1
    (text,) = messages(doc, "torchtitan-float8-eager")
    assert text.startswith("quantize.linear.mx with the model not compiled")
    assert "torchao's MXFP8 linears run eager" in text and "float8" not in text
    assert text.endswith("torchtitan refuses to compile the model with quantize.linear.mx "
                         "at tensor_parallel_degree 4 (torchtitan/components/quantization/"
                         "mx.py MXLinearConverter), so compiling needs tensor_parallel_degree 1")


# --- 2. async tensor parallelism without a compiled model ---------------------------


def test_async_tp_without_the_model_compiled_is_torchtitans_error(tmp_path: Path) -> None:
    """torchtitan 0.2.2 distributed/tensor_parallel.py maybe_enable_async_tp, called by
    llama3's parallelize where tp is above 1."""
    async_tp = "enable_async_tensor_parallel = true"
    code, found, doc = job(tmp_path, parallel=async_tp, components='["loss"]')
    assert code == 1 and found["torchtitan-async-tp"] == "error"
    assert messages(doc, "torchtitan-async-tp") == [
        "parallelism.enable_async_tensor_parallel with tensor_parallel_degree 4 and the "
        'model not compiled ([compile] enable with "model" in components): torchtitan raises '
        "'Async TP requires 'model' in --compile.components and --compile.enable' "
        "(torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp); compile the "
        "model or set enable_async_tensor_parallel = false"]
    _, found, _ = job(tmp_path, parallel=async_tp)  # the model compiled
    assert "torchtitan-async-tp" not in found
    _, found, _ = job(tmp_path, parallel=async_tp, components='["loss"]', tp=1, shard=16)
    assert "torchtitan-async-tp" not in found  # no TP mesh: maybe_enable_async_tp not called


def test_qwen3_says_its_own_async_tp_words(tmp_path: Path) -> None:
    """models/qwen3/infra/parallelize.py raises 'Async TP requires torch.compile'."""
    _, found, doc = job(tmp_path, name="qwen3", flavor="32B", pp=1, schedule="1F1B", tp=4,
                        shard=2, local=8, global_batch=16, components='["loss"]',
                        parallel="enable_async_tensor_parallel = true")
    assert found["torchtitan-async-tp"] == "error"
    (text,) = messages(doc, "torchtitan-async-tp")
    assert ("torchtitan raises 'Async TP requires torch.compile' "
            "(torchtitan/models/qwen3/infra/parallelize.py)") in text


# --- 3. a model or flavor torchtitan does not register ------------------------------


def test_unknown_flavor_is_torchtitans_key_error(tmp_path: Path) -> None:
    code, found, doc = job(tmp_path, flavor="700B")
    assert code == 1 and found["torchtitan-model"] == "error"
    assert messages(doc, "torchtitan-model") == [
        "model.flavor '700B': torchtitan 0.2.2's llama3 has no such flavor: train.py's "
        "train_spec.model_args[job_config.model.flavor] raises KeyError (its flavors, "
        "torchtitan/models/llama3/__init__.py: debugmodel, debugmodel_flex_attn, "
        "debugmodel_varlen_attn, 8B, 8B_flex, 8B_varlen, 70B, 405B); did you mean 70B?; a "
        "TrainSpec of your own is registered by the module [experimental] custom_import "
        "names (register_train_spec)"]
    # a dict key: the case matters
    _, found, doc = job(tmp_path, flavor="70b")
    assert found["torchtitan-model"] == "error"
    assert "did you mean 70B?" in messages(doc, "torchtitan-model")[0]


def test_unknown_model_name_is_torchtitans_error(tmp_path: Path) -> None:
    code, found, doc = job(tmp_path, name="llama3_1")
    assert code == 1 and found["torchtitan-model"] == "error"
    (text,) = messages(doc, "torchtitan-model")
    assert text.startswith(
        "model.name 'llama3_1': torchtitan 0.2.2 registers no such TrainSpec: "
        "torchtitan/protocols/train_spec.py get_train_spec raises 'TrainSpec llama3_1 is not "
        "registered.' (it registers deepseek_v3, flux, gpt_oss, llama3, llama3_ft, llama4, "
        "qwen3 and the experiments of torchtitan/experiments/__init__.py); did you mean "
        "llama3?")


def test_custom_import_makes_an_unknown_model_a_warning(tmp_path: Path) -> None:
    """train.py imports [experimental] custom_import before get_train_spec: it may
    register the name (register_train_spec), which pptune cannot see."""
    custom = '[experimental]\ncustom_import = "my.specs"\n'
    for name, flavor in (("llama3_1", "70B"), ("llama3", "700B")):
        code, found, doc = job(tmp_path, name=name, flavor=flavor, tables=custom)
        assert code == 0 and found["torchtitan-model"] == "warning"
        assert messages(doc, "torchtitan-model")[0].endswith(
            "[experimental] custom_import 'my.specs' may register it (pptune does not load it)")


def test_other_releases_keep_the_note(tmp_path: Path) -> None:
    """The flavor sets are 0.2.2's: other releases registered others."""
    code, found, _ = job(tmp_path, "--framework-version", "torchtitan=0.2.1", flavor="700B")
    assert code == 0 and "torchtitan-model" not in found


# --- 4. a micro-batch fix satisfies every batch rule at once -------------------------


def test_interleaved_fix_keeps_the_global_batch(tmp_path: Path) -> None:
    """pp 9, 128 micro-batches: torch's round count 128 // 9 = 14 does not divide 128. The
    global batch 512 = local x dp 4 x runs: a count must divide 128; of 1, 2, 4, 8, 16, 32,
    64, 128 the rule max(1, n // 9) | n takes 1 to 16 (32 // 9 = 3, 64 // 9 = 7,
    128 // 9 = 14 do not divide them): 16, run 8 times."""
    code, found, doc = job(tmp_path, local=128, tp=1, pp=9, parallel="context_parallel_degree = 2")
    assert code == 1 and found["interleaved-rounds"] == "error"
    assert messages(doc, "interleaved-rounds")[0].endswith(
        "use 16 (local_batch_size 16 with pipeline_parallel_microbatch_size 1; "
        "global_batch_size 512 then runs the pipeline 8 times a step)")
    # no multiple of 9 divides 128: aligning changes the global batch, said so, and in
    # the file's settings: local_batch_size 135, global_batch_size 512 / 128 x 135 = 540
    assert messages(doc, "ga-not-aligned") == [
        "micro-batches per pipeline run (128) are not a multiple of pp (9); 135 would align "
        "gradient accumulation to pipeline depth, with a global batch of micro-batch 1 x "
        "135 x dp 4; in the file: local_batch_size 135 with "
        "pipeline_parallel_microbatch_size 1, and global_batch_size 540"]
    code, found, doc = job(tmp_path, local=16, tp=1, pp=9, parallel="context_parallel_degree = 2")
    assert code == 0 and not [f for f in doc["findings"] if f["severity"] == "error"]
    assert doc["derived"]["microbatches"] == 16 and doc["derived"]["grad_accum_steps"] == 128


def test_1f1b_fix_keeps_or_names_the_global_batch(tmp_path: Path) -> None:
    """Schedule1F1B needs m >= pp 4. Local 2, dp 2, global 16: 4 runs of 2, 8 a step; 4
    divides 8 (2 runs). Global 4: 2 a step, no count >= 4 divides it: local 4 needs a
    global batch that is a multiple of 4 x dp 2 = 8."""
    _, found, doc = job(tmp_path, local=2, global_batch=16, shard=2, tp=1, schedule="1F1B")
    assert found["1f1b-m-lt-pp"] == "error"
    assert messages(doc, "1f1b-m-lt-pp")[0].endswith(
        "raise the micro-batches to >= 4 (local_batch_size 4 with "
        "pipeline_parallel_microbatch_size 1; global_batch_size 16 then runs the pipeline 2 "
        "times a step)")
    _, _, doc = job(tmp_path, local=2, global_batch=4, shard=2, tp=1, schedule="1F1B")
    assert messages(doc, "1f1b-m-lt-pp")[0].endswith(
        "raise the micro-batches to >= 4 (local_batch_size 4 with "
        "pipeline_parallel_microbatch_size 1, and global_batch_size 8: a multiple of "
        "local_batch_size x dp 2 = 8)")


def test_alignment_keeps_the_global_batch_where_a_multiple_divides_it(tmp_path: Path
                                                                      ) -> None:
    """pp 4, local 6, dp 2, global 24: 2 runs of 6, 12 a step; of the multiples of 4, 4 and
    12 divide 12, 4 the nearer to 6: 3 runs."""
    _, _, doc = job(tmp_path, local=6, global_batch=24, shard=2, tp=1, schedule="1F1B")
    assert messages(doc, "ga-not-aligned") == [
        "micro-batches per pipeline run (6) are not a multiple of pp (4); 4 would align "
        "gradient accumulation to pipeline depth, run 3 times a step (the global batch kept)"]


def test_no_warning_from_a_batch_already_in_error(tmp_path: Path) -> None:
    """local 32 is not a multiple of micro-batch 3: torchtitan's error, and no count of
    micro-batches (pptune took the local batch as one) to warn about."""
    text = JOB.format(name="llama3", flavor="70B", model="", local=32, global_batch=512,
                      training="", shard=4, tp=4, pp=4, schedule="Interleaved1F1B",
                      parallel="", components='["model", "loss"]', tables="").replace(
        "pipeline_parallel_microbatch_size = 1", "pipeline_parallel_microbatch_size = 3")
    code, found, doc = check_file(tmp_path / "job.toml", text, "--gpu", "b200")
    assert code == 1 and found["torchtitan-microbatch-size"] == "error"
    assert "ga-not-aligned" not in found and doc["derived"]["microbatches"] is None


# --- 5. a minimal job file is torchtitan's ------------------------------------------


def test_a_model_table_alone_is_read_as_torchtitan(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text('[model]\nname = "llama3"\nflavor = "70B"\n')
    read = read_config(path)
    assert read.format is Framework.TORCHTITAN and read.config.model == "llama3-70b"
    own = tmp_path / "own.toml"  # pptune's own TOML: its [limits] table is no JobConfig's
    own.write_text('model = "llama3-8b"\npp = 2\nmicro_batch_size = 1\nglobal_batch = 16\n'
                   "gpus = 8\n[limits]\nmax_bubble = 0.3\n")
    assert read_config(own).format is Framework.PPTUNE


# --- 6. messages in torchtitan's words ----------------------------------------------


def test_fp32_warning_names_torchtitans_setting(tmp_path: Path) -> None:
    _, found, doc = job(tmp_path, training='mixed_precision_param = "float32"')
    assert found["precision-fp32"] == "warning"
    (text,) = messages(doc, "precision-fp32")
    assert text.endswith('state bf16 (training.mixed_precision_param = "bfloat16") if that '
                         "is what runs") and "Megatron" not in text


def test_hsdp_note_says_hsdp(tmp_path: Path) -> None:
    _, _, doc = job(tmp_path, shard=2, parallel="data_parallel_replicate_degree = 2")
    assert ("HSDP (replicate 2 x shard 2: each replica shards the state over its ranks), "
            "reshard after forward off (fsdp_reshard_after_forward default, pp 4)") in doc["notes"]
    _, _, doc = job(tmp_path)
    assert ("FSDP full sharding, reshard after forward off (fsdp_reshard_after_forward "
            "default, pp 4)") in doc["notes"]


def test_main_after_0_2_2_is_not_called_a_release(tmp_path: Path) -> None:
    """pytorch/torchtitan has no v0.3.0 tag; "0.3.0" names its main branch after 0.2.2."""
    _, _, doc = job(tmp_path, "--framework-version", "torchtitan=0.3.0")
    (text,) = messages(doc, "torchtitan-toml")
    assert "after 0.2.2" in text and "no release has that yet" in text


def test_1f1b_with_fewer_micro_batches_than_stages_fails_at_any_gpu_count(
        tmp_path: Path) -> None:
    """torchtitan's micro-batches are local_batch_size // pipeline_parallel_microbatch_size
    (distributed/pipeline_parallel.py), a rank's own: no data-parallel size changes them,
    so Schedule1F1B's refusal of 1 < 4 is an error without --gpus too (a user trial: the
    shipped llama4_17bx128e.toml was a warning "at dp=1, assumed")."""
    for flags in ((), ("--gpus", "256")):
        code, found, doc = job(tmp_path, *flags, local=1, global_batch=-1, shard=-1,
                               schedule="1F1B")
        assert (code, found["1f1b-m-lt-pp"]) == (1, "error"), flags
        said = next(f["message"] for f in doc["findings"] if f["id"] == "1f1b-m-lt-pp")
        assert "assumed" not in said
