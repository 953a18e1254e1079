"""torchtitan's training.dtype and mixed_precision_reduce as torch FSDP2 keeps them
(torch 2.13 torch/distributed/fsdp/_fully_shard/): the reduce dtype is the unsharded
gradient's (accumulated and reduce-scattered in it, ``FSDPParam.to_accumulated_grad_if_needed``,
``foreach_reduce``'s reduce_scatter_input); the sharded gradient is cast back to the sharded
parameter's dtype (``foreach_reduce``: ``_to_dtype_if_needed(reduce_output, orig_dtype)``),
FP32 unless training.dtype is bfloat16."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.check.widths import optimizer_widths
from pptune.costmodel.records import PlanRequest
from pptune.costmodel.sharding import Sharding
from pptune.frameworks.read import read_config

JOB = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 1
seq_len = 8192
{training}
[parallelism]
data_parallel_shard_degree = {shard}
data_parallel_replicate_degree = {replicate}
"""

# a stage of 1,000 parameters whose largest layer holds 100, sharded over 4 ranks
PARAMS, LARGEST, DP = 1000.0, 100.0, 4


def _request(tmp_path: Path, training: str, shard: int = 4, replicate: int = 1
             ) -> tuple[PlanRequest, list[str]]:
    path = tmp_path / "job.toml"
    path.write_text(JOB.format(training=training, shard=shard, replicate=replicate))
    read = read_config(path)
    return PlanRequest(gpus=DP, global_batch=DP, **optimizer_widths(read.config)), read.notes


# (dtype, mixed_precision_reduce) -> sharded state bytes of the stage, unsharded working
# bytes resharding after forward (pp 1), kept gathered (pp > 1), gradient bytes' factor
@pytest.mark.parametrize(("dtype", "reduce", "state", "resharded", "gathered", "factor"), [
    # FP32 shards: weights 4 + gradient 4 + Adam 8 = 16 a parameter over 4 ranks; two
    # blocks' BF16 weights (2 x 2) + the BF16 gradient (2) + the FP32 reduce copy (4);
    # kept gathered: BF16 weights (2) + the gradient accumulated in FP32 (4)
    ("float32", "float32", 1000 * 16 / 4, 100 * (4 + 2 + 4), 1000 * (2 + 4), 1.0),
    # reduced in BF16, the shard's gradient still FP32 (cast back to the FP32 parameter):
    # state as above; the reduce copy and the accumulated gradient BF16 (2)
    ("float32", "bfloat16", 1000 * 16 / 4, 100 * (4 + 2 + 2), 1000 * (2 + 2), 0.5),
    # BF16 shards, no FP32 copy: weights 2 + gradient 2 + BF16 Adam 4 = 8; FSDP2 still
    # reduces in torchtitan's default FP32 (mixed_precision_reduce "float32")
    ("bfloat16", "float32", 1000 * 8 / 4, 100 * (4 + 2 + 4), 1000 * (2 + 4), 1.0),
    ("bfloat16", "bfloat16", 1000 * 8 / 4, 100 * (4 + 2 + 2), 1000 * (2 + 2), 0.5),
])
def test_fsdp2_keeps_the_sharded_gradient_in_the_parameter_s_dtype(
        tmp_path: Path, dtype: str, reduce: str, state: float, resharded: float,
        gathered: float, factor: float) -> None:
    req, _ = _request(tmp_path, f'dtype = "{dtype}"\nmixed_precision_reduce = "{reduce}"')
    assert req.state_per_param(Sharding.FSDP, DP) * PARAMS == pytest.approx(state)
    assert req.working(Sharding.FSDP, True, PARAMS, LARGEST) == pytest.approx(resharded)
    assert req.working(Sharding.FSDP, False, PARAMS, LARGEST) == pytest.approx(gathered)
    assert req.grad_bytes_factor == factor


def test_without_fsdp_the_reduce_dtype_has_no_effect(tmp_path: Path) -> None:
    """job_config.py: mixed_precision_reduce 'only takes effect when
    data_parallel_shard_degree > 1'; DDP (replicate only) all-reduces the parameters'
    gradients: FP32 ones under torch.autocast, BF16 ones under training.dtype bfloat16."""
    req, notes = _request(tmp_path, 'mixed_precision_reduce = "bfloat16"', shard=1,
                          replicate=4)
    assert req.grad_bytes_factor == 1.0 and req.grad_buffer_bytes is None
    assert any("mixed_precision_reduce bfloat16 has no effect without FSDP" in n
               for n in notes), notes
    req, _ = _request(tmp_path, 'dtype = "bfloat16"', shard=1, replicate=4)
    assert req.grad_bytes_factor == 0.5 and req.grad_buffer_bytes == 2.0


def test_check_config_narrows_only_the_unsharded_gradient(tmp_path: Path) -> None:
    """Llama 3 8B, FSDP over 8 ranks, no pipeline (resharded after forward): the widest
    layer's unsharded gradient is copied into a reduce_scatter_input of the reduce dtype,
    the LM head with the final norm, 128,256 x 4,096 + 4,096 parameters: BF16 saves 2
    bytes of each. The sharded state is the same (it was 2/8 bytes a parameter less, 502 MB
    of Llama 3 8B's 8.03e9, when the sharded gradient was priced at the reduce dtype)."""
    from tests.check_json import check_file

    peak = {}
    for reduce in ("float32", "bfloat16"):
        text = JOB.format(training=f'mixed_precision_reduce = "{reduce}"', shard=8,
                          replicate=1)
        code, found, doc = check_file(tmp_path / f"{reduce}.toml", text, "--gpu", "h100-sxm")
        assert code == 0, found
        peak[reduce] = doc["derived"]["peak_memory_bytes"][0]
    assert peak["float32"] - peak["bfloat16"] == pytest.approx(2 * (128256 * 4096 + 4096),
                                                                abs=1.0)


def test_a_bfloat16_reduce_under_fsdp_is_priced_and_noted_as_outside_the_declared_type(
        tmp_path: Path) -> None:
    """torchtitan 0.1.0 through 0.2.2 (and main) declare ``mixed_precision_reduce:
    Literal["float32"]``: the TOML's value reaches tyro as a default outside the declared
    choices, which tyro warns about and passes through to FSDP2's MixedPrecisionPolicy.
    Priced as the BF16 reduction it runs, with one note saying torchtitan does not declare
    it; the default float32 gets no note."""
    req, notes = _request(tmp_path, 'mixed_precision_reduce = "bfloat16"')
    assert req.grad_bytes_factor == 0.5
    (said,) = [n for n in notes if "declares" in n]
    assert 'Literal["float32"]' in said and "bfloat16" in said
    _, notes = _request(tmp_path, 'mixed_precision_reduce = "float32"')
    assert not [n for n in notes if "declares" in n]
