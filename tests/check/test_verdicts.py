"""How check-config qualifies its findings: an assumed dp, the bubble hint, twin findings."""

from __future__ import annotations

from pathlib import Path

from pptune.check.rules import check
from pptune.check.verdicts import assumed_dp
from pptune.schemas import TrainingConfig

# Llama 3 8B on one pipeline without sharding: 8.03e9 parameters x 18 bytes = 135 GiB
# of training state at any dp, over 80 GiB
BASE = dict(tp=1, pp=1, micro_batch_size=1, grad_accum_steps=1, model="llama3-8b",
            gpu="h100-sxm", schedule="1f1b")


def findings(cfg: dict) -> dict[str, tuple[str, str]]:
    report = check(TrainingConfig.model_validate(cfg), Path("."))
    return {f.id: (f.severity, f.message) for f in report.findings}


def test_the_smallest_dp_the_expert_layout_admits() -> None:
    """ep x etp ranks divide tp x cp x dp: ep 8 at tp 2 needs dp 4; ep 2 at tp 2, 1."""
    def cfg(**kw: int) -> TrainingConfig:
        return TrainingConfig.model_validate({**BASE, "model": "mixtral-8x7b", **kw})
    assert assumed_dp(cfg(ep=8, tp=2)) == 4
    assert assumed_dp(cfg(ep=2, tp=2)) == 1
    assert assumed_dp(cfg(ep=8, etp=2, tp=2, cp=2)) == 4
    assert assumed_dp(TrainingConfig.model_validate(BASE)) == 1


def test_memory_at_an_assumed_dp_is_a_warning_that_says_so() -> None:
    found = findings(BASE)
    assert found["dp-assumed"][0] == "warning"
    severity, message = found["memory-overflow"]
    assert severity == "warning"
    assert message.endswith("(at dp=1, assumed: the config states no GPU count; pass --gpus N "
                            "to check it)")
    # stated GPUs: the same overflow is an error
    assert findings({**BASE, "gpus": 1})["memory-overflow"][0] == "error"


def test_an_expert_layout_is_not_refused_for_an_assumed_dp() -> None:
    """ep 8 over tp 1: dp 8 assumed, where dp 1 had raised moe-world."""
    found = findings({**BASE, "model": "mixtral-8x7b", "ep": 8, "global_batch": None,
                      "grad_accum_steps": 8})
    assert "moe-world" not in found
    assert "assumed dp=8" in found["dp-assumed"][1]


def test_rules_that_do_not_depend_on_dp_stay_errors() -> None:
    found = findings({**BASE, "pp": 4, "num_layers": 30})  # 30 layers over 4 stages
    assert found["layers-not-divisible"][0] == "error"


def test_the_micro_batches_that_bring_a_bubble_under_its_limit() -> None:
    """The idle time a step held fixed, the work growing with m: bubble / (1 - bubble)
    falls as 1/m. 27.6% at m = 8 under a 25% limit: 8 x 0.276 / 0.724 x 3 = 9.15 -> 10,
    12 as a multiple of pp 4 (interleaved); 50% at m = 8: 8 x 1 x 3 = 24."""
    from pptune.check.verdicts import bubble_hint
    assert "about m >= 12 (a multiple of pp)" in bubble_hint(4, 8, 0.276, 0.25, 4)
    assert "about m >= 10 would" in bubble_hint(4, 8, 0.276, 0.25, 1)
    assert "about m >= 24 would" in bubble_hint(4, 8, 0.5, 0.25, 1)
    assert "no pipeline" in bubble_hint(1, 1, 0.47, 0.25, 1)
    assert bubble_hint(4, None, 0.5, 0.25, 1) == ""


def test_an_unbalanced_pipelines_bubble_has_a_floor() -> None:
    """The devices' mean work a micro-batch 0.9 of the busiest's: the bubble falls towards
    10%, not 0. 30% at m = 8: the fill and drain are 8 x 0.9 / 0.7 - 8 = 2.286 of the
    busiest device's micro-batches; under 20% from 0.8 x 2.286 / (0.9 - 0.8) = 18.3 -> 19
    (the balanced formula said 8 x 0.3 / 0.7 x 4 = 13.7 -> 14). At 0.7 the floor, 30%, is
    over a 25% limit: no m brings it under."""
    from pptune.check.verdicts import bubble_hint
    assert "about m >= 19 would" in bubble_hint(4, 8, 0.3, 0.2, 1, 0.9)
    assert "about m >= 14 would" in bubble_hint(4, 8, 0.3, 0.2, 1)
    hint = bubble_hint(8, 224, 0.36, 0.25, 1, 0.7, 7)
    assert "more micro-batches cannot" in hint and "pipeline rank 7 works 1.43x" in hint
    assert "30.0% of the step" in hint


def test_a_frameworks_refusal_replaces_the_generic_finding_of_the_same_fault() -> None:
    from pptune.check.rules import Finding
    from pptune.check.verdicts import without_twins
    found = [Finding("megatron-layers-not-divisible", "error", "a"),
             Finding("layers-not-divisible", "error", "b"),
             Finding("batch-mismatch", "error", "c")]
    assert [f.id for f in without_twins(found)] == ["megatron-layers-not-divisible",
                                                     "batch-mismatch"]


def test_memory_overflow_is_one_finding_naming_the_ranks_and_the_fullest() -> None:
    """A user trial's pp 8 config had eight near-identical memory-overflow errors: one
    finding now names the ranks over (as ranges) and the fullest, whose rank and peak
    are its values (``ranks``: every rank over)."""
    from pptune.check.verdicts import memory_overflow

    gib = 1024**3
    found: list[tuple[str, str, str, dict]] = []

    def add(id_: str, severity: str, message: str, **values: object) -> None:
        found.append((id_, severity, message, values))

    peaks = [90.5 * gib, 85 * gib, 70 * gib, 89 * gib, 89 * gib, 89 * gib, 70 * gib, 80.5 * gib]
    memory_overflow(peaks, 80 * gib, "use more pipeline stages (pp)", "error", add)
    ((id_, severity, message, values),) = found
    assert (id_, severity) == ("memory-overflow", "error")
    assert message == ("pipeline ranks 0-1, 3-5, 7 (6 of 8) need up to 90.50 GiB (rank 0), over "
                       "the 80.00 GiB each may use by up to 10.50 GiB; use more pipeline stages "
                       "(pp)")
    assert values == {"rank": 0, "peak_bytes": 90.5 * gib, "capacity_bytes": 80 * gib,
                      "ranks": [0, 1, 3, 4, 5, 7]}
    found.clear()
    memory_overflow([70 * gib, 81 * gib], 80 * gib, "fix", "warning", add)
    assert found == [("memory-overflow", "warning",
                      "pipeline rank 1 needs 81.00 GiB, over the 80.00 GiB it may use by "
                      "1.00 GiB; fix", {"rank": 1, "peak_bytes": 81 * gib,
                                        "capacity_bytes": 80 * gib, "ranks": [1]})]
    found.clear()
    memory_overflow([70 * gib], 80 * gib, "fix", "error", add)
    assert found == []
