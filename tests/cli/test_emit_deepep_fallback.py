"""DeepEP asked where megatron-core cannot run it: its flex dispatcher needs tp x ep > 1
("Flex token dispatcher requires TPxEP > 1"), so a Megatron-LM script of a tp 1, ep 1
plan states the alltoall dispatcher, and recommend prices the plan with it, as
check-config prices the file (a user trial: the header said 703.1 ms with DeepEP's price,
check-config 761.1 ms for the alltoall the file states)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel.dispatch import Dispatcher
from pptune.frameworks.megatron.closest import dispatcher

runner = CliRunner()


def test_the_script_states_deepep_only_where_tp_times_ep_exceeds_one() -> None:
    assert dispatcher(Dispatcher.DEEPEP, 1, 1) is Dispatcher.ALLTOALL
    assert dispatcher(Dispatcher.DEEPEP, 1, 2) is Dispatcher.DEEPEP
    assert dispatcher(Dispatcher.DEEPEP, 2, 1) is Dispatcher.DEEPEP
    assert dispatcher(Dispatcher.ALLGATHER, 1, 1) is Dispatcher.ALLGATHER


def test_a_tp1_ep1_plan_is_priced_with_the_alltoall_its_script_states(tmp_path: Path) -> None:
    r = runner.invoke(app, ["recommend", "--model", "qwen3-30b-a3b", "--gpu", "gb200",
                            "--gpus", "64", "--framework", "megatron", "--moe-dispatcher",
                            "deepep", "--ep", "1", "--tp", "1", "--pp", "1", "--emit",
                            "megatron", "-o", str(tmp_path / "out")])
    assert r.exit_code == 0, r.stderr
    assert "and the alltoall dispatcher (megatron-core's flex dispatcher needs tp x ep > 1)" \
        in " ".join(r.stderr.split())
    script = (tmp_path / "out" / "pretrain_megatron.sh").read_text()
    assert "--moe-token-dispatcher-type alltoall" in script
    assert "--moe-flex-dispatcher-backend" not in script
    header = re.search(r"# predicted: step ([\d.]+) ms", script)
    assert header is not None
    check = runner.invoke(app, ["check-config", str(tmp_path / "out" / "pretrain_megatron.sh"),
                                "--json"])
    assert check.exit_code in (0, 1), check.stderr
    step = json.loads(check.stdout)["derived"]["step_time_s"]
    assert round(step * 1e3, 1) == float(header.group(1))
