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


def test_one_gpu_over_nodes_of_three_reads_as_english() -> None:
    assert domain_note(16, 3, "node") == (
        "16 GPUs fill 5 nodes of 3 and 1 GPU of one more: a group whose size does not divide "
        "3 can cross a node boundary and is priced at its worst placement (over the NICs); "
        "15 or 18 GPUs fill whole ones")


def test_a_host_of_an_nvl72_asked_as_the_node_is_said() -> None:
    """--gpus-per-node is the NVLink domain (its help); on a GB200 NVL72, whose compute
    trays hold 4 GPUs of a 72-GPU domain, a trial typed 4 (the GPUs a host runs) and got a
    17% slower plan with no word: one note says what was priced and what the rack is."""
    from pptune.costmodel.presets import GPUS
    from pptune.plan.domain_note import host_note

    gb200 = GPUS["gb200"]
    assert host_note(4, gb200) == (
        "--gpus-per-node 4 prices an NVLink domain of 4 GPUs; gb200's NVL72 joins 72 over "
        "NVLink, 4 a host (compute tray): leave --gpus-per-node out to price the rack")
    assert host_note(None, gb200) is None and host_note(72, gb200) is None
    assert host_note(64, gb200) is None  # a domain of its own, not one host
    assert host_note(4, GPUS["h100-sxm"]) is None  # an HGX host is its domain
