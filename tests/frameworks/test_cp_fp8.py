"""Context parallelism and FP8 in the frameworks' files: read, checked by each
framework's own rules, and priced at the layout the file states.

The Megatron-LM scripts follow NVIDIA's Llama 3.1 8B pretraining recipe
(megatron-bridge / NeMo llama31_8b: TP1 PP1 CP2, sequence 8192, micro-batch 1,
global batch 128, FP8 hybrid with the distributed optimizer), written as
Megatron-LM flags; the torchtitan jobs follow torchtitan 0.2.2's
``torchtitan/models/llama3/train_configs/llama3_8b.toml`` with its
``[parallelism]`` keys and the float8 settings of its docs/float8.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from tests.check_json import check_file

runner = CliRunner()

RECIPE = (
    "#!/bin/bash\n"
    "export CUDA_DEVICE_MAX_CONNECTIONS=1\n"
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --context-parallel-size {cp} {cp_flags} \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\\n"
    "  --group-query-attention --num-query-groups 8 --swiglu --seq-length {seq} \\\n"
    "  --max-position-embeddings {seq} \\\n"
    "  --micro-batch-size 1 --global-batch-size 128 --bf16 --use-distributed-optimizer \\\n"
    "  {fp8}\n"
)
FP8 = "--fp8-format hybrid --fp8-recipe tensorwise --fp8-param-gather"


def check(tmp_path: Path, name: str, text: str, *flags: str) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / name, text, *flags)


def mega(tmp_path: Path, *, cp: int = 2, cp_flags: str = "", seq: int = 8192, fp8: str = FP8,
         gpu: str = "h100-sxm") -> tuple[int, dict[str, str], dict]:
    text = RECIPE.format(cp=cp, cp_flags=cp_flags, seq=seq, fp8=fp8)
    return check(tmp_path, "run.sh", text, "--gpu", gpu)


# --- Megatron-LM (core_r0.16 / megatron-core 0.16.1) ----------------------------------


def test_megatron_recipe_reads_cp_and_fp8_and_prices_that_key(tmp_path: Path) -> None:
    code, _, doc = mega(tmp_path)
    cfg = doc["config"]
    assert code == 0, doc["findings"]
    assert (cfg["cp"], cfg["cp_comm"], cfg["precision"], cfg["fp8_recipe"],
            cfg["fp8_param_gather"]) == (2, "p2p", "fp8", "tensorwise", True)
    assert doc["derived"]["cost_key"] == "tp1 cp2 fp8"
    _, _, bf16 = mega(tmp_path, fp8="")
    assert bf16["config"]["precision"] == "bf16"
    assert bf16["derived"]["cost_key"] == "tp1 cp2 bf16"
    # FP8 GEMMs run at the FP8 peak: the same job is faster than in BF16
    assert doc["derived"]["step_time_s"] < bf16["derived"]["step_time_s"]


def test_megatron_cp_comm_types_and_their_spellings(tmp_path: Path) -> None:
    for flags, comm in (("--cp-comm-type a2a", "a2a"), ("--cp-comm-type all_gather", "all-gather"),
                        ("--cp-comm-type=p2p", "p2p")):
        code, _, doc = mega(tmp_path, cp_flags=flags)
        assert (code, doc["config"]["cp_comm"]) == (0, comm), (flags, doc["findings"])
    code, _, doc = mega(tmp_path, cp_flags="--cp-comm-type allgather")
    assert doc["config"]["cp_comm"] == "all-gather"
    assert any("allgather read as all_gather" in n for n in doc["notes"])
    code, found, _ = mega(tmp_path, cp_flags="--cp-comm-type ring")
    assert found["megatron-cp-comm-type"] == "error" and code == 1


def test_megatron_per_layer_cp_comm_type(tmp_path: Path) -> None:
    types = " ".join(["a2a"] * 20 + ["p2p"] * 12)
    code, found, doc = mega(tmp_path, cp_flags=f"--cp-comm-type {types}")
    assert doc["config"]["cp_comm"] == "a2a"  # the most common of the 32 layers
    assert found["megatron-unmodelled-flag"] == "warning" and code == 0
    code, found, _ = mega(tmp_path, cp_flags="--cp-comm-type p2p a2a")
    assert found["megatron-cp-comm-type"] == "error"  # 2 types for 32 layers


def test_megatron_hierarchical_cp_needs_its_sizes(tmp_path: Path) -> None:
    code, found, _ = mega(tmp_path, cp=4, cp_flags="--cp-comm-type a2a+p2p")
    assert found["megatron-cp-hierarchical"] == "error" and code == 1
    code, found, _ = mega(tmp_path, cp=4, cp_flags="--cp-comm-type a2a+p2p "
                          "--hierarchical-context-parallel-sizes 2 4")
    assert found["megatron-cp-hierarchical"] == "error"  # 2 x 4 != cp 4
    code, found, doc = mega(tmp_path, cp=4, cp_flags="--cp-comm-type a2a+p2p "
                            "--hierarchical-context-parallel-sizes 2 2")
    assert code == 0 and doc["config"]["cp_comm"] == "a2a+p2p", doc["findings"]


def test_megatron_sequence_not_divisible_by_2cp_is_one_finding(tmp_path: Path) -> None:
    code, _, doc = mega(tmp_path, seq=8190)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and [f["id"] for f in errors] == ["megatron-cp-seq"]
    assert "multiple of 4" in errors[0]["message"]


def test_megatron_sequence_parallelism_needs_tp_to_divide_a_cp_ranks_tokens(
        tmp_path: Path) -> None:
    """32,776 tokens over cp 4: 8,194 a rank (2 x 4 divides the sequence), which
    --sequence-parallel scatters over tp 4: 8,194 % 4 = 2, megatron-core's
    _split_along_first_dim asserts. lcm(2 x 4, 4 x 4) = 16: 32,768 runs."""
    def run(seq: int, sp: str = "--sequence-parallel") -> tuple[int, dict[str, str], dict]:
        text = RECIPE.format(cp=4, cp_flags=sp, seq=seq, fp8="").replace(
            "--tensor-model-parallel-size 1", "--tensor-model-parallel-size 4").replace(
            "--nnodes 1", "--nnodes 2")  # tp 4 x cp 4: 16 GPUs
        return check(tmp_path, "run.sh", text, "--gpu", "h100-sxm")
    code, _, doc = run(32776)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and [f["id"] for f in errors] == ["megatron-sp-seq"]
    assert "8194 tokens are split over the 4 tensor-parallel ranks" in errors[0]["message"]
    assert "multiple of 16" in errors[0]["message"]
    code, found, _ = run(32768)
    assert "megatron-sp-seq" not in found and code == 0
    code, found, _ = run(32776, sp="")  # without sequence parallelism nothing is split
    assert "megatron-sp-seq" not in found and code == 0


def test_megatron_cp_and_fp8_need_transformer_engine(tmp_path: Path) -> None:
    code, found, _ = mega(tmp_path, cp_flags="--transformer-impl local")
    assert code == 1 and found["megatron-cp-attention"] == "error"
    assert found["megatron-fp8-te"] == "error"


def test_megatron_a2a_needs_heads_divisible_by_cp(tmp_path: Path) -> None:
    # 8 query groups cannot be split over 16 ranks (8192 tokens: 2 x 16 divides them)
    code, found, _ = mega(tmp_path, cp=16, cp_flags="--cp-comm-type a2a", fp8="")
    assert found["megatron-cp-a2a-heads"] == "error" and code == 1


def test_megatron_fp8_param_gather_rules(tmp_path: Path) -> None:
    text = RECIPE.format(cp=2, cp_flags="", seq=8192, fp8=FP8).replace(
        "--use-distributed-optimizer", "")
    code, found, _ = check(tmp_path, "a.sh", text, "--gpu", "h100-sxm")
    assert found["megatron-fp8-param-gather"] == "error"
    code, found, doc = mega(tmp_path, fp8="--fp8-param-gather")
    assert code == 1 and found["megatron-fp8-param-gather"] == "error"
    assert doc["config"]["precision"] == "bf16"


def test_delayed_scaling_pays_its_amax_reductions(tmp_path: Path) -> None:
    # the recipe's 8 GPUs, cp 2 x dp 4: delayed scaling reduces its amaxes over all 8
    # after each forward and backward (costmodel/amax.py); tensorwise scales locally
    _, _, tensorwise = mega(tmp_path)
    _, _, delayed = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe delayed "
                                       "--fp8-param-gather")
    _, _, default = mega(tmp_path, fp8="--fp8-format hybrid --fp8-param-gather")
    assert delayed["config"]["fp8_recipe"] == default["config"]["fp8_recipe"] == "delayed"
    step = {name: d["derived"]["step_time_s"] for name, d in
            (("tensorwise", tensorwise), ("delayed", delayed), ("default", default))}
    assert step["tensorwise"] < step["delayed"] == step["default"]


def test_megatron_recipes_map_to_precisions(tmp_path: Path) -> None:
    code, _, doc = mega(tmp_path, fp8="--fp8-format e4m3")
    assert (doc["config"]["precision"], doc["config"]["fp8_recipe"]) == ("fp8", "delayed")
    code, found, doc = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe mxfp8", gpu="b200")
    assert code == 0 and doc["derived"]["cost_key"] == "tp1 cp2 mxfp8", doc["findings"]
    code, found, _ = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe custom")
    assert found["megatron-unmodelled-flag"] == "warning"


def test_fp8_on_a_gpu_without_it_is_one_error(tmp_path: Path) -> None:
    code, found, doc = mega(tmp_path, gpu="a100-80gb")
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and [f["id"] for f in errors] == ["precision-gpu"]
    assert "a100-80gb has no FP8" in errors[0]["message"]
    code, found, _ = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe mxfp8")
    assert found["precision-gpu"] == "error"  # microscaling FP8 is Blackwell's


def test_megatron_bad_fp8_format_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "run.sh"
    path.write_text(RECIPE.format(cp=2, cp_flags="", seq=8192, fp8="--fp8-format e5m2"))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2
    assert r.stderr.strip().count("\n") == 0 and "--fp8-format 'e5m2'" in r.stderr
    path.write_text(RECIPE.format(cp=2, cp_flags="--hierarchical-context-parallel-sizes x 2",
                                  seq=8192, fp8=""))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and "--hierarchical-context-parallel-sizes" in r.stderr


# --- torchtitan 0.2.2 ----------------------------------------------------------------

TITAN = """\
[model]
name = "llama3"
flavor = "8B"
{converters}

[training]
local_batch_size = 1
seq_len = {seq}

[activation_checkpoint]
mode = "none"

[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
context_parallel_degree = {cp}
{rotate}
{tables}
"""


def titan(tmp_path: Path, *, cp: int = 2, rotate: str = "", seq: int = 8192,
          converters: str = "", tables: str = "", gpu: str = "h100-sxm", flags: tuple[str, ...] = ()
          ) -> tuple[int, dict[str, str], dict]:
    text = TITAN.format(cp=cp, rotate=rotate, seq=seq, converters=converters, tables=tables)
    return check(tmp_path, "job.toml", text, "--gpus", "8", "--gpu", gpu, *flags)


def test_torchtitan_rotate_methods(tmp_path: Path) -> None:
    code, _, doc = titan(tmp_path)
    assert (code, doc["config"]["cp_comm"]) == (0, "all-gather")  # torchtitan's default
    assert doc["derived"]["cost_key"] == "tp1 cp2 bf16"
    code, _, doc = titan(tmp_path, rotate='context_parallel_rotate_method = "alltoall"')
    assert doc["config"]["cp_comm"] == "p2p"  # torch's ring of all-to-all shifts
    code, found, _ = titan(tmp_path, rotate='context_parallel_rotate_method = "ring"')
    assert found["torchtitan-cp-rotate"] == "error"


def test_torchtitan_sequence_divisible_by_tp_times_2cp(tmp_path: Path) -> None:
    code, _, doc = titan(tmp_path, cp=4, seq=8196)
    errors = [f["id"] for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and errors == ["torchtitan-cp-seq"]


def test_torchtitan_sequence_divisor_holds_without_cp_too(tmp_path: Path) -> None:
    """parallel_dims.py seq_len_divisor is tp x 2 x cp at every size: an odd sequence
    is refused at cp 1 as well."""
    code, _, doc = titan(tmp_path, cp=1, seq=8191)
    errors = [f for f in doc["findings"] if f["severity"] == "error"]
    assert code == 1 and [f["id"] for f in errors] == ["torchtitan-cp-seq"]
    assert "use a multiple of 2" in errors[0]["message"]


def test_torchtitan_shards_over_the_cp_ranks_too(tmp_path: Path) -> None:
    # parallel_dims.py: fsdp_enabled = dp_shard_enabled or cp_enabled; 8 GPUs at cp 8
    # leave a shard degree of 1, and FSDP still shards over the 8 cp ranks
    _, _, doc = titan(tmp_path, cp=8)
    assert (doc["config"]["dp"], doc["config"]["sharding"]) == (1, "fsdp")
    _, _, doc = titan(tmp_path, cp=8, rotate="data_parallel_replicate_degree = 1")
    assert doc["config"]["sharding"] == "fsdp"


FLOAT8 = 'converters = ["quantize.linear.float8"]'


def test_torchtitan_float8_with_fsdp_all_gather(tmp_path: Path) -> None:
    tables = ("[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"
              "precompute_float8_dynamic_scale_for_fsdp = true\n")
    code, _, doc = titan(tmp_path, converters=FLOAT8, tables=tables)
    cfg = doc["config"]
    assert code == 0, doc["findings"]
    assert (cfg["precision"], cfg["fp8_recipe"], cfg["fp8_param_gather"], cfg["sharding"]) == (
        "fp8", "tensorwise", True, "fsdp")
    assert doc["derived"]["cost_key"] == "tp1 cp2 fp8"
    assert not any("ignored tables" in n for n in doc["notes"])


def test_torchtitan_float8_of_the_lm_head_is_said(tmp_path: Path) -> None:
    """Float8LinearConverter converts every linear filter_fqns does not name (default []):
    without "output" torchtitan runs the LM head in float8, which pptune prices in BF16."""
    _, found, _ = titan(tmp_path, converters=FLOAT8, tables="[quantize.linear.float8]\n")
    assert found["torchtitan-unmodelled"] == "warning"
    _, found, _ = titan(tmp_path, converters=FLOAT8,
                        tables='[quantize.linear.float8]\nfilter_fqns = ["output"]\n')
    assert "torchtitan-unmodelled" not in found


def test_torchtitan_float8_rules(tmp_path: Path) -> None:
    rowwise = ('[quantize.linear.float8]\nrecipe_name = "rowwise"\n'
               "enable_fsdp_float8_all_gather = true\n")
    code, found, _ = titan(tmp_path, converters=FLOAT8, tables=rowwise)
    assert found["torchtitan-float8-all-gather"] == "error"
    code, found, _ = titan(tmp_path, converters=FLOAT8,
                           tables='[quantize.linear.float8]\nrecipe_name = "blockwise"\n')
    assert found["torchtitan-float8-recipe"] == "error"
    code, found, doc = titan(tmp_path, converters=FLOAT8,
                             tables="[quantize.linear.float8]\nemulate = true\n")
    assert found["torchtitan-unmodelled"] == "warning" and doc["config"]["precision"] != "fp8"
    code, found, _ = titan(tmp_path, converters=FLOAT8, gpu="a100-80gb")
    assert code == 1 and found["precision-gpu"] == "error"


def test_torchtitan_mx_and_older_float8_converters(tmp_path: Path) -> None:
    code, _, doc = titan(tmp_path, converters='converters = ["quantize.linear.mx"]', gpu="b200")
    assert (doc["config"]["precision"], doc["config"]["fp8_recipe"]) == ("mxfp8", "mxfp8_cublas")
    code, _, doc = titan(tmp_path, converters='converters = ["float8"]',
                         tables="[float8]\nenable_fsdp_float8_all_gather = true\n",
                         flags=("--framework-version", "torchtitan=0.1.0"))
    assert (doc["config"]["precision"], doc["config"]["fp8_param_gather"]) == ("fp8", True)
    code, _, doc = titan(tmp_path, converters='converters = "quantize.linear.float8"')
    assert code == 0 and doc["config"]["precision"] == "fp8"  # the command line's comma-separated form


def test_torchtitan_refuses_converters_its_release_does_not_register(tmp_path: Path) -> None:
    """torchtitan 0.2 renamed float8 to quantize.linear.float8; an unregistered name raises
    KeyError in ModelConvertersContainer (its own llama3_405b.toml of 2026-02 names float8
    with a [quantize.linear.float8] table)."""
    tables = "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"
    code, found, doc = titan(tmp_path, converters='converters = ["float8"]', tables=tables)
    assert code == 1 and found["torchtitan-converter"] == "error"
    message = next(f["message"] for f in doc["findings"] if f["id"] == "torchtitan-converter")
    assert "torchtitan 0.2 renamed it quantize.linear.float8" in message
    code, found, _ = titan(tmp_path, converters='converters = ["bogus"]')
    assert code == 1 and found["torchtitan-converter"] == "error"
    code, found, _ = titan(tmp_path, converters='converters = ["quantize.linear.mx"]',
                           flags=("--framework-version", "torchtitan=0.1.0"))
    assert found["torchtitan-converter"] == "error"  # 0.1 registers float8 and mx


def test_torchtitan_float8_holds_what_bf16_holds(tmp_path: Path) -> None:
    """torchao's float8 keeps no FP8 weight copies and saves BF16 inputs (precision.py):
    the peak memory of a float8 file is its BF16 twin's; compiled, the step is faster, and
    not compiled, its casts run eager, op by op: slower than BF16 (compiled or not)."""
    compiled = "[compile]\nenable = true\n"
    _, _, bf16 = titan(tmp_path, tables=compiled)
    _, _, eager_bf16 = titan(tmp_path)
    for tables in ("", "[quantize.linear.float8]\nenable_fsdp_float8_all_gather = true\n"):
        code, _, fp8 = titan(tmp_path, converters=FLOAT8, tables=tables + compiled)
        assert code == 0 and fp8["config"]["fp8_kernels"] == "torchao"
        assert fp8["derived"]["peak_memory_bytes"] == bf16["derived"]["peak_memory_bytes"]
        assert fp8["derived"]["step_time_s"] < bf16["derived"]["step_time_s"]
        _, _, eager = titan(tmp_path, converters=FLOAT8, tables=tables)
        assert eager["config"]["fp8_casts"] == "eager"
        assert eager["derived"]["step_time_s"] > eager_bf16["derived"]["step_time_s"]


# --- DeepSpeed 0.19.8: Ulysses sequence parallelism, no FP8 key -----------------------


def test_deepspeed_ulysses_is_cp_with_the_all_to_all(tmp_path: Path) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
              "sequence_parallel_size": 4, "bf16": {"enabled": True},
              "zero_optimization": {"stage": 1}}
    code, found, doc = check(tmp_path, "ds.json", json.dumps(config), "--gpus", "16",
                             "--model", "llama3-8b", "--gpu", "h100-sxm")
    assert code == 0, doc["findings"]
    assert (doc["config"]["cp"], doc["config"]["cp_comm"]) == (4, "a2a")
    # dp = 16 / sp 4; GA = 64 // 1 // dp
    assert (doc["derived"]["dp"], doc["derived"]["grad_accum_steps"]) == (4, 16)
    assert doc["derived"]["cost_key"] == "tp1 cp4 bf16"
    # DeepSpeed's attention is the model code's (flash, Hugging Face's SDPA, unless the
    # file says eager): fused, as context parallelism is priced
    assert "cp-attention" not in found
    eager = {**config, "pptune": {"attention": "eager"}}
    code, found, doc = check(tmp_path, "ds.json", json.dumps(eager), "--gpus", "16",
                             "--model", "llama3-8b", "--gpu", "h100-sxm")
    assert found["cp-attention"] == "warning"
    piped = {**config, "pipeline": {"stages": 2}}
    code, found, doc = check(tmp_path, "ds.json", json.dumps(piped), "--gpus", "16",
                             "--model", "llama3-8b", "--gpu", "h100-sxm")
    assert found["deepspeed-unmodelled"] == "warning" and doc["config"]["cp"] == 1


def test_megatron_tp_pp_dp_mapping_with_cp_and_a_pipeline_is_refused(tmp_path: Path) -> None:
    """megatron-core's initialize_model_parallel (parallel_state.py): without pp-last
    ordering the dense and expert data-parallel sizes must agree, and the expert groups
    hold no cp (found by `make peers` on an emitted script)."""
    text = RECIPE.format(cp=2, cp_flags="--pipeline-model-parallel-size 2 "
                         "--use-tp-pp-dp-mapping", seq=8192, fp8="")
    text = text.replace("--pipeline-model-parallel-size 1 ", "")
    code, found, _ = check(tmp_path, "run.sh", text, "--gpu", "h100-sxm")
    assert code == 1 and found["megatron-cp-rank-order"] == "error"
    code, found, _ = check(tmp_path, "run.sh", text.replace("--use-tp-pp-dp-mapping", ""),
                           "--gpu", "h100-sxm")
    assert "megatron-cp-rank-order" not in found
    # the expert groups' dp is world / (etp x pp): at etp = tp 1 x cp 2 it is the dense
    # world / (tp x cp x pp), and megatron-core asserts nothing (Megatron-LM's functional
    # test gpt3_mcore_te_tp2_pp2_cp2_etp4_dp_last runs tp 2, cp 2, etp 4 so)
    code, found, _ = check(tmp_path, "run.sh", text.replace(
        "--use-tp-pp-dp-mapping", "--use-tp-pp-dp-mapping --expert-tensor-parallel-size 2"),
        "--gpu", "h100-sxm")
    assert "megatron-cp-rank-order" not in found
    code, found, _ = check_file(tmp_path / "run.sh", text.replace(
        "--use-tp-pp-dp-mapping", "--use-tp-pp-dp-mapping --expert-tensor-parallel-size 4"),
        "--gpu", "h100-sxm", by="message")
    assert "= 2/4" in found["megatron-cp-rank-order"]


OWN = ("model: llama3-8b\ngpus: 8\ntp: 1\ncp: 2\nprecision: fp8\n{recipe}pp: 1\ndp: 4\n"
       "schedule: 1f1b\nmicro_batch_size: 1\nglobal_batch: 128\nsharding: zero1\n")


def test_pptune_format_prices_its_fp8_recipe_and_refuses_others(tmp_path: Path) -> None:
    _, _, delayed = check(tmp_path, "d.yaml", OWN.format(recipe=""), "--gpu", "h100-sxm")
    _, _, tensorwise = check(tmp_path, "t.yaml", OWN.format(recipe="fp8_recipe: tensorwise\n"),
                             "--gpu", "h100-sxm")
    assert tensorwise["derived"]["step_time_s"] < delayed["derived"]["step_time_s"]
    path = tmp_path / "bad.yaml"
    path.write_text(OWN.format(recipe="fp8_recipe: current\n"))
    r = runner.invoke(app, ["check-config", str(path)])
    assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
    assert "fp8_recipe 'current'" in r.stderr and "delayed, tensorwise" in r.stderr


def test_megatron_cuda_graphs_are_named_as_not_modelled(tmp_path: Path) -> None:
    """megatron-core's --cuda-graph-impl (and its older --enable-cuda-graph /
    --external-cuda-graph) is read, not ignored: one warning names it, the prediction
    is the eager one, and --cuda-graph-impl none says nothing."""
    _, _, eager = mega(tmp_path)
    for flags in ("--cuda-graph-impl local --cuda-graph-scope attn mlp",
                  "--enable-cuda-graph", "--external-cuda-graph --cuda-graph-warmup-steps 3"):
        code, found, doc = mega(tmp_path, cp_flags=flags)
        assert found["megatron-unmodelled-flag"] == "warning" and code == 0, flags
        said = [f["message"] for f in doc["findings"] if f["id"] == "megatron-unmodelled-flag"]
        assert said == [f"{flags.split(' --')[0]}: CUDA graphs are not modelled; pptune "
                        "prices the kernels as eager PyTorch launches them, one launch gap "
                        "each (the GPU preset's launch_s), not replayed from a captured graph"]
        assert not any("cuda-graph" in n for n in doc["notes"])  # read, not "ignored"
        assert doc["derived"]["step_time_s"] == eager["derived"]["step_time_s"]
    _, found, _ = mega(tmp_path, cp_flags="--cuda-graph-impl none")
    assert "megatron-unmodelled-flag" not in found


def test_an_fp32_script_is_priced_as_bf16_and_says_so(tmp_path: Path) -> None:
    """Megatron-LM without --bf16 or --fp16 trains in FP32: pptune prices BF16 GEMMs,
    and one warning says so, with the fix; the step is the BF16 script's."""
    _, _, bf16 = mega(tmp_path, fp8="")
    text = RECIPE.format(cp=2, cp_flags="", seq=8192, fp8="").replace("--bf16 ", "")
    code, found, doc = check(tmp_path, "fp32.sh", text, "--gpu", "h100-sxm")
    assert (code, doc["config"]["precision"], found["precision-fp32"]) == (0, "fp32", "warning")
    assert doc["derived"]["step_time_s"] == bf16["derived"]["step_time_s"]
    assert "precision-fp32" not in mega(tmp_path, fp8="")[1]


def test_megatron_grad_reduce_in_bf16_halves_the_gradient_buffer(tmp_path: Path) -> None:
    """validate_args: under --bf16, --grad-reduce-in-bf16 turns
    accumulate_allreduce_grads_in_fp32 off, so DDP's gradient buffer is BF16: 2 bytes a
    parameter held and reduced, 2 fewer than the FP32 buffer. The distributed optimizer
    does not shard the buffer: 2 bytes x 8.03e9 parameters = 16.1 GB less a GPU."""
    _, _, fp32 = mega(tmp_path)
    code, _, bf16 = mega(tmp_path, cp_flags="--grad-reduce-in-bf16")
    assert code == 0 and bf16["config"]["main_grads_dtype"] == "bf16"
    assert fp32["config"]["main_grads_dtype"] is None
    saved = max(fp32["derived"]["peak_memory_bytes"]) - max(bf16["derived"]["peak_memory_bytes"])
    assert saved == pytest.approx(2 * 8.03e9, rel=0.01)


def test_megatron_fp16_keeps_fp16_gradients_unless_accumulated_in_fp32(
        tmp_path: Path) -> None:
    """validate_args turns accumulate_allreduce_grads_in_fp32 on only under --bf16: under
    --fp16 DDP's gradient buffer takes the parameters' dtype, FP16, 2 bytes a parameter
    (8.03e9 parameters: 16.1 GB less a GPU than FP32, as --grad-reduce-in-bf16 saves under
    --bf16), and --accumulate-allreduce-grads-in-fp32 keeps it FP32."""
    def fp16(flags: str) -> dict:
        text = RECIPE.format(cp=2, cp_flags=flags, seq=8192, fp8="").replace("--bf16 ", "--fp16 ")
        code, _, doc = check(tmp_path, "fp16.sh", text, "--gpu", "h100-sxm")
        assert code == 0 and doc["config"]["precision"] == "fp16", doc["findings"]
        return doc
    _, _, bf16 = mega(tmp_path, fp8="")
    held, wide = fp16(""), fp16("--accumulate-allreduce-grads-in-fp32")
    assert held["config"]["main_grads_dtype"] == "fp16"
    assert wide["config"]["main_grads_dtype"] is None
    saved = max(wide["derived"]["peak_memory_bytes"]) - max(held["derived"]["peak_memory_bytes"])
    assert saved == pytest.approx(2 * 8.03e9, rel=0.01)
    assert max(wide["derived"]["peak_memory_bytes"]) == max(bf16["derived"]["peak_memory_bytes"])


def test_a_pptune_file_states_torchao_float8(tmp_path: Path) -> None:
    """recommend --fp8-kernels torchao --emit pptune writes fp8_kernels, and check-config
    of the file prices the plan's memory and step as recommend did."""
    from pptune.frameworks.registry import Framework
    from pptune.plan.emit import emit, write
    from pptune.plan.recommend import RecommendSpec, recommend
    run = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm",
                                     precision="fp8", fp8_kernels="torchao", top=1))
    out = emit(Framework.PPTUNE, run)
    assert "fp8_kernels: torchao" in out.files["pptune.yaml"]
    write(out, tmp_path)
    _, _, doc = check(tmp_path, "pptune.yaml", (tmp_path / "pptune.yaml").read_text())
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    assert max(doc["derived"]["peak_memory_bytes"]) == pytest.approx(
        max(out.plan.peak_memory_bytes), rel=1e-9)


def test_megatron_blockwise_recipe_prices_its_scales_and_says_its_gemm_rate(
        tmp_path: Path) -> None:
    """--fp8-recipe blockwise: the same GEMMs as tensorwise, more memory (the FP8 inputs
    saved with a scale every 128 elements), and a note that its GEMM rate is
    tensorwise's (no published block-scaled throughput)."""
    tensorwise = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe tensorwise")[2]
    block = mega(tmp_path, fp8="--fp8-format hybrid --fp8-recipe blockwise")[2]
    assert block["config"]["fp8_recipe"] == "blockwise"
    said = [n for n in block["notes"] if n.startswith("--fp8-recipe blockwise: ")]
    assert len(said) == 1 and "priced at tensorwise FP8's GEMM rate" in said[0]
    assert not any("blockwise" in n for n in tensorwise["notes"])
    peak = max(block["derived"]["peak_memory_bytes"])
    assert peak > max(tensorwise["derived"]["peak_memory_bytes"])
    assert block["derived"]["step_time_s"] >= tensorwise["derived"]["step_time_s"]
