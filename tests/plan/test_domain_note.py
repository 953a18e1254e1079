"""recommend's note on a job that does not fill whole nodes (report/domain_note.py)."""

from __future__ import annotations

from pptune.report.domain_note import domain_note


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
    from pptune.report.domain_note import host_note

    gb200 = GPUS["gb200"]
    assert host_note(4, gb200) == (
        "--gpus-per-node 4 prices an NVLink domain of 4 GPUs; gb200's NVL72 joins 72 over "
        "NVLink, 4 a host (compute tray): leave --gpus-per-node out to price the rack")
    assert host_note(None, gb200) is None and host_note(72, gb200) is None
    assert host_note(64, gb200) is None  # a domain of its own, not one host
    assert host_note(4, GPUS["h100-sxm"]) is None  # an HGX host is its domain


def test_racks_used_as_fewer_gpus_are_named_where_they_divide_the_job() -> None:
    """A domain that spans hosts (an NVL72 of 4-GPU trays) can be used as fewer GPUs a
    rack (a scheduler's segments of whole trays): 512 GB200s are 8 racks of 64, where
    every group of a size dividing 64 stays inside one; the note names it (a user trial:
    512 GPUs priced 3.7x slower than 504 with one expert-data-parallel member alone on a
    rack's last 8 GPUs)."""
    note = domain_note(512, 72, "NVLink domain", host=4)
    assert note is not None and note.endswith(
        "504 or 576 GPUs fill whole ones, or --gpus-per-node 64 prices 8 racks used as 64 "
        "GPUs each (16 hosts of 4; a scheduler's segments of whole hosts place them so)")
    assert domain_note(256, 72, "NVLink domain", host=4).endswith(  # type: ignore[union-attr]
        "--gpus-per-node 64 prices 4 racks used as 64 GPUs each (16 hosts of 4; a "
        "scheduler's segments of whole hosts place them so)")
    assert domain_note(12, 8, "node", host=None).endswith("8 or 16 GPUs fill whole ones")
    # no whole-host size under the rack divides 4 x 73 = 292 but 4 itself: none named
    assert domain_note(292, 72, "NVLink domain", host=4).endswith(
        "288 or 360 GPUs fill whole ones")


def test_a_domain_wider_than_the_gpus_is_said() -> None:
    """--gpus-per-node 72 with --gpu b200 (an HGX of 8: presets.py) priced plans on a
    72-GPU NVLink domain with no word and changed the winner (trial u30, rough edge 6):
    one note says the preset's domain and which presets have one of 72."""
    from pptune.costmodel.presets import GPUS
    from pptune.report.domain_note import wider_note

    assert wider_note(72, GPUS["b200"]) == (
        "--gpus-per-node 72 prices an NVLink domain of 72 GPUs, which b200 does not have: "
        "its NVLink domain is 8 GPUs (gb200 and gb300 have 72)")
    assert wider_note(16, GPUS["h100-sxm"]) == (
        "--gpus-per-node 16 prices an NVLink domain of 16 GPUs, which h100-sxm does not "
        "have: its NVLink domain is 8 GPUs")  # no preset has one of 16
    assert wider_note(8, GPUS["b200"]) is None and wider_note(None, GPUS["b200"]) is None
    assert wider_note(72, GPUS["gb200"]) is None and wider_note(4, GPUS["gb200"]) is None


def test_recommend_says_so() -> None:
    from pptune.plan.recommend import RecommendSpec, recommend

    run = recommend(RecommendSpec.of(gpus=16, model="gpt-small", gpu="b200", gpus_per_node=16,
                                     top=1))
    assert [n for n in run.result.notes if n.startswith("--gpus-per-node 16 prices")] == [
        "--gpus-per-node 16 prices an NVLink domain of 16 GPUs, which b200 does not have: "
        "its NVLink domain is 8 GPUs"]
