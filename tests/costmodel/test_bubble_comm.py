"""What the bubble counts: a GPU waiting on the others. Communication a GPU's compute
waits on is busy time, wherever it runs: inside an op (ZeRO-3's and FSDP's gathers,
tensor-parallel collectives) or once a step, before the first forward or after the
last backward (the gradient reduction of no sharding, ZeRO-1 and ZeRO-2, a ZeRO-2 or
unresharded FSDP gather), as far as no wait on another GPU covers it."""

from __future__ import annotations

import pytest

from pptune.costmodel.keys import CostKey
from pptune.costmodel.partition import add_ends
from pptune.costmodel.presets import MODELS
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.search import PlanRequest, PlanSpec, Sharding, evaluate
from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.costs.resolve import analytic_costs


def test_without_a_pipeline_a_reduction_after_the_backward_is_busy() -> None:
    """pp 1, two micro-batches of F 1 + B 2, then 0.5 of gradient reduction: the GPU
    works 6, waits 0.5 on its own reduction and on nothing else: no bubble."""
    r = simulate("1f1b", 1, 2, uniform_stages(1, 1.0, 2.0), dp_allreduce_s=[0.5])
    assert r.step_time_s == 6.5
    [dev] = r.devices
    assert (dev.busy_s, dev.idle_s, dev.exposed_comm_s) == (6.5, 0.0, 0.5)
    assert r.bubble_rate == 0.0


def test_without_a_pipeline_a_gather_before_the_first_forward_is_busy() -> None:
    r = simulate("1f1b", 1, 2, uniform_stages(1, 1.0, 2.0), device_start_s=[0.25])
    [dev] = r.devices
    assert (r.step_time_s, dev.busy_s, dev.exposed_comm_s, r.bubble_rate) == (
        6.25, 6.25, 0.25, 0.0)


def test_in_a_pipeline_only_the_traffic_past_the_last_op_is_busy() -> None:
    """1F1B, pp 2, m 2, F 1 + B 2 a stage: device 1 runs F0 1-2, B0 2-4, F1 4-5, B1 5-7,
    device 0 F0 0-1, F1 1-2, B0 4-6, B1 7-9. Each stage reduces for 0.5 after its last
    backward: device 1's 7-7.5 runs while device 0 still computes (device 1 waits on it
    anyway: the bubble), device 0's 9-9.5 past every op (busy). Bubble (3 + 3.5) / 19."""
    r = simulate("1f1b", 2, 2, uniform_stages(2, 1.0, 2.0), dp_allreduce_s=[0.5, 0.5])
    assert r.step_time_s == 9.5
    assert [d.compute_end_s for d in r.devices] == [9.0, 7.0]
    assert [(d.busy_s, d.idle_s) for d in r.devices] == [(6.5, 3.0), (6.0, 3.5)]
    assert [d.exposed_comm_s for d in r.devices] == [0.5, 0.0]
    assert r.bubble_rate == pytest.approx(6.5 / 19)
    # the same gathered before the first forward: device 0 waits 0.5 on it (busy);
    # device 1 waits for device 0's F0 until 1.5 anyway
    r = simulate("1f1b", 2, 2, uniform_stages(2, 1.0, 2.0), device_start_s=[0.5, 0.5])
    assert r.step_time_s == 9.5
    assert [(d.busy_s, d.idle_s) for d in r.devices] == [(6.5, 3.0), (6.0, 3.5)]
    assert r.bubble_rate == pytest.approx(6.5 / 19)


@pytest.mark.parametrize("sharding", list(Sharding))
def test_no_sharding_has_a_bubble_without_a_pipeline(sharding: Sharding) -> None:
    """gpt-small on 8 H100s, pp 1: ZeRO-3's gathers inside the ops and ZeRO-2's
    reduction tail alike are the GPU's work, so no plan without a pipeline idles, and
    the efficiency is the busy share of the step."""
    table, _ = analytic_costs(MODELS["gpt-small"], "h100-sxm", (4,), gpus=8)
    req = PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),))
    plan = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 1, 4, 1,
                                         (len(table.names),), sharding=sharding))
    assert plan.bubble_rate == 0.0
    [dev] = plan.sim.devices
    assert dev.busy_s == pytest.approx(plan.sim.step_time_s, rel=1e-12)
    assert plan.efficiency == pytest.approx(plan.sim.step_time_s / plan.step_time_s,
                                            rel=1e-12)
    if sharding in (Sharding.NONE, Sharding.ZERO1, Sharding.ZERO2):
        assert dev.exposed_comm_s > 0  # its once-a-step traffic, waited on


def test_in_a_pipeline_each_gpu_is_busy_with_its_own_traffic_past_the_last_op() -> None:
    """pp 2, ZeRO-1 (its traffic all after the backward): each GPU's exposed
    communication is its reduction past the pipeline's last op, and the step ends with
    the last reduction."""
    table, _ = analytic_costs(MODELS["gpt-small"], "h100-sxm", (1,), gpus=8)
    req = PlanRequest(gpus=8, global_batch=32, cost_keys=(CostKey(),))
    plan = evaluate(table, req, PlanSpec(Schedule.ONE_F_ONE_B, 2, 1, 8,
                                         tuple(add_ends([3, 3])), sharding=Sharding.ZERO1))
    ops_end = max(d.compute_end_s for d in plan.sim.devices)
    assert plan.sim.step_time_s == max(d.allreduce_end_s for d in plan.sim.devices) > ops_end
    for dev in plan.sim.devices:
        assert dev.exposed_comm_s == pytest.approx(max(0.0, dev.allreduce_end_s - ops_end))
    assert plan.bubble_rate == pytest.approx(
        sum(d.idle_s for d in plan.sim.devices) / (2 * plan.sim.step_time_s))
