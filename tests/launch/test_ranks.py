"""The launch layer without torch: node keys, the torchrun join, run-time failures."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from pptune.errors import EXIT_FAILED, BadInput, RunFailed
from pptune.launch import ranks

TEXTS = ranks.JoinTexts(
    no_group=lambda rank, world, text: f"rank {rank} of {world} cannot join: {text}",
    failed=lambda rank, world, text: f"rank {rank} of {world} failed: {text}",
)
ENV = {"RANK": 1, "WORLD_SIZE": 2, "LOCAL_RANK": 1, "LOCAL_WORLD_SIZE": 2}


@dataclass
class Group:
    backend: str = "gloo"
    device: str = "cpu"
    threads: int = 1
    timeout_s: float = 30.0


@dataclass
class FakeTorch:
    """Just what ``init_group`` and ``joined_group`` call, recorded."""

    join_error: Exception | None = None
    calls: list[tuple[str, Any]] = field(default_factory=list)
    initialized: bool = False

    def __post_init__(self) -> None:
        self.distributed = SimpleNamespace(
            init_process_group=self._init,
            is_initialized=lambda: self.initialized,
            destroy_process_group=lambda: self.calls.append(("destroy", None)),
        )

    def set_num_threads(self, n: int) -> None:
        self.calls.append(("threads", n))

    def _init(self, **kwargs: Any) -> None:
        if self.join_error is not None:
            raise self.join_error
        self.initialized = True
        self.calls.append(("init", (kwargs["backend"], kwargs["rank"], kwargs["world_size"])))


def test_run_failures_exit_1_and_bad_input_exits_2() -> None:
    assert RunFailed("x").exit_code == EXIT_FAILED == 1
    assert BadInput("x").exit_code == 2


def test_node_key_is_the_host_and_torchruns_node_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROUP_RANK", raising=False)
    assert ranks.node_key() == socket.gethostname()
    monkeypatch.setenv("GROUP_RANK", "3")
    assert ranks.node_key() == f"{socket.gethostname()}/node3"


def test_torchrun_env_needs_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    assert ranks.torchrun_env() is None
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert ranks.torchrun_env() == {"RANK": 1, "WORLD_SIZE": 4, "LOCAL_RANK": 1,
                                    "LOCAL_WORLD_SIZE": 4}
    monkeypatch.setenv("RANK", "one")
    with pytest.raises(BadInput, match="must be integers"):
        ranks.torchrun_env()


def test_joined_group_runs_the_body_then_leaves_the_group() -> None:
    torch = FakeTorch()
    with ranks.joined_group(torch, Group(threads=2), ENV, TEXTS):
        torch.calls.append(("body", None))
    assert torch.calls == [("threads", 2), ("init", ("gloo", 1, 2)), ("body", None),
                           ("destroy", None)]


def test_a_rank_that_cannot_join_is_a_failed_run() -> None:
    torch = FakeTorch(join_error=RuntimeError("connection refused\nmore detail"))
    with pytest.raises(RunFailed) as err:
        with ranks.joined_group(torch, Group(), ENV, TEXTS):
            raise AssertionError("the body must not run")
    assert str(err.value) == "rank 1 of 2 cannot join: RuntimeError: connection refused"
    assert ("destroy", None) not in torch.calls


def test_a_failure_in_the_body_is_a_failed_run_in_one_line() -> None:
    torch = FakeTorch()
    with pytest.raises(RunFailed) as err:
        with ranks.joined_group(torch, Group(), ENV, TEXTS):
            raise ValueError("shapes differ\ntraceback text")
    assert str(err.value) == "rank 1 of 2 failed: ValueError: shapes differ"
    assert torch.calls[-1] == ("destroy", None)


def test_pptune_errors_in_the_body_pass_through_unchanged() -> None:
    torch = FakeTorch()
    with pytest.raises(BadInput, match=r"^bad flag$"):
        with ranks.joined_group(torch, Group(), ENV, TEXTS):
            raise BadInput("bad flag")
    assert torch.calls[-1] == ("destroy", None)


@pytest.mark.slow
def test_a_run_past_its_time_limit_is_stopped_and_its_ranks_ended() -> None:
    """Ranks that keep reporting (so the silence timeout never fires) but never finish:
    tune's --budget stops them at ``limit_s`` (TimeLimit) and none is left running."""
    import os
    import time

    from launch_spawn_helpers import chatty_entry

    from pptune.errors import TimeLimit

    texts = ranks.SpawnTexts(died=lambda r, w, c: f"rank {r} died", silent=lambda *a: "silent",
                             failed=lambda r, w, t: f"rank {r} failed: {t}")
    pids: list[int] = []

    def seen(rank: int, payload: Any) -> None:
        if payload is not None:
            pids.append(payload)

    t0 = time.monotonic()
    with pytest.raises(TimeLimit, match=r"^0 of 2 rank\(s\) done at its limit of 2 s; every "
                                        r"rank was ended$"):
        ranks.spawn_ranks(chatty_entry, (), 2, 60.0, texts, seen, limit_s=2.0)
    assert time.monotonic() - t0 < 15
    assert len(pids) == 2
    for pid in pids:  # ended and reaped: no such process
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
