"""Megatron-LM's weight-gradient accumulation (costmodel/rates.py WgradAccum), read from
its scripts, priced, said by check-config and written by ``--emit megatron``.

megatron-core accumulates each weight gradient into the FP32 main_grad inside its GEMM
unless ``--no-gradient-accumulation-fusion`` (validate_args' default is fused); without
it DDP's hook adds the BF16 gradient in a kernel of its own (10 bytes a weight element);
torch FSDP2 keeps autograd's BF16 gradients; Megatron-FSDP's sharded buffers copy them
(megatron_fsdp.py ``_grad_acc``), which is not counted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel import presets
from pptune.plan.emit import Framework, emit, write
from pptune.plan.recommend import RecommendSpec, recommend
from tests.check_json import check_file

SCRIPT = (
    "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py \\\n"
    "  --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 \\\n"
    "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size 14336 \\\n"
    "  --group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 \\\n"
    "  --max-position-embeddings 8192 --vocab-size 128256 --attention-dropout 0.0 \\\n"
    "  --hidden-dropout 0.0 --untie-embeddings-and-output-weights --normalization RMSNorm \\\n"
    "  --position-embedding-type rope --disable-bias-linear \\\n"
    "  --micro-batch-size 1 --global-batch-size 64 --bf16 {flags}\n"
)
FSDP = "--use-megatron-fsdp --ckpt-format fsdp_dtensor"
NO_FUSION = "--no-gradient-accumulation-fusion"


@pytest.mark.parametrize(("flags", "accum"), [
    ("--use-distributed-optimizer", "fused"),
    (f"--use-distributed-optimizer {NO_FUSION}", "unfused"),
    (f"--use-torch-fsdp2 {NO_FUSION} --ckpt-format torch_dist", "bf16"),
    # Megatron-FSDP's sharded gradient buffer copies; its unsharded one (optim) adds
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params {NO_FUSION}", "bf16"),
    (f"{FSDP} --data-parallel-sharding-strategy optim {NO_FUSION}", "unfused"),
    # fused, its sharded buffer's GEMMs write the bucket (overwrite_main_grad): 16-bit as
    # autograd's BF16 gradient, FP32 priced as an accumulation (the warning says so)
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params --grad-reduce-in-bf16",
     "bf16"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads --grad-reduce-in-bf16", "bf16"),
    (f"{FSDP} --data-parallel-sharding-strategy optim_grads_params", "fused"),
])
def test_the_script_says_where_weight_gradients_go(tmp_path: Path, flags: str,
                                                   accum: str) -> None:
    _, found, doc = check_file(tmp_path / "a.sh", SCRIPT.format(flags=flags),
                               "--gpu", "h100-sxm", by="message")
    assert doc["config"]["wgrad_accum"] == accum
    assert ("wgrad-accumulation-unfused" in found) == (accum == "unfused")
    # how Megatron-FSDP's sharded strategies are priced (an info: fsdp.py)
    priced = found.get("megatron-fsdp-priced", "")
    if "optim_grads_params" in flags and NO_FUSION in flags:
        assert "not counted: the copy of each BF16 weight gradient into its gradient bucket" \
            in priced
    overwritten = "priced as accumulated into main_grad by their GEMMs (8 bytes an element)"
    assert (overwritten in priced) == ("optim_grads" in flags and accum == "fused")


def test_a_bf16_gradient_buffer_halves_what_unfused_accumulation_costs(
        tmp_path: Path) -> None:
    """--grad-reduce-in-bf16 under --bf16: DDP's buffer, and so each main_grad, is BF16
    (megatron-core distributed_data_parallel.py ``grad_dtype = param.dtype``). The same
    7.50e9 weight elements as below, 2 + 2 + 2 bytes each added in 129 kernels: 15.4 ms
    a micro-batch, less the 2 bytes an output element the fused GEMMs' last waves add
    (2 + 2 read and written against the unfused GEMM's BF16 2)."""
    _, _, doc = check_file(tmp_path / "a.sh", SCRIPT.format(
        flags=f"--use-distributed-optimizer {NO_FUSION} --grad-reduce-in-bf16"),
        "--gpu", "h100-sxm")
    assert doc["config"]["main_grads_dtype"] == "bf16"
    (finding,) = [f for f in doc["findings"] if f["id"] == "wgrad-accumulation-unfused"]
    assert "into the BF16 main_grad (6 bytes a weight element, not the GEMM's 4 an output " \
        "element)" in finding["message"]
    weights = 7_504_658_432
    gpu = presets.GPUS["h100-sxm"]
    adds_s = 6 * weights / (gpu.hbm_bytes_per_s * gpu.hbm_fraction) + 129 * gpu.launch_s
    assert adds_s == pytest.approx(15.45e-3, rel=1e-3)
    assert 0.98 * adds_s < finding["values"]["extra_s"] < adds_s


def test_check_config_names_what_unfused_accumulation_costs(tmp_path: Path) -> None:
    """Llama 3 8B on one rank: 7.50e9 weight elements (32 blocks of 4096 x 6144 QKV,
    4096 x 4096 output, 3 x 4096 x 14336 MLP, and the 4096 x 128,256 LM head), 10 bytes
    each added in 129 kernels at the H100's 3.35 TB/s x 0.9 and 4 us a launch: 25.4 ms a
    micro-batch, less the 6 bytes an output element the fused GEMMs' last waves add."""
    _, _, doc = check_file(tmp_path / "a.sh", SCRIPT.format(
        flags=f"--use-distributed-optimizer {NO_FUSION}"), "--gpu", "h100-sxm")
    (finding,) = [f for f in doc["findings"] if f["id"] == "wgrad-accumulation-unfused"]
    assert finding["severity"] == "info"
    block = 4096 * 6144 + 4096 * 4096 + 3 * 4096 * 14336
    weights = 32 * block + 4096 * 128256
    assert weights == 7_504_658_432
    gpu = presets.GPUS["h100-sxm"]
    adds_s = 10 * weights / (gpu.hbm_bytes_per_s * gpu.hbm_fraction) + 129 * gpu.launch_s
    assert adds_s == pytest.approx(25.41e-3, rel=1e-3)
    assert 0.97 * adds_s < finding["values"]["extra_s"] < adds_s


def _step(path: Path) -> float:
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpus", "8", "--gpu", "h100-sxm",
                                 "--output", "json", "--no-compare"])
    assert r.exit_code == 0, r.stdout
    return float(json.loads(r.stdout)["derived"]["step_time_s"])


@pytest.mark.parametrize("asked", ["bf16", "unfused"])
def test_megatron_scripts_are_priced_and_read_back_as_they_accumulate(
        tmp_path: Path, asked: str) -> None:
    """A plan priced with BF16 gradients (recommend's default) is re-predicted fused, as a
    Megatron-LM script runs by default; one priced unfused is written with
    --no-gradient-accumulation-fusion. Either reads back at the emitted step."""
    run = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", pp=[2],
                                     sharding="zero1", wgrad_accum=asked, top=1))
    out = emit(Framework.MEGATRON, run)
    said = any("(gradient_accumulation_fusion, its default)" in n for n in out.notes)
    assert said == (asked == "bf16")
    write(out, tmp_path)
    script = tmp_path / "pretrain_megatron.sh"
    assert (NO_FUSION in script.read_text()) == (asked == "unfused")
    assert _step(script) == pytest.approx(out.plan.step_time_s, rel=1e-9)
    if asked == "unfused":
        pptune = emit(Framework.PPTUNE, run)
        write(pptune, tmp_path)
        assert "wgrad_accum: unfused" in (tmp_path / "pptune.yaml").read_text()
        assert _step(tmp_path / "pptune.yaml") == pytest.approx(pptune.plan.step_time_s,
                                                                 rel=1e-9)
