"""The one cost resolver: its precedence table row by row, what it refuses, model FLOPs."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costmodel.loss import CrossEntropy
from pptune.costs.modelspec import from_sizes
from pptune.costs.profiles import analytic_profile
from pptune.costs.resolve import (
    CostOptions,
    Costs,
    Mode,
    QuickProbe,
    find,
    model_flops_per_token,
    resolve,
)
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


def _probe(calls: list[str]) -> QuickProbe:
    def measure() -> Profile:
        calls.append("probe")
        return analytic_profile("gpt-small", "a100-80gb", [1])

    return QuickProbe(measure, "quick probe here")


LOCAL = "profile ./pptune-profile.json (analytic)"
DEFAULT = "analytic llama3-8b on h100-sxm (embedded default: no profile found)"
# (mode, the options named, a local ./pptune-profile.json?, where the costs come from):
# one row per row and column of the table in pptune/costs/resolve.py
TABLE = [
    # row 1: a profile beats everything
    ("plan", {"profile": "p.json"}, True, "profile {t}/p.json (analytic)"),
    ("check", {"profile": "p.json"}, True, "profile {t}/p.json (analytic)"),
    ("run", {"profile": "p.json", "model": "gpt-small"}, True, "profile {t}/p.json (analytic)"),
    # row 2: analytic costs when asked, before the local profile
    ("plan", {"model": "gpt-small"}, True, "analytic gpt-small on h100-sxm"),
    ("plan", {"gpu": "a100-80gb"}, True, "analytic llama3-8b on a100-80gb"),
    ("check", {"model": "gpt-small"}, True, "analytic gpt-small on h100-sxm"),
    ("check", {"gpu": "a100-80gb"}, True, LOCAL),  # a GPU alone names no model
    ("run", {"gpu": "a100-80gb", "model": "gpt-small"}, True, "analytic gpt-small on a100-80gb"),
    # row 3: the local profile; RUN skips it when a flag names the model
    ("plan", {}, True, LOCAL),
    ("check", {}, True, LOCAL),
    ("run", {}, True, LOCAL),
    ("run", {"model": "gpt-small"}, True, "quick probe here"),
    # rows 4 and 5: nothing found
    ("plan", {}, False, DEFAULT),
    ("check", {}, False, None),
    ("run", {}, False, "quick probe here"),
]


@pytest.mark.parametrize(("mode", "named", "local", "origin"), TABLE)
def test_the_precedence_table_row_by_row(tmp_path: Path, mode: str, named: dict[str, str],
                                         local: bool, origin: str | None) -> None:
    _write_profile(tmp_path / "p.json")
    if local:
        _write_profile(tmp_path / "pptune-profile.json")
    opts = CostOptions(**{k: tmp_path / v if k == "profile" else v for k, v in named.items()})
    calls: list[str] = []
    if mode == "run":
        got: Costs | None = resolve(opts, cwd=tmp_path, probe=_probe(calls))
    elif mode == "check":
        got = find(opts, Mode.CHECK, cwd=tmp_path)
    else:
        got = resolve(opts, cwd=tmp_path)
    want = None if origin is None else origin.replace("{t}", str(tmp_path))
    assert (None if got is None else got.origin) == want
    assert calls == (["probe"] if want == "quick probe here" else [])  # probed only when last


def test_the_commands_own_profile_beats_the_flag_and_may_be_an_object(tmp_path: Path) -> None:
    flag = _write_profile(tmp_path / "p.json")
    own = _write_profile(tmp_path / "own.json")
    assert resolve(CostOptions(profile=flag), profile=own).origin == f"profile {own} (analytic)"
    obj = analytic_profile("gpt-small", "a100-80gb", [1, 2])
    got = resolve(CostOptions(profile=flag), profile=obj)
    assert got.measured and got.profile is obj
    assert got.origin == "profile of gpt-small on a100-80gb (analytic)"


def test_run_mode_lets_model_flags_name_what_runs(tmp_path: Path) -> None:
    """validate and tune: --model, --hf-config and --seq-len with a profile name the model
    that runs; with recommend they would be analytic costs the profile cannot give."""
    prof = _write_profile(tmp_path / "p.json")
    opts = CostOptions(profile=prof, model="gpt-small", seq_len=64)
    assert resolve(opts, probe=_probe([])).measured
    with pytest.raises(BadInput, match="--model describes analytic costs"):
        resolve(CostOptions(profile=prof, model="gpt-small"))
    with pytest.raises(BadInput, match="--gpu describes analytic costs"):
        resolve(CostOptions(profile=prof, gpu="h200"), probe=_probe([]))


def test_check_mode_prices_a_shape_the_caller_built(tmp_path: Path) -> None:
    shape = from_sizes(2, 64, 4, 32)
    got = find(CostOptions(), Mode.CHECK, cwd=tmp_path, shape=shape, sizes=(1,))
    assert got is not None and got.origin == f"analytic {shape.name} on h100-sxm"
    assert len(got.table.names) == 4  # embedding + 2 blocks + head


def test_seq_len_is_honoured_for_analytic_costs_and_refused_for_measured(tmp_path: Path) -> None:
    assert resolve(CostOptions(seq_len=4096), cwd=tmp_path).table.seq_len == 4096
    assert resolve(CostOptions(gpu="a100-80gb", seq_len=512), cwd=tmp_path).table.seq_len == 512
    prof = _write_profile(tmp_path / "p.json")
    assert resolve(CostOptions(profile=prof, seq_len=128), cwd=tmp_path).table.seq_len == 128
    with pytest.raises(BadInput, match="measured at sequence length 128"):
        resolve(CostOptions(profile=prof, seq_len=4096), cwd=tmp_path)


@pytest.mark.parametrize("opts", [CostOptions(gpu="h200"), CostOptions(efficiency=0.4),
                                  CostOptions(model="gpt-small"),
                                  CostOptions(cross_entropy=CrossEntropy.UNFUSED)])
def test_analytic_flags_are_refused_with_a_profile(tmp_path: Path, opts: CostOptions) -> None:
    prof = _write_profile(tmp_path / "p.json")
    with pytest.raises(BadInput, match="describes analytic costs"):
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


def test_moe_model_flops_count_the_active_experts_by_hand() -> None:
    from pptune.costmodel.presets import ModelShape

    # 2 blocks of h 8, 2 heads, GeLU experts: 4 experts of width 16, top-2, vocab 32, seq 4
    shape = ModelShape("toy-moe", 2, 8, 2, 2, 16, 32, 4, 8, False, False, "test",
                       experts=4, top_k=2, expert_ffn=16)
    # a block: attention 8 x (8 + 2 x 8) + 8 x 8 = 256, two RMSNorms 16, router 8 x 4 = 32
    # (dense 304); experts 4 x 2 x 8 x 16 = 1024, of which top_k / experts = 2 / 4 count:
    # 304 + 512 = 816 a block; the LM head 32 x 8 = 256 (the embedding's table is no matmul)
    n = 2 * 816 + 256
    prof = analytic_profile(shape, "h100-sxm", [1])
    assert model_flops_per_token(prof, shape=shape) == 6 * n + 6 * 2 * 8 * 4
    # a measured profile: its layers' expert bytes and the model's top_k / experts
    cost = LayerCost(fwd_s=1e-3, bwd_s=2e-3, act_bytes=0, out_bytes=0)
    measured = Profile(
        source="probe", model={"name": "toy-moe", "seq_len": 4, "hidden_size": 8,
                               "num_blocks": 2, "experts": 4, "top_k": 2},
        device=DeviceInfo(name="x", memory_bytes=1e9), links=prof.links,
        layers=[Layer(name=n_, param_bytes=b, expert_param_bytes=e, per_micro_batch={"1": cost})
                for n_, b, e in (("embedding", 512, 0), ("block0", 2 * 1328, 2 * 1024),
                                 ("block1", 2 * 1328, 2 * 1024), ("head", 512, 0))],
    )
    assert model_flops_per_token(measured) == 6 * n + 6 * 2 * 8 * 4


def test_profile_model_experts_come_with_their_top_k() -> None:
    with pytest.raises(ValueError, match="experts and top_k come together"):
        Profile.model_validate({**analytic_profile("gpt-small", "h100-sxm", [1]).model_dump(),
                                "model": {"name": "m", "seq_len": 4, "experts": 8}})
    doc = analytic_profile("mixtral-8x7b", "h100-sxm", [1]).model_dump()
    assert (doc["model"]["experts"], doc["model"]["top_k"]) == (8, 2)
    assert "experts" not in analytic_profile("gpt-small", "h100-sxm", [1]).model_dump()["model"]


def test_attention_flops_count_the_heads_widths_and_windows_by_hand() -> None:
    """Causal attention a token: 6 x heads x (d_qk + d_v) x keys a query sees (s / 2;
    w - w^2 / 2s in a window w), summed over the blocks."""
    from pptune.costmodel.presets import MODELS
    from pptune.costs.flops import attention_flops_per_token

    s = 4096
    # Llama 3 8B: 32 heads x 128 = its hidden size: PaLM's 6 x L x h x s
    assert attention_flops_per_token(MODELS["llama3-8b"], s) == 6 * 32 * 4096 * s
    # Qwen3-235B-A22B: 64 heads x 128 = 8,192 wide on a hidden size of 4,096: twice that
    assert attention_flops_per_token(MODELS["qwen3-235b-a22b"], s) == 6 * 64 * 256 * 2048 * 94
    # DeepSeek-V3's latent attention: 128 heads, queries and keys 128 + 64, values 128
    assert attention_flops_per_token(MODELS["deepseek-v3"], s) == 6 * 128 * 320 * 2048 * 61
    # GPT-OSS-120B: 36 blocks, 64 heads x 64; every other block a window of 128 keys
    windowed, full = 128 - 128 * 128 / (2 * s), s / 2
    assert attention_flops_per_token(MODELS["gpt-oss-120b"], s) == pytest.approx(
        18 * 6 * 64 * 128 * windowed + 18 * 6 * 64 * 128 * full)
