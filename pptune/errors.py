"""One base error carrying an exit code; the CLI maps it to an exit once.

Exit codes (pip-audit's convention): 0 ok, 1 findings / no feasible plan /
a run that failed, 2 bad usage or bad input.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_FAILED = 1  # a run that started and failed (probe, validate)
EXIT_USAGE = 2


class PptuneError(Exception):
    """A user-facing error: one line of text and an exit code."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class BadInput(PptuneError):
    """A file, flag or value the user gave is invalid (exit 2)."""

    exit_code = EXIT_USAGE


class NoFeasiblePlan(PptuneError):
    """Nothing fits the request (exit 1)."""

    exit_code = EXIT_FINDINGS


class RunFailed(PptuneError):
    """A run started and a rank failed, died or hung (exit 1): the input was
    accepted, the run did not finish."""

    exit_code = EXIT_FAILED


class TimeLimit(RunFailed):
    """A run stopped at the wall-clock time it was given (tune's --budget): its
    processes were ended before a result."""


class MissingDependency(PptuneError):
    """An optional package (torch) is needed for this command (exit 2)."""

    exit_code = EXIT_USAGE
