"""Renderers and exports of pipeline timelines and results.

Everything here returns an object or a string (or writes a file atomically);
nothing prints. Timelines are duck-typed (``protocol.Timeline``), so measured
runs render the same way as ``simulate`` results.
"""

from pptune.report.fmt import fmt_bytes, fmt_pct, fmt_seconds
from pptune.report.protocol import Timeline, TimelineEvent, TimelineOp
from pptune.report.render import render_plain
from pptune.report.svg import timeline_svg, write_svg
from pptune.report.tables import sim_summary_table
from pptune.report.timeline import plain_timeline, timeline_text
from pptune.report.trace import chrome_trace, write_trace

__all__ = [
    "Timeline",
    "TimelineEvent",
    "TimelineOp",
    "chrome_trace",
    "fmt_bytes",
    "fmt_pct",
    "fmt_seconds",
    "plain_timeline",
    "render_plain",
    "sim_summary_table",
    "timeline_svg",
    "timeline_text",
    "write_svg",
    "write_trace",
]
