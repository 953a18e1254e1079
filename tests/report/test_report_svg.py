"""SVG timeline: well-formed, one rect per op, colours, escaping."""

import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field

import pytest

from pptune.costmodel.simulate import simulate, uniform_stages
from pptune.report.svg import COLORS, timeline_svg, write_svg

NS = "{http://www.w3.org/2000/svg}"


def op_rects(root: ET.Element) -> list[ET.Element]:
    return [r for r in root.iter(f"{NS}rect") if r.get("class", "").startswith("op ")]


def test_one_rect_per_op_with_kind_colours() -> None:
    r = simulate("zb-h1", 4, 8, uniform_stages(4, 1e-3, 1e-3, 1e-3))
    root = ET.fromstring(timeline_svg(r))
    assert root.tag == f"{NS}svg" and root.get("width") == "960"
    rects = op_rects(root)
    assert len(rects) == len(r.events) == 4 * 8 * 3
    assert Counter(x.get("class") for x in rects) == {"op op-F": 32, "op op-B": 32, "op op-W": 32}
    for x in rects:
        assert x.get("fill") == COLORS[x.get("class")[-1]]
        assert x.find(f"{NS}title") is not None
    idle = [x for x in root.iter(f"{NS}rect") if x.get("class") == "idle"]
    assert len(idle) == 4
    texts = [t.text for t in root.iter(f"{NS}text")]
    for label in ("dev0", "dev3", "forward", "backward", "weight-grad", "idle", "27.0 ms"):
        assert label in texts, label


def test_svg_legend_lists_weight_grad_only_when_present() -> None:
    r = simulate("1f1b", 2, 2, uniform_stages(2, 1.0, 1.0))
    texts = [t.text for t in ET.fromstring(timeline_svg(r)).iter(f"{NS}text")]
    assert "forward" in texts and "idle" in texts and "weight-grad" not in texts


def test_rects_scale_to_the_width() -> None:
    r = simulate("1f1b", 2, 2, uniform_stages(2, 1.0, 1.0))
    root = ET.fromstring(timeline_svg(r, width_px=500))
    rects = op_rects(root)
    idle = next(x for x in root.iter(f"{NS}rect") if x.get("class") == "idle")
    left, bar_w = float(idle.get("x")), float(idle.get("width"))
    assert left + bar_w <= 500
    # the latest op ends at the right edge of the bar
    assert max(float(x.get("x")) + float(x.get("width")) for x in rects) == pytest.approx(
        left + bar_w, abs=0.02
    )
    # equal-cost ops have equal widths: the step is 6 s, each op 1 s
    assert {x.get("width") for x in rects} == {f"{bar_w / 6:.2f}".rstrip("0").rstrip(".")}


@dataclass
class Op:
    kind: str
    mb: int
    stage: int


@dataclass
class Ev:
    device: int
    op: Op
    start_s: float
    end_s: float


@dataclass
class Measured:
    p: int
    step_time_s: float
    schedule: str = "<mine & yours>"
    events: list[Ev] = field(default_factory=list)


def test_text_is_escaped_and_duck_typing_works(tmp_path) -> None:
    m = Measured(1, 2.0, events=[Ev(0, Op("F", 0, 0), 0.0, 1.0)])
    path = tmp_path / "t.svg"
    write_svg(path, m)
    root = ET.parse(path).getroot()
    assert len(op_rects(root)) == 1
    assert any("<mine & yours>" in (t.text or "") for t in root.iter(f"{NS}text"))


def test_zero_length_and_many_devices() -> None:
    r = simulate("1f1b", 4, 4, uniform_stages(4, 0.0, 0.0))
    root = ET.fromstring(timeline_svg(r))
    assert len(op_rects(root)) == len(r.events)
    assert all(float(x.get("width")) == 0 for x in op_rects(root))
    r = simulate("1f1b", 64, 128, uniform_stages(64, 1e-3, 2e-3))
    root = ET.fromstring(timeline_svg(r))
    assert len(op_rects(root)) == 64 * 128 * 2
    assert len([x for x in root.iter(f"{NS}rect") if x.get("class") == "idle"]) == 64


def test_interleaved_svg_tells_chunks_apart_and_names_v() -> None:
    from pptune.costmodel.schedules import Schedule
    from pptune.costmodel.simulate import simulate, uniform_stages
    from pptune.report.svg import timeline_svg

    sim = simulate(Schedule.INTERLEAVED, 2, 4, uniform_stages(4, 1.0, 2.0), v=2)
    svg = timeline_svg(sim)
    assert "v=2" in svg
    assert svg.count("chunk-1") == 2 * 2 * 4  # F and B of 4 micro-batches on 2 devices
    assert "(chunk 1)" in svg and 'fill-opacity="0.6"' in svg
