"""Weights a rank holds once: the FP8 copies of its own GEMMs' weights (experts included
only where they are local), and an MTP module's embedding where the embedding is on the
same device. Values derived by hand for moe-small: h = 256, 4 heads of 64, 4 KV heads,
8 routed experts of FFN 512 (SwiGLU), top-2, vocabulary 8,192."""

from __future__ import annotations

import dataclasses

import pytest

from pptune.costmodel import presets
from pptune.costmodel.evaluate import PlanRequest, PlanSpec, evaluate
from pptune.costmodel.keys import Precision
from pptune.costmodel.moe import ExpertParallel
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import Recompute, Sharding
from pptune.costs.profiles import analytic_profile, cost_table

MOE = presets.MODELS["moe-small"]
ATTENTION = 256 * (256 + 2 * 256) + 256 * 256  # QKV and output projections: 262,144
EXPERT = 3 * 256 * 512  # one SwiGLU expert: 393,216


@pytest.mark.parametrize(("ep", "local"), [(1, 8), (2, 4), (4, 2), (8, 1)])
def test_fp8_copies_are_of_the_rank_s_own_gemm_weights(ep: int, local: int) -> None:
    # FP8 copy + transpose: 2 bytes a weight of the attention and of the local experts;
    # the router (256 x 8) and the two norms keep none
    prof = analytic_profile(MOE, "h100-sxm", [1], gemm_precision=Precision.FP8,
                            experts=ExpertParallel(ep=ep))
    blocks = [layer for layer in prof.layers if layer.name.startswith("block")]
    assert {layer.cache_bytes for layer in blocks} == {2.0 * (ATTENTION + local * EXPERT)}
    assert all(layer.cache_bytes is None for layer in prof.layers
               if not layer.name.startswith("block"))


def _state(schedule: Schedule, pp: int, split: tuple[int, ...]) -> tuple[list[float], object]:
    shape = dataclasses.replace(MOE, mtp_layers=1)
    table = cost_table(analytic_profile(shape, "h100-sxm", [1]))
    req = PlanRequest(gpus=pp, global_batch=8, tp=1, reserve_bytes=0.0)
    spec = PlanSpec(schedule, pp, 1, 8, split, 1, sharding=Sharding.NONE,
                    recompute=Recompute.NONE)
    plan = evaluate(table, req, spec)
    return [d.state_bytes for d in plan.memory], table


PER_PARAM = 2 + 4 + 4 + 4 + 4  # BF16 weight, FP32 gradient, master weight, two moments
EMBEDDING = 8192 * 256


def test_an_mtp_module_shares_the_embedding_on_its_device() -> None:
    # layers: embedding, block0..3, mtp0, head (7)
    state, table = _state(Schedule.ONE_F_ONE_B, 1, (7,))
    assert state == [pytest.approx(PER_PARAM * (table.params(0, 7) - EMBEDDING))]
    # 1F1B over 2 devices: the MTP module is on the last, the embedding on the first:
    # the last keeps its copy
    state, table = _state(Schedule.ONE_F_ONE_B, 2, (3, 4))
    assert state == [pytest.approx(PER_PARAM * table.params(0, 3)),
                     pytest.approx(PER_PARAM * table.params(3, 7))]
    # a V (zbv): device 0 holds the first chunk and the last (MTP and head): shared
    state, table = _state(Schedule.ZBV, 2, (2, 2, 1, 2))
    assert state[0] == pytest.approx(PER_PARAM * (table.params(0, 2) + table.params(5, 7)
                                                  - EMBEDDING))
    assert state[1] == pytest.approx(PER_PARAM * table.params(2, 5))
