"""The DualPipes' F&B pairs and whole backwards in the text timeline, the SVG and the trace.

One device, dualpipev, m 2, every op of a stage 1 s (F 1, B 1, W 1): its order
F0@0 F0@1 F1@0 BW0@1 F1@1&B0@0 BW1@1 B1@0 W1@0 runs back to back, the pair as
F + whole backward = 3 s: F0 [0,1], F0 [1,2], F1 [2,3], BW0 [3,5], F1&B0 [5,8],
BW1 [8,10], B1 [10,11], W1 [11,12].
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.svg import COLORS, timeline_svg
from pptune.report.timeline import STYLES, plain_timeline
from pptune.report.trace import chrome_trace

NS = "{http://www.w3.org/2000/svg}"


def dual():
    return simulate("dualpipev", 1, 2, uniform_stages(2, 1.0, 1.0, 1.0))


def test_the_order_runs_back_to_back() -> None:
    r = dual()
    assert [(str(e.op), e.start_s, e.end_s) for e in r.events] == [
        ("F0@0", 0, 1), ("F0@1", 1, 2), ("F1@0", 2, 3), ("BW0@1", 3, 5),
        ("F1@1&B0@0", 5, 8), ("BW1@1", 8, 10), ("B1@0", 10, 11), ("W1@0", 11, 12)]


def test_text_timeline_labels_pairs_and_whole_backwards() -> None:
    # 24 cells over 12 s: two a second
    text = plain_timeline(dual(), width=29)
    row = next(line for line in text.splitlines() if line.startswith("dev0"))
    assert row == "dev0 F0F0F1BW0BF1&B0&BW1BB1W1"
    assert "F&B overlapped forward & backward" in text and "BW whole backward" in text
    assert {"BW", "F&B"} <= set(STYLES)


def test_a_narrow_pair_fills_with_its_sign() -> None:
    # 12 cells: one a second; the pair (3 cells) cannot hold F1&B0: its & fill names
    # it; a whole backward (2 cells) cannot hold BW0 but still starts with BW
    row = next(line for line in plain_timeline(dual(), width=17).splitlines()
               if line.startswith("dev0"))
    assert row == "dev0 FFFBW&&&BWBW"
    # 6 cells: two seconds a cell; the pair owns one and a half: filled with &
    row = next(line for line in plain_timeline(dual(), width=11).splitlines()
               if line.startswith("dev0"))
    assert "&" in row


def test_svg_draws_a_pair_as_its_two_halves() -> None:
    root = ET.fromstring(timeline_svg(dual()))
    # the pair's forward half runs stage 1, device 0's second chunk
    pairs = [g for g in root.iter(f"{NS}g") if g.get("class") == "op op-FB chunk-1"]
    assert len(pairs) == 1
    halves = pairs[0].findall(f"{NS}rect")
    assert [h.get("fill") for h in halves] == [COLORS["F"], COLORS["B"]]
    assert "F1&B0 stages 1&0" in pairs[0].findtext(f"{NS}title", "")
    whole = [r for r in root.iter(f"{NS}rect") if r.get("class") == "op op-BW chunk-1"]
    assert len(whole) == 2 and {r.get("fill") for r in whole} == {COLORS["BW"]}


def test_trace_names_both_halves_of_a_pair() -> None:
    events = [e for e in chrome_trace(dual())["traceEvents"] if e["ph"] == "X"]
    pair = next(e for e in events if e["args"]["kind"] == "F&B")
    assert pair["name"] == "F1&B0 s1&s0"
    assert pair["args"] == {"mb": 1, "stage": 1, "kind": "F&B", "b_mb": 0, "b_stage": 0}
    assert pair["ts"] == 5e6 and pair["dur"] == 3e6
    assert pair["cname"] == "yellow"
    assert next(e for e in events if e["args"]["kind"] == "BW")["name"] == "BW0 s1"
