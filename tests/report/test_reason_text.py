"""The rejection counts' words (report.plans.REASON_TEXT): each says what its key counts."""

from __future__ import annotations

from pptune.costmodel.candidates import Reason
from pptune.report.plans import REASON_TEXT, reason_counts


def test_every_reason_has_words_and_m_lt_pp_covers_interleaving() -> None:
    assert set(REASON_TEXT) == {r.value for r in Reason}
    # global batch 7 on 8 GPUs: 3 one-f-one-b and 9 interleaved candidates at pp 8, 7
    # micro-batches: one count, most first
    assert reason_counts({Reason.M_LT_P.value: 12, Reason.BATCH.value: 7074}) == (
        "global batch does not divide: 7074, m < pp (1f1b, interleaved): 12")
    assert reason_counts({Reason.INTERLEAVE_MULT.value: 2}) == (
        "m not a multiple of pp (interleaved): 2")
