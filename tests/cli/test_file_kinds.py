"""A pptune file of one kind given where another is read is named in one line, exit 2
(trial u30, rough edge 10: a plan file given to --profile had answered with pydantic's
dump of every field it lacks), told by its top-level keys (schemas/base.py KINDS)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pptune.cli.app import app
from pptune.errors import BadInput
from pptune.schemas import load_profile
from pptune.schemas.base import load_json_model
from pptune.schemas.plan import PlanFile

runner = CliRunner()
# the top-level keys of each kind (the rest of each file does not matter to the test)
PLAN = {"plans": [], "rejected": {}, "source": "analytic", "request": {}, "notes": []}
PROFILE = {"schema_version": 1, "source": "probe", "model": {}, "device": {}, "links": {},
           "layers": []}
REPORT = {"file": "x.sh", "format": "megatron", "exit_code": 0, "findings": []}


def test_recommend_names_a_plan_file_given_as_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(PLAN))
    r = runner.invoke(app, ["recommend", "--gpus", "8", "--profile", str(path)])
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"pptune: error: profile file {path}: this is a plan file (pptune recommend -o), "
        "not a profile (pptune probe / calibrate)")


@pytest.mark.parametrize(("doc", "what"), [
    (REPORT, "a check-config report (pptune check-config --output json)"),
    ({"traceEvents": []}, "a trace (pptune simulate --trace, or a profiler's)")])
def test_other_kinds_given_as_a_profile_are_named(tmp_path: Path, doc: dict, what: str
                                                  ) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BadInput) as exc:
        load_profile(path)
    assert str(exc.value) == (f"profile file {path}: this is {what}, not a profile "
                              "(pptune probe / calibrate)")


def test_a_profile_given_as_a_plan_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps(PROFILE))
    with pytest.raises(BadInput) as exc:
        load_json_model(path, PlanFile, "plan")
    assert str(exc.value) == (f"plan file {path}: this is a profile (pptune probe / "
                              "calibrate), not a plan file (pptune recommend -o)")


def test_a_broken_file_of_the_kind_asked_keeps_the_field_errors(tmp_path: Path) -> None:
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({**PROFILE, "source": "guess"}))
    with pytest.raises(BadInput) as exc:
        load_profile(path)
    assert str(exc.value).startswith(f"profile file {path} is invalid: ")
