"""tune's cost source through the one resolver (no torch: the probe hook is a stub)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.costs.profiles import analytic_profile
from pptune.options import RunOptions
from pptune.plan.recommend import RecommendSpec
from pptune.schemas import Profile
from pptune.tune import session
from pptune.validate.spec import ModelSource


def _request(tmp: Path | None = None, **flags: object) -> session.TuneRequest:
    return session.TuneRequest(RecommendSpec.of(gpus=2, **flags), RunOptions(), output=tmp)


def _no_probe(source: ModelSource, sizes: list[int]) -> Profile:
    raise AssertionError("no probe expected")


def test_analytic_trials_costs_carry_tp_and_sequence_parallelism(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    notes: list[str] = []
    plain = session.resolve_costs(_request(model="gpt-small", gpu="h100-sxm", tp=2,
                                           sequence_parallel=False),
                                  None, notes.append, _no_probe)
    sp = session.resolve_costs(_request(model="gpt-small", gpu="h100-sxm", tp=2,
                                        sequence_parallel=True, tp_comm_overlap=True),
                               None, notes.append, _no_probe)
    assert plain.tp_in_costs == sp.tp_in_costs == 2
    block = plain.table.names.index("block0")
    assert sp.table.by_mb[1].act_bytes[block] < plain.table.by_mb[1].act_bytes[block]
    assert "--gpu h100-sxm: analytic costs" in notes[0]


def test_a_probe_profile_is_searched_in_memory_and_saved_only_beside_the_journal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    probed = analytic_profile("gpt-small", "h100-sxm", [1, 2])
    notes: list[str] = []
    req = _request(global_batch=8)
    costs = session.resolve_costs(req, None, notes.append, lambda src, sizes: probed)
    assert costs.profile is probed and costs.origin.startswith("quick probe here")
    assert "measuring a quick profile of gpt-small here first" in notes[0]
    run = session.search(req, costs, None)
    assert run.origin == costs.origin and run.result.plans
    assert list(tmp_path.iterdir()) == []  # no profile file written anywhere to search it
    folder = tmp_path / "tuned"
    folder.mkdir()
    session.search(req, costs, folder)
    assert Profile.model_validate_json((folder / session.PROBE_FILE).read_text()) == probed
