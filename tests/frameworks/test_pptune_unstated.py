"""pptune's own config: what a file that leaves sequence_parallel or a2a_overlap out is
priced as, said in one note each (frameworks/pptune/reader.py).

Both keys default off (schemas/config.py, a contract), where recommend's plans split the
sequence over tp (--sequence-parallel's default) and hide the expert all-to-all behind
the DualPipes' F&B pairs; a user trial copied recommend's winning layout into a YAML
without them and got memory-overflow errors and a step 1.8x recommend's."""

from __future__ import annotations

from pathlib import Path

from tests.check_json import check_file

LAYOUT = """model: qwen3-30b-a3b
gpu: h100-sxm
gpus: 16
tp: 2
pp: 2
ep: 4
schedule: dualpipev
virtual_stages: 2
sharded_optimizer: true
micro_batch_size: 1
global_batch: 64
"""


def notes(doc: dict, part: str) -> list[str]:
    return [n for n in doc["notes"] if part in n]


def test_unstated_keys_get_one_note_each_naming_the_key(tmp_path: Path) -> None:
    _, _, doc = check_file(tmp_path / "a.yaml", LAYOUT)
    (seq,) = notes(doc, "sequence parallelism")
    assert seq.startswith("tp 2 priced without sequence parallelism") and \
        "sequence_parallel: true" in seq
    (a2a,) = notes(doc, "all-to-all")
    assert a2a.startswith("dualpipev priced with the expert all-to-all exposed") and \
        "a2a_overlap: true" in a2a


def test_stated_keys_are_priced_as_stated_without_a_note(tmp_path: Path) -> None:
    """Stated either way, no note; stated on, the step and the memory fall (the split
    sequence holds 1/tp of the activations between the tensor-parallel regions, and the
    all-to-all hides behind compute)."""
    steps, peaks = {}, {}
    for on in ("false", "true"):
        _, _, doc = check_file(tmp_path / f"{on}.yaml",
                               LAYOUT + f"sequence_parallel: {on}\na2a_overlap: {on}\n")
        assert not notes(doc, "sequence parallelism") and not notes(doc, "all-to-all")
        steps[on], peaks[on] = doc["derived"]["step_time_s"], max(
            doc["derived"]["peak_memory_bytes"])
    _, _, unstated = check_file(tmp_path / "b.yaml", LAYOUT)
    assert unstated["derived"]["step_time_s"] == steps["false"]
    assert steps["true"] < steps["false"] and peaks["true"] < peaks["false"]


def test_no_note_where_nothing_depends_on_the_key(tmp_path: Path) -> None:
    """tp 1 splits nothing; 1f1b has no F&B pairs; no ep, no all-to-all; a recomputing
    dualpipev runs without the overlap in recommend too (candidates.a2a_overlaps)."""
    for old, new in (("tp: 2", "tp: 1"), ("ep: 4", "ep: 1"),
                     ("schedule: dualpipev\nvirtual_stages: 2", "schedule: 1f1b"),
                     ("sharded_optimizer", "recompute: full\nsharded_optimizer")):
        _, _, doc = check_file(tmp_path / "c.yaml", LAYOUT.replace(old, new))
        seq, a2a = notes(doc, "sequence parallelism"), notes(doc, "all-to-all exposed")
        assert (not seq) if old == "tp: 2" else len(seq) == 1, (old, doc["notes"])
        assert (len(a2a) == 1) if old == "tp: 2" else not a2a, (old, doc["notes"])


def test_a_pipeline_without_stage_layers_is_said_to_be_priced_on_the_even_split(
        tmp_path: Path) -> None:
    """recommend's plans balance the stages and --emit pptune writes stage_layers; a file
    that leaves it out is priced on the even split of blocks (check/split.py), which a
    trial took for recommend's step: one note naming the key. Stated, or pp 1, no note."""
    _, _, doc = check_file(tmp_path / "a.yaml", LAYOUT)
    (said,) = notes(doc, "stage_layers")
    assert said.startswith("pp 2 priced on an even split") and "stage_layers:" in said
    for extra in ("stage_layers: [12, 12, 12, 12]\n",):
        _, _, doc = check_file(tmp_path / "b.yaml", LAYOUT + extra)
        assert not notes(doc, "stage_layers"), doc["notes"]
    one = LAYOUT.replace("pp: 2", "pp: 1").replace("dualpipev", "1f1b").replace(
        "virtual_stages: 2\n", "")
    _, _, doc = check_file(tmp_path / "c.yaml", one)
    assert not notes(doc, "stage_layers"), doc["notes"]
