"""recommend --max-memory F: plans use at most F of each GPU's memory, the reserve
included, as check-config's --max-memory caps a config (one option, declared once)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.presets import GPUS
from pptune.plan.recommend import RecommendSpec, recommend

runner = CliRunner()
H100 = GPUS["h100-sxm"].memory_bytes  # 81,559 MiB


def test_plans_fit_the_share_of_memory_asked() -> None:
    free = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", top=3))
    # the winner with the whole GPU fills more than 60% of it
    assert max(free.result.plans[0].peak_memory_bytes) > 0.6 * H100
    capped = recommend(RecommendSpec.of(gpus=8, model="llama3-8b", gpu="h100-sxm", top=3,
                                        max_memory=0.6))
    assert capped.result.plans
    for plan in capped.result.plans:
        assert plan.memory_capacity_bytes == 0.6 * H100
        assert max(plan.peak_memory_bytes) <= 0.6 * H100
    assert capped.request.space.max_memory == 0.6


def test_the_plan_file_records_it_and_bad_shares_are_one_line() -> None:
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--model", "llama3-8b", "--top", "1",
                            "--max-memory", "0.9", "--json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["request"]["max_memory"] == 0.9
    assert doc["plans"][0]["memory_capacity_bytes"] == 0.9 * H100
    for bad in ("0", "1.5"):  # check-config's words for its --max-memory
        r = runner.invoke(app, ["recommend", "--gpus", "8", "--max-memory", bad])
        assert r.exit_code == 2 and r.stderr.strip().count("\n") == 0
        assert f"--max-memory must be in (0, 1] (got {float(bad)})" in r.stderr
