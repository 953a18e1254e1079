"""A user trial of context parallelism, command by command: what recommend searches,
what --emit writes, and that check-config accepts what was written."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from typer.testing import Result

from pptune.costmodel.keys import CostKey
from pptune.frameworks.registry import ADAPTERS, Framework
from tests.conftest import Cli


def test_ulysses_without_sizes_searches_the_pairs_it_can_split(cli: Cli) -> None:
    """No --tp, no --cp: Llama 3 8B's 8 KV heads leave 8 / tp a tensor-parallel rank,
    and a2a plans only where cp divides them; nothing refuses the run."""
    r = cli("recommend", "--gpus", "64", "--model", "llama3-8b", "--seq-len", "131072",
            "--precision", "fp8", "--cp-comm", "a2a", "--global-batch", "64", "--json")
    assert r.exit_code == 0, r.stderr
    plans = json.loads(r.stdout)["plans"]
    assert plans and all((8 // p["tp"]) % p["cp"] == 0 for p in plans)
    assert any(p["cp"] > 1 for p in plans)
    winner = plans[0]
    assert winner["exposed_cp_s"] is not None and (winner["exposed_cp_s"] > 0) == (
        winner["cp"] > 1)


def test_a_given_pair_names_the_heads_of_a_rank(
        cli: Cli, error_line: Callable[[Result], str]) -> None:
    r = cli("recommend", "--gpus", "16384", "--model", "llama3.1-405b", "--seq-len", "131072",
            "--tp", "8", "--cp", "16", "--cp-comm", "a2a")
    assert error_line(r) == (
        "pptune: error: tp 8 x cp 16: --cp-comm a2a splits heads over cp: 1 key/value head "
        "per tensor-parallel rank (8 / tp 8) is not divisible by cp = 16; use p2p or a2a+p2p")


def test_hierarchical_exchange_is_written_as_check_config_takes_it(cli: Cli,
                                                                   tmp_path: Path) -> None:
    """Qwen3-30B-A3B has 4 query groups: the all-to-all of a2a+p2p spans 4 of the 8 cp
    ranks on a node (megatron-cp-a2a-heads), the ring the other 2."""
    out = tmp_path / "out"
    r = cli("recommend", "--gpus", "64", "--model", "qwen3-30b-a3b", "--seq-len", "65536",
            "--tp", "1", "--cp", "8", "--cp-comm", "a2a+p2p", "--emit", "megatron", "-o", out)
    assert r.exit_code == 0, r.stderr
    script = (out / "pretrain_megatron.sh").read_text()
    assert "--hierarchical-context-parallel-sizes 4 2" in script
    r = cli("check-config", out / "pretrain_megatron.sh", "--output", "json", "--no-compare")
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["exit_code"] == 0, doc["findings"]


def test_sequence_parallelism_refuses_a_cp_ranks_tokens_tp_cannot_split(
        cli: Cli, error_line: Callable[[Result], str], tmp_path: Path) -> None:
    """8,200 tokens over cp 2: 4,100 a rank, not divisible by tp 8 (Megatron-LM's
    scatter, torchtitan's tp x 2 x cp divisor): refused, nothing written; searched, the
    pair is left out and torchtitan's file passes its own rule."""
    r = cli("recommend", "--gpus", "16", "--model", "llama3-8b", "--seq-len", "8200",
            "--tp", "8", "--cp", "2", "--emit", "torchtitan", "-o", tmp_path / "refused")
    assert "4100 tokens (sequence 8200 / cp 2) over tp 8" in error_line(r)
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "out"
    r = cli("recommend", "--gpus", "16", "--model", "llama3-8b", "--seq-len", "8200",
            "--cp", "2", "--emit", "torchtitan", "-o", out)
    assert r.exit_code == 0, r.stderr
    r = cli("check-config", out / "torchtitan.toml", "--output", "json", "--no-compare")
    assert r.exit_code == 0, json.loads(r.stdout)["findings"]


def test_torchtitan_states_no_sequence_its_divisor_refuses(cli: Cli, tmp_path: Path) -> None:
    """8,196 tokens: 2 x cp 2 and tp 2 split each rank's 4,098 (Megatron-LM runs it), but
    torchtitan asserts seq_len % (tp x 2 x cp) = 8,196 % 8 = 4 == 0."""
    adapter = ADAPTERS[Framework.TORCHTITAN]
    why = adapter.cannot_state(CostKey(tp=2, cp=2), 8196)
    assert why is not None and "use a multiple of 8" in why
    assert adapter.cannot_state(CostKey(tp=2, cp=2), 8192) is None
    assert adapter.cannot_state(CostKey(tp=1, cp=2), 8196) is None
    assert ADAPTERS[Framework.MEGATRON].cannot_state(CostKey(tp=2, cp=2), 8196) is None
    r = cli("recommend", "--gpus", "16", "--model", "llama3-8b", "--seq-len", "8196",
            "--tp", "2", "--cp", "2", "--emit", "torchtitan", "-o", tmp_path / "out")
    assert r.exit_code == 2 and "Traceback" not in r.output and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith(
        "pptune: error: torchtitan cannot express plan 1: sequence 8196 with tensor parallel 2")
    assert not (tmp_path / "out").exists()
