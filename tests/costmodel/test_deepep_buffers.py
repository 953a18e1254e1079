"""DeepEP's communication buffers on each rank, by hand from DeepEP v1.2.1's
Config::get_nvl_buffer_size_hint / get_rdma_buffer_size_hint (csrc/config.hpp), as
megatron-core 0.16.1's fused_a2a.get_buffer sizes them: the larger of the dispatch
and combine configs' hints for the ep x etp group and 2 x hidden bytes a token."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.deepep import buffer_bytes, dispatch_buffer_bytes
from pptune.costmodel.dispatch import Dispatcher, ExpertParallel
from pptune.costmodel.keys import CostKey, Precision
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Recompute, Sharding, evaluate
from pptune.costs.profiles import preset_tables

MIB = 1024**2


def test_deepseek_v3_at_ep64_holds_743_mib_a_rank() -> None:
    """hidden 7168 (14,336 bytes a token), 64 ranks (8 nodes of 8), 20 SMs: 10 channels.
    NVL (both configs receive 288 tokens a chunk):
      10 x 8 x (2 x 8 + 3) x 4 = 6,080
      + 10 x 8 x 288 x (14,336 + 8 + 128 x 8 + 128 x 4 + 128 x 4) = 377,671,680
      = 377,677,760, rounded up to 128: 377,677,824.
    RDMA (receive chunk 128 rounded up to the send chunk's multiple: 28 -> 140, 20 -> 140):
      10 x 8 x (8 x 2 + 2) x 2 x 4 = 11,520
      + 10 x 8 x 140 x 2 x (14,336 + 8 + 1,024 + 512 + 512 + 16) = 367,539,200
      = 367,550,720 (a multiple of 128).
    Plus 160 bytes of barrier signals and pointers and the 32 MiB workspace."""
    nvl, rdma = 377_677_824, 367_550_720
    total = nvl + 160 + 32 * MIB + rdma
    assert buffer_bytes(7168, 64, 20) == total == 778_783_136
    assert total / MIB == pytest.approx(742.7, abs=0.05)


def test_one_node_needs_no_rdma_buffer() -> None:
    """8 ranks: NVLink only; dispatch (6, 256) and combine (4, 256) receive 256 a chunk.
    4,096 hidden: 10 x 8 x (2 + 3) x 4 + 10 x 8 x 256 x (8,192 + 8 + 2,048) = 209,880,640,
    rounded up to 128: 209,880,704; RDMA 0."""
    assert 10 * 8 * 5 * 4 + 10 * 8 * 256 * (8192 + 8 + 2048) == 209_880_640
    assert buffer_bytes(4096, 8, 20) == 209_880_704 + 160 + 32 * MIB


def test_group_sizes_deepep_has_no_config_for_and_other_dispatchers_hold_none() -> None:
    assert buffer_bytes(7168, 256, 20) is None  # "Unsupported number of EP ranks"
    assert buffer_bytes(7168, 1, 20) is None
    ep64 = ExpertParallel(ep=32, etp=2, dispatcher=Dispatcher.DEEPEP)  # the tp_ep group: 64
    assert dispatch_buffer_bytes(ep64, 7168) == buffer_bytes(7168, 64, 20)
    for d in (Dispatcher.ALLTOALL, Dispatcher.ALLGATHER):
        assert dispatch_buffer_bytes(dataclasses.replace(ep64, dispatcher=d), 7168) == 0.0
    assert dispatch_buffer_bytes(None, 7168) == 0.0


def test_each_rank_with_an_expert_layer_holds_them_in_its_memory() -> None:
    """Mixtral 8x7B (hidden 4096) on 8 H100, ep 8, pp 2: both stages hold expert layers,
    so each rank's peak grows by DeepEP's buffers over NCCL's all-to-all's, a term of its
    own in the breakdown."""
    model, gpu = presets.MODELS["mixtral-8x7b"], presets.GPUS["h100-sxm"]
    key = CostKey(tp=1, ep=8, precision=Precision.BF16)
    req = PlanRequest(gpus=16, global_batch=64, tp=1, cost_keys=(key,), gpus_per_node=8,
                      micro_batch_sizes=(1,))
    spec = PlanSpec(pp=2, schedule=Schedule.ONE_F_ONE_B, virtual_stages=1,
                    micro_batch_size=1, num_microbatches=8, stage_layers=[17, 17],
                    sharding=Sharding.ZERO1, recompute=Recompute.FULL, key=key)
    plans = {}
    for d in (Dispatcher.ALLTOALL, Dispatcher.DEEPEP):
        table = preset_tables(model, gpu, (1,), ExpertParallel(dispatcher=d))(key)
        plans[d] = evaluate(table, req, spec)
    held = buffer_bytes(4096, 8, 20)
    assert held is not None
    for rank in range(2):
        deep, nccl = plans[Dispatcher.DEEPEP].memory[rank], plans[Dispatcher.ALLTOALL].memory[rank]
        assert (deep.dispatch_buffer_bytes, nccl.dispatch_buffer_bytes) == (held, 0.0)
