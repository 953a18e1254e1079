"""The link latency tune fits: stored only inside the range the probe measured (or the
headroom of a stated latency), checked leave one out (pptune/tune/latency.py). A user
trial on a loaded 2-core host stored 102,555 us a message where its probe had timed one
small exchange at 167-3,803 us."""

from __future__ import annotations

from typing import Any

import pytest
from tune_helpers import MS, profile, trial

from pptune.schemas import Profile
from pptune.tune import latency, model

# gpipe pp=2 m=1, one layer a stage, F 1 ms and B 1 ms each, measured as profiled: the
# chain F0 -> send -> F1 -> B1 -> send -> B0 is 4 ms and 2 hops, so a step of 5 ms fits
# 0.5 ms a message and one of 8 ms fits 2 ms
OPS = {"F0": 1.0, "F1": 1.0, "B0": 1.0, "B1": 1.0}


def piped(key: str, step_ms: float) -> Any:
    return trial(key, "gpipe", 2, 1, (1, 1), OPS, steps_ms=(step_ms,))


def probed(timings_us: list[float], stated_us: float = 150.0) -> Profile:
    """The hand-sized profile with a probe's timings of one 1 KiB p2p exchange (and a
    larger one the range does not read)."""
    base = profile([1.0, 1.0], [1.0, 1.0], latency_s=stated_us * 1e-6)
    rows = [{"bytes": 4096, "time_s": 1.0, "samples_s": [1.0]},
            {"bytes": 1024, "time_s": timings_us[0] * 1e-6,
             "samples_s": [x * 1e-6 for x in timings_us]}]
    sweeps = [{"scope": "intra_node", "op": "allreduce", "rows": [
                  {"bytes": 1024, "samples_s": [9.0]}]},
              {"scope": "intra_node", "op": "p2p", "rows": rows}]
    return base.model_copy(update={"raw": {"comm": {"sweeps": sweeps}}})


def test_the_range_is_the_probes_timings_of_its_smallest_exchange() -> None:
    r = latency.latency_range(probed([120.0, 100.0, 300.0]))
    assert r is not None
    assert (r.low_s, r.high_s) == pytest.approx((100e-6, 300e-6))
    assert r.text() == ("100-300 us (the fastest and slowest of the probe's 3 timings of one "
                        "1.00 KiB exchange on this link)")


def test_a_fit_above_the_probes_slowest_exchange_is_not_stored() -> None:
    prof = probed([100.0, 200.0, 300.0])
    c = model.calibrate(prof, [piped("t", 5.0)])
    assert c.latency_s is None  # 500 us fitted, above 300 us
    assert c.warnings == [
        "intra-node p2p latency fitted to the trials' steps, 500 us a message, is above the "
        "physical range 100-300 us (the fastest and slowest of the probe's 3 timings of one "
        "1.00 KiB exchange on this link): not stored, the profile keeps 150 us; what the "
        "steps hold beyond their calibrated ops is more likely the host's load (other work, "
        "ranks sharing cores) than the link: run tune on a quieter host, or probe the link "
        "again under the load it trains in"]
    out = model.calibrated_profile(prof, c)
    assert out.links.intra_node.p2p.latency_s == 150e-6
    assert f"warning: {c.warnings[0]}" in out.notes
    assert not any("latency fitted to the trials' step times" in n for n in out.notes)


def test_a_fit_inside_the_probes_timings_is_stored() -> None:
    c = model.calibrate(probed([200.0, 600.0]), [piped("t", 5.0)])
    assert c.latency_s == pytest.approx(0.5 * MS, rel=1e-6)
    assert c.warnings == []


def test_a_fit_below_the_probes_fastest_exchange_is_not_stored() -> None:
    c = model.calibrate(probed([700.0, 900.0]), [piped("t", 5.0)])
    assert c.latency_s is None
    assert "is below the physical range 700-900 us" in c.warnings[0]
    assert "the profile keeps 150 us" in c.warnings[0]


@pytest.mark.parametrize(("stated_us", "stored"), [(5.0, False), (10.0, True)])
def test_without_timings_a_stated_latency_bounds_the_fit(stated_us: float,
                                                         stored: bool) -> None:
    # 500 us against 70 x 5 = 350 us (refused) and 70 x 10 = 700 us (kept)
    prof = profile([1.0, 1.0], [1.0, 1.0], latency_s=stated_us * 1e-6)
    c = model.calibrate(prof, [piped("t", 5.0)])
    if stored:
        assert c.latency_s == pytest.approx(0.5 * MS, rel=1e-6) and c.warnings == []
        return
    # the fit's own 2 hops of 0.5 ms: 4 ms + 1 ms over a free link
    assert c.latency_s is None
    assert ("500 us a message, is above the physical range 0-350 us (up to 70x the 5 us the "
            "profile states, not measured: the most a loaded host has been seen to add to "
            "one message)") in c.warnings[0]


def test_a_free_link_with_no_timings_is_stored_unchecked_and_said() -> None:
    c = model.calibrate(profile([1.0, 1.0], [1.0, 1.0]), [piped("t", 5.0)])
    assert c.latency_s == pytest.approx(0.5 * MS, rel=1e-6)
    assert any(n.startswith("intra-node p2p latency not checked against a measurement")
               for n in c.notes)


def test_trials_that_need_other_latencies_are_warned_leave_one_out() -> None:
    # 0.5 ms and 2 ms fitted; each predicted at the other's: 4 + 2 x 2 = 8 ms against 5
    # (+60.0%), 4 + 2 x 0.5 = 5 ms against 8 (-37.5%)
    c = model.calibrate(probed([100.0, 3000.0]), [piped("a", 5.0), piped("b", 8.0)])
    assert c.latency_s == pytest.approx(1.25 * MS, rel=1e-6)  # the median is kept
    assert c.warnings == [
        "leave one out, each pipelined trial predicted with the latency the others fit "
        "misses by a +60.0%, b -37.5%, beyond the +-10% pptune's calibration benchmark "
        "accepts: the fitted latency may not carry to other plans"]
    agree = model.calibrate(probed([100.0, 3000.0]), [piped("a", 5.0), piped("b", 5.1)])
    assert agree.warnings == []
