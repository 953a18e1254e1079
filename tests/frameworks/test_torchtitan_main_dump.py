"""torchtitan main's Trainer.Config dumps (``to_dict()``), read by main's rules.

The fixtures under tests/data/torchtitan_main/ are real dumps: torchtitan at
b5bcd76 (main, 2026-08-21), each config function called on the CPU with torch 2.13.0 and
``json.dump(f().to_dict())``, then trimmed (README.md there). Expected values are derived
by hand from main's torchtitan/trainer.py ``Trainer.__init__`` and
torchtitan/distributed/pipeline_parallel.py, as each test says.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pptune.costmodel.op_sac import OP_SAC
from pptune.errors import BadInput
from pptune.frameworks.read import ReadResult, read_config

DUMPS = Path(__file__).resolve().parents[1] / "data" / "torchtitan_main"
LLAMA3_8B = json.loads((DUMPS / "llama3_8b.json").read_text())


def read(tmp_path: Path, dump: dict[str, Any], gpus: int | None = 64, **kw: Any) -> ReadResult:
    path = tmp_path / "dump.json"
    path.write_text(json.dumps(dump))
    return read_config(path, gpus=gpus, **kw)


def edited(**sections: dict[str, Any]) -> dict[str, Any]:
    """llama3_8b's dump with the keys of ``sections`` replaced."""
    dump = copy.deepcopy(LLAMA3_8B)
    for name, values in sections.items():
        dump[name].update(values)
    return dump


def ids(result: ReadResult) -> dict[str, str]:
    return {f.id: f.message for f in result.semantics.findings}


def test_llama3_8b_as_dumped(tmp_path: Path) -> None:
    """llama3_8b (config_registry.py): 8192 tokens a micro-batch at context 8192, FSDP over
    the 64 GPUs (shard -1), SelectiveAC, flex attention: one sequence of 8192 a rank, one
    micro-batch a step, 64 sequences a step; the llama3 8B preset."""
    result = read(tmp_path, LLAMA3_8B)
    cfg = result.config
    assert (cfg.model, cfg.num_layers, cfg.pp, cfg.dp, cfg.tp) == ("llama3-8b", None, 1, 64, 1)
    assert (cfg.micro_batch_size, cfg.seq_len, cfg.grad_accum_steps, cfg.global_batch) == (
        1, 8192, 1, 64)
    assert (cfg.recompute, cfg.recompute_modules, cfg.sharding, cfg.zero_stage) == (
        "selective", [OP_SAC], "fsdp", 3)
    assert cfg.attention == "flash" and cfg.precision == "bf16" and result.format == "torchtitan"
    assert result.semantics.versions.chosen["torchtitan"] == "0.3.0"
    assert set(ids(result)) == {"torchtitan-flex-attention"}


def test_two_sequences_a_micro_batch(tmp_path: Path) -> None:
    """16384 tokens at max_context_length 8192 on 64 GPUs: a row holds 16384 / 8192 = 2
    sequences; no pipeline, so one micro-batch a step, 2 x 64 = 128 sequences."""
    cfg = read(tmp_path, edited(training={"num_tokens_per_microbatch_per_dp_rank": 16384})).config
    assert (cfg.micro_batch_size, cfg.seq_len, cfg.grad_accum_steps, cfg.global_batch) == (
        2, 8192, 1, 128)


def test_pipeline_of_interleaved_stages(tmp_path: Path) -> None:
    """pp 4 Interleaved1F1B, num_pp_microbatches 8, 64 GPUs: dp 64 / 4 = 16; two stages a
    rank, 8 stages of (32 + 1 + 1) / 8 = 4 rem 2 layers: 5, 5, 4 x 6, the embedding and
    the head one each, so blocks 4, 5, 4, 4, 4, 4, 4, 3; 8 micro-batches of 2 sequences a
    run, one run a step: 2 x 8 x 16 = 256 sequences."""
    cfg = read(tmp_path, edited(
        training={"num_tokens_per_microbatch_per_dp_rank": 16384},
        parallelism={"pipeline_parallel_degree": 4, "num_pp_microbatches": 8,
                     "pipeline_parallel_schedule": "Interleaved1F1B"})).config
    assert (cfg.pp, cfg.dp, cfg.schedule, cfg.virtual_stages) == (4, 16, "interleaved-1f1b", 2)
    assert cfg.stage_layers == [4, 5, 4, 4, 4, 4, 4, 3]
    assert (cfg.micro_batch_size, cfg.grad_accum_steps, cfg.pipeline_flushes,
            cfg.global_batch) == (2, 8, 1, 256)


def test_tokens_per_step_accumulate_runs(tmp_path: Path) -> None:
    """num_tokens_per_train_step 4,194,304 = 2 x (16384 x 8 x 16): two runs of the
    schedule a step, 16 micro-batches, 512 sequences; one not a multiple is main's
    ValueError."""
    par = {"pipeline_parallel_degree": 4, "num_pp_microbatches": 8}
    train = {"num_tokens_per_microbatch_per_dp_rank": 16384,
             "num_tokens_per_train_step": 4_194_304}
    cfg = read(tmp_path, edited(training=train, parallelism=par)).config
    assert (cfg.grad_accum_steps, cfg.pipeline_flushes, cfg.global_batch) == (16, 2, 512)
    bad = read(tmp_path, edited(training={**train, "num_tokens_per_train_step": 4_210_688},
                                parallelism=par))
    assert "must be divisible by the number of tokens processed globally in one gradient " \
        "accumulation iteration (2097152)" in ids(bad)["torchtitan-global-batch"]


def test_no_pipeline_ignores_the_microbatch_count(tmp_path: Path) -> None:
    """Without pp main runs one micro-batch an accumulation step whatever
    num_pp_microbatches says (trainer.py: ``... if parallel_dims.pp_enabled else 1``)."""
    result = read(tmp_path, edited(parallelism={"num_pp_microbatches": 8}))
    assert (result.config.grad_accum_steps, result.config.global_batch) == (1, 64)
    assert any("num_pp_microbatches 8 ignored" in n for n in result.notes)


@pytest.mark.parametrize(("tokens", "seq", "micro", "warned"), [
    (4096, 4096, 1, False),  # a row shorter than the context: its documents are <= 4096
    (12288, 8192, 2, True),  # 1.5 contexts: priced as 2 whole sequences, with a warning
])
def test_rows_that_are_not_whole_contexts(tmp_path: Path, tokens: int, seq: int, micro: int,
                                          warned: bool) -> None:
    result = read(tmp_path, edited(training={"num_tokens_per_microbatch_per_dp_rank": tokens}))
    assert (result.config.seq_len, result.config.micro_batch_size) == (seq, micro)
    assert ("torchtitan-unmodelled" in ids(result)) is warned


def test_tokens_split_by_sequence_and_context_parallelism(tmp_path: Path) -> None:
    """tp 8 with sequence parallelism and cp 2: main asks the micro-batch's tokens to be a
    multiple of 8 x 2 x 2 = 32; 8200 is not (8200 % 32 = 8). Without sequence
    parallelism the divisor is 2 x 2 = 4, which 8200 is a multiple of."""
    par = {"tensor_parallel_degree": 8, "context_parallel_degree": 2}
    train = {"num_tokens_per_microbatch_per_dp_rank": 8200}
    found = ids(read(tmp_path, edited(training=train, parallelism=par)))
    assert "must be divisible by 32 for the configured sequence/context parallelism" in \
        found["torchtitan-cp-seq"]
    plain = read(tmp_path, edited(training=train, parallelism={
        **par, "enable_sequence_parallel": False}))
    assert "torchtitan-cp-seq" not in ids(plain) and plain.config.sequence_parallel is False


@pytest.mark.parametrize(("policy", "recompute"), [
    (None, "none"),  # activation_checkpoint null: no checkpointing
    ({"preserve_rng_state": True, "determinism_check": "default", "debug": False}, "full"),
])
def test_activation_checkpointing_policies(tmp_path: Path, policy: Any, recompute: str) -> None:
    dump = copy.deepcopy(LLAMA3_8B)
    dump["activation_checkpoint"] = policy
    assert read(tmp_path, dump).config.recompute == recompute


def test_memory_budget_needs_the_model_compiled(tmp_path: Path) -> None:
    dump = copy.deepcopy(LLAMA3_8B)
    dump["activation_checkpoint"] = {"preserve_rng_state": True, "memory_budget": 0.5}
    found = ids(read(tmp_path, dump))
    assert "Trainer.Config.__post_init__" in found["torchtitan-ac-memory-budget"]
    dump["compile"].update(enable=True)
    assert "torchtitan-ac-memory-budget" not in ids(read(tmp_path, dump))


def test_async_tp_needs_the_model_compiled(tmp_path: Path) -> None:
    found = ids(read(tmp_path, edited(compile={"enable_async_tensor_parallel": True},
                                      parallelism={"tensor_parallel_degree": 8})))
    assert "CompileConfig.__post_init__" in found["torchtitan-async-tp"]


def test_qwen3_moe_is_its_preset(tmp_path: Path) -> None:
    """qwen3_30b_a3b: the 30B-A3B preset; 8192 tokens at context 4096 are 2 sequences."""
    dump = json.loads((DUMPS / "qwen3_30b_a3b.json").read_text())
    cfg = read(tmp_path, dump, gpus=8).config
    assert (cfg.model, cfg.micro_batch_size, cfg.seq_len, cfg.ep, cfg.etp) == (
        "qwen3-30b-a3b", 2, 4096, 1, 1)


def test_a_model_without_preset_is_priced_by_its_sizes(tmp_path: Path) -> None:
    """deepseek_v3 debugmodel (fsdp2 tp2 pp2 ep4, 8 GPUs): no preset; its sizes from
    model_spec.model: dim 256, 16 heads, MLA ranks 0 (queries projected directly) / 512, 8 experts top-3 of width 256,
    a shared expert of 512, the first block dense (FFN 1024); ep 4 leaves each expert
    whole (main has no expert tensor parallelism)."""
    dump = json.loads((DUMPS / "deepseek_v3_debugmodel_fsdp2_tp2_pp2_ep4.json").read_text())
    result = read(tmp_path, dump, gpus=None)
    cfg = result.config
    assert cfg.model is None and result.semantics.unknown_model is None
    assert (cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.vocab_size) == (6, 256, 16, 2048)
    assert (cfg.q_lora_rank, cfg.kv_lora_rank, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
            cfg.v_head_dim) == (None, 512, 128, 64, 128)
    assert (cfg.num_experts, cfg.moe_top_k, cfg.moe_ffn_hidden_size,
            cfg.moe_shared_ffn_hidden_size, cfg.moe_first_dense_layers, cfg.ffn_hidden_size) \
        == (8, 3, 256, 512, 1, 1024)
    assert (cfg.pp, cfg.tp, cfg.dp, cfg.ep, cfg.etp) == (2, 2, 2, 4, 1)
    assert any(n.startswith("gpus 8 inferred from the degrees") for n in result.notes)


def test_sizes_other_than_the_presets_are_priced_as_the_dump(tmp_path: Path) -> None:
    """A function that keeps 16 of llama3 8B's blocks: not the preset, the dump's sizes."""
    dump = copy.deepcopy(LLAMA3_8B)
    dump["model_spec"]["model"]["layers"] = dump["model_spec"]["model"]["layers"][:16]
    result = read(tmp_path, dump)
    assert (result.config.model, result.config.num_layers, result.config.ffn_hidden_size,
            result.config.num_kv_heads) == (None, 16, 14336, 8)
    assert any("num_layers 16 (pptune's: 32)" in n for n in result.notes)


def test_varlen_attention_and_mains_cp_refusal(tmp_path: Path) -> None:
    """VarlenAttention.Config (window_size) prices as flash with no flex warning; with
    context parallelism every main decoder refuses it, and SDPA, before qwen3's own check
    runs (models/common/decoder.py Decoder.Config.update_from_config, which llama3's,
    qwen3's, gpt_oss's and deepseek_v3's update_from_config call first)."""
    dump = copy.deepcopy(LLAMA3_8B)
    for block in dump["model_spec"]["model"]["layers"]:
        block["attention"]["inner_attention"] = {"window_size": [-1, 0]}
    result = read(tmp_path, dump)
    assert result.config.attention == "flash" and not ids(result)
    dump["parallelism"].update(context_parallel_degree=2)
    for name, inner, kind in (("qwen3", {"window_size": [-1, 0]}, "varlen"),
                              ("llama3", {}, "sdpa")):
        dump["model_spec"].update(name=name)
        for block in dump["model_spec"]["model"]["layers"]:
            block["attention"]["inner_attention"] = inner
        assert ids(read(tmp_path, dump))["torchtitan-cp-attention"] == (
            f"context_parallel_degree 2 with {kind} attention (model_spec.model's "
            "inner_attention): torchtitan raises 'Context Parallel is not supported with "
            "ScaledDotProductAttention or VarlenAttention. Use FlexAttention or disable "
            "CP.' (torchtitan/models/common/decoder.py Decoder.Config.update_from_config); "
            "use cp 1 or FlexAttention")


def test_padded_expert_dispatch_says_the_converter_is_unseen(tmp_path: Path) -> None:
    """Float8GroupedExpertsConverter pads each expert's tokens to 16 (its trace in a dump)."""
    dump = json.loads((DUMPS / "qwen3_30b_a3b.json").read_text())
    for block in dump["model_spec"]["model"]["layers"]:
        block["moe"]["routed_experts"]["token_dispatcher"]["pad_multiple"] = 16
    result = read(tmp_path, dump, gpus=8)
    assert "pad_multiple 16" in ids(result)["torchtitan-converter-unseen"]
    assert result.config.precision == "bf16"


def test_settings_pptune_does_not_price_are_named(tmp_path: Path) -> None:
    found = ids(read(tmp_path, edited(training={"enable_cpu_offload": True, "new_knob": 1})))
    assert "training.enable_cpu_offload true" in found["torchtitan-unmodelled"]
    assert "training has new_knob" in found["torchtitan-unknown-key"]


def test_a_release_before_main_dumps_none(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"torchtitan=0\.2\.2: that release reads TOML"):
        read(tmp_path, LLAMA3_8B, framework_versions=["torchtitan=0.2.2"])


def test_context_parallel_dump(tmp_path: Path) -> None:
    """torchtitan_recipes.tests.features llama3_debugmodel_fsdp2_cp2: shard 2 x cp 2 = 4
    GPUs, FSDP over both; 16384 tokens at context 2048 are 8 sequences of 2048 (a multiple
    of 2 x cp = 4), no checkpointing (activation_checkpoint null), K/V all-gathered."""
    dump = json.loads((DUMPS / "llama3_debugmodel_fsdp2_cp2.json").read_text())
    cfg = read(tmp_path, dump, gpus=4).config
    assert (cfg.cp, cfg.dp, cfg.sharding, cfg.cp_comm) == (2, 2, "fsdp", "all-gather")
    assert (cfg.micro_batch_size, cfg.seq_len, cfg.global_batch, cfg.recompute) == (
        8, 2048, 16, "none")
