"""The option groups of how a command shows and runs a plan (``groups`` declares the
rest): output on stdout, and a run on this machine."""

from __future__ import annotations

from dataclasses import dataclass

from pptune.options.groups import BOOL, FLOAT, INT, STR, option


@dataclass(frozen=True, kw_only=True)
class OutputOptions:
    """How a command shows its result on stdout."""

    as_json: bool = option(False, "--json", kind=BOOL, help="machine-readable result on stdout")
    timeline: bool = option(False, "--timeline", kind=BOOL, help="draw the timeline")
    width: int = option(80, "--width", kind=INT, help="timeline width in columns")


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """How a plan runs on this machine (``pptune validate``, and each trial of ``pptune tune``)."""

    module: str | None = option(None, "--module", kind=STR,
                                help="your layers: 'pkg.mod:factory' (see pptune probe --help)")
    warmup: int = option(2, "--warmup", kind=INT, help="untimed steps first")
    steps: int = option(5, "--steps", kind=INT, help="timed steps; the median counts")
    timeout: float = option(180.0, "--timeout", kind=FLOAT,
                            help="seconds a rank may stay silent before the run is abandoned")
    device: str = option("auto", "--device", kind=STR,
                         help="auto (cuda if available), cpu or cuda")
