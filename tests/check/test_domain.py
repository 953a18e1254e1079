"""The NVLink domain check-config prices (pptune.check.domain), and what becomes of
--gpus-per-node where the file states its own node size."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from pptune.check.domain import FLAG_VALUE, with_nvlink_domain
from pptune.cli.app import app
from pptune.costmodel.calibration import Factors
from pptune.frameworks.common.fields import Flags
from pptune.frameworks.read import read_config
from pptune.options import CostOptions
from pptune.schemas import TrainingConfig
from pptune.tune import jobs

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
QWEN = DATA / "megatron_qwen3_235b_ep32.sh"  # 32 nodes of 8 (--nproc_per_node 8)

Found = list[tuple[str, str, str, dict[str, Any]]]


def domain(node: int, gpu: str, asked: int | None, **more: Any) -> tuple[int, Found]:
    """The domain priced for a file that states nodes of ``node`` on ``gpu`` with
    --gpus-per-node ``asked``, and the findings."""
    cfg = TrainingConfig.model_validate({"micro_batch_size": 1, "gpus_per_node": node,
                                         "gpu": gpu, **more})
    found: Found = []
    out = with_nvlink_domain(cfg, CostOptions(), lambda *a, **v: found.append((*a, v)),
                             asked)
    return out.gpus_per_node, found


def test_the_flag_sets_the_domain_of_a_files_gb200_hosts() -> None:
    """A GB200 NVL72 rack used as 64 GPUs: the script's --nproc_per_node 4 is a compute
    tray, one host of the domain; --gpus-per-node 64 is that domain, said once."""
    priced, found = domain(4, "gb200", 64)
    assert priced == 64
    assert found == [("nvlink-domain", "info", "NVLink domain priced as 64 GPUs "
                      "(--gpus-per-node 64, of gb200's 72): the 4 GPUs a node runs are one "
                      "host of it", {"gpus_per_node": 64, FLAG_VALUE: 64})]
    # without the flag, the rack's 72 (as before)
    assert domain(4, "gb200", None)[0] == 72


@pytest.mark.parametrize(("node", "gpu", "asked", "why", "priced"), [
    (4, "gb200", 6, "an NVLink domain holds whole hosts: a multiple of the 4 GPUs a node runs",
     72),
    (4, "gb200", 2, "an NVLink domain holds whole hosts: a multiple of the 4 GPUs a node runs",
     72),
    (4, "gb200", 144, "gb200's NVLink domain holds at most 72 GPUs", 72),
    (72, "gb200", 64, "that is more than one 4-GPU host of gb200: it is priced as the NVLink "
     "domain itself", 72),
    (8, "b200", 16, "b200's NVLink domain is one host of 8 GPUs: the node the file launches "
     "is the domain priced", 8),
])
def test_a_flag_that_cannot_be_the_domain_is_said_overridden_once(
        node: int, gpu: str, asked: int, why: str, priced: int) -> None:
    got, found = domain(node, gpu, asked)
    assert got == priced
    [ignored] = [f for f in found if FLAG_VALUE in f[3]]
    assert ignored == ("gpus-per-node-ignored", "info", f"--gpus-per-node {asked} ignored: "
                       f"the file states a node size = {node}, and {why}",
                       {"gpus_per_node": node, FLAG_VALUE: asked})


def test_a_profile_prices_the_node_as_stated() -> None:
    priced, found = domain(4, "gb200", 64, profile="measured.json")
    assert priced == 4
    assert [f[2] for f in found] == [
        "--gpus-per-node 64 ignored: the file states a node size = 4, and the costs come "
        "from a profile, which is priced on the node the file states"]


def test_the_reader_leaves_a_node_flag_against_the_file_to_check_config() -> None:
    """The script states --nproc_per_node 8: the reader keeps it and notes nothing of the
    flag; check-config says what became of it, in one finding."""
    read = read_config(QWEN, gpus_per_node=64)
    assert read.config.gpus_per_node == 8 and read.semantics.gpus_per_node_flag == 64
    assert not any("--gpus-per-node" in n for n in read.notes)
    read = read_config(QWEN, gpus_per_node=8)  # the file's own: nothing to say
    assert read.semantics.gpus_per_node_flag is None


def test_check_config_applies_it_to_a_gb200_script(tmp_path: Path) -> None:
    script = tmp_path / "gb200.sh"
    script.write_text(QWEN.read_text().replace("GPUS_PER_NODE=8", "GPUS_PER_NODE=4")
                      .replace("SLURM_NNODES:-32", "SLURM_NNODES:-64"))
    r = CliRunner().invoke(app, ["check-config", str(script), "--gpu", "gb200",
                                 "--gpus-per-node", "64", "--no-compare", "--output", "json"])
    doc = json.loads(r.stdout)
    said = [f for f in doc["findings"] if FLAG_VALUE in f["values"]]
    assert [(f["id"], f["values"]["gpus_per_node"]) for f in said] == [("nvlink-domain", 64)]
    assert not any("--gpus-per-node" in n for n in doc["notes"])
    assert [f["id"] for f in doc["findings"]].count("nvlink-domain") == 1


def test_calibrate_notes_what_became_of_the_flag() -> None:
    loaded = jobs.load(jobs.Measurement(DATA / "megatron_llama3_8b.sh", step_s=9.0,
                                        flags=Flags(gpus_per_node=4)), "h100-sxm", None, None)
    assert any("--gpus-per-node 4 ignored: the file states a node size = 8, and h100-sxm's "
               "NVLink domain is one host of 8 GPUs" in n for n in loaded.notes)


def gb200_script(tmp_path: Path) -> Path:
    """The Qwen3 EP32 script on 64 GB200 compute trays of 4 GPUs (256 GPUs)."""
    script = tmp_path / "gb200.sh"
    script.write_text(QWEN.read_text().replace("GPUS_PER_NODE=8", "GPUS_PER_NODE=4")
                      .replace("SLURM_NNODES:-32", "SLURM_NNODES:-64"))
    return script


def test_calibrate_prices_a_gb200_job_on_its_72_gpu_domain(tmp_path: Path) -> None:
    """calibrate's job at factors 1 is the step check-config prices for the same file and
    GPU: the rack's 72-GPU NVLink domain, not the script's trays of 4 (whose expert
    all-to-all would run over the NICs)."""
    script = gb200_script(tmp_path)
    job = jobs.load(jobs.Measurement(script, step_s=3.0), "gb200", None, None)
    at_one = jobs.simulated(job, Factors())
    assert at_one.request is not None and at_one.request.gpus_per_node == 72
    r = CliRunner().invoke(app, ["check-config", str(script), "--gpu", "gb200",
                                 "--no-compare", "--output", "json"])
    doc = json.loads(r.stdout)
    assert at_one.derived["step_time_s"] == pytest.approx(doc["derived"]["step_time_s"],
                                                          rel=1e-3)


def test_a_calibrated_profile_prices_its_gpus_domain(tmp_path: Path) -> None:
    """check-config --profile with a calibrated GB200 profile: the domain of the GPU the
    calibration ran on (72), said as without a profile."""
    script = gb200_script(tmp_path)
    out = tmp_path / "cal.json"
    r = CliRunner().invoke(app, ["calibrate", "--run", str(script), "--step-s", "3.0",
                                 "--gpu", "gb200", "-o", str(out)])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(app, ["check-config", str(script), "--profile", str(out),
                                 "--no-compare", "--output", "json"])
    doc = json.loads(r.stdout)
    [said] = [f for f in doc["findings"] if f["id"] == "nvlink-domain"]
    assert said["values"]["gpus_per_node"] == 72


def test_a_stray_profile_in_the_working_folder_is_said(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that names no model, checked where a probe left ./pptune-profile.json:
    the file prices it (the resolver's third row), with a warning naming what it measured,
    and stderr names the costs as recommend's does."""
    link = {"latency_s": 0.0, "bytes_per_s": 1e30}
    probe = {"source": "probe", "model": {"name": "gpt-small", "seq_len": 8},
             "device": {"name": "cpu", "memory_bytes": 1e12},
             "links": {"intra_node": {"p2p": link, "allreduce": link},
                       "inter_node": {"p2p": link, "allreduce": link}},
             "layers": [{"name": f"block.{i}", "param_bytes": 0.0, "per_micro_batch": {"1": {
                 "fwd_s": 1e-3, "bwd_s": 2e-3, "wgrad_s": 0.0, "act_bytes": 0.0,
                 "out_bytes": 0.0}}} for i in range(4)]}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pptune-profile.json").write_text(json.dumps(probe))
    (tmp_path / "job.yaml").write_text("pp: 2\ngpus: 2\nmicro_batch_size: 1\n"
                                       "global_batch: 8\nschedule: 1f1b\n")
    r = CliRunner().invoke(app, ["check-config", "job.yaml", "--no-compare"])
    assert "pptune: costs: profile ./pptune-profile.json" in r.stderr
    assert ("warning profile-from-folder: costs from ./pptune-profile.json in the working "
            "folder (probe of gpt-small on cpu), which neither the config nor a flag names"
            in " ".join(r.stdout.split()))
    named = CliRunner().invoke(app, ["check-config", "job.yaml", "--no-compare",
                                     "--profile", "pptune-profile.json"])
    assert "profile-from-folder" not in named.stdout


def test_a_job_that_leaves_a_rack_part_full_names_a_share_that_divides_it() -> None:
    """512 GB200s are 7 NVL72 racks and 8 GPUs of an eighth: groups that cross a rack are
    priced over the NICs, and an info finding says so and names racks used as 64 (a user
    trial found such a job priced 3.7x slower than 504 GPUs, with no word); with
    --gpus-per-node 64 the job is whole racks and nothing is said."""
    priced, found = domain(4, "gb200", None, gpus=512)
    partial = [f for f in found if f[0] == "nvlink-domain-partial"]
    assert priced == 72 and len(partial) == 1 and partial[0][1] == "info"
    assert partial[0][2].startswith("512 GPUs fill 7 NVLink domains of 72 and 8 GPUs of one more")
    assert "--gpus-per-node 64 prices 8 racks used as 64 GPUs each" in partial[0][2]
    assert partial[0][3] == {"gpus": 512, "gpus_per_node": 72}
    priced, found = domain(4, "gb200", 64, gpus=512)
    assert priced == 64 and not [f for f in found if f[0] == "nvlink-domain-partial"]
    assert not [f for f in domain(8, "h100-sxm", None, gpus=64)[1]
                if f[0] == "nvlink-domain-partial"]
