"""The one plan every ratio of emit's narration is relative to: plan N as ranked.

``emit`` names it (``relative_to``) while the adapters express a plan, so that each
re-pricing's note reads ``(1.022x plan 1)`` whichever substitution came before it;
outside emit (check-config's comparisons) a ratio is to the plan just re-priced."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_BASE: ContextVar[tuple[int, float] | None] = ContextVar("pptune_emit_baseline", default=None)


@contextmanager
def relative_to(rank: int, step_time_s: float) -> Iterator[None]:
    """Ratios in notes written inside are to plan ``rank``'s ``step_time_s``."""
    token = _BASE.set((rank, step_time_s))
    try:
        yield
    finally:
        _BASE.reset(token)


def ratio(step_time_s: float, before_s: float) -> str:
    """``1.022x plan 1`` (to the named baseline), else ``1.022x`` (to ``before_s``)."""
    base = _BASE.get()
    if base is None or base[1] <= 0:
        return f"{step_time_s / before_s:.3f}x" if before_s > 0 else "n/a"
    return f"{step_time_s / base[1]:.3f}x plan {base[0]}"
