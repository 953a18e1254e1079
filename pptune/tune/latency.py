"""The range a link latency ``tune`` fits must be in, and its leave-one-out check (pure).

What is fitted: with the ops calibrated, the rest of each pipelined trial's step
is put on its messages, one intra-node p2p latency a message
(``calibrate.fit_latency``, per trial; the median over trials is kept). The
bandwidth is never fitted (one message size per model: ``calibrate.py``), so
only the latency has a range to keep. That latency stands for the link and the
runtime's work per message; a host too loaded to run a trial at its op times
puts its whole slowdown there instead (a 2-core host running other work: 102,555
us a message fitted where its probe had timed one small exchange at 167-3,803
us), and every plan priced from the profile would then pay it per message.

The range, relative to what was measured of the link:

- the probe's own timings (the profile's ``raw.comm`` sweep of the intra-node
  p2p link): torch.distributed.pipelining sends each message with the isend /
  irecv pair the probe times (``pptune/probe/comm.py`` ``_sweep``;
  torch/distributed/pipelining/schedules.py ``_batch_p2p``), so one message
  takes no less than the fastest and no more than the slowest exchange of the
  probe's smallest (latency-bound) message, the host's load when it probed
  included;
- no timings (``probe --no-comm``, nccl-tests files, a hand-made profile): at
  most ``STATED_HEADROOM`` x the latency the profile states; none where it
  states a free link (nothing to hold the fit against: said in a note).

A fit outside the range is not stored: the profile keeps the latency it had, and
a warning names the fit, the range and where the range comes from. With two
pipelined trials or more, each trial's step is predicted with the latency the
others fit (leave one out); an error beyond ``RESIDUAL_WARN`` is a warning.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pptune.report.fmt import fmt_bytes
from pptune.schemas import Profile
from pptune.tune.jobdoubts import RESIDUAL_WARN

# A stated (unmeasured) latency's headroom: the slowest one-message gloo exchange the
# probe timed on the 2-core development host at a load average of ~10 (6.9 ms,
# docs/measured.md) is 69x the probe's CPU default of 100 us (pptune/probe/links.py):
# more than the host's load has been seen to add to one message.
STATED_HEADROOM = 70.0


@dataclass(frozen=True)
class LatencyRange:
    """What a fitted per-message latency may be, and where that comes from."""

    low_s: float  # exclusive where 0 (a fit at 0 measures nothing: model.calibrate)
    high_s: float
    source: str  # for the warning: "the probe's 10 timings of one 1.00 KiB exchange"

    def holds(self, latency_s: float) -> bool:
        return self.low_s <= latency_s <= self.high_s

    def text(self) -> str:
        return f"{self.low_s * 1e6:,.0f}-{self.high_s * 1e6:,.0f} us ({self.source})"


def latency_range(profile: Profile) -> LatencyRange | None:
    """The range of the profile's intra-node p2p latency (module docstring); None where
    the profile states a free link and measured none."""
    timed = _probe_timings(profile.raw)
    if timed is not None:
        size, samples = timed
        return LatencyRange(min(samples), max(samples),
                            f"the fastest and slowest of the probe's {len(samples)} timings "
                            f"of one {fmt_bytes(size)} exchange on this link")
    stated = profile.links.intra_node.p2p.latency_s
    if stated <= 0:
        return None
    return LatencyRange(0.0, STATED_HEADROOM * stated,
                        f"up to {STATED_HEADROOM:g}x the {stated * 1e6:,.0f} us the profile "
                        "states, not measured: the most a loaded host has been seen to add "
                        "to one message")


def _probe_timings(raw: dict[str, Any] | None) -> tuple[float, list[float]] | None:
    """The message size and seconds of the probe's timings of its smallest intra-node p2p
    exchange; None where the profile keeps none."""
    sweeps = ((raw or {}).get("comm") or {}).get("sweeps") or []
    for sweep in sweeps:
        if not isinstance(sweep, dict) or (sweep.get("scope"), sweep.get("op")) != (
                "intra_node", "p2p"):
            continue
        rows = [r for r in sweep.get("rows") or [] if isinstance(r, dict) and r.get("bytes")]
        if not rows:
            return None
        row = min(rows, key=lambda r: float(r["bytes"]))
        samples = [float(x) for x in row.get("samples_s") or [row.get("time_s")]
                   if isinstance(x, (int, float)) and x > 0]
        return (float(row["bytes"]), samples) if samples else None
    return None


def out_of_range(fitted_s: float, bound: LatencyRange, kept_s: float) -> str:
    """The warning for a fit outside ``bound``, the profile keeping ``kept_s``."""
    above = fitted_s > bound.high_s
    why = ("what the steps hold beyond their calibrated ops is more likely the host's load "
           "(other work, ranks sharing cores) than the link: run tune on a quieter host, or "
           "probe the link again under the load it trains in" if above else
           "the calibrated ops already take up the steps, leaving their messages less than "
           "the link was measured to take")
    return (f"intra-node p2p latency fitted to the trials' steps, {fitted_s * 1e6:,.0f} us a "
            f"message, is {'above' if above else 'below'} the physical range {bound.text()}: "
            f"not stored, the profile keeps {kept_s * 1e6:,.0f} us; {why}")


def held_out(fits: Sequence[float], predict_at: Sequence[Callable[[float], float]],
             measured_s: Sequence[float], labels: Sequence[str]) -> str | None:
    """Leave one out: each trial's step at the median latency of the others' fits over its
    measured step, minus 1; the warning when one misses beyond RESIDUAL_WARN (None with
    fewer than two fits, or when every trial is predicted within it)."""
    if len(fits) < 2:
        return None
    misses = []
    for i, at in enumerate(predict_at):
        others = sorted(f for j, f in enumerate(fits) if j != i)
        median = (others[(len(others) - 1) // 2] + others[len(others) // 2]) / 2
        misses.append(at(median) / measured_s[i] - 1)
    if all(abs(m) <= RESIDUAL_WARN for m in misses):
        return None
    shown = ", ".join(f"{n} {m:+.1%}" for n, m in zip(labels, misses, strict=True))
    return (f"leave one out, each pipelined trial predicted with the latency the others fit "
            f"misses by {shown}, beyond the +-{RESIDUAL_WARN:.0%} pptune's calibration "
            "benchmark accepts: the fitted latency may not carry to other plans")
