"""The compound commands open at a script's top level, followed word by word as bash's
parser follows them, so that one never closed, or a word that ends one where none is
open, is refused as ``bash -n`` refuses the script.

Followed (the bash manual, "Reserved Words", "Compound Commands", "Shell Functions";
each case put to ``bash -n`` in the tests): ``{ }``, ``if then elif else fi``,
``while/until ... do ... done``, ``for/select NAME [in WORDS]; do ... done`` (and a
``{ }`` body), ``for (( ; ; ))``, ``case WORD in PATTERN) ... ;; esac``.

A reserved word counts only where bash reads one: unquoted, a word of its own, where a
command could start (after ``;`` ``&`` ``|`` ``&&`` ``||`` a newline, or a word that
leads a command: ``if then elif else while until do {``, and ``! time`` at a
pipeline's start), not after an assignment (``A=1 fi`` runs a command named fi) nor
as an argument (``echo fi``); after a compound command closes, a word that ends
another is read (``{ (a) }``, ``if x; then { y; } fi``). The
words of ``[[ ]]``, of ``for NAME in WORDS`` and of a ``case`` pattern are none
(``for i in fi done``, ``case x in fi) ...``); a function's ``()`` is followed by its
body (``f() {``, ``function f {``).

Only the top level is followed: inside ``( )`` and ``$( )`` only a ``case`` is
(shell_split.py). bash refuses more than is checked here, left to it: an empty list
(``if true; then; fi``, ``then time fi``), a command word after a closed compound
command (``{ a; } echo``; a word that ends one is checked, ``{ a; } fi``), a stray
``in``, a ``[[`` never closed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pptune.frameworks.common.shell_syntax import ShellSyntax, Unclosed, Unexpected

__all__ = ["Compounds"]

END_OF_FILE = "syntax error: unexpected end of file"  # bash -n's words
_LOOPS = ("while", "until", "for", "select")
# what each compound command is called in messages, and its form, as the bash manual
# writes it
_NAMES = {"if": "if statement", "case": "case statement", "{": "{ group",
          **{loop: f"{loop} loop" for loop in _LOOPS}}
_FORMS = {"if": "if LIST; then LIST; fi", "case": "case WORD in PATTERN) LIST;; esac",
          "{": "{ LIST; }", "while": "while LIST; do LIST; done",
          "until": "until LIST; do LIST; done", "for": "for NAME in WORDS; do LIST; done",
          "select": "select NAME in WORDS; do LIST; done"}
_CLOSERS = {"if": "fi", "case": "esac", "{": "}", **{loop: "done" for loop in _LOOPS}}
# the state a compound command starts in (see _Frame.state)
_FIRST = {"if": "cond", "while": "cond", "until": "cond", "for": "name", "select": "name",
          "case": "subject", "{": "body"}
# a word that goes on with or ends a compound command -> (the commands it belongs to,
# the states it may follow, the state after it; None: it closes the command)
_GOES_ON: dict[str, tuple[tuple[str, ...], tuple[str, ...], str | None]] = {
    "then": (("if",), ("cond",), "then"),
    "elif": (("if",), ("then",), "cond"),
    "else": (("if",), ("then",), "else"),
    "fi": (("if",), ("then", "else"), None),
    "do": (("while", "until"), ("cond",), "body"),
    "done": (_LOOPS, ("body",), None),
    "esac": (("case",), ("body",), None),
    "}": (("{",), ("body",), None),
}
_ITEM_ENDS = (";;", ";&", ";;&")  # what ends a case item
_OWNERS = {"then": "if", "elif": "if", "else": "if", "fi": "if", "do": "loop", "done": "loop",
           "esac": "case", "}": "{", **{end: "case" for end in _ITEM_ENDS}}
_LEADS = frozenset({"!", "time", "coproc"})  # a command follows them
# states in which words are no commands: a case's subject, "in" and patterns; a for
# or select's name, its words and the do awaited
_HEADERS = frozenset({"subject", "in", "pattern", "name", "named", "words", "await"})
# the words of a run of ordinary characters; a redirection (>log) is no reserved word
_TOKENS = re.compile(r"[^\s>]+|>\S*")


@dataclass
class _Frame:
    keyword: str  # a key of _NAMES
    line: int  # where it opened
    # if: cond, then, else; while/until: cond, body; for/select: name, named (after
    # the name or a (( )) header), words (after in), await (after their ;), body;
    # case: subject, in, pattern, body; {: body
    state: str

    @property
    def name(self) -> str:
        return _NAMES[self.keyword]

    def awaits(self) -> str:
        """What bash needs next to go on with this command, for messages."""
        if self.keyword == "if":
            return "its then" if self.state == "cond" else "its fi"
        if self.keyword == "case":
            return {"subject": "the word to match", "in": "its in",
                    "pattern": "a ) to end the pattern, or its esac"}.get(self.state, "its esac")
        if self.keyword == "{":
            return "its }"
        return {"name": "its variable name", "named": "its in or do",
                "words": "a ; or a newline before its do"}.get(
            self.state, "its done" if self.state == "body" else "its do")


class Compounds:
    """The compound commands open at the top level, innermost last, fed the script's
    words and operators there in order. ``strict``: raise ``ShellSyntax`` where bash
    refuses the script, else stop following (an ``eval``'s text, which bash checks
    only when it runs)."""

    def __init__(self, strict: bool = True) -> None:
        self.frames: list[_Frame] = []
        self.command = True  # the next word stands where a command could start
        self._strict = strict
        self._off = False  # a fault seen with strict off: nothing more is followed
        self._named = False  # the last word named a command: "f" of "f() {"
        self._paren_named = False  # the ( open at the top level follows such a name
        self._paren_command = False  # it stands where a command could: ( ) or (( ))
        self._closed = False  # a compound command just closed: a word that ends another may follow
        self._piped = False  # after | : time and ! lead only a pipeline (x | time y runs "time")
        self._test = False  # inside [[ ]]
        self._expect = ""  # function: its name comes next; coproc, time: a name or -p may
        self._pattern_words = 0  # words of the case pattern being read
        self._pattern_paren = False  # the pattern began with its optional (

    # --- what the scanner feeds -------------------------------------------------

    def run(self, piece: str, line: int, glued: bool, goes_on: bool) -> None:
        """A run of ordinary characters (no quote, ``$``, bracket, separator or
        newline); ``glued``: it goes on with a word begun before it; ``goes_on``: its
        last word goes on after it (``fi"x"`` is no ``fi``)."""
        if self._off:
            return
        for token in _TOKENS.finditer(piece):
            if glued and token.start() == 0:
                continue
            word = token.group()
            plain = not word.startswith(">") and not (goes_on and token.end() == len(piece))
            self._word(word, plain, line)

    def part(self, piece: str, line: int, glued: bool) -> None:
        """A quote, substitution or escape, which makes its word no reserved word."""
        if not self._off and not glued:
            self._word(piece, False, line)

    def separator(self, op: str, line: int) -> None:
        """``;`` ``;;`` ``;&`` ``;;&`` ``&`` ``&&`` ``|`` ``||`` ``|&`` or a newline."""
        if self._off or self._test:
            return  # in [[ ]], && and || are the test's and newlines are allowed
        self._expect, self._named, self._closed = "", False, False
        self._piped = op in ("|", "|&")
        top = self.frames[-1] if self.frames else None
        state = top.state if top else ""
        newline = op == "\n"
        if top and state in _HEADERS:
            if state == "pattern" and newline and not (self._pattern_words or self._pattern_paren):
                return  # blank lines between a case's items
            if state in ("named", "words") and op in (";", "\n"):
                top.state = "named" if state == "named" and newline else "await"
            elif not (newline and state in ("in", "await")):
                self._fail(self._header(top, "newline" if newline else op, line))
            return
        if op in _ITEM_ENDS:
            if not (top and top.keyword == "case" and state == "body"):
                self._fail(self._misplaced(top, op, line))
                return
            top.state = "pattern"
            self._pattern_words, self._pattern_paren = 0, False
            self.command = False
            return
        self.command = True

    def stray_paren(self, line: int) -> None:
        """A ``)`` at the top level that ends no case pattern: bash refuses it."""
        if self._off:
            return
        top = self.frames[-1] if self.frames else None
        if top and top.keyword == "case" and top.state == "body":
            self._fail(Unexpected(
                line, ")", f"the ) here ends no pattern of the case statement opened at line "
                f"{top.line}", "end the item before it with ;;"))
        else:
            self._fail(Unexpected(line, ")", "the ) here closes nothing open",
                                  "remove it, or quote it if it is meant literally"))

    def in_pattern(self) -> bool:
        """Whether a ``(`` ``)`` or ``|`` here is a case pattern's (``(a|b)``)."""
        return not self._off and bool(self.frames) and self.frames[-1].state == "pattern"

    def pattern_mark(self, ch: str) -> None:
        """A case pattern's ``(``, ``|`` or ``)``; the ``)`` begins the item's body."""
        top = self.frames[-1]
        if ch == "(":
            self._pattern_paren = True
        elif ch == ")":
            top.state = "body"
            self._pattern_words, self._pattern_paren = 0, False
            self.command = True

    def opened(self) -> None:
        """A ``(`` (subshell, array, a function's ``()``) or ``((`` opens here."""
        if self._off or self._test:
            return
        if self.frames and self.frames[-1].state == "name":
            self.frames[-1].state = "named"  # for (( i = 0; ...; ... ))
        self._paren_named, self._paren_command = self._named, self.command and not self._closed
        self._named = self.command = self._closed = False

    def closed(self, blank: bool) -> None:
        """The ``(`` opened last at the top level closes; ``blank``: nothing between."""
        if not self._off and not self._test:
            named = self._paren_named and blank  # f() { ... }: a body follows
            self.command = named or self._paren_command
            self._closed = self._paren_command and not named  # (a) }: a closed subshell
            self._paren_named = self._paren_command = False

    def end(self) -> None:
        """The end of the text: refuse the innermost compound command still open."""
        if self._off or not self.frames:
            return
        top = self.frames[-1]
        closer = _CLOSERS[top.keyword]
        where = ", after a ; or a newline" if closer == "}" else ""  # "{ a }" is no group's end
        self._fail(Unclosed(top.line, top.keyword, top.name[len(top.keyword):], END_OF_FILE,
                            f"add the {closer} that closes it{where} ({_FORMS[top.keyword]})"))

    # --- following words --------------------------------------------------------

    def _word(self, word: str, plain: bool, line: int) -> None:
        if self._test:
            self._test = not (plain and word == "]]")
            self.command = self._closed = not self._test
            return
        closed, self._closed = self._closed, False
        piped, self._piped = self._piped, False
        expect, self._expect = self._expect, ""
        if expect == "function" or (expect == "coproc" and not (plain and word in _RESERVED)):
            self._named = self.command = True  # function NAME {, coproc NAME {
            return
        if expect == "time" and plain and word == "-p":
            self.command = True
            return
        top = self.frames[-1] if self.frames else None
        if top and top.state in _HEADERS:
            self._header_word(top, word, plain, line)
        elif (plain and word in _RESERVED and (word in _GOES_ON if closed else self.command)
              and not (piped and word in ("time", "!"))):
            self._reserved(top, word, line)
        else:  # a command's name or argument; after a closed command, a redirection
            self._named = self.command and plain and not closed and "=" not in word
            self.command = False

    def _reserved(self, top: _Frame | None, word: str, line: int) -> None:
        self._named, self.command = False, True
        if word in _FIRST:
            self.frames.append(_Frame(word, line, _FIRST[word]))
            self.command = word not in ("for", "select", "case")
        elif word in _LEADS:
            self._expect = word
        elif word in ("[[", "function"):
            self._test = word == "[["
            self._expect = "function" if word == "function" else ""
            self.command = False
        else:
            owners, states, after = _GOES_ON[word]
            if top is None or top.keyword not in owners or top.state not in states:
                self._fail(self._misplaced(top, word, line))
            elif after is None:
                self.frames.pop()
                self._closed = True  # { if a; then b; fi }: the } may follow
            else:
                top.state = after

    def _header_word(self, top: _Frame, word: str, plain: bool, line: int) -> None:
        state = top.state
        if state == "subject":
            top.state = "in"
        elif state == "in" and plain and word == "in":
            top.state = "pattern"
            self._pattern_words, self._pattern_paren = 0, False
        elif state == "pattern":
            if plain and word == "esac" and not (self._pattern_words or self._pattern_paren):
                self.frames.pop()
                self.command = self._closed = True
            else:
                self._pattern_words += 1
        elif state == "name":
            top.state = "named"
        elif state == "named" and plain and word == "in":
            top.state = "words"
        elif state in ("named", "await") and plain and word in ("do", "{"):
            if word == "{":  # for i in a b; { ...; }: the group is the loop's body
                self.frames[-1] = _Frame("{", line, "body")
            else:
                top.state = "body"
            self.command = True
        elif state != "words":
            self._fail(self._header(top, word, line))

    # --- refusals ---------------------------------------------------------------

    def _fail(self, error: ShellSyntax) -> None:
        if self._strict:
            raise error
        self._off = True

    @staticmethod
    def _misplaced(top: _Frame | None, word: str, line: int) -> Unexpected:
        owner = _OWNERS[word]
        if top is None:
            what = "while, until, for or select loop" if owner == "loop" else owner
            return Unexpected(line, word, f"the {word} here belongs to no open {what}",
                              f"remove it, or add the {owner} it belongs to")
        return Unexpected(
            line, word,
            f"the {word} here stands where the {top.name} opened at line {top.line} "
            f"needs {top.awaits()}",
            f"complete the {top.keyword} first ({_FORMS[top.keyword]}), or remove the {word}")

    @staticmethod
    def _header(top: _Frame, token: str, line: int) -> Unexpected:
        return Unexpected(
            line, token,
            f"the {top.name} opened at line {top.line} needs {top.awaits()} here",
            f"write it as bash expects ({_FORMS[top.keyword]})")


_RESERVED = frozenset({*_FIRST, *_GOES_ON, *_LEADS, "[[", "function"})
