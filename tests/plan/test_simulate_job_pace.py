"""simulate --gpus: the job's GPU count sets the slowest-GPU pace of the one pipeline it
simulates, so simulate reproduces the per-pipeline compute of the plan recommend ranks."""

from __future__ import annotations

import pytest

from pptune.costmodel.evaluate import stage_layout
from pptune.costmodel.search import stage_costs
from pptune.costmodel.variation import slowdown
from pptune.options import CostOptions, build
from pptune.plan import whatif
from pptune.plan.recommend import RecommendSpec, recommend

# recommend --gpus 8's plan 2 on the embedded default (the README's example): zbv,
# pp 2, 128 micro-batches of 1, layers per chunk 9,9,8,8 (blocks 8,9,8,7 plus the ends)
LAYOUT = {"schedule": "zbv", "pp": 2, "microbatches": 128, "split": [8, 9, 8, 7]}


def _simulated(**extra: object) -> whatif.SimRun:
    return whatif.run(whatif.SimSpec(**LAYOUT, costs=build(CostOptions, {"model": "llama3-8b"}),
                                     **extra))


def test_the_jobs_gpus_set_the_pace_recommend_prices() -> None:
    """By construction (costmodel/variation.py) the slowest of a node's 8 GPUs is half
    the spread below the median: on an H100 (spread 5%) compute runs 1/1.025 as fast,
    -2.4%; the pipeline alone (2 GPUs) runs at 1 + 0.05 z(2) / (2 z(8)), -1.0%."""
    assert slowdown(8, 0.05) == pytest.approx(1.025, rel=1e-9)
    run = recommend(RecommendSpec.of(gpus=8, model="llama3-8b"))
    plan = next(p for p in run.result.plans if (p.schedule.value, p.pp, p.num_microbatches,
                                                 p.stage_layers) == ("zbv", 2, 128, [9, 9, 8, 8]))
    job, alone = _simulated(gpus=8), _simulated()
    assert "compute at the slowest of 8 GPUs' pace (-2.4%)" in job.origin
    assert "compute at the slowest of 2 GPUs' pace (-1.0%)" in alone.origin
    assert job.stage_layers == plan.stage_layers
    # the same per-chunk costs as the table recommend priced the plan with
    priced = stage_costs(run.table_for(plan.key), plan.micro_batch_size, plan.stage_layers)
    simulated = stage_costs(job.table, 1, job.stage_layers)
    assert [t for c in simulated for t in (c.fwd_s, c.bwd_s, c.wgrad_s)] == pytest.approx(
        [t for c in priced for t in (c.fwd_s, c.bwd_s, c.wgrad_s)], rel=1e-12)
    # and each GPU as busy as in recommend's simulation of the plan's pipeline, but for
    # the data-parallel gradient reduction recommend adds after a chunk's last backward
    lay = stage_layout(run.table_for(plan.key), run.request_for(plan.key), plan.spec)
    for d, (simulated_dev, planned) in enumerate(zip(job.result.devices, plan.sim.devices,
                                                     strict=True)):
        tails = [c.tail_s for c, dev in zip(lay.comm, lay.device_of, strict=True) if dev == d]
        assert 0 <= planned.busy_s - simulated_dev.busy_s + 1e-9 <= max(tails) + 1e-9
    # the step: recommend's adds that exposed reduction and the optimizer step
    assert job.result.step_time_s < plan.sim.step_time_s < plan.step_time_s
    # the pipeline alone is faster, by less than the compute's 1.025 / 1.0099
    ratio = job.result.step_time_s / alone.result.step_time_s
    assert 1 < ratio < slowdown(8, 0.05) / slowdown(2, 0.05)


def test_default_is_one_pipelines_gpus() -> None:
    assert _simulated().origin == _simulated(gpus=2).origin
    assert _simulated().result.step_time_s == _simulated(gpus=2).result.step_time_s
