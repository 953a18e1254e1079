"""Framework releases: which one a rule follows, and how a user picks another.

Each framework's folder declares the releases it follows as ``VersionKey``
values (name, the ``--framework-version`` spellings, the default release
and what was read there); a check carries the user's choices in
``Versions``, and a rule asks it for its key's release. torch is no
framework adapter of its own: its schedules (torchtitan's and pptune's own
runs) are declared here as ``TORCH``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


def version_tuple(text: str) -> tuple[int, ...]:
    """"0.2.2" -> (0, 2, 2); ValueError when it is not dotted numbers."""
    parts = text.strip().lstrip("v").split(".")
    if not parts or not all(p.isdigit() for p in parts) or len(parts) > 4:
        raise ValueError(text)
    return tuple(int(p) for p in parts)


def padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``a`` and ``b`` with zeros appended to one length: 2.13.0 and 2.13 compare equal."""
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


@dataclass(frozen=True)
class VersionKey:
    """One library whose release decides rules: ``--framework-version NAME=VERSION``."""

    name: str  # the key Versions stores it under
    spellings: tuple[str, ...]  # NAME as the user may write it
    default: str  # the release the rules follow unless told otherwise
    source: str  # what was read there, for the docs
    newest: str | None = None  # the latest release whose rules were read (None: default)
    # whether pptune holds rules of earlier releases (a table of what changed) or judges
    # every earlier release by the default's, which a note then says (earlier_than_read)
    earlier_rules: bool = True

    def later_than_read(self, release: str) -> str | None:
        """The newest release read when ``release`` comes after it, else None. Rules ask
        ``Versions.at_least``, so a later release gets every rule of the newest."""
        newest = self.newest or self.default
        given, read = padded(version_tuple(release), version_tuple(newest))
        return newest if given > read else None

    def earlier_than_read(self, release: str) -> str | None:
        """The default when ``release`` comes before it and pptune has no rules of earlier
        releases (``earlier_rules`` False), else None; compared to as many parts as
        ``release`` gives ("0.16" is no earlier than 0.16.1)."""
        given = version_tuple(release)
        if self.earlier_rules or given >= version_tuple(self.default)[:len(given)]:
            return None
        return self.default


TORCH = VersionKey(
    "torch", ("torch",), "2.13",
    "torch/distributed/pipelining/schedules.py (Schedule1F1B, ScheduleInterleaved1F1B, "
    "ScheduleInterleavedZeroBubble, ScheduleZBVZeroBubble)")
# libraries shared by several frameworks (listed after the frameworks' own keys)
SHARED_KEYS = (TORCH,)


class FrameworkRefusal(ValueError):
    """The framework's own validation refuses this configuration (message cites the rule)."""

    def __init__(self, rule_id: str, message: str) -> None:
        super().__init__(message)
        self.rule_id = rule_id


@dataclass(frozen=True)
class Versions:
    """The releases whose rules a check follows: the user's choices, else each key's default."""

    chosen: Mapping[str, str] = field(default_factory=dict)  # VersionKey.name -> release

    def of(self, key: VersionKey) -> str:
        return self.chosen.get(key.name, key.default)

    def at_least(self, key: VersionKey, *release: int) -> bool:
        """Whether the chosen release of ``key`` is ``release`` or later."""
        chosen, asked = padded(version_tuple(self.of(key)), release)
        return chosen >= asked
