"""What ``bash -n`` refuses in a launch script, refused the same way by pptune's reader.

``Unclosed``: a quote, substitution, parenthesis or compound command still open at
the end of the text. ``Unexpected``: a reserved word (or operator) where bash's
grammar allows none, such as a ``fi`` that closes a ``{`` group. Each message is one
line: where, what, bash -n's own words, and what to change.
"""

from __future__ import annotations

__all__ = ["ShellSyntax", "Unclosed", "Unexpected"]


class ShellSyntax(Exception):
    """bash refuses the script; ``line``: where the fault is (for ``Unclosed``, where
    the construct never closed opened)."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


class Unclosed(ShellSyntax):
    """A quote, substitution, parenthesis or compound command the text never closes.
    ``opener``: ``'`` ``"`` ``$'`` ````` ``$(`` ``${`` ``$((`` ``((`` ``(``, or the
    reserved word that opened a compound command (``if`` ``{`` ``case`` ``while``
    ``until`` ``for`` ``select``)."""

    def __init__(self, line: int, opener: str, what: str, bash_says: str, fix: str) -> None:
        super().__init__(f"line {line}: the {opener}{what} opened here is never closed, so "
                         f"bash refuses the script ({bash_says}); {fix}", line)
        self.opener = opener


class Unexpected(ShellSyntax):
    """A word bash's grammar does not allow where it stands (bash -n: "syntax error
    near unexpected token"). ``token``: as bash names it (a newline is ``newline``)."""

    def __init__(self, line: int, token: str, why: str, fix: str) -> None:
        super().__init__(f"line {line}: {why}, so bash refuses the script (syntax error "
                         f"near unexpected token `{token}'); {fix}", line)
        self.token = token
