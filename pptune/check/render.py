"""check-config output: text, JSON and GitHub workflow annotations."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

from pptune.check.rules import CheckReport
from pptune.frameworks.read import ReadResult
from pptune.frameworks.registry import adapter_of

_ORDER = {"error": 0, "warning": 1, "info": 2}
# every key of --output json's "derived" (rules.py writes them), present with null where
# check-config computed none (costs not priced, a prediction skipped, the search not run),
# so a consumer can hold the document to a fixed schema; a key is added, never renamed
DERIVED_KEYS = ("dp", "grad_accum_steps", "microbatches", "cost_source", "cost_key",
                "step_time_s", "bubble_rate", "peak_memory_bytes", "stage_layers",
                "recompute_layers_per_stage", "slowdown_vs_best")


def _sorted(report: CheckReport) -> list[Any]:
    return sorted(report.findings, key=lambda f: _ORDER[f.severity])


def _count(report: CheckReport) -> str:
    e, w = len(report.errors()), len(report.warnings())
    return f"{e} error{'s' * (e != 1)}, {w} warning{'s' * (w != 1)}"


def findings_text(path: Path, read: ReadResult, report: CheckReport,
                  width: int | None = None) -> str:
    """The findings, one a line; at ``width`` columns a long one wraps under its own
    text (a hanging indent), so each finding still starts at the margin. A header longer
    than ``width`` gives the counts a line of their own (a path is never cut)."""
    head = f"{path} ({read.format.value}):"
    lines = [f"{head} {_count(report)}"]
    if width is not None and len(lines[0]) > max(width, 40):
        lines = [*textwrap.wrap(head, width=max(width, 40), subsequent_indent="  ",
                                break_long_words=False, break_on_hyphens=False),
                 f"  {_count(report)}"]
    items = [("note", note) for note in read.notes] + [
        (f.severity, f"{f.id}: {f.message}") for f in _sorted(report)]
    for severity, text in items:
        line = f"  {severity:<8} {text}"
        if width is None or len(line) <= width:
            lines.append(line)
            continue
        lines.extend(textwrap.wrap(line, width=max(width, 40), subsequent_indent=" " * 11,
                                   break_long_words=False, break_on_hyphens=False))
    return "\n".join(lines)


def findings_json(path: Path, read: ReadResult, report: CheckReport, exit_code: int) -> dict[str, Any]:
    return {
        "file": str(path),
        "format": read.format.value,
        "exit_code": exit_code,
        "errors": len(report.errors()),
        "warnings": len(report.warnings()),
        "findings": [
            {"id": f.id, "severity": f.severity, "message": f.message, "values": f.values}
            for f in _sorted(report)
        ],
        "notes": list(read.notes),
        "ignored": list(read.semantics.ignored),  # every flag or key left unread, in full
        "derived": {**dict.fromkeys(DERIVED_KEYS), **report.derived},
        "config": read.config.model_dump(mode="json"),
    }


def _escape(text: str) -> str:
    # GitHub workflow commands: %, CR and LF are escaped in the message
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property value (file=, title=): the message's escapes, and
    ':' and ',' too, which would end the value (actions/toolkit command.ts
    escapeProperty)."""
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


# a flag, or an environment variable's name (CUDA_DEVICE_MAX_CONNECTIONS: an underscore
# in it, so that a script's own TP or EP is not taken for the "EP" of a quoted message)
_NAMED = re.compile(r"--[A-Za-z0-9][-A-Za-z0-9_]*|\b[A-Z][A-Z0-9]*_[A-Z0-9_]+\b")


def finding_line(message: str, lines: dict[str, int], values: Any = (),
                 size_flags: tuple[tuple[str, str], ...] = ()) -> int | None:
    """The line of the first flag or environment variable ``message`` names that the file
    sets (``Semantics.flag_lines``), else of the first flag that sets one of the finding's
    ``values`` (``Adapter.size_flags``: moe-world's ep); None: it names none."""
    for name in _NAMED.findall(message):
        if name in lines:
            return lines[name]
    for key, flag in size_flags:
        if key in values and flag in lines:
            return lines[flag]
    return None


def findings_github(path: Path, read: ReadResult, report: CheckReport) -> str:
    """GitHub workflow commands, ``::warning file=F,line=N,title=T::message`` (line= where
    the finding names a flag the file sets: GitHub shows the annotation on that line)."""
    level = {"error": "error", "warning": "warning", "info": "notice"}
    out = []
    for f in _sorted(report):
        line = finding_line(f.message, read.semantics.flag_lines, f.values,
                            adapter_of(read.format.value).size_flags)
        where = f"file={_property(str(path))}" + (f",line={line}" if line else "")
        out.append(f"::{level[f.severity]} {where},title=pptune {f.id}::{_escape(f.message)}")
    out.append(f"{path} ({read.format.value}): {_count(report)}")
    return "\n".join(out)


def github_error(path: Path | None, message: str) -> str:
    """One annotation for a file that could not be checked (exit 2), so a CI job
    never shows nothing (``path`` None: no file was given)."""
    if path is None:
        return f"::error title=pptune cannot-check::{_escape(message)}\nnothing checked"
    return (f"::error file={_property(str(path))},title=pptune cannot-check::"
            f"{_escape(message)}\n"
            f"{path}: not checked")
