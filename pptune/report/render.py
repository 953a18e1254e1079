"""Render any rich renderable to a string, for golden files and NO_COLOR output."""

from __future__ import annotations

import io

from rich.console import Console, RenderableType


def render_plain(renderable: RenderableType, width: int = 80) -> str:
    """``renderable`` as plain text at ``width`` columns: no colour, no escape codes,
    no trailing spaces (so golden files survive editors that strip them)."""
    console = Console(
        width=width, color_system=None, record=True, file=io.StringIO(), legacy_windows=False,
        force_terminal=False, no_color=True, highlight=False,
    )
    console.print(renderable)
    text = console.export_text(styles=False)
    return "\n".join(line.rstrip() for line in text.split("\n"))
