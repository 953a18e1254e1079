"""DeepSpeed configs as users write them: ZeRO-Offload (what it keeps in host memory is
not counted on the GPU, and the time it adds is named as not priced), and a config
without a GPU count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.read import read_config
from tests.check_json import check_file


def config(**zero: object) -> str:
    return json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                       "bf16": {"enabled": True}, "zero_optimization": zero})


def peak(doc: dict) -> float:
    return max(doc["derived"]["peak_memory_bytes"])


def run(tmp_path: Path, name: str, **zero: object) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / name, config(**zero), "--gpus", "8", "--model", "llama3-8b",
                      "--gpu", "h100-sxm")


def test_offloaded_optimizer_state_leaves_the_gpu(tmp_path: Path) -> None:
    """ZeRO-2 over 8 GPUs: the optimizer's 12 bytes a parameter over dp (master weights and
    two moments) go to the host: 8,030,261,248 x 12 / 8 bytes fewer a GPU."""
    _, found, plain = run(tmp_path, "a.json", stage=2)
    _, found, off = run(tmp_path, "b.json", stage=2, offload_optimizer={"device": "cpu"})
    assert found["deepspeed-offload"] == "warning"
    assert plain["derived"]["step_time_s"] == off["derived"]["step_time_s"]
    assert peak(plain) - peak(off) == 8_030_261_248 * 12 / 8
    # ZeRO-3 with the weights too: 2 bytes a parameter over dp more
    _, _, z3 = run(tmp_path, "c.json", stage=3, offload_optimizer={"device": "nvme"})
    _, _, z3p = run(tmp_path, "d.json", stage=3, offload_optimizer={"device": "cpu"},
                    offload_param={"device": "cpu"})
    assert peak(z3) - peak(z3p) == 8_030_261_248 * 2 / 8


def test_offload_outside_its_stages_and_unknown_devices(tmp_path: Path) -> None:
    _, found, doc = run(tmp_path, "e.json", stage=2, offload_param={"device": "cpu"})
    assert "deepspeed-offload" not in found  # offload_param is ZeRO-3's: ignored, a note
    assert any("offload_param ignored at ZeRO stage 2" in n for n in doc["notes"])
    code, found, _ = run(tmp_path, "f.json", stage=2, offload_optimizer={"device": "gpu"})
    assert code == 1 and found["deepspeed-offload-device"] == "error"
    _, found, _ = run(tmp_path, "g.json", stage=2, offload_optimizer={"device": "none"})
    assert "deepspeed-offload" not in found


def test_without_a_gpu_count_the_accumulation_is_not_derived_at_dp_1(tmp_path: Path) -> None:
    """train_batch_size and the micro-batch without gradient_accumulation_steps: DeepSpeed
    derives GA at its world size, which the file does not state; check-config assumes dp
    (a warning) instead of deriving GA at dp 1 and then inferring dp 1 from it."""
    _, found, doc = check_file(tmp_path / "ds.json", config(stage=1), "--model", "llama3-8b",
                               "--gpu", "h100-sxm")
    assert found["dp-assumed"] == "warning" and "dp-inferred" not in found
    assert not any("derived as DeepSpeed does" in n for n in doc["notes"])
    assert not any("pipeline partition not stated" in n for n in doc["notes"])  # no pipeline


def test_a_checkpoint_interval_of_n_groups_n_blocks(tmp_path: Path) -> None:
    """PipelineModule checkpoints each run of activation_checkpoint_interval layers of a
    stage as one (deepspeed/runtime/pipe/module.py forward): an interval of 2 keeps half
    the inputs and re-creates two blocks at once, the same step as an interval of 1."""
    base = json.loads((Path(__file__).parents[1] / "data" / "configs" / "ds_config.json"
                       ).read_text())
    docs = []
    for n in (1, 2):
        base["pipeline"]["activation_checkpoint_interval"] = n
        docs.append(check_file(tmp_path / f"ds{n}.json", json.dumps(base), "--model", "llama3-8b",
                               "--gpu", "h100-sxm")[2])
    one, two = docs
    assert (one["config"]["recompute"], two["config"]["recompute"]) == ("full", "full")
    assert (one["config"]["recompute_uniform_layers"],
            two["config"]["recompute_uniform_layers"]) == (None, 2)
    assert any("each run of 2 transformer blocks" in n for n in two["notes"])
    assert one["derived"]["step_time_s"] == two["derived"]["step_time_s"]
    assert one["derived"]["peak_memory_bytes"] != two["derived"]["peak_memory_bytes"]


def test_nvme_is_said_nvme_and_its_state_priced_off_the_gpu(tmp_path: Path) -> None:
    """ZeRO-3 swaps to NVMe what device "nvme" names (runtime/zero/stage3.py
    _configure_tensor_swapping, partition_parameters.py); its memory is off the GPU as
    the host's is. ZeRO-1/2's optimizer (runtime/zero/stage_1_and_2.py) takes any device
    but none as the CPU: there "nvme" is host memory."""
    flags = ("--gpus", "8", "--model", "llama3-8b", "--gpu", "h100-sxm")
    _, _, cpu = run(tmp_path, "a.json", stage=3, offload_optimizer={"device": "cpu"},
                    offload_param={"device": "cpu"})
    _, said, nvme = check_file(tmp_path / "b.json", config(
        stage=3, offload_optimizer={"device": "nvme", "nvme_path": "/nvme"},
        offload_param={"device": "nvme", "nvme_path": "/nvme"}), *flags, by="message")
    assert peak(cpu) == peak(nvme)
    assert said["deepspeed-offload"].startswith(
        "ZeRO-Offload (the optimizer state and the parameters to NVMe, nvme_path): that "
        "state is not counted on the GPU; the host's optimizer step and the copies each "
        "step (PCIe, and NVMe reads and writes) are not priced")
    _, said, _ = check_file(tmp_path / "c.json", config(
        stage=3, offload_optimizer={"device": "cpu"}, offload_param={"device": "nvme"}),
        *flags, by="message")
    assert said["deepspeed-offload"].startswith(
        "ZeRO-Offload (the optimizer state to host memory, the parameters to NVMe, "
        "nvme_path):")
    _, said, _ = check_file(tmp_path / "d.json", config(
        stage=2, offload_optimizer={"device": "nvme"}), *flags, by="message")
    assert said["deepspeed-offload"].startswith(
        "ZeRO-Offload (the optimizer state to host memory: at ZeRO stage 2 DeepSpeed's "
        "optimizer takes device \"nvme\" as the CPU, runtime/zero/stage_1_and_2.py "
        "DeepSpeedZeroOptimizer):")


def test_the_deprecated_offload_keys_are_read_as_deepspeed_reads_them(tmp_path: Path) -> None:
    """DeepSpeedZeroConfig sets offload_optimizer / offload_param {"device": "cpu"} from a
    true cpu_offload / cpu_offload_param, and logs that each is deprecated: the same
    prediction as the keys that replace them, 8,030,261,248 x (12 + 2) / 8 bytes a GPU
    fewer than ZeRO-3 without offload, with a warning per deprecated key."""
    _, _, plain = run(tmp_path, "a.json", stage=3)
    _, _, new = run(tmp_path, "b.json", stage=3, offload_optimizer={"device": "cpu"},
                    offload_param={"device": "cpu"})
    _, found, old = run(tmp_path, "c.json", stage=3, cpu_offload=True, cpu_offload_param="yes")
    assert found["deepspeed-deprecated-key"] == "warning"
    assert found["deepspeed-offload"] == "warning"
    assert old["derived"] == new["derived"]
    assert peak(plain) - peak(old) == 8_030_261_248 * (12 + 2) / 8
    warned = [f["message"] for f in old["findings"] if f["id"] == "deepspeed-deprecated-key"]
    assert warned == [
        "zero_optimization.cpu_offload: DeepSpeed logs 'Config parameter cpu_offload is "
        "deprecated use offload_optimizer instead' (deepspeed/runtime/zero/config.py "
        "DeepSpeedZeroConfig, runtime/config_utils.py _process_deprecated_field); read as "
        "offload_optimizer {\"device\": \"cpu\"}",
        "zero_optimization.cpu_offload_param: DeepSpeed logs 'Config parameter "
        "cpu_offload_param is deprecated use offload_param instead' (deepspeed/runtime/zero/"
        "config.py DeepSpeedZeroConfig, runtime/config_utils.py _process_deprecated_field); "
        "read as offload_param {\"device\": \"cpu\"}"]


def test_deprecated_offload_keys_off_outside_their_stage_or_with_their_replacement(
        tmp_path: Path) -> None:
    # false (or pin memory, which sets nothing): warned, nothing offloaded
    _, found, doc = run(tmp_path, "a.json", stage=2, cpu_offload=False,
                        cpu_offload_use_pin_memory=True)
    assert found["deepspeed-deprecated-key"] == "warning" and "deepspeed-offload" not in found
    assert not doc["config"]["offload_optimizer"]
    # cpu_offload_param sets offload_param, which is ZeRO-3's
    _, found, doc = run(tmp_path, "b.json", stage=2, cpu_offload_param=True)
    assert "deepspeed-offload" not in found
    assert any("zero_optimization.cpu_offload_param ignored at ZeRO stage 2" in n
               for n in doc["notes"])
    # both spellings: DeepSpeed's assertion; the replacing key is read
    code, found, doc = run(tmp_path, "c.json", stage=3, cpu_offload=False,
                           offload_optimizer={"device": "cpu"})
    said = [(f["severity"], f["message"][:60]) for f in doc["findings"]
            if f["id"] == "deepspeed-deprecated-key"]
    assert code == 1 and sorted(said) == [
        ("error", "zero_optimization.cpu_offload with zero_optimization.offload"),
        ("warning", "zero_optimization.cpu_offload: DeepSpeed logs 'Config parame")]
    assert doc["config"]["offload_optimizer"]


def test_a_deprecated_offload_key_that_is_no_bool_is_bad_input(tmp_path: Path) -> None:
    """pydantic takes true/false, 0/1 and yes/no-like words for DeepSpeedZeroConfig's
    Optional[bool]; anything else is its ValidationError: one line, bad input."""
    path = tmp_path / "ds.json"
    path.write_text(config(stage=2, cpu_offload="maybe"))
    with pytest.raises(BadInput) as info:
        read_config(path, gpus=8)
    assert str(info.value) == (
        f"{path}: zero_optimization.cpu_offload is 'maybe'; DeepSpeedZeroConfig takes true or "
        "false (a pydantic bool): set true or false, or use offload_optimizer instead")
