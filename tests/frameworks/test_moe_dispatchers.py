"""The MoE token dispatchers in each framework's files: read, refused as the framework
refuses them, priced, written and read back to the same prediction.

Megatron-LM core_v0.16.1 / megatron-core 0.16.1 (transformer_config.py __post_init__,
moe/token_dispatcher.py MoEFlexTokenDispatcher), torchtitan 0.2.2
(config/job_config.py expert_parallel_comm_backend, models/deepseek_v3/infra/parallelize.py).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.costmodel import presets
from pptune.costmodel.dispatch import Dispatcher
from pptune.costmodel.keys import CostKey
from pptune.costmodel.moe import ExpertParallel
from pptune.costs.resolve import analytic_costs
from pptune.frameworks.common.adapter import Job
from pptune.frameworks.registry import ADAPTERS, Framework
from pptune.options import CostOptions
from tests.frameworks.test_moe_frameworks import FLAGS, mixtral, moe_job, run

runner = CliRunner()


def step(doc: dict) -> float:
    return float(doc["derived"]["step_time_s"])


# --- Megatron-LM --------------------------------------------------------------------


def test_megatron_dispatcher_flags_read_as_pptune_dispatchers(tmp_path: Path) -> None:
    def dispatcher_of(script: str) -> str:
        text = mixtral(tmp_path, script)[2]["config"]
        return str(text["moe_dispatcher"])

    assert dispatcher_of("") == "alltoall"  # the script states alltoall
    flex = "--moe-token-dispatcher-type flex"
    assert dispatcher_of(flex) == "deepep"  # deepep: the flex dispatcher's default backend
    assert dispatcher_of(flex + " --moe-enable-deepep") == "deepep"
    assert dispatcher_of(flex + " --moe-flex-dispatcher-backend deepep") == "deepep"
    assert dispatcher_of("--moe-token-dispatcher-type allgather") == "allgather"


def test_megatron_default_dispatcher_is_allgather_and_priced(tmp_path: Path) -> None:
    from tests.frameworks.test_moe_frameworks import MIXTRAL_SCRIPT

    script = MIXTRAL_SCRIPT.replace("--moe-token-dispatcher-type alltoall", "")
    code, found, doc = run(tmp_path, "m.sh", script.format(moe="", tp=1, ep=8, nodes=4),
                           "--gpu", "h100-sxm", "--output", "json")
    assert code == 0 and "megatron-unmodelled-flag" not in found
    assert doc["config"]["moe_dispatcher"] == "allgather"
    assert any("--moe-token-dispatcher-type unset: priced as Megatron-LM's default" in n
               for n in doc["notes"])


def test_deepep_sends_one_copy_a_rank(tmp_path: Path) -> None:
    """Mixtral's 8 experts over ep 2, top-2: the alltoall dispatcher sends both copies of
    a token, DeepEP one to each distinct rank (2 (1 - C(4,2)/C(8,2)) = 1.57 of them); over
    ep 8 each rank holds one expert, a token's two experts are on two ranks, and DeepEP
    saves nothing (its SMs cost a little more)."""
    def step_of(dispatcher: str, ep: int) -> float:
        return step(mixtral(tmp_path, f"--moe-token-dispatcher-type {dispatcher}", 1, ep)[2])

    assert step_of("flex", 2) < step_of("alltoall", 2)
    assert step_of("flex", 8) >= step_of("alltoall", 8)


@pytest.mark.parametrize(("moe", "rule", "words"), [
    ("--moe-enable-deepep", "megatron-deepep-flex", "only supported with flex token dispatcher"),
    ("--moe-token-dispatcher-type flex --moe-enable-deepep --moe-flex-dispatcher-backend "
     "hybridep", "megatron-deepep-flex", "Only one backend is supported"),
    ("--moe-token-dispatcher-type flex --moe-expert-capacity-factor 1.0 "
     "--moe-pad-expert-input-to-capacity", "megatron-deepep-capacity",
     "does not support moe_pad_expert_input_to_capacity"),
    ("--moe-router-group-topk 2", "megatron-group-routing",
     "moe_router_num_groups must be specified"),
    ("--moe-router-num-groups 3 --moe-router-group-topk 2", "megatron-group-routing",
     "the groups divide the experts"),
])
def test_megatron_refuses_what_megatron_core_refuses(tmp_path: Path, moe: str, rule: str,
                                                     words: str) -> None:
    code, found, _ = mixtral(tmp_path, moe.replace("--moe-token-dispatcher-type alltoall", ""))
    assert code == 1 and words in found[rule], found


def test_megatron_flex_needs_tensor_or_expert_parallelism(tmp_path: Path) -> None:
    code, found, _ = mixtral(tmp_path, "--moe-token-dispatcher-type flex", tp=1, ep=1)
    assert code == 1 and "Flex token dispatcher requires TPxEP > 1" in found["megatron-flex-tp-ep"]


def test_megatron_hybridep_is_priced_as_deepep_with_a_warning(tmp_path: Path) -> None:
    code, found, doc = mixtral(tmp_path, "--moe-token-dispatcher-type flex "
                               "--moe-flex-dispatcher-backend hybridep")
    assert code == 0 and "HybridEP's own are not modelled" in found["megatron-unmodelled-flag"]
    assert doc["config"]["moe_dispatcher"] == "deepep"


def test_megatron_group_limited_routing_is_read(tmp_path: Path) -> None:
    cfg = mixtral(tmp_path, "--moe-router-num-groups 4 --moe-router-group-topk 2")[2]["config"]
    assert (cfg["moe_router_num_groups"], cfg["moe_router_group_topk"]) == (4, 2)


def test_megatron_dispatcher_value_is_checked(tmp_path: Path) -> None:
    from tests.frameworks.test_moe_frameworks import MIXTRAL_SCRIPT

    path = tmp_path / "m.sh"
    path.write_text(MIXTRAL_SCRIPT.format(moe="--moe-token-dispatcher-type flex "
                                          "--moe-flex-dispatcher-backend nccl",
                                          tp=1, ep=8, nodes=4))
    r = runner.invoke(app, ["check-config", str(path), "--gpu", "h100-sxm"])
    assert r.exit_code == 2
    assert "--moe-flex-dispatcher-backend is 'nccl'; Megatron-LM accepts deepep, hybridep" \
        in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# --- torchtitan ---------------------------------------------------------------------

DEEPSEEK_TITAN = """[model]
name = "deepseek_v3"
flavor = "671B"
[training]
local_batch_size = 4
seq_len = 4096
[parallelism]
pipeline_parallel_degree = 8
data_parallel_shard_degree = 64
tensor_parallel_degree = 1
expert_parallel_degree = {ep}
expert_tensor_parallel_degree = {etp}
{extra}
"""


def deepseek(tmp_path: Path, extra: str, ep: int = 64, etp: int = 1
             ) -> tuple[int, dict[str, str], dict]:
    return run(tmp_path, "job.toml", DEEPSEEK_TITAN.format(extra=extra, ep=ep, etp=etp),
               "--gpus", "512", "--gpu", "h100-sxm")


def test_torchtitan_backend_key_is_the_dispatcher(tmp_path: Path) -> None:
    _, found, doc = deepseek(tmp_path, 'expert_parallel_comm_backend = "deepep"')
    assert doc["config"]["moe_dispatcher"] == "deepep", found
    standard = deepseek(tmp_path, 'expert_parallel_comm_backend = "standard"')[2]
    assert standard["config"]["moe_dispatcher"] == "alltoall"


def test_torchtitan_refuses_deepep_without_ep_or_with_etp(tmp_path: Path) -> None:
    key = 'expert_parallel_comm_backend = "deepep"'
    code, found, _ = deepseek(tmp_path, key, ep=1)
    assert code == 1 and "DeepEP requires expert parallelism" in found["torchtitan-deepep"]
    code, found, _ = run(tmp_path, "job.toml", DEEPSEEK_TITAN.format(extra=key, ep=8, etp=1)
                         .replace("tensor_parallel_degree = 1", "tensor_parallel_degree = 2")
                         .replace("expert_tensor_parallel_degree = 1",
                                  "expert_tensor_parallel_degree = 2"),
                         "--gpus", "1024", "--gpu", "h100-sxm")
    assert code == 1 and "(ETP) is not supported yet" in found["torchtitan-deepep"]


def test_torchtitan_bad_backend_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "job.toml"
    path.write_text(DEEPSEEK_TITAN.format(extra='expert_parallel_comm_backend = "nccl"', ep=64,
                                          etp=1))
    r = runner.invoke(app, ["check-config", str(path), "--gpus", "512"])
    assert r.exit_code == 2
    assert "expert_parallel_comm_backend is 'nccl'; torchtitan takes standard or deepep" \
        in r.stderr


# --- emit -> check-config: the same dispatcher and prediction ----------------------------


def deepep_job(model: str, tp: int, ep: int, pp: int, gpus: int) -> tuple[Job, object]:
    """A job priced with the DeepEP dispatcher, and a 1F1B plan of it."""
    return moe_job(model, tp, ep, pp, gpus, dispatcher=Dispatcher.DEEPEP)


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.PPTUNE])
def test_emitted_deepep_plans_read_back_the_same(framework: Framework, tmp_path: Path) -> None:
    job, plan = deepep_job("deepseek-v3", tp=2, ep=64, pp=8, gpus=1024)
    adapter = ADAPTERS[framework]
    stated = adapter.express(job, plan, 1)
    files = adapter.write(stated)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    name, flags = FLAGS[framework]
    flags = ["--gpu", "h100-sxm"] if framework is Framework.MEGATRON else flags
    r = runner.invoke(app, ["check-config", str(tmp_path / name), "--output", "json", *flags])
    doc = json.loads(r.stdout)
    assert doc["config"]["moe_dispatcher"] == "deepep"
    assert doc["derived"]["step_time_s"] == pytest.approx(stated.plan.step_time_s, rel=1e-9)
    if framework is Framework.MEGATRON:
        text = files[name]
        assert "--moe-token-dispatcher-type flex" in text
        assert "--moe-flex-dispatcher-backend deepep" in text
        assert "--moe-router-num-groups 8" in text and "--moe-router-group-topk 4" in text


def test_frameworks_without_deepep_reprice_the_all_to_all() -> None:
    """DeepSpeed's MoE runs its all-to-all, torchtitan's qwen3 the standard one: the
    stated plan is priced so, and says so; torchtitan's deepseek_v3 writes the key."""
    job, plan = deepep_job("deepseek-v3", tp=1, ep=64, pp=8, gpus=512)
    titan = ADAPTERS[Framework.TORCHTITAN]
    stated = titan.express(job, plan, 1)
    assert stated.job.cost_options is not None
    assert stated.job.cost_options.moe_dispatcher is Dispatcher.DEEPEP
    assert 'expert_parallel_comm_backend = "deepep"' in titan.write(stated)["torchtitan.toml"]
    qwen, qplan = deepep_job("qwen3-30b-a3b", tp=1, ep=8, pp=1, gpus=64)
    stated = titan.express(qwen, qplan, 1)
    assert stated.job.cost_options is not None
    assert stated.job.cost_options.moe_dispatcher is Dispatcher.ALLTOALL
    assert any("standard all-to-all" in n for n in stated.notes)
    assert stated.plan.step_time_s > qplan.step_time_s  # DeepEP sends fewer copies
    ds = ADAPTERS[Framework.DEEPSPEED].express(qwen, qplan, 1)
    assert ds.job.cost_options is not None
    assert ds.job.cost_options.moe_dispatcher is Dispatcher.ALLTOALL


def test_recommend_takes_the_dispatcher(tmp_path: Path) -> None:
    base = ["recommend", "--gpus", "64", "--model", "qwen3-30b-a3b", "--ep", "8", "--tp", "1",
            "--json"]
    steps, notes = {}, {}
    for d in ("alltoall", "deepep", "allgather"):
        r = runner.invoke(app, [*base, "--moe-dispatcher", d])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        steps[d] = doc["plans"][0]["step_time_s"]
        notes[d] = [n for n in doc["notes"] if n.startswith("with DeepEP's dispatch")]
    assert steps["deepep"] < steps["alltoall"]
    # the alltoall winner's step re-priced with DeepEP, said in one note; none when the
    # job already runs DeepEP
    assert len(notes["alltoall"]) == 1 and notes["deepep"] == []
    said = float(notes["alltoall"][0].split("would step ")[1].split(" s")[0])
    assert said == pytest.approx(steps["deepep"], rel=0.05)
    r = runner.invoke(app, [*base, "--moe-dispatcher", "nccl"])
    assert r.exit_code == 2 and "--moe-dispatcher must be one of" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1  # stdout: --json's error document
    assert json.loads(r.stdout)["error"] == r.stderr.strip().removeprefix("pptune: error: ")


def test_emitting_a_deepep_plan_from_the_cli_states_it(tmp_path: Path) -> None:
    out = tmp_path / "launch"
    r = runner.invoke(app, ["recommend", "--gpus", "64", "--model", "mixtral-8x7b", "--ep", "8",
                            "--tp", "1", "--moe-dispatcher", "deepep", "--emit", "pptune",
                            "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "moe_dispatcher: deepep" in (out / "pptune.yaml").read_text()


def test_cost_options_carry_the_dispatcher_into_every_repricing() -> None:
    """Every re-pricing of a job (express.priced_as_run, torchtitan's exchange and per-op
    checkpointing) builds its experts from the job's options, dispatcher included."""
    ex = replace(CostOptions(moe_imbalance=1.5), moe_dispatcher=Dispatcher.DEEPEP).experts()
    assert (ex.dispatcher, ex.imbalance, ex.ep, ex.etp) == (Dispatcher.DEEPEP, 1.5, 1, 1)


def test_deepep_sms_are_read_and_priced(tmp_path: Path) -> None:
    """--moe-deepep-num-sms: the SMs DeepEP's kernels hold beside compute (megatron-core's
    moe_deepep_num_sms, 20 by default): the table's all-to-all SM share is that over the
    GPU's 132."""
    cfg = mixtral(tmp_path, "--moe-token-dispatcher-type flex --moe-deepep-num-sms 32")[2]
    assert cfg["config"]["moe_dispatcher_sms"] == 32
    shape = presets.MODELS["qwen3-30b-a3b"]
    key = CostKey(ep=8)
    shares = {}
    for sms in (20, 32):
        ex = ExpertParallel(dispatcher=Dispatcher.DEEPEP, dispatch_sms=sms)
        table, _ = analytic_costs(shape, "h100-sxm", (1,), key, ex, gpus=64)
        shares[sms] = table.a2a_sm_share
    assert shares == {20: pytest.approx(20 / 132), 32: pytest.approx(32 / 132)}
    alltoall, _ = analytic_costs(shape, "h100-sxm", (1,), key, gpus=64)
    assert alltoall.a2a_sm_share is None  # NCCL's collectives: the fabric's share


def test_recommend_says_the_moe_host_time_is_not_priced() -> None:
    """An MoE model priced analytically gets one note that the host time of its layers'
    kernels and a dropless layer's synchronisation are not priced; a dense one none."""
    def host_notes(*args: str) -> list[str]:
        r = runner.invoke(app, ["recommend", "--gpus", "16", *args, "--top", "1", "--json"])
        assert r.exit_code == 0, r.output
        return [n for n in json.loads(r.stdout)["notes"] if "host" in n]

    moe = host_notes("--model", "qwen3-30b-a3b", "--global-batch", "1024")
    assert len(moe) == 1 and "not priced" in moe[0] and "calibrate" in moe[0]
    assert host_notes("--model", "llama3-8b") == []
