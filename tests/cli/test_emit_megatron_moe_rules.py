"""Emitted Megatron-LM scripts megatron-core accepts: a top-1 router states
--moe-router-pre-softmax, sliding windows are written, a plan only ZeRO-3 fits is
written as Megatron-FSDP, and refused rather than written unsharded where the
precision-aware optimizer keeps the distributed optimizer alone; megatron-core's combined-order rules on MTP
and the shared-expert overlap are check-config errors, and the search does not rank
the combined order without a pipeline for a model with an MTP layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.candidates import a2a_overlaps
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Recompute
from pptune.errors import BadInput
from pptune.plan.emit import emit, write
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
HF = Path(__file__).resolve().parents[1] / "data" / "hf"


def _check(path: Path, *flags: str) -> dict:
    r = runner.invoke(app, ["check-config", str(path), "--output", "json", "--no-compare",
                            *flags])
    assert r.exit_code in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_a_top_1_router_and_sliding_windows_are_written(tmp_path: Path) -> None:
    scout = recommend(RecommendSpec.of(gpus=32, hf_config=str(HF / "llama4-scout-17b-16e-config.json"),
                                       gpu="h200", seq_len=4096, global_batch=64, top=1))
    out = emit("megatron", scout)
    assert "--moe-router-topk 1" in out.files["pretrain_megatron.sh"]
    assert "--moe-router-pre-softmax" in out.files["pretrain_megatron.sh"]
    write(out, tmp_path / "scout")
    doc = _check(tmp_path / "scout" / "pretrain_megatron.sh")
    assert doc["errors"] == 0, doc["findings"]
    oss = recommend(RecommendSpec.of(gpus=16, model="gpt-oss-120b", gpu="h200", seq_len=8192,
                                     global_batch=64, top=1))
    out = emit("megatron", oss)
    text = out.files["pretrain_megatron.sh"]
    assert "--window-size 128,0" in text and "--window-attn-skip-freq 2" in text
    write(out, tmp_path / "oss")
    doc = _check(tmp_path / "oss" / "pretrain_megatron.sh")
    assert (doc["config"]["sliding_window"], doc["config"]["full_attention_every"]) == (128, 2)
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)


def test_a_plan_only_zero_3_fits_is_written_as_megatron_fsdp(tmp_path: Path) -> None:
    """Llama 4 Scout on 16 H200s, 16 experts over ep 16: only ZeRO-3 fits, written as
    Megatron-FSDP's optim_grads_params with 16-bit gradients (its experts shard over
    the expert data-parallel group) and read back at the same step. The ranked plan
    (140.2 of 140.4 GiB) outgrows the GPU with the gradient buckets Megatron-FSDP's
    backward keeps queued (fsdp.py): the fastest ZeRO-3 plan a script states is written."""
    scout = str(HF / "llama4-scout-17b-16e-config.json")
    run = recommend(RecommendSpec.of(gpus=16, hf_config=scout, gpu="h200", seq_len=4096,
                                     global_batch=64, top=1))
    out = emit("megatron", run)
    assert out.plan.sharding.value == "zero3" and out.plan.ep == 16 and not out.exact
    assert "Megatron-FSDP keeps each backward's gradients in unsharded buckets" in out.notes[0]
    text = out.files["pretrain_megatron.sh"]
    assert "--data-parallel-sharding-strategy optim_grads_params" in text
    write(out, tmp_path)
    doc = _check(tmp_path / "pretrain_megatron.sh", "--gpu", "h200", "--hf-config", scout)
    assert doc["errors"] == 0 and doc["config"]["sharding"] == "zero3", doc["findings"]
    assert doc["derived"]["step_time_s"] == pytest.approx(out.plan.step_time_s, rel=1e-9)
    # BF16 moments keep Megatron-LM on its distributed optimizer (the precision-aware
    # optimizer): on 16 H100s no ZeRO-1 plan fits, refused rather than written unsharded
    bf16 = recommend(RecommendSpec.of(gpus=16, hf_config=scout, gpu="h100-sxm", seq_len=4096,
                                      global_batch=64, top=1, exp_avg_dtype="bf16",
                                      exp_avg_sq_dtype="bf16"))
    with pytest.raises(BadInput, match="megatron cannot express plan 1: it shards the "
                       "training state as ZeRO-3 and no plan with ZeRO-1 fits"):
        emit("megatron", bf16)


def test_megatron_core_combined_order_rules(tmp_path: Path) -> None:
    # megatron-core transformer_config.py: an MTP layer needs a pipeline; the shared
    # experts' own overlap must be off
    assert a2a_overlaps(True, Schedule.ONE_F_ONE_B, 1, 8, Recompute.NONE) == [False, True]
    assert a2a_overlaps(True, Schedule.ONE_F_ONE_B, 1, 8, Recompute.NONE, mtp=True) == [False]
    base = ("torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py --num-layers 8 "
            "--hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
            "--max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 "
            "--bf16 --num-experts 64 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
            "--moe-grouped-gemm --expert-model-parallel-size 8 "
            "--moe-token-dispatcher-type alltoall --overlap-moe-expert-parallel-comm "
            "--position-embedding-type rope --disable-bias-linear --swiglu ")
    script = tmp_path / "a.sh"
    script.write_text(base + "--mtp-num-layers 1\n")
    doc = _check(script, "--gpu", "h100-sxm")
    assert any(f["id"] == "megatron-a2a-overlap" and "MTP layer" in f["message"]
               for f in doc["findings"])
    script.write_text(base + "--moe-shared-expert-intermediate-size 512 "
                      "--moe-shared-expert-overlap\n")
    doc = _check(script, "--gpu", "h100-sxm")
    assert any("disable moe_shared_expert_overlap" in f["message"] for f in doc["findings"])
