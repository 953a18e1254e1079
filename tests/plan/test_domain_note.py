"""recommend's note on a job that does not fill whole nodes (plan/domain_note.py)."""

from __future__ import annotations

from pptune.plan.domain_note import domain_note


def test_whole_nodes_and_one_node_say_nothing() -> None:
    assert domain_note(16, 8, "node") is None
    assert domain_note(8, 8, "node") is None
    assert domain_note(4, 8, "node") is None  # within one node


def test_three_racks_and_forty_gpus() -> None:
    # 256 = 3 x 72 + 40
    assert domain_note(256, 72, "NVLink domain") == (
        "256 GPUs fill 3 NVLink domains of 72 and 40 GPUs of one more: a group whose size "
        "does not divide 72 can cross an NVLink domain boundary and is priced at its worst "
        "placement (over the NICs); 216 or 288 GPUs fill whole ones")


def test_one_node_and_a_half() -> None:
    note = domain_note(12, 8, "node")
    assert note is not None and note.startswith("12 GPUs fill 1 node of 8 and 4 GPUs of one "
                                                "more: ")
    assert note.endswith("8 or 16 GPUs fill whole ones")
