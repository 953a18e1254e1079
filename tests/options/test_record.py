"""A plan file's request: the keys pptune has always written, in their order; old
files load; keys the groups gained are written when set."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pptune.costmodel.memory import Recompute
from pptune.costmodel.ops import Attention
from pptune.costmodel.schedules import Schedule
from pptune.costmodel.sharding import Sharding
from pptune.errors import BadInput
from pptune.options import CostOptions, PlanSpace
from pptune.options.record import KEYS_0_1, PlanFileRequest
from pptune.schemas import PlanFile, load_json_model


def _request(**space: object) -> PlanFileRequest:
    # as recommend records them: the sizes searched, the node size taken
    costs = CostOptions(model="llama3-8b", gpu="h100-sxm", seq_len=8192,
                        attention=Attention.FLASH, tp=1, sequence_parallel=True,
                        tp_comm_overlap=False)
    base = {"gpus": 8, "gpus_per_node": 8, "global_batch": 512, "micro_batch_sizes": (1, 2),
            "schedules": (Schedule.GPIPE, Schedule.ZBV),
            "recompute": (Recompute.NONE, Recompute.FULL), "sharding": (Sharding.ZERO1,)}
    return PlanFileRequest(costs, PlanSpace(**(base | space)), 500)  # type: ignore[arg-type]


def test_the_keys_pptune_always_wrote_come_first_in_their_order() -> None:
    doc = _request().to_json()
    assert list(doc) == list(KEYS_0_1)
    assert doc == {
        "gpus": 8, "tp": 1, "gpus_per_node": 8, "global_batch": 512,
        "global_batch_requested": 500, "micro_batch_sizes": [1, 2],
        "schedules": ["gpipe", "zbv"], "model": "llama3-8b", "device": "h100-sxm",
        "sharded_optimizer": False, "grad_compression": "none", "seq_len": 8192,
        "sequence_parallel": True, "recompute": "none,full", "sharding": "zero1",
        "recompute_every": 2, "attention": "flash", "tp_comm_overlap": False,
        "overlap_grad_reduce": True,
    }


def test_other_fields_are_written_when_set_and_read_back() -> None:
    req = _request(pp=(2, 4), reserve_gib=4.0)
    doc = req.to_json()
    assert list(doc)[len(KEYS_0_1):] == ["pp", "reserve_gib"]
    assert (doc["pp"], doc["reserve_gib"]) == ([2, 4], 4.0)
    assert PlanFileRequest.from_json(json.loads(json.dumps(doc))) == req


def test_a_plan_file_of_pptune_0_1_loads(tmp_path: Path) -> None:
    """The request as the first recommend wrote it, with a later ``"recompute": null``."""
    old = {"gpus": 8, "tp": 1, "gpus_per_node": 8, "global_batch": 512,
           "micro_batch_sizes": [1, 2, 4, 8], "schedules": ["gpipe", "1f1b"],
           "model": "llama3-8b", "device": "h100-sxm", "sharded_optimizer": False,
           "grad_compression": "none", "seq_len": 8192, "recompute": None,
           "a_key_from_a_newer_pptune": 1}
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({"plans": [], "rejected": {}, "source": "x", "request": old}))
    req = load_json_model(path, PlanFile, "plan").request
    assert req.costs == CostOptions(model="llama3-8b", gpu="h100-sxm", seq_len=8192, tp=1)
    assert req.space is not None
    assert (req.space.gpus, req.space.schedules) == (8, (Schedule.GPIPE, Schedule.ONE_F_ONE_B))
    assert (req.space.recompute, req.space.sharding, req.global_batch_requested) == (
        None, None, None)
    no_request = tmp_path / "bare.json"
    no_request.write_text(json.dumps({"plans": [], "rejected": {}, "source": "x"}))
    bare = load_json_model(no_request, PlanFile, "plan").request
    assert bare == PlanFileRequest() and bare.space is None


@pytest.mark.parametrize(("request_", "words"), [
    ({"gpus": 8, "sharding": "zero9"}, "request: Value error, --sharding takes a comma list"),
    ({"model": 5}, "request.model: Input should be a valid string"),
])
def test_a_bad_request_names_the_file_and_the_key(tmp_path: Path, request_: dict[str, object],
                                                  words: str) -> None:
    path = tmp_path / "plans.json"
    path.write_text(json.dumps({"plans": [], "rejected": {}, "source": "x",
                                "request": request_}))
    with pytest.raises(BadInput, match=f"plan file {path} is invalid: {words}"):
        load_json_model(path, PlanFile, "plan")


def test_tp_comm_overlap_not_given_is_written_as_priced() -> None:
    # its field defaults to None (a calibrated profile's jobs fill it in), yet a plan file
    # states it as pptune 0.1 did: off
    req = _request()
    req = PlanFileRequest(dataclasses.replace(req.costs, tp_comm_overlap=None), req.space, 500)
    assert req.to_json()["tp_comm_overlap"] is False
