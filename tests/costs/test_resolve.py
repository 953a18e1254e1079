"""The one cost resolver: where the costs come from, what it refuses, model FLOPs."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costs.profiles import analytic_profile
from pptune.costs.resolve import CostOptions, model_flops_per_token, resolve
from pptune.errors import BadInput
from pptune.schemas import DeviceInfo, Layer, LayerCost, Profile


def _write_profile(path: Path) -> Path:
    path.write_text(analytic_profile("gpt-small", "h100-sxm", [1, 2]).model_dump_json())
    return path


def test_order_profile_then_presets_then_local_file_then_default(tmp_path: Path) -> None:
    prof = _write_profile(tmp_path / "p.json")
    assert resolve(CostOptions(profile=prof), cwd=tmp_path).origin.startswith(f"profile {prof}")
    assert resolve(CostOptions(), cwd=tmp_path).origin.endswith("(embedded default: no profile found)")
    _write_profile(tmp_path / "pptune-profile.json")
    assert resolve(CostOptions(), cwd=tmp_path).origin == "profile ./pptune-profile.json (analytic)"
    got = resolve(CostOptions(model="gpt3-1.3b", gpu="a100-80gb"), cwd=tmp_path)
    assert got.origin == "analytic gpt3-1.3b on a100-80gb" and not got.measured


def test_seq_len_is_honoured_for_analytic_costs_and_refused_for_measured(tmp_path: Path) -> None:
    assert resolve(CostOptions(seq_len=4096), cwd=tmp_path).table.seq_len == 4096
    assert resolve(CostOptions(gpu="a100-80gb", seq_len=512), cwd=tmp_path).table.seq_len == 512
    prof = _write_profile(tmp_path / "p.json")
    assert resolve(CostOptions(profile=prof, seq_len=128), cwd=tmp_path).table.seq_len == 128
    with pytest.raises(BadInput, match="measured at sequence length 128"):
        resolve(CostOptions(profile=prof, seq_len=4096), cwd=tmp_path)


@pytest.mark.parametrize("opts", [CostOptions(gpu="h200"), CostOptions(efficiency=0.4),
                                  CostOptions(model="gpt-small")])
def test_analytic_flags_are_refused_with_a_profile(tmp_path: Path, opts: CostOptions) -> None:
    prof = _write_profile(tmp_path / "p.json")
    with pytest.raises(BadInput, match="describe analytic costs"):
        resolve(CostOptions(**{**opts.__dict__, "profile": prof}), cwd=tmp_path)


@pytest.mark.parametrize(("opts", "words"), [
    (CostOptions(tp=0), "--tp must be >= 1"),
    (CostOptions(efficiency=float("nan")), "--efficiency must be a finite number"),
    (CostOptions(efficiency=0.0), r"--efficiency must be in \(0, 1\]"),
    (CostOptions(seq_len=0), "--seq-len must be >= 1"),
])
def test_numbers_are_checked_once_naming_the_flag(opts: CostOptions, words: str) -> None:
    with pytest.raises(BadInput, match=words):
        resolve(opts)
    with pytest.raises(BadInput, match="micro-batch size must be >= 1"):
        resolve(CostOptions(), sizes=(1, 0))


def test_model_flops_per_token_by_hand() -> None:
    cost = LayerCost(fwd_s=1e-3, bwd_s=2e-3, act_bytes=0, out_bytes=0)
    prof = Profile(
        source="probe",
        model={"name": "toy", "seq_len": 16, "hidden_size": 8, "num_blocks": 1},
        device=DeviceInfo(name="x", memory_bytes=1e9),
        links=analytic_profile("gpt-small", "h100-sxm", [1]).links,
        layers=[Layer(name=n, param_bytes=b, per_micro_batch={"1": cost})
                for n, b in (("embedding", 200), ("block0", 400), ("head", 200))],
    )
    # N = (400 + 200) bytes / 2 = 300 parameters: 6 x 300 + 6 x 1 x 8 x 16 = 1800 + 768
    assert model_flops_per_token(prof) == 2568
    assert model_flops_per_token(prof, tp_in_costs=2) == 2 * 1800 + 768
