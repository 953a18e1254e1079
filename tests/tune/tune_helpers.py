"""Hand-sized profiles, plans and trials for the tune tests (no torch)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pptune.costmodel.schedules import Schedule
from pptune.schemas import Profile
from pptune.tune import candidates as cands
from pptune.tune.model import Trial
from pptune.validate.spec import ModelSource

MS = 1e-3


def profile(fwd_ms: list[float], bwd_ms: list[float], wgrad_ms: list[float] | None = None,
            latency_s: float = 0.0) -> Profile:
    """One micro-batch size (1); free links unless ``latency_s``; no activation bytes."""
    wgrad_ms = wgrad_ms or [0.0] * len(fwd_ms)
    link = {"latency_s": latency_s, "bytes_per_s": 1e30}
    return Profile.model_validate({
        "source": "probe",
        "model": {"name": "gpt-small", "seq_len": 8},
        "device": {"name": "cpu", "memory_bytes": 1e12},
        "links": {"intra_node": {"p2p": link, "allreduce": link},
                  "inter_node": {"p2p": link, "allreduce": link}},
        "layers": [
            {"name": f"block.{i}", "param_bytes": 0.0, "per_micro_batch": {"1": {
                "fwd_s": f * MS, "bwd_s": b * MS, "wgrad_s": w * MS,
                "act_bytes": 0.0, "out_bytes": 0.0}}}
            for i, (f, b, w) in enumerate(zip(fwd_ms, bwd_ms, wgrad_ms, strict=True))
        ],
    })


def plan(schedule: str, pp: int, m: int, split: list[int], step_s: float = 0.0,
         dp: int = 1, tp: int = 1, v: int = 1) -> Any:
    """The fields of the planner's Plan that tune reads."""
    return SimpleNamespace(schedule=Schedule(schedule), pp=pp, dp=dp, tp=tp, virtual_stages=v,
                           micro_batch_size=1, num_microbatches=m, stage_layers=split,
                           step_time_s=step_s)


def settings(device: str = "cpu") -> cands.RunSettings:
    return cands.RunSettings(ModelSource("gpt-small"), warmup=0, steps=3, timeout_s=10.0,
                             device=device)


def candidate(rank: int, *args: Any, **kwargs: Any) -> cands.Candidate:
    return cands.candidate(plan(*args, **kwargs), rank, n_layers=sum(args[3]),
                           local_devices=2, run=settings())


def trial(key: str, schedule: str, pp: int, m: int, split: tuple[int, ...],
          ops_ms: dict[str, float], steps_ms: tuple[float, ...] = (10.0,),
          contention: float | None = None) -> Trial:
    """``ops_ms``: {"F0": 2.0, "B1": ...}."""
    return Trial(key, Schedule(schedule), pp, m, 1, 1, split,
                 tuple(x * MS for x in steps_ms),
                 {(k[0], int(k[1:])): v * MS for k, v in ops_ms.items()},
                 contention=contention)
