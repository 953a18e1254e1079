"""The calibration section of docs/accuracy.md, from bench/results/calibrate.json."""

from __future__ import annotations

from typing import Any


def _pct(x: float, signed: bool = False) -> str:
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def calibration_section(doc: dict[str, Any] | None) -> list[str]:
    if doc is None:
        return ["(`bench/results/calibrate.json` is missing.)", ""]
    t = doc["targets"]
    lines = [
        "## Calibrated on one published row, predicting the others", "",
        f"From `bench/results/calibrate.json`, run {doc.get('date')} (`bench/calibrate.py`): "
        f"{doc['method']}. One row gives one equation, so one factor common to compute, "
        "memory and communication is fitted (`pptune calibrate --run` does the same with "
        f"one job). Targets: median \\|error\\| {_pct(t['median_abs_error'])}, worst "
        f"{_pct(t['worst_abs_error'])}. Modern H100 rows: {doc['modern_rows']}.", "",
    ]
    series = [f for f in doc["families"] if f["family"].startswith("weak scaling")]
    for fam in doc["families"]:
        if fam in series:
            continue
        lines += _family(fam)
    if series:
        lines += [
            "### dgxc-benchmarking weak-scaling series, each on its own", "",
            "Each series (one model and precision on H100 over GPU counts) calibrated on one "
            "GPU count, its other counts predicted; every prediction is in "
            "`bench/results/calibrate.json`.", "",
            "| series | rows | predictions | median \\|error\\| | worst | targets |",
            "|---|---|---|---|---|---|",
        ]
        for fam in series:
            ok = fam["within"]
            lines.append(f"| {fam['family'].removeprefix('weak scaling: ')} | {fam['rows']} "
                         f"| {fam['predictions']} | {_pct(fam['median_abs_error'])} "
                         f"| {_pct(fam['worst_abs_error'])} "
                         f"| {'met' if ok['median'] and ok['worst'] else 'missed'} |")
        lines.append("")
    return lines


def _family(fam: dict[str, Any]) -> list[str]:
    ok = fam["within"]
    lines = [
        f"### {fam['family']}", "", f"{fam['source']}: {fam['rows']} rows, "
        f"{fam['predictions']} predictions; median \\|error\\| "
        f"{_pct(fam['median_abs_error'])} ({'met' if ok['median'] else 'missed'}), worst "
        f"{_pct(fam['worst_abs_error'])} ({'met' if ok['worst'] else 'missed'}).", "",
        "| calibrated on | factor | published / uncalibrated | median \\|error\\| of the "
        "others | worst | worst row |", "|---|---|---|---|---|---|",
    ]
    for r in fam["rounds"]:
        worst = max(r["predictions"], key=lambda p: abs(p["error"]))
        lines.append(f"| {r['calibrated_on']} | {r['factor']:.3f} "
                     f"| {r['uncalibrated_ratio']:.3f} | {_pct(r['median_abs_error'])} "
                     f"| {_pct(worst['error'], True)} | {worst['row']} |")
    lines.append("")
    return lines
