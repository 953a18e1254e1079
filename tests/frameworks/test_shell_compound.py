"""Compound commands (``{ }``, ``if``, ``case``, ``while``/``until``/``for``/``select``)
left open, or ended by a word where none is open, which bash refuses and so does the
reader; and the forms bash reads, read. Each case is worked out by hand from the bash
manual ("Reserved Words", "Compound Commands", "Shell Functions"); where bash is
installed it is also put to ``bash -n``, whose words and line each case records. For
a construct left open bash names the end of the file; pptune names where it opened."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.frameworks.common.shell import (
    Unclosed,
    Unexpected,
    interpret,
    split_statements,
)
from tests.frameworks.test_shell_unclosed import bash_says, needs_bash

END_OF_FILE = "syntax error: unexpected end of file"

# (script, line it opens on, what is open, bash -n's line: the end of the file)
OPEN = [
    ("A=1\n{ echo a\nB=2\n", 2, "{", 4),
    ("A=1\n{ echo a }\nB=2\n", 2, "{", 4),  # a } that is an argument closes nothing
    ("f() {\n  B=2\n", 1, "{", 3),
    ("function f {\n  B=2\n", 1, "{", 3),
    ("A=1\nif true; then\nB=2\n", 2, "if", 4),
    ('A=1\nif [ -n "$X" ]\nB=2\n', 2, "if", 4),  # nor its then
    ("if x; then\n  y\nelse\n  z\n", 1, "if", 5),
    ("A=1\ncase $x in\n  a) echo;;\n", 2, "case", 4),
    ("case $x in\n  a) echo\n", 1, "case", 3),
    ("A=1\nwhile true; do\nB=2\n", 2, "while", 4),
    ("A=1\nwhile true\nB=2\n", 2, "while", 4),  # nor its do
    ("until false; do\n  B=2\n", 1, "until", 3),
    ("A=1\nfor i in 1 2; do\nB=2\n", 2, "for", 4),
    ("for ((i = 0; i < 2; i++)); do\n  echo\n", 1, "for", 3),
    ("select x in a; do\n  B=2\n", 1, "select", 3),
    ("if x; then\n  while y; do\n    z\n", 2, "while", 4),  # the innermost
    ("for i in 1 2; do\n  if [ $i = 1 ]; then\n    echo\n  fi\n", 1, "for", 5),
]

# (script, line, the word bash stops at, bash -n's line)
MISPLACED = [
    ("A=1\nfi\n", 2, "fi", 2),
    ("echo a; done\n", 1, "done", 1),
    ("A=1\n}\n", 2, "}", 2),
    ("esac\n", 1, "esac", 1),
    ("echo a\nelse\n", 2, "else", 2),
    ("if true; then\n  { echo\nfi\n", 3, "fi", 3),  # the { is still open
    ("{ if x; then y; }\n", 1, "}", 1),
    ("until x; do y; fi\n", 1, "fi", 1),
    ("if true; fi\n", 1, "fi", 1),  # no then
    ("while true; done\n", 1, "done", 1),  # no do
    ("if true; then :; fi; fi\n", 1, "fi", 1),
    ("(echo) fi\n", 1, "fi", 1),  # after a subshell a reserved word is read
    ("A=1 if true; then echo; fi\n", 1, "then", 1),  # after an assignment, if is a command
    ("A=1\ncase $x in\n  a) echo;;\nB=2\n", 4, "newline", 4),  # B=2 read as a pattern
    ("case x in a;\n", 1, ";", 1),
    ("case x\nfoo\n", 2, "foo", 2),
    ("A=1\nfor i in 1 2\nB=2\n", 3, "B=2", 3),  # no do
    ("for\n", 1, "newline", 1),
    ("for i in a b & do echo; done\n", 1, "&", 1),
    ("case x in\n  a) echo 1\n  b) echo 2;;\nesac\n", 3, ")", 3),  # a's ;; missing
    ("echo a)\n", 1, ")", 1),
    ("case x in\n  a) if y; then z\n  ;;\nesac\n", 3, ";;", 3),  # the if's fi missing
    ("echo ;;\n", 1, ";;", 1),
]


@pytest.mark.parametrize(("text", "line", "opener", "bash_line"), OPEN)
def test_a_compound_command_never_closed_is_refused_where_it_opens(
        text: str, line: int, opener: str, bash_line: int) -> None:
    with pytest.raises(Unclosed) as info:
        split_statements(text)
    assert (info.value.line, info.value.opener) == (line, opener)
    message = str(info.value)
    assert message.startswith(f"line {line}: the {opener} ")
    assert f"never closed, so bash refuses the script ({END_OF_FILE})" in message
    assert "\n" not in message


@pytest.mark.parametrize(("text", "line", "token", "bash_line"), MISPLACED)
def test_a_word_bash_does_not_allow_there_is_refused_where_it_stands(
        text: str, line: int, token: str, bash_line: int) -> None:
    with pytest.raises(Unexpected) as info:
        split_statements(text)
    assert (info.value.line, info.value.token) == (line, token)
    message = str(info.value)
    assert message.startswith(f"line {line}: ")
    assert f"(syntax error near unexpected token `{token}')" in message
    assert "\n" not in message


@needs_bash
@pytest.mark.parametrize(("text", "line", "opener", "bash_line"), OPEN)
def test_bash_refuses_the_open_ones_at_the_end_of_the_file(
        tmp_path: Path, text: str, line: int, opener: str, bash_line: int) -> None:
    assert bash_says(tmp_path, text) == (bash_line, END_OF_FILE)


@needs_bash
@pytest.mark.parametrize(("text", "line", "token", "bash_line"), MISPLACED)
def test_bash_refuses_the_misplaced_ones_at_the_same_word(
        tmp_path: Path, text: str, line: int, token: str, bash_line: int) -> None:
    assert bash_says(tmp_path, text) == (
        bash_line, f"syntax error near unexpected token `{token}'")


def test_the_messages_name_what_is_open_and_what_it_needs() -> None:
    cases = {
        "A=1\n{ echo a }\n": "line 2: the { group opened here is never closed, so bash "
        "refuses the script (syntax error: unexpected end of file); add the } that closes "
        "it, after a ; or a newline ({ LIST; })",
        "if true; then\n  { echo\nfi\n": "line 3: the fi here stands where the { group "
        "opened at line 2 needs its }, so bash refuses the script (syntax error near "
        "unexpected token `fi'); complete the { first ({ LIST; }), or remove the fi",
        "echo a; done\n": "line 1: the done here belongs to no open while, until, for or "
        "select loop, so bash refuses the script (syntax error near unexpected token "
        "`done'); remove it, or add the loop it belongs to",
        "A=1\nfor i in 1 2\nB=2\n": "line 3: the for loop opened at line 2 needs its do "
        "here, so bash refuses the script (syntax error near unexpected token `B=2'); "
        "write it as bash expects (for NAME in WORDS; do LIST; done)",
    }
    for text, said in cases.items():
        with pytest.raises((Unclosed, Unexpected)) as info:
            split_statements(text)
        assert str(info.value) == said


# scripts bash reads whose compound commands could be misread
ACCEPTED = [
    'if [ "$PP" = 4 ]; then TP=2; fi\n',
    "if x; then y; elif z; then w; else v; fi\nif\ntrue\nthen\n  :\nfi\n",
    'if [ -n "$A" ]; then  # if { fi\n  for i in 1 2; do\n    case $i in\n'
    "      1) echo \"if {\";;\n      (2|3) echo 'done }';;\n    esac\n  done\nfi\n",
    "if true; then\n  cat <<EOF\nfi\ndone\n}\nEOF\nfi\n",
    "while read -r a b; do\n  case $a in\n    -*) echo;;\n    *) break;;\n  esac\n"
    "done <<EOF\nx y\nEOF\n",
    "f() { echo; }\nf ( ) { echo; }\nfunction g { echo; }\nfunction h() {\n  :\n}\n"
    "k()\n{\n  :\n}\nm() ( : )\n",
    'echo if { fi done esac then }\nA=1 fi\nX=if\necho fi"x" \\fi "fi" ${A:-fi}\n',
    "case x in fi) echo;; esac\ncase x in esac\ncase x in a|esac) echo;; esac\n"
    "case $x in\n  a) echo ;&\n  b) echo ;;&\n  *) ;;\nesac\ncase x\nin a) echo;; esac\n",
    "for i in fi done esac; do echo; done\nfor ((i = 0; i < 2; i++)) do echo; done\n"
    "for i in a b; { echo; }\nfor i\ndo echo; done\nselect i in a\ndo break; done\n"
    "until [ $i -ge 3 ]; do i=$((i+1)); done\n",
    '{ echo;}\n[ -z "$X" ] && { echo no; exit 1; }\n{ (echo) }\n{ { echo; } }\n'
    "if x; then { y; } fi\nwhile x; do if y; then z; fi done\n{ [[ a ]] }\n"
    "{ echo; } 2>&1 | tee log\nif true; then :; fi >log\n",
    "[[ a && fi ]]\nif [[ $x == fi ]]; then :; fi\n! { echo; }\ntime { echo; }\n"
    "time -p if true; then :; fi\ncoproc { echo; }\necho a | time fi\n",  # time leads a pipeline only
    'X=$(if true; then echo a; fi)\nY="$(case a in a) echo b;; esac)"\n',
    "if true; then \\\n  echo; fi\necho \\\nfi\n",
    'eval "if x"\n',  # bash checks an eval's text only when it runs it
]


@pytest.mark.parametrize("text", ACCEPTED)
def test_compound_commands_bash_accepts_are_read(text: str) -> None:
    split_statements(text)  # no Unclosed, no Unexpected
    interpret(text)


@needs_bash
@pytest.mark.parametrize("text", ACCEPTED)
def test_bash_accepts_them_too(tmp_path: Path, text: str) -> None:
    assert bash_says(tmp_path, text) is None


def test_a_case_pattern_at_the_top_level_is_one_statement() -> None:
    """Its ( | ) are the pattern's: (b|c) opens no subshell and | ends no statement."""
    assert split_statements("case $x in\n  a|b) PP=2;;\n  (c) PP=4;;\nesac\n") == [
        (1, "case $x in"), (2, "a|b) PP=2"), (3, "(c) PP=4"), (4, "esac")]


def test_a_one_line_if_still_picks_its_branch() -> None:
    script = interpret('PP=4\nif [ "$PP" = 4 ]; then TP=2; else TP=8; fi\n'
                       "{ GBS=64; }\nwhile false; do MBS=1; done\n")
    assert (script.scalars["TP"], script.scalars["GBS"], script.scalars["MBS"]) == (
        "2", "64", "1")
