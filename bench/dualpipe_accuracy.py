"""DualPipeV's predicted step against a real run, beside the schedules validate ran before.

2 CPU ranks (gloo, 1 thread each), gpt-small, micro-batch 1: 1f1b and zbv
(the V placement without overlapped pairs) and dualpipev (torch's
``ScheduleDualPipeV``, 4 stages in a V), m in {4, 8} (DualPipeV needs at
least 2 x pp = 4). One fresh quick probe profile prices every configuration;
each is launched with ``pptune.validate`` (median of the timed steps) and
compared, with the fairness rule of ``bench/accuracy.py``: a launch whose
steps spread by more than ``RETRY_SPREAD`` of their median runs once more and
the quieter of the two counts. The load average is recorded at every launch:
the machine is shared, and its load moves the figures.

Run: ``python -m bench.dualpipe_accuracy [--quick]``; writes
``bench/results/dualpipev_accuracy.json`` (docs/accuracy.md renders it).
"""

from __future__ import annotations

import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.accuracy import PP, RETRY_SPREAD, _launch, _profile
from bench.write import RESULTS, write_json

CONFIGS: tuple[tuple[str, tuple[int, ...]], ...] = (
    ("1f1b", (4, 4)), ("zbv", (2, 2, 2, 2)), ("dualpipev", (2, 2, 2, 2)),
)
MICROBATCHES = (4, 8)


def main(quick: bool = False) -> dict[str, Any]:
    warmup, steps = (1, 3) if quick else (2, 5)
    t_start = time.perf_counter()
    from pptune.schemas import load_profile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "profile.json"
        probe_s = _profile(path, quick)
        profile = load_profile(path)
    rows = []
    for schedule, split in CONFIGS:
        for m in MICROBATCHES:
            config = f"{schedule} m={m}"
            print(f"dualpipe accuracy: {config} ...", file=sys.stderr, flush=True)
            load = os.getloadavg()[0]
            run = _launch(profile, schedule, m, warmup, steps, split)
            retried = None
            if run["spread"] > RETRY_SPREAD:
                again = _launch(profile, schedule, m, warmup, steps, split)
                retried = {"first_spread": run["spread"], "second_spread": again["spread"],
                           "first_error": run["error"]}
                if again["spread"] < run["spread"]:
                    run = again
            rows.append({"config": config, "schedule": schedule, "microbatches": m,
                         "stage_layers": list(split), "load_average": round(load, 2),
                         **{k: v for k, v in run.items() if k != "ops"}, "retried": retried})

    def band(names: tuple[str, ...]) -> dict[str, float]:
        errs = [abs(r["error"]) for r in rows if r["schedule"] in names]
        return {"median_abs_error": statistics.median(errs), "worst_abs_error": max(errs)}

    doc = {
        "benchmark": "dualpipev_accuracy",
        "machine": f"{platform.machine()} {platform.python_version()}, {os.cpu_count()} cores",
        "date": time.strftime("%Y-%m-%d"),
        "setup": {
            "model": "gpt-small", "pp": PP, "micro_batch_size": 1, "backend": "gloo",
            "threads_per_rank": 1, "warmup_steps": warmup, "timed_steps": steps,
            "retry_when_spread_above": RETRY_SPREAD,
            "profile": "pptune probe --quick" + (" --no-comm" if quick else "")
            + f" (fresh, {probe_s:.0f} s)", "quick": quick,
        },
        "configs": rows,
        "dualpipev": band(("dualpipev",)),
        "other_schedules": band(tuple(s for s, _ in CONFIGS if s != "dualpipev")),
        "total_s": round(time.perf_counter() - t_start, 1),
    }
    write_json(RESULTS / "dualpipev_accuracy.json", doc)
    return doc


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
